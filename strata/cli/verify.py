"""`strata verify MODEL --against LOG`: every op's sum against llama-eval-callback's log, row for
row; exit 1 at the first op that diverges, naming it."""

from __future__ import annotations

import argparse

from strata.cli.args import add_model, bounded_int


def add(sub) -> None:
    p = sub.add_parser("verify", help="compare every op's value with a llama.cpp eval-callback log",
                       description="Run MODEL's prefill on the prompt of a llama-eval-callback log and compare "
                                   "the sum of every op with llama.cpp's, row for row. Exit 1 at the first op "
                                   "that diverges, naming it.")
    add_model(p)
    p.add_argument("--against", metavar="LOG", required=True, help="llama-eval-callback's output (*.callback.log)")
    p.add_argument("--ctx", type=bounded_int(1), default=256, help="the context llama.cpp ran with (default 256)")
    p.add_argument("--kv-pad", type=bounded_int(1), default=256, help="llama.cpp's KV padding (default 256)")
    p.add_argument("--rtol", type=float, default=1e-3,
                   help="tolerance on each sum, relative to the tensor's sum of |x| (default 1e-3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.pipeline import load_model
    from strata.verify.verify_llamacpp import verify_against

    ok, verdict = verify_against(load_model(args.model), args.against, args.ctx, args.kv_pad, args.rtol)
    print(verdict)
    return 0 if ok else 1
