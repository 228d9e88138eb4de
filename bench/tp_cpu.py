"""Tensor-parallel CPU decode: one process with 2 math threads (tp=1) against two ranks of one
thread each (tp=2, gloo on this machine), on the Qwen3-0.6B shape.

    .venv/bin/python bench/tp_cpu.py [--cache-dir DIR] [--layers 28] [--prompt 16] [--new 32] [--reps 3]

A Qwen3-0.6B-shaped model (bench/cpu_decode.py's, --layers of its 28) with random fp32 weights,
written once into the cache dir. Each setting runs in its own subprocess (its thread count set
before numpy loads: OMP/OPENBLAS/MKL_NUM_THREADS), the two alternating, --reps each: a prefill of
--prompt tokens, then --new greedy decode steps timed; the best decode rate of each counts. For
tp=2, rank 0's collectives are timed too (its all_reduce and all_gather wrapped): their share
of the decode time. The ids of both must agree.

The last line is exactly
    tp2_over_tp1=<tp=2 decode tok/s / tp=1 decode tok/s> allreduce_share=<fraction of tp=2 decode time>
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _child(args: argparse.Namespace) -> int:
    """One timed run: prints one JSON line (decode tok/s, the collectives' share, the ids)."""
    import numpy as np

    from strata.pipeline import load_model
    from strata.runtime.opener import open_program

    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 151936, args.prompt)]
    if args.tp == 1:
        program = open_program(load_model(args.model), "cpu", {"ctx": 256}, quiet=True)
        clock = None
    else:
        from strata.runtime.tp import launch

        program = launch(args.model, args.tp, "cpu", {"ctx": 256}, threads=1)
        names = program.program.model.__class__.__init__.__globals__  # the generated module's
        clock = [0.0]
        for fn in ("all_reduce", "all_gather"):
            inner = names[fn]

            def timed(*a, _inner=inner):
                t0 = time.perf_counter()
                try:
                    return _inner(*a)
                finally:
                    clock[0] += time.perf_counter() - t0

            names[fn] = timed
    try:
        step = program.prefill(prompt, 0)
        ids = [step.token]
        if clock is not None:
            clock[0] = 0.0
        t0 = time.perf_counter()
        for i in range(args.new):
            step = program.decode(ids[-1], len(prompt) + i)
            ids.append(step.token)
        seconds = time.perf_counter() - t0
    finally:
        program.close()
    share = clock[0] / seconds if clock is not None else 0.0
    print(json.dumps({"tok_s": args.new / seconds, "share": share, "ids": ids}), flush=True)
    return 0


def _run(model: Path, tp: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    threads = "2" if tp == 1 else "1"
    env.update({v: threads for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    cmd = [sys.executable, __file__, "--child", "--model", str(model), "--tp", str(tp),
           "--prompt", str(args.prompt), "--new", str(args.new)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"tp={tp} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "strata-bench")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tp", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args)

    import dataclasses

    import harness
    from cpu_decode import qwen3_06b_shaped

    from strata.models import save_random_checkpoint

    cfg = dataclasses.replace(qwen3_06b_shaped(), num_layers=args.layers)
    model = harness.ensure_model(args.cache_dir, f"qwen3-0.6b-shaped-f32-{args.layers}l",
                                 lambda d: save_random_checkpoint(cfg, d, seed=harness.SEED, dtype="float32"))
    best: dict[int, dict] = {}
    for rep in range(args.reps):
        for tp in (1, 2) if rep % 2 == 0 else (2, 1):  # alternate: both meet the same slow spells
            got = _run(model, tp, args)
            print(f"rep {rep} tp={tp}: {got['tok_s']:.2f} decode tok/s"
                  + (f", collectives {100 * got['share']:.1f}% of it" if tp > 1 else ""), file=sys.stderr)
            if tp not in best or got["tok_s"] > best[tp]["tok_s"]:
                best[tp] = got
    if best[1]["ids"] != best[2]["ids"]:
        raise SystemExit(f"tp=2 chose other ids than tp=1: {best[2]['ids']} vs {best[1]['ids']}")
    print(f"tp=1 (2 threads): {best[1]['tok_s']:.2f} decode tok/s; tp=2 (1 thread each): {best[2]['tok_s']:.2f} "
          f"decode tok/s; {args.layers} layers, {args.new} steps after {args.prompt} tokens, best of {args.reps}")
    print(f"tp2_over_tp1={best[2]['tok_s'] / best[1]['tok_s']:.3f} allreduce_share={best[2]['share']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
