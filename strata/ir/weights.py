"""A read-only, memory-mapped store of model weights in safetensors files.

The safetensors reader is our own (a little-endian u64 header length, a JSON header, then raw
tensor bytes), so that every tensor is a zero-copy view of one ``numpy.memmap`` and no pickle is
ever loaded. Tensors are addressed by their ggml (llama.cpp) names, the names the rest of strata
uses; HF names are mapped by :func:`hf_to_ggml_name`. Linear weights keep the HF ``[out, in]``
layout.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import ml_dtypes
import numpy as np

from strata.errors import StrataError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

#: safetensors dtype code -> (strata dtype string, numpy dtype); safetensors is little-endian.
_DTYPES: dict[str, tuple[str, np.dtype]] = {
    "F32": ("f32", np.dtype("<f4")),
    "F16": ("f16", np.dtype("<f2")),
    "BF16": ("bf16", np.dtype(ml_dtypes.bfloat16)),
    "I32": ("i32", np.dtype("<i4")),
    "I64": ("i64", np.dtype("<i8")),
}
FLOAT_DTYPES = ("f32", "f16", "bf16")
_NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# The reference implementation refuses larger headers too; this bounds what garbage can cost us.
_MAX_HEADER = 100 * 1024 * 1024

_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
_GGML_LAYER = re.compile(r"blk\.(\d+)\.(.+)\.(weight|bias)")


class WeightError(StrataError):
    """Weights that cannot be read or do not fit the model."""


def hf_to_ggml_name(hf_name: str) -> str | None:
    """The ggml name of a llama-family HF tensor, or None for tensors strata ignores."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    m = _HF_LAYER.fullmatch(hf_name)
    if m is None or m.group(2) not in _LAYER_NAMES:
        return None
    return f"blk.{int(m.group(1))}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"


def ggml_to_hf_name(ggml_name: str) -> str | None:
    """The inverse of :func:`hf_to_ggml_name` (None for names it never produces)."""
    for hf, gg in _GLOBAL_NAMES.items():
        if gg == ggml_name:
            return hf
    m = _GGML_LAYER.fullmatch(ggml_name)
    inverse = {gg: hf for hf, gg in _LAYER_NAMES.items()}
    if m is None or m.group(2) not in inverse:
        return None
    return f"model.layers.{int(m.group(1))}.{inverse[m.group(2)]}.{m.group(3)}"


# ---------------------------------------------------------------------------------------------
# One safetensors file


@dataclass(frozen=True)
class _Entry:
    shape: tuple[int, ...]
    code: str  # safetensors dtype code
    begin: int  # byte offset in the file
    nbytes: int


class SafetensorsFile:
    """The validated header of one safetensors file and a read-only memory map of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        header, data_start, size = _read_header(path)
        self.metadata = header.pop("__metadata__", None)
        self.entries = {name: _parse_entry(path, name, raw, data_start, size)
                        for name, raw in header.items()}
        _check_no_overlap(path, self.entries)
        self._map = np.memmap(path, dtype=np.uint8, mode="r")

    def array(self, name: str) -> np.ndarray:
        """A zero-copy view of tensor ``name``."""
        e = self.entries[name]
        return self._map[e.begin:e.begin + e.nbytes].view(_DTYPES[e.code][1]).reshape(e.shape)


def _read_header(path: Path) -> tuple[dict, int, int]:
    """(header dict, offset where tensor data starts, file size)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise WeightError(f"{path}: file is too short to be safetensors ({size} bytes)")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(size - 8, _MAX_HEADER):
                raise WeightError(f"{path}: header length {length} does not fit in the file "
                                  f"({size} bytes); truncated or not a safetensors file")
            raw = fh.read(length)
    except OSError as e:
        raise WeightError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise WeightError(f"{path}: header is not valid JSON ({_json_problem(e)}); "
                          "truncated or not a safetensors file") from None
    if not isinstance(header, dict):
        raise WeightError(f"{path}: header is not a JSON object")
    return header, 8 + length, size


def _json_problem(e: ValueError | RecursionError) -> str:
    """What json.loads (or the UTF-8 decoding before it) found wrong, for a one-line message."""
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
        return str(e)
    # The one other ValueError: int() refuses more digits than sys.get_int_max_str_digits().
    return "an integer with too many digits"


