"""Batched CPU decode: strata's `decode_rows` at batch 1, 8 and 32 against numpy's own GEMM ceiling
and llama.cpp's `llama-batched-bench`, on the same Qwen3-0.6B-shaped f32 weights.

    .venv/bin/python bench/cpu_batch.py [--batches 1,8,32] [--steps 16] [--prompt 4] [--reps 3] [--cache-dir DIR]

The model is bench/cpu_decode.py's (random fp32 weights, seed 0, written once into the cache dir).
Per batch size B, strata compiles it for the cpu target with `entries=decode_rows Batch=B` and
runs B rows through `decode_rows`: --prompt untimed steps at positions 0.. (the rows' context and
the warm-up), then --steps timed steps, each row fed its own argmax. Aggregate tokens/s count
every row's token: B * steps / seconds.

numpy's ceiling is the model's linear layers alone: every 2-D weight of the checkpoint (q, k, v,
o, gate, up, down per layer; the tied embedding as the output projection) multiplied by an
activation of B rows, one OpenBLAS sgemm each, per step; nothing else (no attention, norms, RoPE,
argmax). Each run times both ways of calling it, `x @ W.T` and `W @ x.T` (the weight not
transposed, which OpenBLAS runs faster for a few rows: strata's generated mul_mat calls that
one), and the faster counts. Strata's share of it says how much of the batched step is its
matmuls.

Where llama.cpp's `llama-batched-bench` is built (LLAMA_CPP, or the oracle's cache), the same
checkpoint is converted to an f32 GGUF (llama.cpp's converter through the oracle's convert.py,
with its byte-level tokenizer: the bench feeds token ids, not text) and run with -npl B, -npp
--prompt, -ntg --steps and as many threads as numpy has cores; its S_TG is the aggregate.

Strata, the ceiling and llama.cpp alternate (--reps rounds per batch size; the vCPUs here slow
down for seconds at random, so the best run of each counts). The last line is exactly
    strata_over_llamacpp=<B>:<ratio>,...     (or strata_over_ceiling=<B>:<share>,... without llama.cpp)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from cpu_decode import ensure_model  # noqa: E402

ORACLE = harness.ROOT.parent / "shared" / "tools" / "llamacpp-oracle"
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / ".cache" / "llamacpp-oracle" / "llama_cpp_python-0.3.36"
                                / "vendor" / "llama.cpp"))
BATCHED_BENCH = LLAMA_CPP / "build" / "bin" / "llama-batched-bench"


def progress(text: str) -> None:
    """A line of progress, on a terminal only."""
    if sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def parse_batches(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"--batches {text!r}: expected comma-separated integers") from None
    if not out or min(out) < 1 or len(set(out)) != len(out):
        raise SystemExit(f"--batches {text!r}: expected distinct batch sizes of at least 1")
    return out


# ---------------------------------------------------------------------------------------------
# Strata: decode_rows


class StrataRows:
    """The program compiled for B rows (`decode_rows` only), its rows warmed up at positions
    0 .. prompt - 1."""

    def __init__(self, model, cache: Path, batch: int, prompt: int, ctx: int, vocab: int):
        from strata.runtime.opener import open_program

        knobs = {"ctx": ctx, "entries": "decode_rows", "Batch": batch}
        t0 = time.perf_counter()
        self.program = open_program(model, "cpu", knobs, cache_dir=cache / f"cpu-rows-b{batch}", quiet=True)
        progress(f"B={batch}: strata compiled (or reused) and loaded in {time.perf_counter() - t0:.1f} s")
        self.batch, self.prompt = batch, prompt
        rng = np.random.default_rng(harness.SEED + batch)
        self.start = rng.integers(0, vocab, (batch, 1)).astype(np.int32)
        tokens = self.start
        for pos in range(prompt):
            tokens = self.step(tokens, pos)

    def step(self, tokens: np.ndarray, pos: int) -> np.ndarray:
        (logits,) = self.program.call("decode_rows", tokens=tokens,
                                      positions=np.full(self.batch, pos, np.int32))
        return np.argmax(logits.reshape(self.batch, -1), axis=-1).astype(np.int32).reshape(self.batch, 1)

    def rep(self, steps: int) -> float:
        """Aggregate tokens/s of `steps` steps from position `prompt` (the same KV rows each rep)."""
        tokens = self.start
        t0 = time.perf_counter()
        for i in range(steps):
            tokens = self.step(tokens, self.prompt + i)
        return self.batch * steps / (time.perf_counter() - t0)

    def close(self) -> None:
        self.program.close()


# ---------------------------------------------------------------------------------------------
# numpy's ceiling: the linear layers as OpenBLAS GEMMs


def linear_weights(model_dir: Path) -> list[np.ndarray]:
    """Every matrix of the checkpoint, in memory: the weights of the model's matmuls."""
    from strata.ir.weights import WeightStore

    store = WeightStore.open(model_dir)
    return [np.ascontiguousarray(store.get(n)) for n in store.names() if store.get(n).ndim == 2]


def ceiling_rep(weights: list[np.ndarray], batch: int, steps: int) -> float:
    """Aggregate tokens/s of `steps` steps of a B-row GEMM with every matrix: the faster of
    `x @ W.T` and `W @ x.T` (two sgemm calls of different operand order and layout)."""
    rng = np.random.default_rng(harness.SEED)
    xs = {w.shape[1]: rng.standard_normal((batch, w.shape[1]), dtype=np.float32) for w in weights}
    rows_out = [np.empty((batch, w.shape[0]), np.float32) for w in weights]
    cols_out = [np.empty((w.shape[0], batch), np.float32) for w in weights]
    rates = []
    for weight_first in (False, True):
        t0 = time.perf_counter()
        for _ in range(steps):
            for w, ro, co in zip(weights, rows_out, cols_out):
                x = xs[w.shape[1]]
                if weight_first:
                    np.matmul(w, x.T, out=co)
                else:
                    np.matmul(x, w.T, out=ro)
        rates.append(batch * steps / (time.perf_counter() - t0))
    return max(rates)


