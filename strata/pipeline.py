"""The compiler's pipeline: read a model once, build its module level once, lower its
entries through a target's pass pipeline, and write the result as a stage.

    model = load_model("models/tiny")                    # config + module level, built once
    store = model.open_weights()                         # checked against the module's params
    out = compile_model(model, "cpu", "build/tiny")      # model.py, op.mlir, manifest.json
    print(target_pipeline("cpu", model, {}))             # the pass pipeline it ran

Every target is a pass-pipeline string over the module level (`strata-opt -p` runs the same
string) plus a printer (`strata.targets`). Families plug in through `strata.models`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

from strata.dialects import op as O
from strata.dialects import strata_context
from strata.dialects.instances import TensorInstance, find_model, instantiate
from strata.errors import StrataError
from strata.ir.dtypes import dtype_of
from strata.ir.text import print_ir
from strata.ir.weights import Composite, WeightStore
from strata.passes import strata_passes
from strata.stage import MANIFEST, StageError, check_destination, locked, manifest_bytes, sha256_file, stage_matches, write_stage
from strata.targets import Target, target

DEFAULT_MAX_CTX = 4096
OP_MLIR = "op.mlir"


class PipelineError(StrataError):
    """A compile that cannot proceed."""


def warn(text: str) -> None:
    print(f"strata: warning: {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The model


def model_root(path: str | Path) -> Path:
    """The model directory for a directory or a `config.json` path."""
    p = Path(path)
    return p.parent if p.is_file() else p


@dataclass
class Model:
    """A model read from disk: its config, and its module level built once."""

    root: Path
    config: Any
    module: ModuleOp
    #: The block size of an fp8 block-quantized checkpoint (its quantization_config), else None.
    fp8_block: tuple[int, int] | None = None
    #: The GGUF file the model was read from (`strata.frontends.gguf.GgufFile`), else None.
    gguf: Any = None
    _params: dict[str, TensorInstance] | None = field(default=None, repr=False)
    _tensors: list[TensorInstance] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.config.name)

    @property
    def model_op(self):
        return find_model(self.module)

    def param_instances(self) -> list[TensorInstance]:
        """Every param instance of the model (a tied one too), from one walk of its blocks."""
        if self._tensors is None:
            self._tensors = [t for t in instantiate(self.model_op).tensors() if t.kind == "param"]
        return self._tensors

    def params(self) -> dict[str, TensorInstance]:
        """Every distinct param (tied ones once), by its llama.cpp name."""
        if self._params is None:
            self._params = {t.ggml: t for t in self.param_instances() if t.tied_from is None}
        return self._params

    def weight_names(self) -> tuple[dict[str, str], set[str], dict[str, Composite]]:
        """(stored HF name -> IR name, the stored names the model knowingly ignores, the IR
        tensors assembled from several stored ones)."""
        tensors = self.param_instances()
        names = {t.hf: t.ggml for t in tensors if t.tied_from is None and "*" not in t.hf and not t.hf_merged}
        composites = {t.ggml: composite_of(t) for t in tensors if "*" in t.hf or t.hf_merged}
        # A tied model's checkpoint may still carry the tied copy (lm_head.weight).
        ignore = {t.tied_from for t in tensors if t.tied_from is not None}
        # What a family's checkpoints carry besides the language model (a vision tower, MTP heads).
        ignored = self.model_op.attributes.get("ignored_weights")
        if ignored is not None:
            ignore |= {a.data for a in ignored.data}
        return names, ignore, composites

    def open_weights(self, check: bool = True, quiet: bool = False) -> WeightStore:
        """The model's weight store, addressed by IR names; checked against the params."""
        expected = {name: (t.shape, t.dtype) for name, t in self.params().items()}
        if self.gguf is not None:
            from strata.frontends.gguf import GgufWeights

            store = GgufWeights(self.gguf, self.config, expected, self.centred_norms())
        else:
            names, ignore, composites = self.weight_names()
            store = WeightStore.open(self.root, names, ignore, composites, fp8_block=self.fp8_block)
        if check:
            store.check(expected)
        if store.unused and not quiet:
            shown = ", ".join(f"'{n}'" for n in store.unused[:3]) + (", ..." if len(store.unused) > 3 else "")
            warn(f"{store.label}: {len(store.unused)} stored tensor(s) are not used by this model ({shown})")
        return store


    @property
    def cache_root(self) -> Path:
        """Where `strata run` keeps compiled stages by default: `.strata-cache` next to the
        checkpoint, one folder per GGUF file (files that share a folder do not share a cache)."""
        cache = self.root / ".strata-cache"
        return cache / self.gguf.path.name if self.gguf is not None else cache

    def centred_norms(self) -> set[str]:
        """The zero-centred norm weights (used as 1 + w: the op level's `plus_one`)."""
        return {inst.params["weight"].ggml for inst in instantiate(self.model_op).walk()
                if inst.attr("weight_offset") is not None and "weight" in inst.params}

    def config_fingerprint(self) -> dict[str, str]:
        """The file that gave the config and its sha256 (a GGUF's: of its metadata and tensor infos)."""
        if self.gguf is not None:
            return {"file": self.gguf.path.name, "header_sha256": self.gguf.header_sha256}
        config = self.root / "config.json"
        return {"file": config.name, "sha256": sha256_file(config)}


