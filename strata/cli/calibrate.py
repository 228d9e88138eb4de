"""`strata calibrate MODEL -o RANGES`: activation ranges on prompts (for SmoothQuant and the
fixed-point formats)."""

from __future__ import annotations

import argparse

from strata.cli.args import add_model, bounded_int, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("calibrate", help="record activation ranges on prompts (for SmoothQuant and fixed point)")
    add_model(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE", default=None,
                     help="one prompt per line, token ids separated by commas or spaces")
    src.add_argument("--random", metavar="N", type=bounded_int(1), default=None,
                     help="N random prompts, at most 65536 (the default: 8)")
    p.add_argument("--length", type=bounded_int(1), default=16,
                   help="tokens per random prompt, at most the model's context (default 16)")
    p.add_argument("--seed", type=bounded_int(0), default=0, help="the random prompts' seed (default 0)")
    p.add_argument("-o", "--output", metavar="RANGES", required=True, help="the ranges file to write (JSON)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.errors import say

    if args.prompts is not None:
        refuse_unused(args, "with --prompts (they apply to --random)", "--length", "--seed")
    from strata.pipeline import load_model
    from strata.quant.calibrate import calibrate_to

    say(calibrate_to(load_model(args.model), args.output, args.prompts, args.random, args.length, args.seed))
    return 0
