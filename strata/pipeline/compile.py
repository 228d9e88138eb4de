"""Compiling a model for a target: the knobs, the stage a compile writes, and the cache that
`strata run` reuses.

    out = compile_model(model, "cpu", "build/tiny")       # model.py, op.mlir, manifest.json
    print(target_pipeline("cpu", model, {}))              # the pass pipeline it ran
    out, why = cached_compile(model, "cpu", cache_dir)    # reused while its inputs match

Every target is a pass-pipeline string over the module level (`strata-opt -p` runs the same
string) plus a printer (`strata.targets`); a stage directory records what made it
(`strata.artifacts.stage`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.artifacts.stage import MANIFEST, check_destination, locked, manifest_bytes, stage_matches, write_stage
from strata.dialects import op as O
from strata.ir.dtypes import dtype_of
from strata.ir.text import print_ir
from strata.ir.weights import WeightStore
from strata.passes.pipelines import PipelineError, lowered
from strata.pipeline.model import Model
from strata.targets import Target, target
from strata.targets.codegen import sanitize_label

DEFAULT_MAX_CTX = 4096
OP_MLIR = "op.mlir"


def resolve_knobs(tgt: Target, model: Model, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The target's knobs with defaults filled in and checked against the model."""
    out = dict(tgt.knobs)
    unknown = set(knobs) - set(out)
    if unknown:
        raise PipelineError(f"target '{tgt.name}' has no knob(s) {', '.join(sorted(unknown))}")
    out.update({k: v for k, v in knobs.items() if v is not None})
    if tgt.check is not None:
        out = tgt.check(model, out)
    limit = model.config.max_position_embeddings
    if out.get("ctx") is None:
        out["ctx"] = min(limit, DEFAULT_MAX_CTX)
    ctx = out["ctx"]
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
        raise PipelineError(f"ctx must be a positive integer, got {ctx!r}")
    if ctx > limit:
        raise PipelineError(f"ctx {ctx} exceeds the model's max_position_embeddings ({limit})")
    return out


def target_pipeline(name: str, model: Model, knobs: Mapping[str, Any]) -> str:
    """The target's pass pipeline for these knobs, checked as a compile would check it."""
    from strata.passes.pipelines import parsed_pipeline

    tgt = target(name)
    spec = tgt.pipeline(resolve_knobs(tgt, model, knobs))
    parsed_pipeline(spec)
    return spec


def state_bytes(module: ModuleOp) -> int:
    """The bytes of every distinct `op.state` buffer (the KV cache) of a lowered module."""
    sizes: dict[str, int] = {}
    for op in module.walk():
        if isinstance(op, O.StateOp):
            n = 1
            for d in op.result.type.get_shape():
                n *= d
            sizes[op.state_name.data] = n * dtype_of(op.result.type.get_element_type()).itemsize
    return sum(sizes.values())


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_state_fits(module: ModuleOp, ctx: int) -> None:
    """Refuse a context whose state cannot be allocated, before anything is written."""
    need, have = state_bytes(module), available_memory()
    if have is not None and need > have:
        raise PipelineError(f"ctx {ctx} needs {_size(need)} of state (the KV cache), but only "
                            f"{_size(have)} of memory is available; choose a smaller --ctx")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------------------------------------
# Compiling to a stage