#: The quantization_config fields read, and the one format and block size supported.
FP8_FMT = "e4m3"
FP8_BLOCK = [128, 128]


def fp8_block_of(root: Path) -> tuple[int, int] | None:
    """The block size of an fp8 block-quantized checkpoint, read off the `quantization_config`
    of its config.json (DeepSeek-V3's and Qwen's FP8 checkpoints: `quant_method: fp8`,
    `fmt: e4m3`, `weight_block_size: [128, 128]`; transformers' defaults for a missing `fmt`
    or `weight_block_size` are these), or None for a checkpoint without one. The activation
    scheme is not read: strata computes in the IR's types on the dequantized weights."""
    from strata.frontends.hf_config import ConfigError

    path = root / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # not ours to report: the config was read already, or the store was opened without one
    q = config.get("quantization_config") if isinstance(config, dict) else None
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ConfigError(f"{path}: field 'quantization_config' must be an object")
    method = q.get("quant_method")
    if method != "fp8":
        raise ConfigError(f"{path}: field 'quantization_config.quant_method' is {method!r}; "
                          "strata reads only 'fp8' (block-quantized e4m3) checkpoints")
    fmt = q.get("fmt", FP8_FMT)
    if fmt != FP8_FMT:
        raise ConfigError(f"{path}: field 'quantization_config.fmt' is {fmt!r}; strata reads only {FP8_FMT!r}")
    block = q.get("weight_block_size", FP8_BLOCK)
    if block != FP8_BLOCK or not all(type(b) is int for b in block):
        raise ConfigError(f"{path}: field 'quantization_config.weight_block_size' is {block!r}; "
                          f"strata reads only {FP8_BLOCK}")
    return FP8_BLOCK[0], FP8_BLOCK[1]


def composite_of(t: TensorInstance) -> Composite:
    """How the store assembles a param stored in pieces (see module.param)."""
    stack = tuple(t.hf.replace("*", str(i)) for i in range(t.shape[0])) if "*" in t.hf else ()
    merged, part, parts = None, 0, 1
    if t.hf_merged:
        merged, _, which = t.hf_merged.rpartition(":")
        first, _, count = which.partition("/")
        part, parts = int(first), int(count)
    return Composite(stack=stack, merged=merged, part=part, parts=parts, axis=1)


def load_config(path: str | Path):
    """The model's config, read by the family its `architectures` names."""
    from strata.models import read_config

    return read_config(path)


def load_model(path: str | Path, max_seq: int | None = None) -> Model:
    """Read the config at `path` (a model directory, its config.json, or a GGUF file) and build
    the module level (once)."""
    from strata.frontends.gguf import GgufFile, is_gguf, read_gguf_config
    from strata.models import build_module

    gguf = GgufFile(path) if is_gguf(path) else None
    config = read_gguf_config(path, gguf) if gguf is not None else load_config(path)
    module = build_module(config, max_seq=max_seq)
    module.verify()
    root = model_root(path)
    return Model(root, config, module, fp8_block=None if gguf else fp8_block_of(root), gguf=gguf)


# ---------------------------------------------------------------------------------------------
# Lowering


def run_pipeline(module: ModuleOp, spec: str, ctx: Context | None = None) -> ModuleOp:
    """Run the pass pipeline `spec` (strata-opt's `-p` syntax) on `module` in place."""
    try:
        pipeline = PassPipeline.parse_spec(strata_passes(), spec)
    except Exception as e:  # noqa: BLE001 - xDSL reports bad specs with several exception types
        raise PipelineError(f"pass pipeline '{spec}': {str(e).strip().splitlines()[0]}") from None
    pipeline.apply(ctx or strata_context(), module)
    try:
        module.verify()
    except VerifyException as e:
        raise PipelineError(f"pass pipeline '{spec}' produced invalid IR: {str(e).strip().splitlines()[0]}") from None
    return module


def lower(model: Model, spec: str) -> ModuleOp:
    """A copy of the model's module level after the pass pipeline `spec`."""
    return run_pipeline(model.module.clone(), spec)


def entry_pipeline(entry: str, *, tokens: int = 0, start: int = -1, ctx: int = 0, kv_pad: int = 256,
                   flash_attn: bool = True) -> str:
    """The pass pipeline that lowers one entry (what `strata ir --level op` and `trace` run)."""
    flash = "true" if flash_attn else "false"
    return (f"convert-module-to-op{{entry={entry} tokens={tokens} start={start} ctx={ctx} kv_pad={kv_pad} "
            f"flash_attn={flash}}}")


