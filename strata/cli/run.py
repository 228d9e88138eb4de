"""`strata run MODEL --prompt-ids 1,2,3` (or `--prompt TEXT`): compile (or reuse) for a target and
generate (greedily, or with the sampling flags), printing the ids last; `--via onnxruntime`:
through the model exported to ONNX instead."""

from __future__ import annotations

import argparse

from strata.cli.args import (add_allow_nonfinite, add_model, add_prompt, add_ranks, add_sampling, add_target, bounded_int, knobs_of,
                             prompt_of, ranks_of, refuse_unused, sampling_of)


def add(sub) -> None:
    p = sub.add_parser("run", help="compile (or reuse) and generate, printing the ids")
    add_model(p)
    add_prompt(p)
    p.add_argument("--max-new-tokens", type=bounded_int(0), default=16,
                   help="how many tokens to generate (default 16)")
    p.add_argument("--dump-logits", metavar="FILE", default=None,
                   help="save the float32 logits that chose each new token, [N, vocab], to this .npy")
    add_target(p, run=True)
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    add_allow_nonfinite(p)
    add_ranks(p)
    p.add_argument("--via", choices=["onnxruntime"], default=None,
                   help="generate through this runtime instead of the compiled target (exports to ONNX first)")
    add_sampling(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError
    from strata.runtime.commands.textgen import run_prompt

    if args.via is not None:
        if args.target != args.command_parser.get_default("target"):
            raise StrataError(f"--via {args.via} runs the op level exported to ONNX; it takes no --target {args.target}")
        refuse_unused(args, f"with --via {args.via} (nothing is compiled)", "--cache-dir")
        args.target = args.via  # the runtime the model is exported to is the target: its knobs are read
    knobs = knobs_of(args)
    ranks_of(args, knobs)
    run_prompt(args.model, prompt_of(args), args.max_new_tokens, target_name=args.target, knobs=knobs,
               interpret=getattr(args, "interpret", False), cache_dir=args.cache_dir,
               dump_logits=args.dump_logits, allow_nonfinite=args.allow_nonfinite, sampling=sampling_of(args))
    return 0
