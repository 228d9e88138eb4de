"""Opening a model as a program for any target, and `strata run`'s whole job over it.

    model = load_model("models/tiny")
    program = open_program(model, "cpu")                       # compiled (or reused), loaded, bound
    program = open_program(model, "cuda", interpret=True)      # Triton's interpreter on the CPU
    program = open_program(model, "cpu", via="onnxruntime", prompt_len=3)
    run_prompt("models/tiny", [1, 2, 3], 16, target="epu")     # what `strata run` prints

A compiled program is kept in a cache directory, one rule for every target:
`MODEL/.strata-cache/VARIANT` (a GGUF file: a folder of its own under it), VARIANT being the
target's name (`cuda-interpret` under Triton's interpreter), or `--cache-dir`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strata.artifacts.files import check_output_path
from strata.artifacts.stage import StageError
from strata.errors import StrataError, say
from strata.runtime.generate import Generation, generate
from strata.runtime.program import Program
from strata.runtime.progress import GenerationClock
from strata.runtime.report import report_result
from strata.runtime.request import check_finite, check_request

NO_GPU = ("--target cuda needs a CUDA GPU (torch.cuda.is_available() is false); without one, run the same "
          "generated kernels in Triton's interpreter on the CPU: strata run MODEL --target cuda --interpret")


class EngineError(StrataError):
    """A program that cannot be opened for the target asked for."""


def start_triton_interpreter() -> None:
    """Put Triton in its interpreter (TRITON_INTERPRET=1) before it is imported."""
    triton = sys.modules.get("triton")
    if triton is not None and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise EngineError("--interpret: Triton was imported before TRITON_INTERPRET=1 could be set; "
                          "run with TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"


def check_gpu() -> None:
    try:
        import torch
    except ImportError:
        raise EngineError("--target cuda needs torch and triton (pip install 'strata[cuda]')") from None
    if not torch.cuda.is_available():
        raise EngineError(NO_GPU)


def prepare_device(target_name: str, interpret: bool) -> None:
    """What a target needs of the process before anything is imported: Triton's interpreter, or a GPU."""
    if target_name == "cuda":
        start_triton_interpreter() if interpret else check_gpu()
    elif interpret:
        raise EngineError(f"--interpret applies to --target cuda, not --target {target_name}")


def cache_dir_of(model: Any, target_name: str, interpret: bool = False, tp: int = 1, ep: int = 1) -> Path:
    """The default cache of `model`'s compiled program for a target (see the module docstring);
    a tensor-parallel one's is `TARGET-tpN` (`TARGET-tpN-epN` with whole experts per rank)."""
    variant = f"{target_name}-interpret" if interpret else target_name
    if tp > 1:
        variant += f"-tp{tp}" + (f"-ep{ep}" if ep > 1 else "")
    return model.cache_root / variant


