"""`strata blueprint MODEL`: the blueprint level as kbp-graph/v1 JSON, Graphviz, a group table
or IR; `--errors IDS`: each node's error under the recipe against f32, and greedy agreement."""

from __future__ import annotations

import argparse

from strata.cli.args import add_blueprint, add_model, blueprint_of, bounded_int, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("blueprint", help="export the blueprint level: kernel groups with precision, "
                                         "placement and state (kbp-graph/v1 JSON, Graphviz, a table, or IR)")
    add_model(p)
    add_blueprint(p)
    p.add_argument("--format", choices=["kbp-graph", "dot", "table", "mlir"], default="kbp-graph",
                   help="kbp-graph/v1 JSON (default), Graphviz with a cluster per group, the group table, the IR")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here (default: standard output)")
    p.add_argument("--errors", metavar="IDS", default=None,
                   help="instead: run the prompt IDS (comma-separated token ids) and report each node's error "
                        "under --recipe against f32, and greedy top-1 agreement with the op level")
    p.add_argument("--steps", type=bounded_int(1, 4096), default=32, help="greedy steps for --errors (default 32)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.artifacts.files import check_output_path, emit_text
    from strata.pipeline import load_model
    from strata.pipeline.views import blueprint_text
    from strata.runtime.request import parse_prompt_ids

    if args.errors is not None:
        refuse_unused(args, "with --errors (it reports on the prefill and decode of --recipe)", "--mode", "--rows",
                      "--kv", "--format")
    else:
        refuse_unused(args, "without --errors", "--steps")
    prompt = parse_prompt_ids(args.errors, "--errors") if args.errors is not None else None
    model = load_model(args.model)
    if args.output is not None:
        check_output_path(args.output, model.input_files())
    if prompt is not None:
        from strata.runtime.request import RequestError
        from strata.verify.blueprint import errors_report

        try:
            text = errors_report(model, args.recipe, prompt, args.steps)
        except RequestError as e:
            raise RequestError(f"--errors: {e}") from None
    else:
        text = blueprint_text(model, args.format, blueprint_of(args))
    emit_text(text, args.output)
    return 0
