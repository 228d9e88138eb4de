"""`strata score MODEL --target epu --prompt-ids 1,2,3 [--steps N]`: the EPU gate as a command:
compile (or reuse) for the EPU, run the driver greedily and score each step's logits against
ONNX Runtime on the same int4 graph; the worst figures and `gate=pass|fail` last, exit 1 on a
failed gate."""

from __future__ import annotations

import argparse

from strata.cli.args import add_model, bounded_int


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def add(sub) -> None:
    from strata.verify.epu_gate import MAX_REL_RMSE_AFFINE

    p = sub.add_parser("score", help="the EPU gate: the EPU program's logits against ONNX Runtime's on the same "
                                     "int4 graph, pass or fail")
    add_model(p)
    p.add_argument("--target", choices=["epu"], required=True, help="the target scored (epu: Quadric Chimera's gate against ONNX Runtime)")
    p.add_argument("--prompt-ids", metavar="IDS", required=True, help="the prompt as comma-separated token ids")
    p.add_argument("--steps", type=bounded_int(1, 4096), default=1,
                   help="greedy steps scored, each against ORT on the same context (default 1: the first token)")
    p.add_argument("--max-rel-rmse-affine", type=_fraction, default=MAX_REL_RMSE_AFFINE,
                   help=f"the gate's bar on rel_rmse_affine, in (0, 1] (default {MAX_REL_RMSE_AFFINE:g}, Chimera's)")
    p.add_argument("--ctx", type=bounded_int(1), default=None, help="the EPU's context in tokens (default 256)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of the EPU compile: alpha, headroom, block, calib_prompts, calib_len, calib_seed, ctx")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled stages are kept and reused (default: MODEL/.strata-cache/epu, as "
                        "`strata run --target epu`)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.pipeline.compile import parse_settings
    from strata.runtime.request import parse_prompt_ids
    from strata.targets import target
    from strata.verify.epu_gate import score_model

    knobs = parse_settings(args.set, target(args.target).knobs, f"target '{args.target}'")
    if args.ctx is not None:
        knobs["ctx"] = args.ctx
    lines, passed = score_model(args.model, parse_prompt_ids(args.prompt_ids), args.steps, knobs, args.cache_dir,
                                args.max_rel_rmse_affine, args.target)
    print("\n".join(lines), flush=True)
    return 0 if passed else 1
