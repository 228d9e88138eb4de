"""What the CPU benchmarks (cpu_decode.py, cpu_moe.py) share: strata's CPU target against HF
transformers (eager PyTorch), each engine in its own subprocess, their runs alternated.

A bench supplies its model (written once, with random weights, into the cache dir by
`ensure_model`), its two engine factories (`strata_engine`, `torch_engine`: each returns an
`Engine` after its warm-up) and its report lines; this module holds the rest: the options
(`arg_parser`), the subprocess protocol (`engine_main` in the child, `Child` in the parent),
the interleaved runs (`run_engines`), the copy bandwidth the decode roofline is set against,
and the common report lines (`report_speed`, `parity`, `print_ratios`).

The bench script itself is the child: `Child` runs it again with the hidden --engine option,
and its `main` hands that over to `engine_main`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CTX = 256
SEED = 0
ENGINES = ("strata", "torch")


# ---------------------------------------------------------------------------------------------
# The model and the machine


def ensure_model(cache: Path, dirname: str, write: Callable[[Path], None]) -> Path:
    """The random-weight model ``cache / dirname``, written (atomically) on first use:
    ``write(directory)`` writes config.json and model.safetensors into a fresh directory."""
    final = cache / dirname
    if (final / "config.json").is_file() and (final / "model.safetensors").is_file():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".model.tmp-", dir=cache))
    t0 = time.perf_counter()
    write(tmp)
    os.rename(tmp, final)
    print(f"wrote random weights to {final} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return final


def copy_bandwidth() -> float:
    """STREAM-style copy bandwidth (bytes read + written per second) of np.copyto over
    512 MiB, one slice per core in threads (numpy releases the GIL), best of 5."""
    from concurrent.futures import ThreadPoolExecutor

    n = 512 << 20
    src = np.ones(n // 4, dtype=np.float32)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), os.cpu_count() or 1)
    slices = [slice(int(p[0]), int(p[-1]) + 1) for p in parts]
    best = float("inf")
    with ThreadPoolExecutor(len(slices)) as pool:
        for _ in range(6):
            t0 = time.perf_counter()
            list(pool.map(lambda sl: np.copyto(dst[sl], src[sl]), slices))
            best = min(best, time.perf_counter() - t0)
    return 2 * n / best


# ---------------------------------------------------------------------------------------------
# Engines (each runs in its own subprocess)


def prompt(n: int, vocab: int) -> np.ndarray:
    """The prompt both engines run: ``n`` token ids, the same on every run."""
    return np.random.default_rng(1).integers(0, vocab, size=n).astype(np.int32)


class Engine:
    """One engine in this process: ``rep()`` runs a prefill and the greedy decode once.

    ``extra`` goes into the engine's final answer as it is; ``final_checks``, when set, is
    called once after the last run (and after peak RSS is read) and its dict goes in too."""

    def __init__(self, prefill, decode, n_prompt: int, n_new: int):
        self.prefill, self.decode = prefill, decode
        self.n_prompt, self.n_new = n_prompt, n_new
        self.first_logits = None
        self.ids: list[int] = []
        self.extra: dict = {}
        self.final_checks: Callable[[], dict] | None = None

    def rep(self) -> dict:
        t0 = time.perf_counter()
        first = np.asarray(self.prefill(), dtype=np.float32).copy()
        t1 = time.perf_counter()
        ids = [int(np.argmax(first))]
        for i in range(self.n_new - 1):
            ids.append(int(np.argmax(self.decode(ids[-1], self.n_prompt + i))))
        t2 = time.perf_counter()
        self.first_logits, self.ids = first, ids
        return {"prefill_s": t1 - t0, "decode_s": t2 - t1}


def strata_model(model_dir: Path, compiled: Path, n_prompt: int):
    """(strata's compiled CPU model on the weights in ``model_dir``, the prompt for it)."""
    from strata.pipeline import load_model
    from strata.targets.cpu.program import load_compiled

    weights = load_model(model_dir).open_weights()
    model = load_compiled(compiled).Model(weights)
    vocab = model.OUTPUTS["decode"][0][-1]
    return model, prompt(n_prompt, vocab)


def torch_model(model_dir: Path, n_prompt: int):
    """(HF transformers' model, eager attention, fp32, no grad, all cores; the prompt for it
    as a [1, n_prompt] int64 tensor)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.set_grad_enabled(False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    ids = torch.from_numpy(prompt(n_prompt, model.config.vocab_size).astype(np.int64))[None, :]
    return model, ids


def engine_main(args: argparse.Namespace, strata_engine, torch_engine) -> int:
    """Serve `rep` and `done` commands on stdin; answer one JSON line each on stdout.
    ``strata_engine(model_dir, compiled, n_prompt, n_new)`` and ``torch_engine(model_dir,
    n_prompt, n_new)`` build the bench's engines."""
    import warnings

    warnings.simplefilter("ignore")
    model_dir = Path(args.model)
    if args.engine == "strata":
        engine = strata_engine(model_dir, Path(args.compiled), args.prompt, args.new)
    else:
        engine = torch_engine(model_dir, args.prompt, args.new)
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries print; keep the protocol channel clean
    print("READY", file=out, flush=True)
    for line in sys.stdin:
        if line.strip() == "rep":
            print(json.dumps(engine.rep()), file=out, flush=True)
        elif line.strip() == "done":
            np.save(args.logits_out, engine.first_logits)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            final = {"ids": engine.ids, "peak_rss_bytes": rss, **engine.extra}
            if engine.final_checks is not None:
                final.update(engine.final_checks())
            print(json.dumps(final), file=out, flush=True)
            return 0
    return 1


class Child:
    """An engine subprocess (the bench ``script`` run again with --engine) driven over a pipe,
    so that the engines' runs can interleave. With ``announce``, its load time goes to stderr."""

    def __init__(self, script: Path, engine: str, model_dir: Path, compiled: Path, args, logits_out: Path,
                 announce: bool = False):
        cmd = [sys.executable, str(Path(script).resolve()), "--engine", engine, "--model", str(model_dir),
               "--compiled", str(compiled), "--prompt", str(args.prompt), "--new", str(args.new),
               "--logits-out", str(logits_out)]
        self.name = engine
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.expect("READY")
        if announce:
            print(f"{engine}: loaded and warmed up in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    def expect(self, what: str | None = None) -> str:
        line = self.proc.stdout.readline()
        if not line or (what is not None and line.strip() != what):
            self.proc.kill()
            raise SystemExit(f"{self.name} engine failed (exit {self.proc.wait()}): {line.strip()!r}")
        return line

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.expect())

    def close(self) -> dict:
        final = self.ask("done")
        self.proc.wait()
        return final


def run_engines(script: Path, model_dir: Path, compiled: Path, args, *, one_at_a_time: bool = False,
                announce: bool = False) -> dict[str, dict]:
    """Run both engines --reps times each; per engine: the best prefill_s and decode_s, all
    runs rounded, the first token's logits, and its final answer (ids, peak_rss_bytes, ...)."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def child(e: str) -> Child:
            return Child(script, e, model_dir, compiled, args, Path(tmp) / f"{e}.npy", announce)

        runs: dict[str, list] = {}
        finals: dict[str, dict] = {}
        if one_at_a_time:
            for e in ENGINES:
                c = child(e)
                runs[e] = [c.ask("rep") for _ in range(args.reps)]
                finals[e] = c.close()
        else:
            # Load one engine at a time, then alternate their runs: a slow spell of the
            # (shared, throttled) vCPUs then hits both alike, and the best run of each counts.
            children = [child(e) for e in ENGINES]
            runs = {c.name: [] for c in children}
            for _ in range(args.reps):
                for c in children:
                    runs[c.name].append(c.ask("rep"))
            finals = {c.name: c.close() for c in children}
        for name, final in finals.items():
            results[name] = {
                "prefill_s": min(r["prefill_s"] for r in runs[name]),
                "decode_s": min(r["decode_s"] for r in runs[name]),
                "runs": [[round(r["prefill_s"], 2), round(r["decode_s"], 2)] for r in runs[name]],
                "first_logits": np.load(Path(tmp) / f"{name}.npy"),
                **final,
            }
    return results


# ---------------------------------------------------------------------------------------------
# Options and report


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """The options every bench takes (and the hidden ones its engine subprocesses get)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--cache-dir", default=str(ROOT / ".strata-cache" / "bench"))
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--reps", type=int, default=5, help="runs per engine; the best times count (the vCPUs here throttle at random)")
    # hidden: the options with which `Child` starts an engine subprocess
    p.add_argument("--engine", choices=list(ENGINES), help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--compiled", help=argparse.SUPPRESS)
    p.add_argument("--logits-out", help=argparse.SUPPRESS)
    return p


def check_lengths(args) -> None:
    if args.prompt + args.new > CTX:
        raise SystemExit(f"--prompt + --new must be <= {CTX}")


def report_speed(results: dict[str, dict], args, bw: float, wbytes: int, *, prefill_ms: bool = False) -> dict:
    """Print the copy bandwidth and decode roofline, then each engine's rates, peak RSS and
    runs; return {engine: (prefill tok/s, decode tok/s)}."""
    n_dec = args.new - 1
    roof_s = wbytes / bw
    print(f"copy bandwidth: {bw / 1e9:.1f} GB/s (read + write); decode roofline {roof_s * 1e3:.0f} ms/token "
          f"= {1 / roof_s:.2f} tok/s")
    rates = {}
    for engine in ENGINES:
        r = results[engine]
        pre = args.prompt / r["prefill_s"]
        dec = n_dec / r["decode_s"]
        rates[engine] = (pre, dec)
        per_tok = r["decode_s"] / n_dec
        ms = f" ({r['prefill_s'] * 1e3:.0f} ms)" if prefill_ms else ""
        print(f"{engine:>6}: prefill {pre:7.1f} tok/s{ms}   decode {dec:6.2f} tok/s "
              f"({per_tok * 1e3:.0f} ms/token, {roof_s / per_tok:.0%} of roofline)   "
              f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB")
        print(f"        runs [prefill s, decode s]: {r['runs']}")
    return rates


def parity(results: dict[str, dict]) -> tuple[float, int]:
    """(max |strata - torch| of the first token's logits, how many greedy ids agree)."""
    diff = float(np.max(np.abs(results["strata"]["first_logits"] - results["torch"]["first_logits"])))
    same = sum(a == b for a, b in zip(results["strata"]["ids"], results["torch"]["ids"]))
    return diff, same


def print_ratios(rates: dict) -> None:
    """The last line: strata's rates over torch's, decode and prefill."""
    decode_ratio = rates["strata"][1] / rates["torch"][1]
    prefill_ratio = rates["strata"][0] / rates["torch"][0]
    print(f"decode_ratio={decode_ratio:.2f} prefill_ratio={prefill_ratio:.2f}")
