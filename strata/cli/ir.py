"""`strata ir MODEL --level module|op|blueprint`: the IR of a level."""

from __future__ import annotations

import argparse
import sys

from strata.cli.args import LOWERING_FLAGS, add_lowering, add_model, lowering_of, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("ir", help="print the IR of a level")
    add_model(p)
    p.add_argument("--level", choices=["module", "op", "blueprint"], default="module",
                   help="the IR level (default module; blueprint: of --entry's mode, --tokens rows)")
    add_lowering(p)
    p.add_argument("--recipe", default="fp8-bf16head", help="the blueprint level's precision recipe")
    p.add_argument("--kv", choices=["paged", "contiguous"], default="paged", help="the blueprint's KV cache layout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.level == "module":
        refuse_unused(args, "with --level module", *LOWERING_FLAGS, "--recipe", "--kv")
    elif args.level == "op":
        refuse_unused(args, "with --level op (they choose the blueprint)", "--recipe", "--kv")
    else:
        refuse_unused(args, "with --level blueprint (it takes --entry and --tokens)", "--start", "--ctx", "--kv-pad",
                      "--no-flash-attn")
    from strata.pipeline import load_model
    from strata.pipeline.views import level_ir

    sys.stdout.write(level_ir(load_model(args.model), args.level, lowering_of(args), args.recipe, args.kv))
    return 0
