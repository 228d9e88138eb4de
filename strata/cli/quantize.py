"""`strata quantize MODEL -o OUT`: an fp8 block-quantized checkpoint with the error of each
tensor, or `--w4a16`: int4 weights as ONNX Runtime's MatMulNBits packs them."""

from __future__ import annotations

import argparse
import sys

from strata.cli.args import add_model, bounded_int, refuse_unused


def add(sub) -> None:
    p = sub.add_parser("quantize", help="write an fp8 block-quantized checkpoint and report the error per tensor "
                                        "(--w4a16: int4 weights as ONNX Runtime's MatMulNBits packs them)")
    add_model(p)
    p.add_argument("--recipe", default=None,
                   help="fp8: the precision recipe whose fp8 weights are quantized (default fp8-bf16head)")
    p.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="the output directory (created; a previous strata output there is replaced)")
    p.add_argument("--report-only", action="store_true", help="print the error table without writing")
    p.add_argument("--w4a16", action="store_true",
                   help="int4 weights (block-wise asymmetric, as ONNX Runtime's MatMulNBits packs them)")
    p.add_argument("--smoothquant", metavar="RANGES", default=None,
                   help="--w4a16: smooth first, with the per-channel ranges `strata calibrate` wrote")
    p.add_argument("--alpha", type=float, default=None,
                   help="--w4a16 --smoothquant: SmoothQuant's migration strength, in [0, 1] (default 0.5)")
    p.add_argument("--block", type=bounded_int(16, 1 << 16), default=None,
                   help="--w4a16: int4 block size, a power of two (default 128)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError, counter, say
    from strata.pipeline import load_model

    if args.w4a16:
        from strata.quant.w4a16 import quantize_to

        if args.report_only:
            raise StrataError("quantize: --report-only reports fp8 errors; --w4a16 writes -o OUT")
        refuse_unused(args, "with --w4a16 (its int4 weights follow the w4a16 plan)", "--recipe")
        if args.smoothquant is None:
            refuse_unused(args, "without --smoothquant RANGES", "--alpha")
        if args.output is None:
            raise StrataError("quantize: give -o OUT (the output directory)")
        alpha = 0.5 if args.alpha is None else args.alpha
        block = 128 if args.block is None else args.block
        for line in quantize_to(load_model(args.model), args.output, args.smoothquant, alpha, block):
            say(line)
        return 0
    from strata.quant.fp8_checkpoint import error_table, quantize_checkpoint

    refuse_unused(args, "to fp8 checkpoints (it is a --w4a16 option)", "--smoothquant", "--alpha", "--block")
    if args.report_only:
        refuse_unused(args, "with --report-only (it writes nothing)", "-o")
    if args.output is None and not args.report_only:
        raise StrataError("quantize: give -o OUT (the output directory), or --report-only")
    rows = quantize_checkpoint(load_model(args.model), None if args.report_only else args.output,
                               args.recipe or "fp8-bf16head", counter("quantized", "tensors"))
    sys.stdout.write(error_table(rows))
    if not args.report_only:
        say(f"wrote {len(rows)} fp8 tensors and their scales to {args.output}")
    return 0
