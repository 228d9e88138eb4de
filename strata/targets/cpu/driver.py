"""Compile a model for the CPU, load the result, and generate greedily.

    out = compile_cpu("models/tiny", "build/tiny-cpu")       # model.py, op.mlir, manifest.json
    mod = load_compiled(out)                                 # the generated module
    ids, logits = generate(mod, WeightStore.open("models/tiny"), [1, 2, 3], 16)

A compile writes a directory (a stage, in the design's words) holding

* ``model.py``: the generated numpy module (imports only numpy and ml_dtypes);
* ``op.mlir``: the op-level IR it was printed from;
* ``manifest.json``: what the output depends on (the config's sha256; each weight file's
  name, size and the sha256 of its safetensors JSON header: the tensor names, dtypes and
  shapes the code depends on; the tensor data is read at run time, never compiled in),
  the knobs, the tool versions and the sha256 of each output. No timestamps: compiling
  the same inputs twice gives byte-identical directories.

The directory is written next to its destination and renamed into place, so it is never
half-written; an existing destination is replaced only if it is a strata output.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError

MANIFEST = "manifest.json"
MODEL_PY = "model.py"
OP_MLIR = "op.mlir"
FORMAT = "strata-cpu-compile/1"
DEFAULT_MAX_CTX = 4096
KV_PAD = 256


class CpuDriverError(StrataError):
    """A compile or run of the CPU target that cannot proceed (bad input or output)."""


# ---------------------------------------------------------------------------------------------
# Inputs


def model_root(model: str | Path) -> Path:
    """The model directory for a directory or a ``config.json`` path."""
    p = Path(model)
    return p.parent if p.is_file() else p


def resolve_ctx(cfg, ctx: int | None) -> int:
    """The context size: ``ctx``, or min(max_position_embeddings, 4096)."""
    limit = cfg.max_position_embeddings
    if ctx is None:
        return min(limit, DEFAULT_MAX_CTX)
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
        raise CpuDriverError(f"ctx must be a positive integer, got {ctx!r}")
    if ctx > limit:
        raise CpuDriverError(f"ctx {ctx} exceeds the model's max_position_embeddings ({limit})")
    return ctx


def knobs_of(cfg, ctx: int | None, flash_attn: bool) -> dict[str, Any]:
    return {"ctx": resolve_ctx(cfg, ctx), "flash_attn": bool(flash_attn), "kv_pad": KV_PAD,
            "entries": ["prefill", "decode"]}


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _safetensors_header_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise CpuDriverError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        return hashlib.sha256(fh.read(length)).hexdigest()


def weight_files(root: Path) -> list[Path]:
    """The files the weight store reads: model.safetensors, or the index and its shards."""
    from strata.ir.weights import INDEX_FILE, SINGLE_FILE

    if (root / SINGLE_FILE).is_file():
        return [root / SINGLE_FILE]
    index = root / INDEX_FILE
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CpuDriverError(f"{index}: cannot read the shard list: {e}") from None
        return [index] + [root / s for s in shards if Path(s).name == s]
    raise CpuDriverError(f"{root}: no model.safetensors or model.safetensors.index.json found")


def input_record(model: str | Path, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs section of a manifest: config and weight-file hashes and the knobs."""
    root = model_root(model)
    config = root / "config.json"
    files = []
    for f in weight_files(root):
        entry: dict[str, Any] = {"file": f.name, "size": f.stat().st_size}
        if f.name.endswith(".safetensors"):
            entry["header_sha256"] = _safetensors_header_sha256(f)
        else:
            entry["sha256"] = _sha256_file(f)
        files.append(entry)
    return {
        "config": {"file": "config.json", "sha256": _sha256_file(config)},
        "weights": files,
        "weights_hash": "header_sha256 is the sha256 of each safetensors JSON header (names, dtypes, "
                        "shapes, offsets); tensor data is read at run time and not hashed",
        "knobs": dict(knobs),
    }


