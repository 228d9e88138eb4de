"""`strata import FILE --format tensorviz -o OUT.mlir [--random-weights SEED]`: a model in another
format as the module level, with a checkpoint of seeded random weights on request."""

from __future__ import annotations

import argparse
from pathlib import Path

from strata.cli.args import bounded_int


def add(sub) -> None:
    p = sub.add_parser("import", help="read a model in another format as the module level (.mlir)")
    p.add_argument("file", metavar="FILE", help="the model file (a tensorviz.graph JSON document)")
    p.add_argument("--format", choices=["tensorviz"], required=True, help="the file's format")
    p.add_argument("-o", "--output", metavar="OUT.mlir", default=None, help="write here (default: standard output)")
    p.add_argument("--random-weights", metavar="SEED", type=bounded_int(0), default=None,
                   help="also write a checkpoint (config.json, model.safetensors) of seeded random weights to "
                        "OUT/ (OUT.mlir without its suffix), so that strata compile/run work on it")
    p.add_argument("--weights-dir", metavar="DIR", default=None, help="write the random checkpoint here instead")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.artifacts.files import check_output_path, emit_text
    from strata.errors import StrataError
    from strata.pipeline.formats import import_tensorviz_with_weights

    if args.output is not None:
        check_output_path(args.output, {args.file: "the imported document"})
    weights = args.weights_dir
    if args.random_weights is not None and weights is None:
        if args.output is None:
            raise StrataError("import: --random-weights needs -o OUT.mlir (the checkpoint goes to OUT/) "
                              "or --weights-dir DIR")
        weights = str(Path(args.output).with_suffix(""))
    if weights is not None and args.random_weights is None:
        raise StrataError("import: --weights-dir needs --random-weights SEED")
    text = import_tensorviz_with_weights(args.file, Path(weights) if weights is not None else None, args.random_weights,
                                         args.output)
    emit_text(text, args.output)
    return 0
