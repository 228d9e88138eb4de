"""The `strata` driver: inspect, ir, trace, compile and run a model.

MODEL is a directory holding an HF `config.json` (and safetensors for compile and
run), or the path of the config file itself, or a llama.cpp GGUF file. User errors print
one line and exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from strata.errors import StrataError

#: The largest --ctx / --tokens / --start the IR can describe (it keeps int64 products safe).
MAX_INT = 2**31 - 1


def _say(text: str) -> None:
    print(f"strata: {text}", file=sys.stderr, flush=True)


def _model(args: argparse.Namespace):
    from strata.pipeline import load_model

    return load_model(args.model)


def _lower(args: argparse.Namespace):
    from strata.pipeline import entry_pipeline, lower

    tokens = args.tokens if args.tokens is not None else (5 if args.entry == "prefill" else 1)
    spec = entry_pipeline(args.entry, tokens=tokens, start=args.start, ctx=args.ctx, kv_pad=args.kv_pad,
                          flash_attn=not args.no_flash_attn)
    return lower(_model(args), spec)


def _blueprint(args: argparse.Namespace):
    """The model and its blueprint function for --mode/--rows/--recipe/--kv."""
    from xdsl.dialects import func

    from strata.pipeline import blueprint_of

    model = _model(args)
    module = blueprint_of(model, args.mode, args.rows, args.recipe, kv=args.kv)
    return model, next(op for op in module.walk() if isinstance(op, func.FuncOp))


def _provenance(model, args: argparse.Namespace) -> dict:
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        strata_version = version("strata")
    except PackageNotFoundError:  # run from a source tree
        strata_version = "source"
    config = (model.root / "config.json").read_bytes() if (model.root / "config.json").is_file() else b""
    config_sha256 = model.gguf.header_sha256 if model.gguf is not None else hashlib.sha256(config).hexdigest()
    command = (f"strata blueprint {model.name} --mode {args.mode} --rows {args.rows} --recipe {args.recipe} "
               f"--kv {args.kv}")
    return {"kind": "strata", "model": model.name, "config_sha256": config_sha256,
            "recipe": args.recipe, "mode": args.mode, "rows": args.rows, "kv": args.kv, "strata": strata_version,
            "commands": [command]}


def cmd_inspect(args: argparse.Namespace) -> int:
    if getattr(args, "level", "module") == "blueprint":
        from strata.exporters.blueprint_table import inspect_table

        sys.stdout.write(inspect_table(_blueprint(args)[1]))
        return 0
    from strata.exporters.listing import model_listing

    sys.stdout.write(model_listing(_model(args).module))
    return 0


def cmd_ir(args: argparse.Namespace) -> int:
    from strata.ir.text import print_ir

    if args.level == "blueprint":
        args.mode = "prefill" if args.entry == "prefill" else "decode"
        args.rows = (args.tokens or 5) if args.entry == "prefill" else 1
        module = _blueprint(args)[1]
    else:
        module = _model(args).module if args.level == "module" else _lower(args)
    sys.stdout.write(print_ir(module))
    return 0


def cmd_blueprint(args: argparse.Namespace) -> int:
    from strata.outputs import check_output_path, write_output

    if args.output is not None:
        check_output_path(args.output)
    if args.errors is not None:
        from strata.verify.blueprint import error_table, greedy_agreement, node_errors

        model, prompt = _model(args), parse_prompt_ids(args.errors)
        store = model.open_weights(quiet=not sys.stderr.isatty())
        text = error_table(node_errors(model, args.recipe, prompt, store))
        a = greedy_agreement(model, args.recipe, prompt, args.steps, store)
        text += (f"greedy top-1 agreement with the op level in f32 over {a.steps} steps: "
                 f"{a.free_running}/{a.steps} free-running, {a.teacher_forced}/{a.steps} teacher-forced\n")
        if args.output is None:
            sys.stdout.write(text)
        else:
            write_output(args.output, text.encode())
        return 0
    model, fn = _blueprint(args)
    if args.format == "kbp-graph":
        from strata.exporters.kbp_graph import export_kbp_graph, kbp_graph_json

        text = kbp_graph_json(export_kbp_graph(fn, provenance=_provenance(model, args))) + "\n"
    elif args.format == "dot":
        from strata.exporters.blueprint_dot import blueprint_dot

        text = blueprint_dot(fn)
    elif args.format == "table":
        from strata.exporters.blueprint_table import inspect_table

        text = inspect_table(fn)
    else:
        from strata.ir.text import print_ir

        text = print_ir(fn)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text.encode())
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from strata.exporters.trace import trace_table

    sys.stdout.write(trace_table(_lower(args)))
    return 0


def _knobs(args: argparse.Namespace) -> dict:
    from strata.cli_cuda import cuda_knobs, refuse_cuda_flags

    if getattr(args, "target", "cpu") == "cuda":
        return cuda_knobs(args)
    refuse_cuda_flags(args)
    return {"ctx": args.ctx, "flash_attn": not args.no_flash_attn}


def cmd_compile(args: argparse.Namespace) -> int:
    from strata.pipeline import compile_model, target_pipeline

    if args.target == "cuda":
        from strata.cli_cuda import compile_cuda

        return compile_cuda(args)
    model = _model(args)
    if args.target == "epu":  # staged and reads the weights: calibrate -> ... -> cpp (strata.epu)
        from strata.epu import cmd_compile_epu

        return cmd_compile_epu(args, model)
    if args.print_pipeline:
        print(target_pipeline(args.target, model, _knobs(args)))
        return 0
    if args.output is None:
        raise StrataError("compile: give -o OUT (the output directory), or --print-pipeline")
    t0 = time.perf_counter()
    out = compile_model(model, args.target, args.output, _knobs(args))
    _say(f"compiled {args.model} for {args.target} in {time.perf_counter() - t0:.2f} s")
    print(out)
    return 0


def parse_prompt_ids(text: str) -> list[int]:
    items = [t.strip() for t in str(text).split(",")]
    if items == [""]:
        raise StrataError("--prompt-ids is empty; give comma-separated token ids, e.g. 1,2,3")
    ids = []
    for t in items:
        try:
            ids.append(int(t, 10))
        except ValueError:
            raise StrataError(f"--prompt-ids: {t[:40]!r} is not an integer token id "
                              "(expected comma-separated ids, e.g. 1,2,3)") from None
    return ids


def check_finite(store, names, allow: bool) -> None:
    """Refuse weights holding NaN or infinity, naming the first such tensor (or warn)."""
    import numpy as np

    for name in names:
        w = store.get(name)
        flat = w.reshape(-1)
        for i in range(0, flat.size, 1 << 22):  # in chunks: no copy of a whole big tensor
            if not np.isfinite(np.asarray(flat[i:i + (1 << 22)], dtype=np.float32)).all():
                where = f"tensor '{name}' (HF '{store.stored_name(name)}') holds NaN or infinite values"
                if not allow:
                    raise StrataError(f"{store.label}: {where}; refusing to run (--allow-nonfinite runs anyway)")
                _say(f"warning: {store.label}: {where}")
                break


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "via", None) == "onnxruntime":
        from strata.cli_onnx import run_via_onnxruntime

        return run_via_onnxruntime(args)
    if args.target == "cuda":
        from strata.cli_cuda import run_cuda

        return run_cuda(args)
    if args.target == "epu":  # the staged compile, g++ and the device-side loop (strata.epu)
        from strata.epu import cmd_run_epu

        return cmd_run_epu(args)
    from strata.outputs import check_output_path, write_output
    from strata.pipeline import cached_compile, resolve_knobs
    from strata.stage import StageError
    from strata.targets import target
    from strata.targets.cpu.driver import check_request, generate, load_compiled

    prompt = parse_prompt_ids(args.prompt_ids)
    if args.dump_logits:
        check_output_path(args.dump_logits)  # before the work, not after it
    model = _model(args)
    knobs = resolve_knobs(target(args.target), model, _knobs(args))
    # Check the request against the config first: a bad prompt should not cost a compile.
    check_request(prompt, args.max_new_tokens, model.config.vocab_size, knobs["ctx"])
    store = model.open_weights()
    check_finite(store, list(model.params()), args.allow_nonfinite)
    default_cache = args.cache_dir is None
    cache = model.cache_root / args.target if default_cache else Path(args.cache_dir)

    t0 = time.perf_counter()
    try:
        out, rebuilt = cached_compile(model, args.target, cache, knobs, store)
    except StageError as e:
        hint = "; pass --cache-dir DIR to keep the compiled model elsewhere" if default_cache else ""
        raise StageError(f"{e}{hint}") from None
    if rebuilt is None:
        _say(f"reusing the compiled model in {out}")
    else:
        _say(f"compiled {model.root} for {args.target} into {out} in {time.perf_counter() - t0:.2f} s "
             f"(rebuilt: {rebuilt})" if rebuilt != "there was none" else
             f"compiled {model.root} for {args.target} into {out} in {time.perf_counter() - t0:.2f} s")
    module = load_compiled(out)

    ids, logits = generate_with_progress(prompt, args.max_new_tokens,
                                         lambda on_token: generate(module, store, prompt, args.max_new_tokens,
                                                                   on_token=on_token))
    report_result(ids, logits, args.dump_logits)
    return 0


def generate_with_progress(prompt, n: int, run, runtime: str = ""):
    """`run(on_token)` -> (ids, logits), with prefill and decode speeds on stderr and a progress
    line on a terminal."""
    tty = sys.stderr.isatty()
    clock = {"start": time.perf_counter(), "first": None}

    def on_token(i: int, token: int) -> None:
        now = time.perf_counter()
        if i == 0:
            clock["first"] = now
            _say(f"prefill: {len(prompt)} tokens in {now - clock['start']:.3f} s "
                 f"({len(prompt) / max(now - clock['start'], 1e-9):.1f} tokens/s)")
        if tty:
            print(f"\rstrata: generated {i + 1}/{n} tokens", end="", file=sys.stderr, flush=True)

    clock["start"] = time.perf_counter()
    ids, logits = run(on_token)
    end = time.perf_counter()
    if tty and n:
        print(file=sys.stderr)
    if n > 1 and clock["first"] is not None:
        dt = end - clock["first"]
        _say(f"decode: {n - 1} tokens in {dt:.3f} s ({(n - 1) / max(dt, 1e-9):.1f} tokens/s)")
    _say(f"generated {n} tokens in {end - clock['start']:.3f} s" + (f" ({runtime})" if runtime else ""))
    return ids, logits


def report_result(ids, logits, dump_logits: str | None) -> None:
    """What every `strata run` prints: the ids last on stdout (first, so that whatever happens to
    the logits file the result is not lost), then the float32 logits to --dump-logits if asked."""
    print("ids=" + ",".join(str(int(t)) for t in ids), flush=True)
    if dump_logits:
        import io

        import numpy as np

        from strata.outputs import write_output

        buf = io.BytesIO()
        np.save(buf, np.asarray(logits).astype(np.float32), allow_pickle=False)
        write_output(dump_logits, buf.getvalue())
        _say(f"logits {list(np.shape(logits))} float32 saved to {dump_logits}")


def cmd_import(args: argparse.Namespace) -> int:
    from strata.cli_formats import cmd_import as run

    return run(args)


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "onnx":
        if args.output is None:
            raise StrataError("export: --format onnx needs -o FILE")
        from strata.cli_onnx import cmd_export_onnx

        return cmd_export_onnx(args)
    from strata.cli_formats import cmd_export as run

    return run(args)


def cmd_view(args: argparse.Namespace) -> int:
    from strata.cli_formats import cmd_view as run

    return run(args)

def cmd_verify(args: argparse.Namespace) -> int:
    """Run the model on a llama-eval-callback log's prompt and compare every op's sum with it."""
    from strata.verify.llamacpp import parse_callback_log, verify

    log = parse_callback_log(Path(args.against))
    model = _model(args)
    agreed, divergence = verify(model, log, args.rtol, ctx=args.ctx, kv_pad=args.kv_pad)
    if divergence is None:
        print(f"all {agreed} ops agree with {args.against} (rtol {args.rtol} of each tensor's magnitude)")
        return 0
    d = divergence
    print(f"ops 1-{agreed} agree; op {d.index} diverges: {d.op} '{d.name}': llama.cpp sum {d.theirs:.6g}, "
          f"strata {d.ours:.6g} (magnitude {d.scale:.6g}): {d.why}")
    return 1


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
        cache_dir=None, no_flash_attn=False, target="cpu", allow_nonfinite=False,
    )
    return cmd_run(run)


# ---------------------------------------------------------------------------------------------
# Arguments


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


MODEL_HELP = ("the model: a directory holding an HF config.json and its safetensors (or the config.json itself), "
              "or a llama.cpp GGUF file")


def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)


def _add_lowering_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entry", choices=["prefill", "decode"], default="prefill", help="the entry to lower (default prefill)")
    p.add_argument("--tokens", type=bounded_int(0), default=None,
                   help="tokens to prefill (default 5; 0: dynamic); decode takes 1")
    p.add_argument("--start", type=bounded_int(-1), default=0, help="position of the first token (-1: unknown)")
    p.add_argument("--ctx", type=bounded_int(0), default=0, help="context size in tokens (default: the model's MaxSeq)")
    p.add_argument("--kv-pad", type=bounded_int(1), default=256, help="round the visible KV rows up to this")
    p.add_argument("--no-flash-attn", action="store_true", help="unfused MUL_MAT/SOFT_MAX attention")


def _add_target_args(p: argparse.ArgumentParser) -> None:
    from strata.targets import TARGETS

    p.add_argument("--target", choices=sorted(TARGETS), default="cpu", help="what to compile for (default cpu)")
    p.add_argument("--ctx", type=bounded_int(1), default=None,
                   help="context size in tokens: the KV cache holds this many "
                        "(default: min(max_position_embeddings, 4096))")
    p.add_argument("--no-flash-attn", action="store_true", help="unfused MUL_MAT/SOFT_MAX attention")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of a staged target (epu: alpha, headroom, block, ctx, calib_prompts, calib_len, calib_seed)")


def _add_blueprint_args(p: argparse.ArgumentParser) -> None:
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.pipeline import BLUEPRINT_MODES

    p.add_argument("--mode", choices=BLUEPRINT_MODES, default="decode", help="the blueprint's mode (default decode)")
    p.add_argument("--rows", type=bounded_int(1), default=1,
                   help="rows per call (decode/multi_seq/verify: sequences or tokens; prefill: tokens; default 1)")
    p.add_argument("--recipe", choices=recipe_names(), default="fp8-bf16head",
                   help="the precision recipe (default fp8-bf16head)")
    p.add_argument("--kv", choices=["paged", "contiguous"], default="paged", help="the KV cache layout (default paged)")


def build_parser() -> argparse.ArgumentParser:
    from strata.cli_cuda import add_cuda_args

    parser = argparse.ArgumentParser(prog="strata", description="Strata: a multi-level compiler for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="print the module level as a listing of entries, generics and blocks, "
                                      "or the blueprint level as a table of kernel groups")
    _add_model(p)
    p.add_argument("--level", choices=["module", "blueprint"], default="module", help="the level (default module)")
    _add_blueprint_args(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("ir", help="print the IR of a level")
    _add_model(p)
    p.add_argument("--level", choices=["module", "op", "blueprint"], default="module",
                   help="the IR level (default module; blueprint: of --entry's mode, --tokens rows)")
    _add_lowering_args(p)
    p.add_argument("--recipe", default="fp8-bf16head", help="the blueprint level's precision recipe")
    p.add_argument("--kv", choices=["paged", "contiguous"], default="paged", help="the blueprint's KV cache layout")
    p.set_defaults(func=cmd_ir)

    p = sub.add_parser("blueprint", help="export the blueprint level: kernel groups with precision, "
                                         "placement and state (kbp-graph/v1 JSON, Graphviz, a table, or IR)")
    _add_model(p)
    _add_blueprint_args(p)
    p.add_argument("--format", choices=["kbp-graph", "dot", "table", "mlir"], default="kbp-graph",
                   help="kbp-graph/v1 JSON (default), Graphviz with a cluster per group, the group table, the IR")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here (default: standard output)")
    p.add_argument("--errors", metavar="IDS", default=None,
                   help="instead: run the prompt IDS (comma-separated token ids) and report each node's error "
                        "under --recipe against f32, and greedy top-1 agreement with the op level")
    p.add_argument("--steps", type=bounded_int(1, 4096), default=32, help="greedy steps for --errors (default 32)")
    p.set_defaults(func=cmd_blueprint)

    p = sub.add_parser("trace", help="print the op level as llama.cpp's eval-callback table")
    _add_model(p)
    _add_lowering_args(p)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("compile", help="compile a model for a target")
    _add_model(p)
    _add_target_args(p)
    p.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="the output directory (created; a previous strata output there is replaced)")
    p.add_argument("--print-pipeline", action="store_true",
                   help="print the target's pass pipeline (runnable by strata-opt -p) and stop")
    add_cuda_args(p, run=False)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="compile (or reuse) and generate greedily")
    _add_model(p)
    p.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--max-new-tokens", type=bounded_int(0), default=16,
                   help="how many tokens to generate (default 16)")
    p.add_argument("--dump-logits", metavar="FILE", default=None,
                   help="save the float32 logits that chose each new token, [N, vocab], to this .npy")
    _add_target_args(p)
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="run even if a weight holds NaN or infinity (warns instead of refusing)")
    p.add_argument("--via", choices=["onnxruntime"], default=None,
                   help="generate through this runtime instead of the compiled target (exports to ONNX first)")
    add_cuda_args(p, run=True)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("import", help="read a model in another format as the module level (.mlir)")
    p.add_argument("file", metavar="FILE", help="the model file (a tensorviz.graph JSON document)")
    p.add_argument("--format", choices=["tensorviz"], required=True, help="the file's format")
    p.add_argument("-o", "--output", metavar="OUT.mlir", default=None, help="write here (default: standard output)")
    p.add_argument("--random-weights", metavar="SEED", type=bounded_int(0), default=None,
                   help="also write a checkpoint (config.json, model.safetensors) of seeded random weights to "
                        "OUT/ (OUT.mlir without its suffix), so that strata compile/run work on it")
    p.add_argument("--weights-dir", metavar="DIR", default=None, help="write the random checkpoint here instead")
    p.set_defaults(func=cmd_import)

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
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("view", help="draw a level of the model: Graphviz, SVG or a self-contained HTML page")
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP + ", or a module-level .mlir")
    p.add_argument("--level", choices=["module", "op", "blueprint"], default="module", help="the level (default module)")
    p.add_argument("--format", choices=["dot", "svg", "html"], default="dot",
                   help="dot (Graphviz text, default), svg (Graphviz's dot if installed, else strata's own layout), "
                        "html (the SVG in one self-contained page)")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here (default: standard output)")
    p.add_argument("--expand", action="store_true", help="draw every layer (default: a repeated layer is one node)")
    p.add_argument("--require-dot", action="store_true", help="fail instead of using strata's own layout without dot")
    _add_lowering_args(p)
    _add_blueprint_args(p)
    p.set_defaults(func=cmd_view)

    p = sub.add_parser("verify", help="compare every op's value with a llama.cpp eval-callback log",
                       description="Run MODEL's prefill on the prompt of a llama-eval-callback log and compare "
                                   "the sum of every op with llama.cpp's, row for row. Exit 1 at the first op "
                                   "that diverges, naming it.")
    _add_model(p)
    p.add_argument("--against", metavar="LOG", required=True, help="llama-eval-callback's output (*.callback.log)")
    p.add_argument("--ctx", type=bounded_int(1), default=256, help="the context llama.cpp ran with (default 256)")
    p.add_argument("--kv-pad", type=bounded_int(1), default=256, help="llama.cpp's KV padding (default 256)")
    p.add_argument("--rtol", type=float, default=1e-3,
                   help="tolerance on each sum, relative to the tensor's sum of |x| (default 1e-3)")
    p.set_defaults(func=cmd_verify)

    from strata.cli_quant import add_calibrate, add_quantize

    add_calibrate(sub)
    add_quantize(sub)

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