def _refuse_dangling_link(path: Path) -> None:
    """A dangling link would read as 'not found'; name it and where it points instead."""
    if path.is_symlink() and not path.exists():
        raise WeightError(f"{path}: dangling symbolic link to '{os.readlink(path)}'")


def _parse_entry(path: Path, name: str, raw: object, data_start: int, size: int) -> _Entry:
    def bad(problem: str) -> WeightError:
        return WeightError(f"{path}: tensor '{name}' {problem}")

    if not isinstance(raw, dict):
        raise bad("has a header entry that is not an object")
    code, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if code not in _DTYPES:
        raise bad(f"has dtype {code!r}, which strata does not support "
                  f"(supported: {', '.join(_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise bad(f"has an invalid shape {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_uint, offsets))
            or offsets[0] > offsets[1]):
        raise bad(f"has invalid data_offsets {offsets!r}")
    begin, end = offsets
    available = size - data_start
    if end > available:
        raise bad(f"data [{begin}, {end}) runs past the end of the file "
                  f"({available} bytes of tensor data)")
    itemsize = _DTYPES[code][1].itemsize
    need = math.prod(shape) * itemsize
    if end - begin != need:
        raise bad(f"has {end - begin} bytes of data but shape {shape} of {code} needs {need}")
    return _Entry(tuple(shape), code, data_start + begin, end - begin)


def _check_no_overlap(path: Path, entries: dict[str, _Entry]) -> None:
    spans = sorted((e.begin, e.begin + e.nbytes, n) for n, e in entries.items() if e.nbytes)
    for (_, end0, name0), (begin1, _, name1) in zip(spans, spans[1:]):
        if begin1 < end0:
            raise WeightError(f"{path}: data of tensors '{name0}' and '{name1}' overlap")