def stage_inputs(model: Model, store: WeightStore, tgt: Target, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs section of a stage's manifest: everything that decides its outputs."""
    return {
        "config": model.config_fingerprint(),
        "weights": store.fingerprint(),
        "pipeline": tgt.pipeline(knobs),
        "knobs": dict(knobs),
    }


def build_stage(model: Model, tgt: Target, knobs: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, bytes]:
    """The files of a compile: the target's outputs, the op-level IR and the manifest."""
    module = lowered(model.module, tgt.pipeline(knobs))
    check_state_fits(module, knobs["ctx"])
    files = {name: text.encode("utf-8") if isinstance(text, str) else text
             for name, text in tgt.emit(module, model.name, None).items()}
    files[OP_MLIR] = print_ir(module).encode("utf-8")
    files[MANIFEST] = manifest_bytes(tgt.name, inputs, files, model=sanitize_label(model.name))
    return files


def _prepare(model: Model, target_name: str, knobs: Mapping[str, Any] | None, store: WeightStore | None):
    """(target, resolved knobs, the stage's inputs, the stage's file names) of a compile."""
    tgt = target(target_name)
    knobs = resolve_knobs(tgt, model, knobs or {})
    inputs = stage_inputs(model, store or model.open_weights(), tgt, knobs)
    extra = tgt.extra_outputs(knobs) if tgt.extra_outputs is not None else ()
    return tgt, knobs, inputs, {*tgt.outputs, *extra, OP_MLIR}


def _staged(model: Model, target_name: str, out: str | Path, knobs: Mapping[str, Any] | None,
            replace_any: bool = False):
    """(directory, stages rebuilt) of a staged target's compile, or None for the others;
    `replace_any`: `out` is in the model's own cache (see `cached_compile`)."""
    tgt = target(target_name)
    if tgt.staged is None:
        return None
    options = {"replace_any": True} if replace_any else {}
    return tgt.staged(model, Path(out), resolve_knobs(tgt, model, knobs or {}), **options)


def compile_model(model: Model, target_name: str, out: str | Path, knobs: Mapping[str, Any] | None = None,
                  store: WeightStore | None = None) -> Path:
    """Compile `model` for a target into the stage directory `out` (replacing a strata stage);
    a staged target (its compile reads the weights) builds or reuses each of its stages there."""
    staged = _staged(model, target_name, out, knobs)
    if staged is not None:
        return staged[0]
    tgt, knobs, inputs, stage_files = _prepare(model, target_name, knobs, store)
    out = Path(out)
    check_destination(out, stage_files)  # before the work, so a refusal is quick
    files = build_stage(model, tgt, knobs, inputs)  # in memory: a refused compile writes nothing
    with locked(out):
        check_destination(out, stage_files)
        write_stage(out, files)
    return out


def in_own_cache(model: Model, path: Path) -> bool:
    """Whether `path` lies in the model's own cache (`model.cache_root`, `.strata-cache` beside
    the checkpoint): a folder there is strata's, rebuilt whatever it holds. A cache the user
    named elsewhere (`--cache-dir`) is replaced only when it holds a strata stage."""
    try:
        path, root = path.resolve(), model.cache_root.resolve()
        return path != root and path.is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of symbolic links: not ours to judge
        return False


def cached_compile(model: Model, target_name: str, cache: str | Path, knobs: Mapping[str, Any] | None = None,
                   store: WeightStore | None = None) -> tuple[Path, str | None]:
    """The stage in `cache` for these inputs: reused if it matches, else (re)built. In the
    model's own cache, anything else at `cache` (a stage a kill or an edit broke, a folder of
    an older layout) is replaced; elsewhere only a strata stage is.

    Returns (the directory, None if reused else why it was built)."""
    staged = _staged(model, target_name, cache, knobs, replace_any=in_own_cache(model, Path(cache)))
    if staged is not None:
        out, rebuilt = staged
        return out, f"stages {', '.join(rebuilt)} rebuilt" if rebuilt else None
    tgt, knobs, inputs, stage_files = _prepare(model, target_name, knobs, store)
    cache = Path(cache)
    if cache.is_dir() and stage_matches(cache, inputs, stage_files)[0]:
        return cache, None  # the common case, without taking the lock
    files = build_stage(model, tgt, knobs, inputs)  # in memory: a refused compile writes nothing
    with locked(cache):
        if cache.is_dir():
            ok, why = stage_matches(cache, inputs, stage_files)
            if ok:
                return cache, None  # another process built it meanwhile
        elif cache.exists() or cache.is_symlink():
            why = "what was there was not a strata stage"
        else:
            why = "there was none"
        own = in_own_cache(model, cache)
        if not own:
            check_destination(cache, stage_files)
        write_stage(cache, files, replace_any=own)
    return cache, why


def parse_settings(items: Sequence[str] | None, knobs: Mapping[str, Any], what: str) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs as knob values, each parsed as its default's type (a number where
    the default is a number or unset); a one-line error names a bad one. `what` names the knobs'
    owner for messages (`target 'epu'`)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or key not in knobs:
            known = ", ".join(knobs) or "none"
            raise PipelineError(f"--set {item!r}: expected KEY=VALUE with KEY a knob of {what} ({known})")
        default = knobs[key]
        try:
            if isinstance(default, bool):
                if value not in ("true", "false"):
                    raise ValueError
                out[key] = value == "true"
            elif isinstance(default, float):
                out[key] = float(value)
            elif isinstance(default, str):
                out[key] = value
            else:
                out[key] = int(value, 10)
        except ValueError:
            kind = "true or false" if isinstance(default, bool) else "a number" if isinstance(default, float) \
                else "an integer"
            raise PipelineError(f"--set {item!r}: {value[:40]!r} is not {kind}") from None
    return out


class ConfigOnly:
    """The weight store of a model without weights, for a target whose output does not depend
    on them (the CUDA host reads the weights when it runs): a compile needs none."""

    def fingerprint(self) -> list:
        return []


def has_weights(model: Model) -> bool:
    root = model.root
    return model.gguf is not None or any(root.glob("*.safetensors")) or (root / "model.safetensors.index.json").is_file()


def compile_to(model: Model, target_name: str, out: str | Path, knobs: Mapping[str, Any] | None = None, *,
               aot: str | None = None, allow_spills: bool = False) -> Path:
    """`strata compile`: the model compiled for a target into `out`, with what it did on standard
    error; `aot`: also every kernel compiled for that architecture (cuda)."""
    import time

    from strata.errors import say

    if aot is not None and target_name != "cuda":
        raise PipelineError(f"--aot applies to --target cuda, not --target {target_name}")
    store = None
    if target_name == "cuda" and not has_weights(model):
        store = ConfigOnly()
        say(f"{model.root}: no safetensors; compiling from the config alone (model.py reads the weights when it runs)")
    t0 = time.perf_counter()
    tgt = target(target_name)
    staged = _staged(model, target_name, out, knobs)
    if staged is not None:
        result, rebuilt = staged
        say(f"compiled {model.source} for {target_name} in {time.perf_counter() - t0:.2f} s "
            f"(rebuilt: {', '.join(rebuilt) or 'nothing'})")
    else:
        result = compile_model(model, target_name, out, knobs, store=store)
        say(f"compiled {model.source} for {target_name} in {time.perf_counter() - t0:.2f} s")
    if tgt.summary is not None:
        say(tgt.summary(result))
    if aot is not None:
        from strata.targets.cuda.aot_stage import write_aot

        write_aot(result, {name: tuple(t.shape) for name, t in model.params().items()}, aot, allow_spills)
    return result
