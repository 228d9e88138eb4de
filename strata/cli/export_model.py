"""`strata export MODEL_OR_MLIR --format onnx|tensorviz -o FILE`: an entry of the op level as
ONNX (`--recipe w4a16`: its int4 weights as com.microsoft.MatMulNBits), or the module level as a
tensorviz.graph document."""

from __future__ import annotations

import argparse

from strata.cli.args import MODEL_HELP, bounded_int, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("export", help="write a model in another format: an entry of the op level as ONNX, or "
                                      "the module level (of a directory or a module-level .mlir) as tensorviz.graph")
    p.add_argument("model", metavar="MODEL_OR_MLIR", help=MODEL_HELP + ", or a module-level .mlir (tensorviz)")
    p.add_argument("--format", choices=["onnx", "tensorviz"], required=True,
                   help="onnx: standard ONNX ops, state as inputs and outputs; tensorviz: a tensorviz.graph v3 document")
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write here (tensorviz default: standard output; onnx: required, beside it FILE.data holds "
                        "the weights of a model over 1 GiB)")
    p.add_argument("--entry", choices=["prefill", "decode"], default="prefill", help="onnx: the entry (default prefill)")
    p.add_argument("--tokens", type=bounded_int(1), default=5, help="onnx: tokens per prefill call (default 5)")
    p.add_argument("--ctx", type=bounded_int(1), default=None,
                   help="onnx: context size in tokens (default: min(max_position_embeddings, 4096))")
    p.add_argument("--no-flash-attn", action="store_true", help="onnx: unfused MUL_MAT/SOFT_MAX attention")
    p.add_argument("--recipe", default=None, metavar="RECIPE",
                   help="onnx: w4a16: int4 weights (block 128, asymmetric) as ONNX Runtime's com.microsoft.MatMulNBits, "
                        "f32 activations (default: the model's own weights)")
    p.add_argument("--w4a16", metavar="DIR", default=None,
                   help="onnx, with --recipe w4a16: the int4 weights of this w4a16 stage (a `strata quantize --w4a16` "
                        "output, or OUT/w4a16/q of `strata compile --target epu`: the EPU gate's reference) instead "
                        "of quantizing the model's without SmoothQuant")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.artifacts.files import check_output_path, emit_text
    from strata.errors import StrataError, say

    if args.format == "onnx":
        from strata.pipeline import load_model

        if args.entry == "decode":
            refuse_unused(args, "with --entry decode (it takes one token)", "--tokens")
        from strata.pipeline.formats import check_onnx_recipe, export_onnx_file
        from strata.runtime.opener import resolved_knobs

        if args.output is None:
            raise StrataError("export: --format onnx needs -o FILE")
        check_onnx_recipe(args.recipe, args.w4a16)
        model = load_model(args.model)
        knobs = resolved_knobs(model, "cpu", {"ctx": args.ctx, "flash_attn": not args.no_flash_attn})
        tokens = args.tokens if args.entry == "prefill" else 1
        say(export_onnx_file(model, args.entry, tokens, knobs, args.output, args.recipe, args.w4a16))
        return 0
    from strata.pipeline.formats import input_files_of, tensorviz_text

    refuse_unused(args, "with --format tensorviz (the module level)", "--entry", "--tokens", "--ctx", "--no-flash-attn",
                  "--recipe", "--w4a16")
    if args.output is not None:
        check_output_path(args.output, input_files_of(args.model))
    emit_text(tensorviz_text(args.model), args.output)
    return 0
