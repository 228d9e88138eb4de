"""`strata view MODEL --level module|op|blueprint --format dot|svg|html`: a level drawn, one
cluster per group, shapes and precisions on the edges."""

from __future__ import annotations

import argparse

from strata.cli.args import (BLUEPRINT_FLAGS, LOWERING_FLAGS, MODEL_HELP, add_blueprint, add_lowering, blueprint_of,
                             lowering_of, refuse_unused)


def add(sub) -> None:
    p = sub.add_parser("view", help="draw a level of the model: Graphviz, SVG or a self-contained HTML page")
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP + ", or a module-level .mlir")
    p.add_argument("--level", choices=["module", "op", "blueprint"], default="module", help="the level (default module)")
    p.add_argument("--format", choices=["dot", "svg", "html"], default="dot",
                   help="dot (Graphviz text, default), svg (Graphviz's dot if installed, else strata's own layout), "
                        "html (the SVG in one self-contained page)")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here (default: standard output)")
    p.add_argument("--expand", action="store_true", help="draw every layer (default: a repeated layer is one node)")
    p.add_argument("--require-dot", action="store_true", help="fail instead of using strata's own layout without dot")
    add_lowering(p)
    add_blueprint(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.artifacts.files import check_output_path, emit_text
    from strata.errors import say
    from strata.pipeline.formats import input_files_of, module_of
    from strata.pipeline.views import view

    unused = {"module": (*LOWERING_FLAGS, *BLUEPRINT_FLAGS), "op": BLUEPRINT_FLAGS, "blueprint": LOWERING_FLAGS}
    refuse_unused(args, f"with --level {args.level}", *unused[args.level])
    if args.format == "dot":
        refuse_unused(args, "with --format dot (Graphviz text needs no dot)", "--require-dot")
    if args.output is not None:
        check_output_path(args.output, input_files_of(args.model))
    text, summary = view(module_of(args.model), args.level, args.format, lowering=lowering_of(args),
                         bp=blueprint_of(args), expand=args.expand, require_dot=args.require_dot, label=args.model)
    emit_text(text, args.output)
    if args.output is not None:
        say(summary)
    return 0