# ---------------------------------------------------------------------------------------------
# llama.cpp: llama-batched-bench on the same weights


def ensure_gguf(model_dir: Path) -> Path:
    """The checkpoint as an f32 GGUF next to it, converted (atomically) on first use."""
    final = model_dir.parent / f"{model_dir.name}.gguf"
    if final.is_file():
        return final
    with tempfile.TemporaryDirectory(prefix=".gguf-src-", dir=model_dir.parent) as tmp:
        src = Path(tmp) / "hf"
        src.mkdir()
        for name in ("config.json", "model.safetensors"):
            os.symlink((model_dir / name).resolve(), src / name)
        # The converter needs a tokenizer; the oracle's byte-level one (the bench feeds ids).
        subprocess.run([sys.executable, str(ORACLE / "tok.py"), str(src)], check=True, capture_output=True)
        out = Path(tmp) / "model.gguf"
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(ORACLE / "convert.py"), str(src), "--outtype", "f32",
                            "--outfile", str(out)], env={**os.environ, "LLAMA_CPP": str(LLAMA_CPP)},
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"llama.cpp's converter failed:\n{r.stderr[-2000:]}")
        os.rename(out, final)
    progress(f"wrote {final} in {time.perf_counter() - t0:.1f} s")
    return final


def llamacpp_rep(gguf: Path, batch: int, prompt: int, steps: int, threads: int) -> float:
    """llama-batched-bench's aggregate generation tokens/s (S_TG) at `batch` sequences."""
    ctx = batch * (prompt + steps) + 16
    cmd = [str(BATCHED_BENCH), "-m", str(gguf), "-c", str(ctx), "-b", "2048", "-ub", "512", "-t", str(threads),
           "-npp", str(prompt), "-ntg", str(steps), "-npl", str(batch), "--output-format", "jsonl"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{") and "speed_tg" in line]
    if r.returncode != 0 or len(rows) != 1:
        raise SystemExit(f"llama-batched-bench failed (exit {r.returncode}):\n{(r.stderr + r.stdout)[-2000:]}")
    return float(rows[0]["speed_tg"])


# ---------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache-dir", default=str(harness.ROOT / ".strata-cache" / "bench"))
    p.add_argument("--batches", default="1,8,32", help="batch sizes (rows of decode_rows), comma-separated")
    p.add_argument("--steps", type=int, default=16, help="timed decode steps per run")
    p.add_argument("--prompt", type=int, default=4, help="untimed steps first: each row's context")
    p.add_argument("--reps", type=int, default=3, help="runs of each per batch size; the best counts")
    p.add_argument("--no-llamacpp", action="store_true", help="skip llama-batched-bench even where it is built")
    args = p.parse_args()
    batches = parse_batches(args.batches)
    if args.steps < 1 or args.prompt < 1 or args.reps < 1:
        raise SystemExit("--steps, --prompt and --reps must be at least 1")

    from strata.pipeline import load_model

    cache = Path(args.cache_dir)
    model_dir = ensure_model(cache)
    model = load_model(model_dir)
    vocab = int(model.config.vocab_size)
    threads = os.cpu_count() or 1
    gguf = None
    if not args.no_llamacpp and BATCHED_BENCH.is_file():
        gguf = ensure_gguf(model_dir)
    weights = linear_weights(model_dir)

    best: dict[int, dict[str, float]] = {}
    for b in batches:
        rows = StrataRows(model, cache, b, args.prompt, args.prompt + args.steps, vocab)
        try:
            got: dict[str, list[float]] = {"strata": [], "ceiling": [], "llamacpp": []}
            for rep in range(args.reps):
                order = ["strata", "ceiling", "llamacpp"]
                for engine in order if rep % 2 == 0 else order[::-1]:  # alternate: the same slow spells
                    if engine == "strata":
                        got[engine].append(rows.rep(args.steps))
                    elif engine == "ceiling":
                        got[engine].append(ceiling_rep(weights, b, args.steps))
                    elif gguf is not None:
                        got[engine].append(llamacpp_rep(gguf, b, args.prompt, args.steps, threads))
                progress(f"B={b} rep {rep}: " + ", ".join(f"{e} {v[-1]:.1f}" for e, v in got.items() if v)
                         + " tok/s")
        finally:
            rows.close()
        best[b] = {e: max(v) for e, v in got.items() if v}

    print(f"model: Qwen3-0.6B-shaped, fp32 random weights; {args.steps} decode steps after {args.prompt}, "
          f"best of {args.reps}, {threads} threads")
    base = best[batches[0]]["strata"] if batches[0] == 1 else None
    for b in batches:
        r = best[b]
        line = (f"B={b:>3}: strata decode_rows {r['strata']:7.1f} tok/s   numpy ceiling {r['ceiling']:7.1f} tok/s "
                f"({r['strata'] / r['ceiling']:.0%} of it)")
        if base is not None:
            line += f"   x{r['strata'] / base:.2f} over batch 1"
        if "llamacpp" in r:
            line += f"   llama.cpp {r['llamacpp']:7.1f} tok/s"
        print(line)
    if gguf is not None:
        print("strata_over_llamacpp=" + ",".join(f"{b}:{best[b]['strata'] / best[b]['llamacpp']:.2f}" for b in batches))
    else:
        print("strata_over_ceiling=" + ",".join(f"{b}:{best[b]['strata'] / best[b]['ceiling']:.2f}" for b in batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
