"""`strata demo`: the main job on the built-in default model (no download)."""

from __future__ import annotations

import argparse


def add(sub) -> None:
    p = sub.add_parser("demo", help="the main job on the built-in default model")
    p.add_argument("--root", default=".strata-cache/models", help="where the default model is written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.demo import run_demo

    run_demo(args.root)
    return 0