BLUEPRINT_MODES = ("decode", "multi_seq", "verify", "draft", "prefill")


def blueprint_pipeline(mode: str = "decode", rows: int = 1, recipe: str = "fp8-bf16head", *, kv: str = "paged",
                       embed: str = "host", sample: str = "host", collapse: bool = True) -> str:
    """The passes from the module level to the blueprint level of one mode: the op level of the
    entry that runs `rows` rows (decode for one, prefill otherwise), then convert-op-to-blueprint,
    precision, state placement, fusion and collapse."""
    if mode not in BLUEPRINT_MODES:
        raise PipelineError(f"unknown mode '{mode}' (known: {', '.join(BLUEPRINT_MODES)})")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise PipelineError(f"rows must be a positive integer, got {rows!r}")
    entry = "decode" if mode != "prefill" and rows == 1 else "prefill"
    # The blueprint keeps no context size: the smallest cache that holds the rows will do.
    lower = entry_pipeline(entry, tokens=rows if entry == "prefill" else 0, start=0 if entry == "prefill" else rows,
                           ctx=max(2 * rows, 64), kv_pad=1)
    passes = [lower, f"convert-op-to-blueprint{{mode={mode} rows={rows}}}",
              f"blueprint-assign-precision{{recipe={recipe}}}",
              f"blueprint-place-state{{kv={kv} embed={embed} sample={sample}}}", "blueprint-fuse"]
    return ",".join(passes + (["blueprint-collapse"] if collapse else []))


def blueprint_of(model: Model, mode: str = "decode", rows: int = 1, recipe: str = "fp8-bf16head",
                 **options: Any) -> ModuleOp:
    """The blueprint level of `model` (one function, named after its entry, `blueprint.model` its name)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import StringAttr

    module = lower(model, blueprint_pipeline(mode, rows, recipe, **options))
    for fn in module.walk():
        if isinstance(fn, func.FuncOp):
            fn.attributes["blueprint.model"] = StringAttr(model.name)
    return module


def resolve_knobs(tgt: Target, model: Model, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The target's knobs with defaults filled in and checked against the model."""
    out = dict(tgt.knobs)
    unknown = set(knobs) - set(out)
    if unknown:
        raise PipelineError(f"target '{tgt.name}' has no knob(s) {', '.join(sorted(unknown))}")
    out.update({k: v for k, v in knobs.items() if v is not None})
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
    tgt = target(name)
    return tgt.pipeline(resolve_knobs(tgt, model, knobs))


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
    module = lower(model, tgt.pipeline(knobs))
    check_state_fits(module, knobs["ctx"])
    files = {name: text.encode("utf-8") for name, text in tgt.emit(module, model.name).items()}
    files[OP_MLIR] = print_ir(module).encode("utf-8")
    from strata.targets.codegen import sanitize_label

    files[MANIFEST] = manifest_bytes(tgt.name, inputs, files, model=sanitize_label(model.name))
    return files


def _prepare(model: Model, target_name: str, knobs: Mapping[str, Any] | None, store: WeightStore | None):
    """(target, resolved knobs, the stage's inputs, the stage's file names) of a compile."""
    tgt = target(target_name)
    knobs = resolve_knobs(tgt, model, knobs or {})
    inputs = stage_inputs(model, store or model.open_weights(), tgt, knobs)
    return tgt, knobs, inputs, {*tgt.outputs, OP_MLIR}


def compile_model(model: Model, target_name: str, out: str | Path, knobs: Mapping[str, Any] | None = None,
                  store: WeightStore | None = None) -> Path:
    """Compile `model` for a target into the stage directory `out` (replacing a strata stage)."""
    tgt, knobs, inputs, stage_files = _prepare(model, target_name, knobs, store)
    out = Path(out)
    check_destination(out, stage_files)  # before the work, so a refusal is quick
    files = build_stage(model, tgt, knobs, inputs)  # in memory: a refused compile writes nothing
    with locked(out):
        check_destination(out, stage_files)
        write_stage(out, files)
    return out


def cached_compile(model: Model, target_name: str, cache: str | Path, knobs: Mapping[str, Any] | None = None,
                   store: WeightStore | None = None) -> tuple[Path, str | None]:
    """The stage in `cache` for these inputs: reused if it matches, else (re)built.

    Returns (the directory, None if reused else why it was built)."""
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
        else:
            why = "there was none"
        check_destination(cache, stage_files)
        write_stage(cache, files)
    return cache, why


__all__ = ["Model", "PipelineError", "StageError", "load_model", "lower", "run_pipeline", "entry_pipeline",
           "compile_model", "cached_compile", "target_pipeline", "model_root"]
