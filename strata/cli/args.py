"""The argument types and groups that several `strata` commands share."""

from __future__ import annotations

import argparse

#: The largest --ctx / --tokens / --start the IR can describe (it keeps int64 products safe).
MAX_INT = 2**31 - 1

MODEL_HELP = ("the model: a directory holding an HF config.json and its safetensors (or the config.json itself), "
              "or a llama.cpp GGUF file")


def bounded_int(low: int, high: int = MAX_INT):
    """An argparse type: an integer in [low, high], with a message that names the limits."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            shown = text if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(f"{shown} is not in [{low}, {high}]")
        return value

    parse.__name__ = "integer"
    return parse


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)


def add_lowering(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entry", choices=["prefill", "decode"], default="prefill", help="the entry to lower (default prefill)")
    p.add_argument("--tokens", type=bounded_int(0), default=None,
                   help="tokens to prefill (default 5; 0: dynamic); decode takes 1")
    p.add_argument("--start", type=bounded_int(-1), default=0, help="position of the first token (-1: unknown)")
    p.add_argument("--ctx", type=bounded_int(0), default=0, help="context size in tokens (default: the model's MaxSeq)")
    p.add_argument("--kv-pad", type=bounded_int(1), default=256, help="round the visible KV rows up to this")
    p.add_argument("--no-flash-attn", action="store_true", help="unfused MUL_MAT/SOFT_MAX attention")


def lowering_of(args: argparse.Namespace):
    """The `Lowering` that --entry/--tokens/--start/--ctx/--kv-pad/--no-flash-attn ask for."""
    from strata.pipeline.views import Lowering

    return Lowering(args.entry, args.tokens, args.start, args.ctx, args.kv_pad, not args.no_flash_attn)


def add_blueprint(p: argparse.ArgumentParser) -> None:
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.passes.pipelines import BLUEPRINT_MODES

    p.add_argument("--mode", choices=BLUEPRINT_MODES, default="decode", help="the blueprint's mode (default decode)")
    p.add_argument("--rows", type=bounded_int(1), default=1,
                   help="rows per call (decode/multi_seq/verify: sequences or tokens; prefill: tokens; default 1)")
    p.add_argument("--recipe", choices=recipe_names(), default="fp8-bf16head",
                   help="the precision recipe (default fp8-bf16head)")
    p.add_argument("--kv", choices=["paged", "contiguous"], default="paged", help="the KV cache layout (default paged)")
    p.add_argument("--tp", type=bounded_int(1), default=1,
                   help="one rank's blueprint of this many tensor-parallel ranks, with its collectives and what "
                        "each rank sends (default 1)")
    p.add_argument("--ep", type=bounded_int(1), default=1,
                   help="with --tp: 1 (each expert split over the ranks, the default) or the ranks (whole experts "
                        "per rank)")


def blueprint_of(args: argparse.Namespace):
    """The `Blueprint` that --mode/--rows/--recipe/--kv/--tp/--ep ask for."""
    from strata.errors import StrataError
    from strata.pipeline.views import Blueprint

    if args.ep not in (1, args.tp):
        raise StrataError(f"--ep is 1 or the ranks of --tp ({args.tp}), got {args.ep}")
    return Blueprint(args.mode, args.rows, args.recipe, args.kv, args.tp, args.ep)


def add_target(p: argparse.ArgumentParser, run: bool) -> None:
    """--target and the knobs of the targets (their flags refuse a target they do not apply to)."""
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.targets import TARGETS

    p.add_argument("--target", choices=sorted(TARGETS), default="cpu", help="what to compile for (default cpu)")
    p.add_argument("--ctx", type=bounded_int(1), default=None,
                   help="context size in tokens: the KV cache holds this many "
                        "(default: min(max_position_embeddings, 4096); epu: 256)")
    p.add_argument("--no-flash-attn", action="store_true", help="--target cpu: unfused MUL_MAT/SOFT_MAX attention")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of the target (cpu: kv_pad; cuda: kv; epu: alpha, headroom, block, calib_prompts, "
                        "calib_len, calib_seed; all: ctx)")
    p.add_argument("--recipe", choices=recipe_names(), default=None,
                   help="--target cuda: the precision recipe (default bf16; f32 with --interpret)")
    if run:
        p.add_argument("--interpret", action="store_true",
                       help="--target cuda: run the generated kernels in Triton's interpreter on the CPU "
                            "(TRITON_INTERPRET=1), every edge in f32")
    else:
        p.add_argument("--aot", metavar="ARCH", choices=["sm_90a"], default=None,
                       help="--target cuda: also compile every kernel of the model for ARCH (sm_90a) into OUT/aot "
                            "and report registers, shared memory and spills")
        p.add_argument("--allow-spills", action="store_true", help="with --aot: report spills without failing")


def knobs_of(args: argparse.Namespace) -> dict:
    """The target's knobs from its flags and --set (each flag refused where it does not apply)."""
    from strata.errors import StrataError
    from strata.pipeline.compile import parse_settings
    from strata.targets import target

    name = args.target
    for flag, given, owner in (("--recipe", args.recipe, "cuda"), ("--interpret", getattr(args, "interpret", False), "cuda"),
                               ("--aot", getattr(args, "aot", None), "cuda"),
                               ("--allow-spills", getattr(args, "allow_spills", False), "cuda"),
                               ("--no-flash-attn", args.no_flash_attn, "cpu")):
        if given and name != owner:
            raise StrataError(f"{flag} applies to --target {owner}, not --target {name}")
    tgt = target(name)
    knobs = parse_settings(args.set, {k: v for k, v in tgt.knobs.items() if k not in ("recipe", "flash_attn")},
                           f"target '{name}'")
    if args.ctx is not None or "ctx" not in knobs:
        knobs["ctx"] = args.ctx if args.ctx is not None else knobs.get("ctx")
    if name == "cpu":
        knobs["flash_attn"] = not args.no_flash_attn
    if name == "cuda":
        knobs["recipe"] = args.recipe or ("f32" if getattr(args, "interpret", False) else None)
    return knobs
