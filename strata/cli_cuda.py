"""`strata compile/run --target cuda`: the CUDA target's knobs, ahead-of-time compilation
(`--aot sm_90a`) and generation on a GPU, or in Triton's interpreter on the CPU (`--interpret`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from strata.errors import StrataError

NO_GPU = ("--target cuda needs a CUDA GPU (torch.cuda.is_available() is false); without one, run the same "
          "generated kernels in Triton's interpreter on the CPU: strata run MODEL --target cuda --interpret")


def _say(text: str) -> None:
    print(f"strata: {text}", file=sys.stderr, flush=True)


def add_cuda_args(p: argparse.ArgumentParser, run: bool) -> None:
    from strata.passes.blueprint_assign_precision import recipe_names

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


def cuda_knobs(args: argparse.Namespace) -> dict:
    if getattr(args, "no_flash_attn", False):
        raise StrataError("--no-flash-attn applies to the cpu target (the CUDA target's attention is flash-style)")
    recipe = getattr(args, "recipe", None) or ("f32" if getattr(args, "interpret", False) else None)
    return {"ctx": args.ctx, "recipe": recipe}


def refuse_cuda_flags(args: argparse.Namespace) -> None:
    """One-line errors for the CUDA target's flags given to another target."""
    for flag, given in (("--recipe", getattr(args, "recipe", None)), ("--interpret", getattr(args, "interpret", False)),
                        ("--aot", getattr(args, "aot", None)), ("--allow-spills", getattr(args, "allow_spills", False))):
        if given:
            raise StrataError(f"{flag} applies to --target cuda, not --target {args.target}")


class _ConfigOnly:
    """The weight store of a model without safetensors: the CUDA target's output does not
    depend on the weights (model.py reads them when it runs), so a compile needs none."""

    def fingerprint(self) -> list:
        return []


def _has_weights(root: Path) -> bool:
    return any(root.glob("*.safetensors")) or (root / "model.safetensors.index.json").is_file()


def compile_cuda(args: argparse.Namespace) -> int:
    from strata.pipeline import compile_model, load_model, target_pipeline

    model = load_model(args.model)
    knobs = cuda_knobs(args)
    if args.print_pipeline:
        print(target_pipeline("cuda", model, knobs))
        return 0
    if args.output is None:
        raise StrataError("compile: give -o OUT (the output directory), or --print-pipeline")
    store = None
    if not _has_weights(model.root):
        store = _ConfigOnly()
        _say(f"{model.root}: no safetensors; compiling from the config alone (model.py reads the weights when it runs)")
    t0 = time.perf_counter()
    out = compile_model(model, "cuda", args.output, knobs, store=store)
    _say(f"compiled {args.model} for cuda in {time.perf_counter() - t0:.2f} s")
    if args.aot:
        aot(model, out, args.aot, args.allow_spills)
    print(out)
    return 0


def aot(model, out: Path, arch: str, allow_spills: bool) -> None:
    """Compile the kernels of the stage `out` for `arch` into the stage `out/aot`; print the
    report; raise (one line) if a kernel exceeds the limits."""
    from dataclasses import asdict

    from strata.stage import check_destination, locked, manifest_bytes, write_stage
    from strata.targets.cuda.aot_model import compile_model_kernels, report, verdict

    params = {name: tuple(t.shape) for name, t in model.params().items()}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata-aot-") as tmp:
        results = compile_model_kernels(out, params, arch=arch, aot_dir=tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    files["report.json"] = (json.dumps([asdict(r) for r in results], indent=1) + "\n").encode()
    inputs = {"stage": json.loads((out / "manifest.json").read_text())["outputs"], "arch": arch}
    files["manifest.json"] = manifest_bytes("cuda-aot", inputs, files)
    dest = out / "aot"
    check_destination(dest, set(files))
    with locked(dest):
        write_stage(dest, files)
    sys.stdout.write(report(results))
    _say(f"compiled {len(results)} kernel launches for {arch} in {time.perf_counter() - t0:.1f} s into {dest}")
    problem = verdict(results, allow_spills)
    if problem is not None:
        raise StrataError(problem)


def _start_interpreter() -> None:
    triton = sys.modules.get("triton")
    if triton is not None and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise StrataError("--interpret: Triton was imported before TRITON_INTERPRET=1 could be set; "
                          "run with TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"


def _check_gpu() -> None:
    try:
        import torch
    except ImportError:
        raise StrataError("--target cuda needs torch and triton (pip install 'strata[cuda]')") from None
    if not torch.cuda.is_available():
        raise StrataError(NO_GPU)


def run_cuda(args: argparse.Namespace) -> int:
    """`strata run --target cuda`: what `strata run` prints (ids last, --dump-logits), from the
    generated model.py on the GPU, or under Triton's interpreter with --interpret."""
    from strata.cli import check_finite, parse_prompt_ids, report_result
    from strata.outputs import check_output_path
    from strata.pipeline import cached_compile, load_model, resolve_knobs
    from strata.stage import StageError
    from strata.targets import target
    from strata.targets.cpu.driver import check_request
    from strata.targets.cuda.driver import load_model_py

    interpret = bool(getattr(args, "interpret", False))
    _start_interpreter() if interpret else _check_gpu()
    prompt = parse_prompt_ids(args.prompt_ids)
    if args.dump_logits:
        check_output_path(args.dump_logits)
    model = load_model(args.model)
    knobs = resolve_knobs(target("cuda"), model, cuda_knobs(args))
    check_request(prompt, args.max_new_tokens, model.config.vocab_size, knobs["ctx"])
    store = model.open_weights()
    check_finite(store, list(model.params()), args.allow_nonfinite)
    default_cache = args.cache_dir is None
    cache = model.root / ".strata-cache" / ("cuda-interpret" if interpret else "cuda") if default_cache \
        else Path(args.cache_dir)
    t0 = time.perf_counter()
    try:
        out, rebuilt = cached_compile(model, "cuda", cache, knobs, store)
    except StageError as e:
        hint = "; pass --cache-dir DIR to keep the compiled model elsewhere" if default_cache else ""
        raise StageError(f"{e}{hint}") from None
    _say(f"reusing the compiled model in {out}" if rebuilt is None else
         f"compiled {model.root} for cuda ({knobs['recipe']}) into {out} in {time.perf_counter() - t0:.2f} s")
    module = load_model_py(out)
    t0 = time.perf_counter()
    try:
        m = module.Model(store, interpret=interpret, cuda_graph=not interpret)
    except module.ModelError as e:
        raise StrataError(str(e)) from None
    _say(f"weights prepared ({knobs['recipe']}) in {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    ids, logits = m.generate(prompt, args.max_new_tokens)
    _say(f"generated {args.max_new_tokens} tokens in {time.perf_counter() - t0:.3f} s"
         + (" (Triton interpreter)" if interpret else ""))
    report_result(ids, logits, args.dump_logits)
    return 0