def versions() -> dict[str, str]:
    import ml_dtypes
    import xdsl

    try:
        from importlib.metadata import version

        strata_version = version("strata")
        xdsl_version = version("xdsl")
    except Exception:  # noqa: BLE001 - metadata missing in an odd install
        strata_version = "unknown"
        xdsl_version = getattr(xdsl, "__version__", "unknown")
    return {"strata": strata_version, "strata_sources_sha256": _sources_sha256(), "xdsl": xdsl_version,
            "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version()}


#: The strata modules whose source decides the compiled output. A development (editable)
#: install changes them without changing its version number, so their bytes are hashed.
_OUTPUT_SOURCES = (
    "strata.dialects.op",
    "strata.frontends.hf_config",
    "strata.models.llama",
    "strata.passes.convert_module_to_op",
    "strata.semantics.kernels",
    "strata.targets.cpu.emit",
)


def _sources_sha256() -> str:
    h = hashlib.sha256()
    for name in _OUTPUT_SOURCES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        h.update(name.encode() + b"\0")
        if origin and Path(origin).is_file():
            h.update(Path(origin).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Compile


def lower_entries(cfg, ctx: int, flash_attn: bool):
    """The op-level module with @prefill (dynamic tokens) and @decode for ``cfg``."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp

    from strata.models.llama import build_llama
    from strata.passes.convert_module_to_op import ConvertModuleToOpPass

    fns = []
    for entry in ("prefill", "decode"):
        module = build_llama(cfg)
        ConvertModuleToOpPass(entry=entry, tokens=0, start=-1, ctx=ctx, kv_pad=KV_PAD,
                              flash_attn=flash_attn).apply(Context(), module)
        (fn,) = list(module.ops)
        fn.detach()
        fns.append(fn)
    module = ModuleOp(fns)
    module.verify()
    return module


def open_checked_weights(model: str | Path, cfg=None):
    """The model's weight store, checked against its config (WeightError if not matching)."""
    from strata.frontends.hf_config import load_hf_config
    from strata.ir.weights import WeightStore
    from strata.models.checkpoint import expected_llama_weights

    cfg = cfg or load_hf_config(model)
    store = WeightStore.open(model_root(model))
    store.check(expected_llama_weights(cfg), tied_output=cfg.tie_word_embeddings)
    return store


def compile_cpu(model_dir: str | Path, out_dir: str | Path, *, ctx: int | None = None,
                flash_attn: bool = True) -> Path:
    """Compile the model in ``model_dir`` for the CPU into ``out_dir``; returns ``out_dir``."""
    from strata.frontends.hf_config import load_hf_config
    from strata.ir.text import print_ir
    from strata.targets.cpu.emit import emit_cpu

    cfg = load_hf_config(model_dir)
    knobs = knobs_of(cfg, ctx, flash_attn)
    open_checked_weights(model_dir, cfg)
    out = Path(out_dir)
    _check_destination(out)

    module = lower_entries(cfg, knobs["ctx"], knobs["flash_attn"])
    code = emit_cpu(module, cfg.name)
    ir_text = print_ir(module)
    files = {MODEL_PY: code.encode("utf-8"), OP_MLIR: ir_text.encode("utf-8")}
    manifest = {
        "format": FORMAT,
        "target": "cpu",
        "model": _plain_name(cfg.name),
        "inputs": input_record(model_dir, knobs),
        "versions": versions(),
        "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    _write_atomically(out, files)
    return out


def _plain_name(name: str) -> str:
    from strata.targets.codegen import sanitize_label

    return sanitize_label(name)


def _is_strata_output(path: Path) -> bool:
    try:
        data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def _check_destination(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CpuDriverError(f"{out}: exists and is not a directory; refusing to replace it")
    if out.is_dir() and any(out.iterdir()) and not _is_strata_output(out):
        raise CpuDriverError(f"{out}: exists and is not a strata CPU output directory (no strata "
                             f"{MANIFEST}); refusing to overwrite it, choose another output path")


def _write_atomically(out: Path, files: Mapping[str, bytes]) -> None:
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    except OSError as e:
        raise CpuDriverError(f"{out}: cannot create the output directory: {e.strerror or e}") from None
    old = None
    try:
        os.chmod(tmp, 0o755)
        for name, data in files.items():
            with open(tmp / name, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        _check_destination(out)  # again, right before replacing anything
        if out.exists():
            # Move the old output aside, then put the new one in place: at every moment the
            # path holds either a complete old output, nothing, or the complete new one.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            os.rename(out, old / "out")
        os.rename(tmp, out)
    except OSError as e:
        raise CpuDriverError(f"{out}: cannot write the compiled output: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Reuse and load


def manifest_matches(out_dir: str | Path, model_dir: str | Path, knobs: Mapping[str, Any]) -> bool:
    """Whether ``out_dir`` holds a complete compile of ``model_dir`` with ``knobs``
    (``{"ctx": int | None, "flash_attn": bool}``) by this strata, xdsl, numpy and python."""
    from strata.frontends.hf_config import load_hf_config

    out = Path(out_dir)
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        cfg = load_hf_config(model_dir)
        want = knobs_of(cfg, knobs.get("ctx"), knobs.get("flash_attn", True))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            return False
        if manifest.get("inputs") != input_record(model_dir, want) or manifest.get("versions") != versions():
            return False
        outputs = manifest.get("outputs")
        if not isinstance(outputs, dict) or set(outputs) != {MODEL_PY, OP_MLIR}:
            return False
        return all(_sha256_file(out / name) == digest for name, digest in outputs.items())
    except (OSError, ValueError, StrataError):
        return False


def load_compiled(out_dir: str | Path):
    """Import the generated ``model.py`` of ``out_dir`` (by path, via importlib)."""
    path = Path(out_dir) / MODEL_PY
    if not path.is_file():
        raise CpuDriverError(f"{path}: no such file; compile the model first")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(f"strata_compiled_{digest}", path)
    if spec is None or spec.loader is None:
        raise CpuDriverError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Generate


def generate(model, weights, prompt_ids: Sequence[int], max_new_tokens: int, *,
             on_token: Callable[[int, int], None] | None = None) -> tuple[list[int], np.ndarray]:
    """Greedy generation: prefill the prompt, then decode one token at a time.

    ``model`` is a loaded compiled module (``load_compiled``) or a ``Model`` instance;
    ``weights`` maps ggml names to arrays (a ``WeightStore``; unused for an instance).
    Returns the new ids and their logits [max_new_tokens, vocab] float32: row 0 is the
    last prompt position's logits (which pick the first new token), row i the logits
    that pick new token i. ``on_token(i, id)`` is called as each new token is chosen.
    """
    instance = model.Model(weights) if hasattr(model, "Model") else model
    vocab = int(instance.OUTPUTS["decode"][0][-1])
    prompt = check_request(prompt_ids, max_new_tokens, vocab, int(instance.N_CTX))
    ids: list[int] = []
    logits = np.zeros((max_new_tokens, vocab), dtype=np.float32)
    if max_new_tokens == 0:
        return ids, logits
    row = instance.prefill(prompt, 0)[-1]
    for i in range(max_new_tokens):
        logits[i] = row
        token = int(np.argmax(row))
        ids.append(token)
        if on_token is not None:
            on_token(i, token)
        if i + 1 < max_new_tokens:
            row = instance.decode(token, len(prompt) + i)[-1]
    return ids, logits


def check_request(prompt_ids: Sequence[int], max_new_tokens: int, vocab: int, n_ctx: int) -> np.ndarray:
    """The prompt as int32 ids, after checking it and the length against vocab and context."""
    prompt = _check_prompt(prompt_ids, vocab)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise CpuDriverError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if len(prompt) + max_new_tokens > n_ctx:
        raise CpuDriverError(f"the prompt ({len(prompt)} tokens) plus {max_new_tokens} new tokens "
                             f"exceed the context of {n_ctx}; compile with a larger ctx")
    return prompt


def _check_prompt(prompt_ids: Sequence[int], vocab: int) -> np.ndarray:
    try:
        prompt = np.asarray(list(prompt_ids))
    except TypeError:
        raise CpuDriverError("the prompt must be a sequence of token ids") from None
    if prompt.size == 0:
        raise CpuDriverError("the prompt is empty; give at least one token id")
    if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
        raise CpuDriverError("the prompt must be a flat list of integer token ids")
    bad = [int(t) for t in prompt if not 0 <= t < vocab]
    if bad:
        raise CpuDriverError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return prompt.astype(np.int32)