def resolved_knobs(model: Any, target_name: str, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
    from strata.pipeline import resolve_knobs
    from strata.targets import target

    return resolve_knobs(target(target_name), model, dict(knobs or {}))


def open_program(model: Any, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                 store: Any = None, cache_dir: str | Path | None = None, interpret: bool = False,
                 via: str | None = None, prompt_len: int | None = None, need_decode: bool = True,
                 group: Any = None, quiet: bool = False) -> Program:
    """`model` as a program: compiled for `target_name` into its cache (reused while it matches)
    and loaded with its weights; `via="onnxruntime"`: its prefill (for `prompt_len` tokens) and
    decode exported to ONNX and run by onnxruntime instead (`need_decode=False`: no decode).
    `group`: the process group of one rank of a tensor-parallel program (`strata.runtime.tp`);
    `quiet`: no messages (a follower rank's)."""
    from strata.pipeline import cached_compile
    from strata.targets import target

    knobs = resolved_knobs(model, target_name, knobs)
    store = store if store is not None else model.open_weights()
    if via == "onnxruntime":
        from strata.targets.onnxruntime.program import open_onnxruntime

        if prompt_len is None:
            raise EngineError("onnxruntime runs an exported prefill of a fixed length: give prompt_len")
        t0 = time.perf_counter()
        program = open_onnxruntime(model, store, knobs, prompt_len, decode=need_decode)
        say(f"exported {model.root} to ONNX and loaded it in onnxruntime in {time.perf_counter() - t0:.2f} s")
        return program
    if via is not None:
        raise EngineError(f"unknown runtime {via!r} for --via (known: onnxruntime)")
    default_cache = cache_dir is None
    cache = (cache_dir_of(model, target_name, interpret, knobs.get("tp", 1), knobs.get("ep", 1)) if default_cache
             else Path(cache_dir))
    t0 = time.perf_counter()
    try:
        out, rebuilt = cached_compile(model, target_name, cache, knobs, store)
    except StageError as e:
        hint = "; pass --cache-dir DIR to keep the compiled model elsewhere" if default_cache else ""
        raise StageError(f"{e}{hint}") from None
    recipe = f" ({knobs['recipe']})" if knobs.get("recipe") else ""
    if quiet:
        pass
    elif rebuilt is None:
        say(f"reusing the compiled model in {out}")
    else:
        why = f" (rebuilt: {rebuilt})" if rebuilt != "there was none" else ""
        say(f"compiled {model.root} for {target_name}{recipe} into {out} in {time.perf_counter() - t0:.2f} s{why}")
    options: dict[str, Any] = {"interpret": interpret} if target_name == "cuda" else {}
    if group is not None:
        options["group"] = group
    t0 = time.perf_counter()
    program = target(target_name).load(out, store, **options)
    if target_name == "cuda":
        say(f"weights prepared{recipe} in {time.perf_counter() - t0:.2f} s")
    return program


def run_prompt(model_path: str | Path, prompt: Sequence[int], max_new_tokens: int, *, target_name: str = "cpu",
               knobs: Mapping[str, Any] | None = None, via: str | None = None, interpret: bool = False,
               cache_dir: str | Path | None = None, dump_logits: str | None = None,
               allow_nonfinite: bool = False, opener: Any = None) -> Generation:
    """`strata run`: check the request, open the program, generate greedily with progress, and
    print the ids last (then the logits to `dump_logits`). `opener(model_path, target_name,
    knobs, cache_dir)`, if given, opens the program instead (`strata.runtime.tp.opener(N)`: on N
    ranks, this process rank 0 and the others spawned)."""
    from strata.pipeline import load_model

    prepare_device(target_name, interpret)
    if dump_logits:
        check_output_path(dump_logits)  # before the work, not after it
    model = load_model(model_path)
    k = resolved_knobs(model, target_name, knobs)
    # Check the request against the config first: a bad prompt should not cost a compile.
    ids = check_request(prompt, max_new_tokens, int(model.config.vocab_size), k["ctx"])
    store = model.open_weights()
    check_finite(store, list(model.params()), allow_nonfinite)
    if opener is not None:
        if via is not None or interpret:
            raise EngineError("--tp runs the compiled cpu program on several ranks: it takes no --via or --interpret")
        del store  # each rank opens its own, reading only its pieces
        program: Program = opener(model_path, target_name, k, cache_dir)
    else:
        program = open_program(model, target_name, k, store=store, cache_dir=cache_dir, interpret=interpret, via=via,
                               prompt_len=len(ids), need_decode=max_new_tokens > 1)
    return generate_reported(program, ids, max_new_tokens, dump_logits)


def generate_reported(program: Program, ids: Sequence[int], max_new_tokens: int,
                      dump_logits: str | None = None) -> Generation:
    """Generate greedily with progress through the one loop, close the program, and print the ids
    last (then the logits to `dump_logits`): the end of `strata run`, on one rank or on many."""
    try:
        clock = GenerationClock(len(ids), max_new_tokens)
        out = generate(program, ids, max_new_tokens, keep_logits=True, on_token=clock.on_token)
        clock.done(program.runtime)
    finally:
        program.close()
    report_result(out.ids, out.logits, dump_logits)
    return out
