"""`strata calibrate` and `strata quantize` (fp8 block checkpoints, int4 w4a16 packed as ORT's MatMulNBits)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strata.cli import _add_model, _model, _say, bounded_int
from strata.errors import StrataError

# ---------------------------------------------------------------------------------------------
# calibrate, quantize --w4a16 (issue 10 item 1)


def _progress(verb: str, unit: str):
    """A one-line progress counter on a terminal; nothing when stderr is piped."""
    if not sys.stderr.isatty():
        return None

    def show(i: int, n: int, *_: object) -> None:
        print(f"\rstrata: {verb} {i}/{n} {unit}", end="" if i < n else "\n", file=sys.stderr, flush=True)

    return show


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the op level on prompts; write each linear's per-channel max|x| and each tensor's range."""
    from strata.calibrate import calibrate, random_prompts, ranges_bytes, read_prompts
    from strata.outputs import check_output_path, write_output

    check_output_path(args.output)
    model = _model(args)
    vocab = int(model.config.vocab_size)
    if args.prompts is not None:
        prompts = read_prompts(args.prompts, vocab)
    else:
        prompts = random_prompts(args.random or 8, args.length, vocab, args.seed)
    ranges = calibrate(model, prompts, progress=_progress("calibrated", "prompts"))
    write_output(args.output, ranges_bytes(ranges))
    _say(f"wrote the ranges of {len(ranges['linears'])} linears and {len(ranges['tensors'])} tensors "
         f"over {len(prompts)} prompts to {args.output}")
    return 0


def cmd_quantize_w4a16(args: argparse.Namespace) -> int:
    """SmoothQuant (with --smoothquant RANGES), then int4 weights packed as MatMulNBits, written to OUT."""
    from strata.stage import check_destination
    from strata.w4a16 import INFO, TENSORS, plan_model, write_w4a16

    if getattr(args, "report_only", False):
        raise StrataError("quantize: --report-only reports fp8 errors; --w4a16 writes -o OUT")
    if args.output is None:
        raise StrataError("quantize: give -o OUT (the output directory)")
    check_destination(Path(args.output), {TENSORS, INFO, "config.json"})
    model = _model(args)
    plan = plan_model(model, args.smoothquant, args.alpha, args.block)
    write_w4a16(model, plan, args.output, progress=_progress("quantized", "weights"))
    smooth = f", {len(plan.groups)} SmoothQuant groups (alpha {plan.alpha})" if plan.ranges is not None else ""
    _say(f"wrote {len(plan.weights)} int4 weights (block {plan.block}){smooth} to {args.output}")
    for name, why in plan.skipped:
        _say(f"left as f32: '{name}' ({why})")
    return 0


def _add_quantize_w4a16_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--w4a16", action="store_true",
                   help="int4 weights (block-wise asymmetric, as ONNX Runtime's MatMulNBits packs them)")
    p.add_argument("--smoothquant", metavar="RANGES", default=None,
                   help="smooth first, with the per-channel ranges `strata calibrate` wrote")
    p.add_argument("--alpha", type=float, default=0.5, help="SmoothQuant's migration strength (default 0.5)")
    p.add_argument("--block", type=bounded_int(16, 1 << 16), default=128, help="int4 block size (default 128)")


def add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="record activation ranges on prompts (for SmoothQuant and fixed point)")
    _add_model(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE", default=None,
                     help="one prompt per line, token ids separated by commas or spaces")
    src.add_argument("--random", metavar="N", type=bounded_int(1, 1 << 20), default=None,
                     help="N random prompts (the default: 8)")
    p.add_argument("--length", type=bounded_int(1, 1 << 16), default=16, help="tokens per random prompt (default 16)")
    p.add_argument("--seed", type=bounded_int(0), default=0, help="the random prompts' seed (default 0)")
    p.add_argument("-o", "--output", metavar="RANGES", required=True, help="the ranges file to write (JSON)")
    p.set_defaults(func=cmd_calibrate)


def cmd_quantize(args: argparse.Namespace) -> int:
    """Write MODEL with its recipe's fp8 weights block-quantized; print each tensor's error."""
    if args.w4a16:
        return cmd_quantize_w4a16(args)
    from strata.quantize import error_table, quantize_checkpoint

    if args.output is None and not args.report_only:
        raise StrataError("quantize: give -o OUT (the output directory), or --report-only")
    tty = sys.stderr.isatty()

    def progress(i: int, n: int, name: str) -> None:
        if tty:
            print(f"\rstrata: quantized {i}/{n} tensors", end="" if i < n else "\n", file=sys.stderr, flush=True)

    rows = quantize_checkpoint(args.model, None if args.report_only else args.output, args.recipe, progress)
    sys.stdout.write(error_table(rows))
    if not args.report_only:
        _say(f"wrote {len(rows)} fp8 tensors and their scales to {args.output}")
    return 0


def add_quantize(sub) -> None:
    p = sub.add_parser("quantize", help="write an fp8 block-quantized checkpoint and report the error per tensor "
                                        "(--w4a16: int4 weights as ONNX Runtime's MatMulNBits packs them)")
    _add_model(p)
    p.add_argument("--recipe", default="fp8-bf16head",
                   help="the precision recipe whose fp8 weights are quantized (default fp8-bf16head)")
    p.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="the output directory (created; a previous strata output there is replaced)")
    p.add_argument("--report-only", action="store_true", help="print the error table without writing")
    _add_quantize_w4a16_args(p)
    p.set_defaults(func=cmd_quantize)
