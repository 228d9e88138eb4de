"""`strata import`, `strata export` and `strata view`: a model in other formats and as pictures.

    strata import FILE --format tensorviz -o OUT.mlir [--random-weights SEED]   # + OUT/ checkpoint
    strata export MODEL_OR_MLIR --format tensorviz -o F.json
    strata view MODEL --level module|op|blueprint --format dot|svg|html [-o F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strata.cli import _model, _say
from strata.errors import StrataError


def _module_of(path: str):
    """The module level of MODEL_OR_MLIR: a model directory (or config.json), or a .mlir file."""
    if path.endswith(".mlir") and Path(path).is_file():
        from strata.dialects import strata_context
        from strata.ir.text import read_ir

        return read_ir(path, strata_context())
    return _model(argparse.Namespace(model=path)).module


def cmd_import(args: argparse.Namespace) -> int:
    """A model in another format as the module level (.mlir), with seeded random weights on request."""
    from strata.frontends.tensorviz import import_tensorviz, random_weights_std
    from strata.ir.text import print_ir
    from strata.outputs import check_output_path, write_output

    if args.output is not None:
        check_output_path(args.output)
    weights = args.weights_dir
    if args.random_weights is not None and weights is None:
        if args.output is None:
            raise StrataError("import: --random-weights needs -o OUT.mlir (the checkpoint goes to OUT/) "
                              "or --weights-dir DIR")
        weights = str(Path(args.output).with_suffix(""))
    if weights is not None:
        if args.random_weights is None:
            raise StrataError("import: --weights-dir needs --random-weights SEED")
        _check_weights_dir(Path(weights))
    cfg, module = import_tensorviz(args.file)
    text = print_ir(module)
    if weights is not None:
        from strata.models.checkpoint import save_random_checkpoint

        save_random_checkpoint(cfg, weights, seed=args.random_weights, std=random_weights_std(cfg.hidden_size))
        _say(f"wrote a checkpoint with random weights (seed {args.random_weights}) to {weights}")
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text.encode())
    return 0


def _check_weights_dir(d: Path) -> None:
    """Refuse a directory holding anything but a checkpoint strata writes (nothing of the user's
    is overwritten)."""
    ours = {"config.json", "model.safetensors", ".strata-cache"}
    if d.exists() and not d.is_dir():
        raise StrataError(f"{d}: exists and is not a directory; give --weights-dir DIR")
    if d.is_dir():
        other = sorted(p.name for p in d.iterdir() if p.name not in ours)
        if other:
            raise StrataError(f"{d}: holds {other[0]!r}, not written by strata import; give an empty or new "
                              "--weights-dir")
    elif not d.parent.is_dir():
        raise StrataError(f"{d}: the directory {d.parent} does not exist")


def cmd_export(args: argparse.Namespace) -> int:
    from strata.outputs import check_output_path, write_output

    if args.output is not None:
        check_output_path(args.output)
    from strata.exporters.tensorviz import export_tensorviz, tensorviz_json

    text = tensorviz_json(export_tensorviz(_module_of(args.model)))
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text.encode())
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """The model's module, op or blueprint level as Graphviz, SVG or a self-contained HTML page."""
    from strata.exporters import view as V
    from strata.exporters import view_render as R
    from strata.outputs import check_output_path, write_output

    if args.output is not None:
        check_output_path(args.output)
    dot = R.dot_binary() if args.format != "dot" else None
    if args.format != "dot" and dot is None and args.require_dot:
        raise StrataError("view: Graphviz's 'dot' is not on PATH (install graphviz), and --require-dot was given")
    module = _module_of(args.model)
    if args.level == "module":
        graph = V.module_graph(module)
        keys = V.layer_keys(graph)
    elif args.level == "op":
        from strata.pipeline import entry_pipeline, run_pipeline

        tokens = args.tokens if args.tokens is not None else (5 if args.entry == "prefill" else 1)
        spec = entry_pipeline(args.entry, tokens=tokens, start=args.start, ctx=args.ctx, kv_pad=args.kv_pad,
                              flash_attn=not args.no_flash_attn)
        graph = V.op_graph(run_pipeline(module.clone(), spec))
        keys = V.layer_keys(graph)
    else:
        from xdsl.dialects import func

        from strata.pipeline import blueprint_pipeline, run_pipeline

        lowered = run_pipeline(module.clone(), blueprint_pipeline(args.mode, args.rows, args.recipe, kv=args.kv))
        graph, keys = V.blueprint_graph(next(op for op in lowered.walk() if isinstance(op, func.FuncOp)))
    full = len(graph.nodes)
    if not args.expand:
        graph = V.collapse_layers(graph, keys)
    summary = (f"{args.model}: {args.level} level, {len(graph.nodes)} nodes shown of {full}"
               + ("" if len(graph.nodes) == full else " (repeated layers collapsed; --expand shows all)"))
    text = V.to_dot(graph)
    if args.format != "dot":
        text = R.svg_via_dot(text, dot) if dot is not None else R.layout_svg(graph)
        if args.format == "html":
            text = R.html_page(f"{graph.name}: {args.level} level", text, summary)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text.encode())
        _say(summary)
    return 0