def _is_uint(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


# ---------------------------------------------------------------------------------------------
# The store


class WeightStore:
    """All tensors of one model, by ggml name, memory-mapped from one or more safetensors files."""

    def __init__(self, label: Path, files: list[SafetensorsFile]) -> None:
        self.label = label  # the file named in errors: model.safetensors or the index
        self.tied_output = False
        self._where: dict[str, tuple[SafetensorsFile, str]] = {}
        for f in files:
            for hf_name in f.entries:
                name = hf_to_ggml_name(hf_name)
                if name is None:
                    continue  # e.g. rotary_emb.inv_freq: recomputed, not a parameter
                if name in self._where:
                    raise WeightError(f"{f.path}: tensor '{hf_name}' is also stored in "
                                      f"{self._where[name][0].path}")
                self._where[name] = (f, hf_name)

    @classmethod
    def open(cls, model_dir: str | Path) -> WeightStore:
        """Open ``model.safetensors`` or the sharded index in ``model_dir`` (or one file)."""
        path = Path(model_dir)
        for candidate in (path, path / SINGLE_FILE, path / INDEX_FILE):
            _refuse_dangling_link(candidate)
        if path.is_file():
            return cls(path, [SafetensorsFile(path)])
        if (path / SINGLE_FILE).is_file():
            return cls(path / SINGLE_FILE, [SafetensorsFile(path / SINGLE_FILE)])
        if (path / INDEX_FILE).is_file():
            return cls(path / INDEX_FILE, _open_shards(path / INDEX_FILE))
        hint = " (pickle checkpoints are never loaded)" if any(path.glob("*.bin")) else ""
        raise WeightError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE} found{hint}")

    def names(self) -> list[str]:
        """The ggml names of the stored tensors, sorted."""
        return sorted(self._where)

    def __contains__(self, name: str) -> bool:
        return self._resolve(name) in self._where

    def info(self, name: str) -> tuple[tuple[int, ...], str]:
        """(shape, dtype) of tensor ``name``; dtype is one of f32 f16 bf16 i32 i64."""
        f, hf_name = self._lookup(name)
        e = f.entries[hf_name]
        return e.shape, _DTYPES[e.code][0]

    def get(self, name: str) -> np.ndarray:
        """A read-only, memory-mapped view of tensor ``name`` (no copy)."""
        f, hf_name = self._lookup(name)
        return f.array(hf_name)

    def hf_name(self, name: str) -> str:
        """The HF name under which tensor ``name`` is stored."""
        return self._lookup(name)[1]

    def check(self, expected: Mapping[str, tuple[tuple[int, ...], str]],
              tied_output: bool) -> None:
        """Check that the store holds exactly ``expected`` (ggml name -> (shape, dtype)).

        An expected float dtype (f32, f16 or bf16) accepts any float tensor, since the store's
        dtypes are what the checkpoint has; integer dtypes must match exactly. With
        ``tied_output``, 'output.weight' aliases 'token_embd.weight', as in transformers.
        """
        self.tied_output = tied_output
        for name, (shape, dtype) in expected.items():
            self._check_one(name, tuple(shape), dtype)
        for name in self.names():
            if name not in expected and not (tied_output and name == "output.weight"):
                raise WeightError(f"{self.label}: tensor '{name}' ({self._hf(name)}) is not used "
                                  "by a model with this config")

    def _check_one(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
        if self._resolve(name) not in self._where:
            raise WeightError(f"{self.label}: tensor '{name}' ({self._hf(name)}) is missing; "
                              f"expected shape {list(shape)}")
        actual_shape, actual_dtype = self.info(name)
        f, hf_name = self._lookup(name)
        if actual_shape != shape:
            raise WeightError(f"{f.path}: tensor '{name}' ({self._hf(name)}) has shape "
                              f"{list(actual_shape)}, expected {list(shape)}")
        is_float = dtype in FLOAT_DTYPES
        if (actual_dtype in FLOAT_DTYPES) != is_float or (not is_float and actual_dtype != dtype):
            want = "a float type (f32, f16, bf16)" if is_float else dtype
            raise WeightError(f"{f.path}: tensor '{name}' ({self._hf(name)}) has dtype "
                              f"{actual_dtype}, expected {want}")

    def _resolve(self, name: str) -> str:
        return "token_embd.weight" if self.tied_output and name == "output.weight" else name

    def _lookup(self, name: str) -> tuple[SafetensorsFile, str]:
        try:
            return self._where[self._resolve(name)]
        except KeyError:
            raise WeightError(f"{self.label}: no tensor '{name}' ({self._hf(name)})") from None

    def _hf(self, name: str) -> str:
        hf = ggml_to_hf_name(name)
        return f"HF '{hf}'" if hf else "no HF name"


def _open_shards(index: Path) -> list[SafetensorsFile]:
    """Open the shards listed by a ``model.safetensors.index.json``, checking the map."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except OSError as e:
        raise WeightError(f"{index}: cannot read: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise WeightError(f"{index}: invalid JSON: {_json_problem(e)}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise WeightError(f"{index}: field 'weight_map' must map tensor names to shard files")
    shards: dict[str, SafetensorsFile] = {}
    for tensor, shard in sorted(weight_map.items()):
        # Shards must sit next to the index; a path could point anywhere on disk.
        if Path(shard).name != shard or shard in ("", ".", ".."):
            raise WeightError(f"{index}: tensor '{tensor}' maps to {shard!r}, not a file name")
        if shard not in shards:
            _refuse_dangling_link(index.parent / shard)
            if not (index.parent / shard).is_file():
                raise WeightError(f"{index}: shard '{shard}' (holding tensor '{tensor}') "
                                  "does not exist")
            shards[shard] = SafetensorsFile(index.parent / shard)
        if tensor not in shards[shard].entries:
            raise WeightError(f"{index}: tensor '{tensor}' is mapped to '{shard}', "
                              "which does not contain it")
    return list(shards.values())


# ---------------------------------------------------------------------------------------------
# Writing


def write_safetensors(path: str | Path, tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``tensors`` as a safetensors file; the bytes depend only on the inputs."""
    path = Path(path)
    header: dict[str, object] = {}
    arrays, offset = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        code = _code_of(a.dtype, name)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        header[name] = {"dtype": code, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        arrays.append(a)
        offset += a.nbytes
    if metadata:
        header["__metadata__"] = dict(metadata)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # pad so that tensor data starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for a in arrays:
            fh.write(a.tobytes())
    return path


def _code_of(dtype: np.dtype, name: str) -> str:
    if name == "__metadata__":
        raise WeightError("'__metadata__' cannot be a tensor name")
    for code, (_, np_dtype) in _DTYPES.items():
        if dtype == np_dtype or dtype == np_dtype.newbyteorder(">"):
            return code
    raise WeightError(f"tensor '{name}': cannot write dtype {dtype} to safetensors")
