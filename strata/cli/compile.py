"""`strata compile MODEL --target cpu|cuda|epu -o OUT`: the model compiled for a target, or
`--print-pipeline`: the target's pass pipeline."""

from __future__ import annotations

import argparse

from strata.cli.args import add_model, add_target, knobs_of, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("compile", help="compile a model for a target")
    add_model(p)
    add_target(p, run=False)
    p.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="the output directory (created; a previous strata output there is replaced)")
    p.add_argument("--print-pipeline", action="store_true",
                   help="print the target's pass pipeline (runnable by strata-opt -p) and stop")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError
    from strata.pipeline import load_model, target_pipeline
    from strata.pipeline.compile import compile_to

    if args.print_pipeline:
        refuse_unused(args, "with --print-pipeline (nothing is compiled)", "-o", "--aot", "--allow-spills")
    elif args.aot is None:
        refuse_unused(args, "without --aot", "--allow-spills")
    knobs = knobs_of(args)
    model = load_model(args.model)
    if args.print_pipeline:
        print(target_pipeline(args.target, model, knobs))
        return 0
    if args.output is None:
        raise StrataError("compile: give -o OUT (the output directory), or --print-pipeline")
    print(compile_to(model, args.target, args.output, knobs, aot=args.aot, allow_spills=args.allow_spills))
    return 0
