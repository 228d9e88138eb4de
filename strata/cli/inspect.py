"""`strata inspect MODEL [--level module|blueprint]`: the module level as a listing (entries, generics, blocks), or
the blueprint level as one line per kernel group."""

from __future__ import annotations

import argparse
import sys

from strata.cli.args import BLUEPRINT_FLAGS, add_blueprint, add_model, blueprint_of, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("inspect", help="print the module level as a listing of entries, generics and blocks, "
                                      "or the blueprint level as a table of kernel groups")
    add_model(p)
    p.add_argument("--level", choices=["module", "blueprint"], default="module", help="the level (default module)")
    add_blueprint(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.pipeline import load_model
    from strata.pipeline.views import group_table, listing

    if args.level == "module":
        refuse_unused(args, "with --level module (the listing)", *BLUEPRINT_FLAGS)
    model = load_model(args.model)
    sys.stdout.write(group_table(model, blueprint_of(args)) if args.level == "blueprint" else listing(model))
    return 0
