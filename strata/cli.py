"""The `strata` driver: inspect, ir, trace, compile and run a model.

MODEL is a directory holding an HF `config.json` (and safetensors for compile and
run), or the path of the config file itself. User errors print one line and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strata.errors import StrataError


def _load_module(model: str, max_seq: int | None = None):
    from strata.frontends.hf_config import load_hf_config
    from strata.models.llama import build_llama

    cfg = load_hf_config(model)
    module = build_llama(cfg, max_seq=max_seq)
    module.verify()
    return cfg, module


def _lower(args: argparse.Namespace):
    from xdsl.context import Context

    from strata.passes.convert_module_to_op import ConvertModuleToOpPass

    _, module = _load_module(args.model)
    tokens = args.tokens if args.tokens is not None else (5 if args.entry == "prefill" else 1)
    opts = ConvertModuleToOpPass(
        entry=args.entry, tokens=tokens, start=args.start, ctx=args.ctx, kv_pad=args.kv_pad, flash_attn=not args.no_flash_attn
    )
    opts.apply(Context(), module)
    module.verify()
    return module


def cmd_inspect(args: argparse.Namespace) -> int:
    from strata.frontends.listing import model_listing

    _, module = _load_module(args.model)
    sys.stdout.write(model_listing(module))
    return 0


def cmd_ir(args: argparse.Namespace) -> int:
    from strata.ir.text import print_ir

    module = _load_module(args.model)[1] if args.level == "module" else _lower(args)
    sys.stdout.write(print_ir(module))
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from strata.frontends.trace import trace_table

    sys.stdout.write(trace_table(_lower(args)))
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from strata.targets.cpu.commands import cmd_compile as compile_cpu

    if args.target != "cpu":
        raise StrataError(f"target '{args.target}' is not available yet (available: cpu)")
    return compile_cpu(args)


def cmd_run(args: argparse.Namespace) -> int:
    from strata.targets.cpu.commands import cmd_run as run_cpu

    return run_cpu(args)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the built-in default model: inspect, trace, compile, run."""
    from strata.models.default import ensure_default_model

    model = str(ensure_default_model(Path(args.root)))
    print(f"== default model: {model}")
    print("== strata inspect")
    cmd_inspect(argparse.Namespace(model=model))
    print("== strata trace --entry prefill --tokens 5 --ctx 256 --kv-pad 256")
    trace = argparse.Namespace(model=model, entry="prefill", tokens=5, start=0, ctx=256, kv_pad=256, no_flash_attn=False)
    cmd_trace(trace)
    print("== strata run --prompt-ids 1,2,3,4,5 --max-new-tokens 16")
    run = argparse.Namespace(
        model=model, prompt_ids="1,2,3,4,5", max_new_tokens=16, dump_logits=None, ctx=None,
        cache_dir=None, no_flash_attn=False, target="cpu",
    )
    return cmd_run(run)


def _add_lowering_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entry", choices=["prefill", "decode"], default="prefill")
    p.add_argument("--tokens", type=int, default=None, help="tokens to prefill (default 5; 0: dynamic); decode takes 1")
    p.add_argument("--start", type=int, default=0, help="position of the first token (-1: unknown)")
    p.add_argument("--ctx", type=int, default=0, help="context size (default: the model's MaxSeq)")
    p.add_argument("--kv-pad", type=int, default=256, help="round the visible KV rows up to this")
    p.add_argument("--no-flash-attn", action="store_true", help="unfused MUL_MAT/SOFT_MAX attention")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata", description="Strata: a multi-level compiler for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="print the module level as a listing of entries, generics and blocks")
    p.add_argument("model")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("ir", help="print the IR of a level")
    p.add_argument("model")
    p.add_argument("--level", choices=["module", "op"], default="module")
    _add_lowering_args(p)
    p.set_defaults(func=cmd_ir)

    p = sub.add_parser("trace", help="print the op level as llama.cpp's eval-callback table")
    p.add_argument("model")
    _add_lowering_args(p)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("compile", help="compile a model for a target")
    p.add_argument("model")
    p.add_argument("--target", default="cpu")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--ctx", type=int, default=None)
    p.add_argument("--no-flash-attn", action="store_true")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="compile (or reuse) and generate greedily")
    p.add_argument("model")
    p.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dump-logits", default=None, help="save float32 logits (N, vocab) to this .npy")
    p.add_argument("--ctx", type=int, default=None)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-flash-attn", action="store_true")
    p.add_argument("--target", default="cpu")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("demo", help="the main job on the built-in default model")
    p.add_argument("--root", default=".strata-cache/models", help="where the default model is written")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    from strata.errors import run_tool

    def body() -> int:
        args = build_parser().parse_args(argv)
        return args.func(args)

    # Called without arguments, main is the program (console script, python -m).
    return run_tool("strata", body, owns_process=argv is None)


if __name__ == "__main__":
    sys.exit(main())
