"""The native kernels' GEMV speed per weight type: GB/s of weight bytes read, against numpy's float32
GEMV on the same shape.

    .venv/bin/python bench/native_gemv.py [--rows 1536] [--k 768] [--threads 1,2] [--reps 5] [--types q4_0,...]

The weight is `rows` x `k` random blocks of each type (as GGUF stores them); one activation row.
Per type and thread count the best of --reps timings of a loop of calls counts (the vCPUs here
slow down for seconds at random); the CPU-time figure in parentheses (weight bytes per second of
process CPU time, all threads together) is what the kernel costs when other work shares the cores.
numpy's line is `W @ x` with W float32 (4 bytes a weight), one BLAS sgemv on as many threads
as the most of --threads (OPENBLAS_NUM_THREADS, unless it is set). GB/s = weight bytes / seconds per call. k defaults to 768, SmolLM2's 576
rounded up to a multiple of 256 (the K types' super-block). The last line is exactly
    native_over_numpy=<type>:<ratio at the most threads>,...
(ratio of calls per second; above 1 the native GEMV is faster than numpy's float32 one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and "OPENBLAS_NUM_THREADS" not in os.environ:
    # numpy's BLAS gets as many threads as the native kernels' most (--threads), set before numpy loads
    _threads = next((a.split("=", 1)[1] if "=" in a else sys.argv[i + 2] for i, a in enumerate(sys.argv[1:])
                     if a.startswith("--threads")), "1,2")
    os.environ["OPENBLAS_NUM_THREADS"] = str(max(int(t) for t in _threads.split(",")))

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from native_support import TYPES, random_weight  # noqa: E402
from strata.targets.cpu.native.build import build_library  # noqa: E402
from strata.targets.cpu.native.loader import native_load, native_set_threads  # noqa: E402

DEFAULT_TYPES = "f32,f16,bf16,q4_0,q4_1,q5_0,q5_1,q8_0,q2_K,q3_K,q4_K,q5_K,q6_K,iq4_nl,iq4_xs"


def best_seconds(fn, reps: int, min_time: float = 0.05) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per call: the best of `reps` timed loops of about
    `min_time` each. On a machine shared with other work the CPU time says what the kernel
    costs; the wall time includes waiting for a core."""
    fn()
    calls = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - t0 >= min_time:
            break
        calls *= 2
    best, best_cpu = float("inf"), float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
        best_cpu = min(best_cpu, (time.process_time() - c0) / calls)
    return best, best_cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1536)
    ap.add_argument("--k", type=int, default=768, help="a multiple of 256 for the K types (576 is not)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--types", default=DEFAULT_TYPES)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    by_name = {v[0]: t for t, v in TYPES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = build_library(tmp)
        if path is None:
            return 1
        lib = native_load(path)
        rng = np.random.default_rng(0)
        rows, k = args.rows, args.k
        x = rng.standard_normal((1, k)).astype(np.float32)
        wf = rng.standard_normal((rows, k)).astype(np.float32)
        xv = x[0].copy()
        numpy_s, numpy_cpu = best_seconds(lambda: wf @ xv, args.reps)
        print(f"shape {rows} x {k}, one activation row; GB/s of weight bytes by wall time (by CPU time)")
        print(f"{'numpy f32':>10}: {wf.nbytes / numpy_s / 1e9:7.2f} GB/s ({wf.nbytes / numpy_cpu / 1e9:6.2f})"
              f"  {numpy_s * 1e6:8.1f} us/call")
        ratios = []
        for name in args.types.split(","):
            t = by_name[name]
            if k % TYPES[t][1]:
                print(f"{name:>10}: skipped (k={k} is not a multiple of {TYPES[t][1]})")
                continue
            w = random_weight(t, rows, k, rng)
            y = np.empty((1, rows), np.float32)
            wp, xp, yp, rb = w.ctypes.data, x.ctypes.data, y.ctypes.data, w.shape[1]
            parts = []
            secs = 0.0
            for n in threads:
                native_set_threads(lib, n)
                secs, cpu = best_seconds(lambda: lib.strata_mul_mat(t, wp, rows, k, rb, xp, 1, yp), args.reps)
                gbs, gbs_cpu = w.nbytes / secs / 1e9, w.nbytes / cpu / 1e9
                parts.append(f"{n}t {gbs:6.2f} GB/s ({gbs_cpu:6.2f}) {secs * 1e6:7.1f} us")
            ratios.append(f"{name}:{numpy_s / secs:.2f}")
            print(f"{name:>10}: " + "   ".join(parts) + f"   x{numpy_s / secs:.2f} numpy")
        print("native_over_numpy=" + ",".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
