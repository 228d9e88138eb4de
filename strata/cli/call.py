"""`strata call MODEL --calls FILE.json -o OUT.npz`: run entries of the module level on given inputs, in
order on one program state (as IREE's iree-run-module), and save their results."""

from __future__ import annotations

import argparse

from strata.cli.args import add_allow_nonfinite, add_model, add_target, knobs_of


def add(sub) -> None:
    p = sub.add_parser("call", help="run entries (decode_rows, prefill_slots, ...) on given inputs; save the results")
    add_model(p)
    p.add_argument("--calls", required=True, metavar="FILE",
                   help='a JSON list of calls run in order on one state: [{"entry": "decode_rows", '
                        '"inputs": {"tokens": [[5], [9]], "positions": [3, 7]}}, ...] (the module level\'s argument names)')
    p.add_argument("-o", "--output", required=True, metavar="OUT.npz",
                   help="where the results go: call<i>, or call<i>_<j> for an entry with several results")
    add_target(p, run=True)
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    add_allow_nonfinite(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.call import call_model

    call_model(args.model, args.calls, args.output, target_name=args.target, knobs=knobs_of(args),
               cache_dir=args.cache_dir, interpret=getattr(args, "interpret", False),
               allow_nonfinite=args.allow_nonfinite)
    return 0
