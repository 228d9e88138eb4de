"""`strata trace MODEL --entry prefill|decode ...`: the op level as llama.cpp's eval-callback table."""

from __future__ import annotations

import argparse
import sys

from strata.cli.args import add_lowering, add_model, lowering_of


def add(sub) -> None:
    p = sub.add_parser("trace", help="print the op level as llama.cpp's eval-callback table")
    add_model(p)
    add_lowering(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.pipeline import load_model
    from strata.pipeline.views import trace

    sys.stdout.write(trace(load_model(args.model), lowering_of(args)))
    return 0
