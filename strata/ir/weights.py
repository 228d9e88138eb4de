"""A read-only, memory-mapped store of model weights in safetensors files.

The safetensors reader is our own (a little-endian u64 header length, a JSON header, then raw
tensor bytes), so that every tensor is a zero-copy view of one ``numpy.memmap`` and no pickle is
ever loaded. Tensors are addressed by the names the IR uses (llama.cpp's); the caller gives the
map from the stored (HF) names, which it reads off the module IR
(`strata.pipeline.model.Model.weight_names`), so no model family is known here. Stored tensors outside the
map are listed in `unused`. Linear weights keep the HF ``[out, in]`` layout.

An fp8 checkpoint (the store opened with ``fp8_block``) stores a weight as F8_E4M3 ``W`` plus
its f32 block scales ``W_scale_inv`` (`strata.ir.fp8`); the store gives the dequantized f32
tensor, built once on first use and kept, under the weight's IR name.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Mapping

import numpy as np

from strata.errors import StrataError
from strata.ir import dtypes, fp8
from strata.ir.split import split_piece

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# The reference implementation refuses larger headers too; this bounds what garbage can cost us.
_MAX_HEADER = 100 * 1024 * 1024


class WeightError(StrataError):
    """Weights that cannot be read or do not fit the model."""


SAFETENSORS_CODES = [d.safetensors for d in map(dtypes.dtype_named, dtypes.names()) if d.safetensors]


def _storage(code: str) -> np.dtype | None:
    """The numpy dtype of a safetensors dtype code (little-endian, as safetensors stores)."""
    found = dtypes.dtype_of_safetensors(code)
    return None if found is None else found.numpy.newbyteorder("<")


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
        # The header fixes every tensor's name, dtype and shape: what compiled code depends on.
        self.header_sha256 = hashlib.sha256(self._map[8:data_start]).hexdigest()

    def array(self, name: str) -> np.ndarray:
        """A zero-copy view of tensor ``name``."""
        e = self.entries[name]
        return self._map[e.begin:e.begin + e.nbytes].view(_storage(e.code)).reshape(e.shape)

    def piece(self, name: str, axis: int, pieces: int, parts: Sequence[int], index: int) -> np.ndarray:
        """Piece `index` of tensor ``name`` as op.param's `split` cuts it (`strata.ir.split`), as an
        array of its own; the pages of the map that the copy read are then dropped from this
        process's memory (the file's page cache keeps them). A view would keep them mapped, and
        the kernel maps a file's pages in large folios: a rank's views would hold its neighbours'
        bytes too."""
        out = np.array(split_piece(self.array(name), axis, pieces, parts, index), order="C")  # a copy, always
        out.flags.writeable = False
        e = self.entries[name]
        start = e.begin // mmap.PAGESIZE * mmap.PAGESIZE
        self._map._mmap.madvise(mmap.MADV_DONTNEED, start, e.begin + e.nbytes - start)  # type: ignore[union-attr]
        return out


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
    if not isinstance(code, str) or _storage(code) is None:
        raise bad(f"has dtype {code!r}, which strata does not support "
                  f"(supported: {', '.join(SAFETENSORS_CODES)})")
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
    itemsize = _storage(code).itemsize
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


@dataclass(frozen=True)
class Composite:
    """An IR tensor assembled from stored ones: `stack`, one stored tensor per index of its
    first dim (a hub checkpoint's experts, one by one), or else part `part` of `parts` of the
    stored tensor `merged`, split along `axis` (transformers' merged `gate_up_proj`)."""

    stack: tuple[str, ...] = ()
    merged: str | None = None
    part: int = 0
    parts: int = 1
    axis: int = 1


#: The element types a float param may be stored in: the IR's type is what it computes in.
FLOAT_STORAGE = ("f32", "f16", "bf16")


class WeightStore:
    """All tensors of one model, memory-mapped from one or more safetensors files, addressed by
    the IR's names through `names` (stored name -> IR name; None: the stored names)."""

    def __init__(self, label: Path, files: list[SafetensorsFile], names: Mapping[str, str] | None = None,
                 ignore: frozenset[str] | set[str] = frozenset(),
                 composites: Mapping[str, Composite] | None = None,
                 fp8_block: tuple[int, int] | None = None) -> None:
        self.label = label  # the file named in errors: model.safetensors or the index
        self.files = files
        self._where: dict[str, tuple[SafetensorsFile, str]] = {}
        self._stored_name: dict[str, str] = {}
        stored_in: dict[str, SafetensorsFile] = {}
        for f in files:
            for stored in f.entries:
                if stored in stored_in:
                    raise WeightError(f"{f.path}: tensor '{stored}' is also stored in {stored_in[stored].path}")
                stored_in[stored] = f
        used: set[str] = set()
        for stored, f in stored_in.items():
            name = stored if names is None else names.get(stored)
            if name is not None:
                self._where[name] = (f, stored)
                self._stored_name[name] = stored
                used.add(stored)
        #: IR name -> (how, stored names) of the tensors assembled from several stored ones.
        self._assembled: dict[str, tuple[Composite, tuple[str, ...]]] = {}
        self._cache: dict[str, np.ndarray] = {}
        self._composites = dict(composites or {})
        for name, comp in self._composites.items():
            if comp.stack and all(n in stored_in for n in comp.stack):
                self._assembled[name] = (comp, comp.stack)
            elif comp.merged is not None and comp.merged in stored_in:
                self._assembled[name] = (comp, (comp.merged,))
            else:
                continue
            used.update(self._assembled[name][1])
        #: Stored fp8 weight -> its stored scale, for a store opened with `fp8_block`.
        self.fp8_block = fp8_block
        self._fp8: dict[str, str] = {}
        self._dequantized: dict[str, np.ndarray] = {}
        if fp8_block is not None:
            for stored in sorted(used):
                if stored_in[stored].entries[stored].code == _FP8_CODE:
                    self._fp8[stored] = self._check_scale(stored, stored_in, fp8_block)
            used.update(self._fp8.values())
        #: Stored tensors the model does not use (outside `names`, the composites and `ignore`), sorted.
        #: An `ignore` entry ending in "." ignores every name under it (`model.visual.`).
        prefixes = tuple(i for i in ignore if i.endswith("."))
        self.unused = sorted(n for n in stored_in if n not in used and n not in ignore and not n.startswith(prefixes))
        self._stored_in = stored_in
        self._expected_stored = {v: k for k, v in names.items()} if names is not None else {}

    def _check_scale(self, stored: str, stored_in: Mapping[str, SafetensorsFile], block: tuple[int, int]) -> str:
        """The stored name of fp8 weight ``stored``'s scale, checked against its shape."""
        f = stored_in[stored]
        shape = f.entries[stored].shape
        scale = stored + "_scale_inv"
        if len(shape) != 2:
            raise WeightError(f"{f.path}: fp8 tensor '{stored}' has shape {list(shape)}; "
                              "block-quantized fp8 weights must be 2-D")
        if scale not in stored_in:
            raise WeightError(f"{self.label}: fp8 tensor '{stored}' has no scale '{scale}'")
        e = stored_in[scale].entries[scale]
        want = fp8.scale_shape(shape, block)
        if e.shape != want:
            raise WeightError(f"{stored_in[scale].path}: tensor '{scale}' has shape {list(e.shape)}, expected "
                              f"{list(want)} (the {list(block)} blocks of '{stored}' {list(shape)})")
        if dtypes.dtype_of_safetensors(e.code).name not in FLOAT_STORAGE:
            raise WeightError(f"{stored_in[scale].path}: tensor '{scale}' has dtype "
                              f"{dtypes.dtype_of_safetensors(e.code).name}, expected f32")
        return scale

    def _array(self, stored: str) -> np.ndarray:
        """Stored tensor ``stored``: a view, or an fp8 weight dequantized (once) to f32."""
        if stored not in self._fp8:
            return self._stored_in[stored].array(stored)
        if stored not in self._dequantized:
            scale = self._fp8[stored]
            w = fp8.dequantize_fp8_block(self._stored_in[stored].array(stored),
                                         self._stored_in[scale].array(scale), self.fp8_block)
            w.flags.writeable = False
            self._dequantized[stored] = w
        return self._dequantized[stored]

    def _dtype_name(self, stored: str) -> str:
        """The element type the store gives stored tensor ``stored`` in (f32 for fp8 weights)."""
        if stored in self._fp8:
            return "f32"
        return dtypes.dtype_of_safetensors(self._stored_in[stored].entries[stored].code).name

    @classmethod
    def open(cls, model_dir: str | Path, names: Mapping[str, str] | None = None,
             ignore: frozenset[str] | set[str] = frozenset(),
             composites: Mapping[str, Composite] | None = None,
             fp8_block: tuple[int, int] | None = None) -> WeightStore:
        """Open ``model.safetensors`` or the sharded index in ``model_dir`` (or one file).
        ``fp8_block``: the checkpoint is block-quantized fp8 (`strata.ir.fp8`) with these blocks."""
        path = Path(model_dir)
        for candidate in (path, path / SINGLE_FILE, path / INDEX_FILE):
            _refuse_dangling_link(candidate)
        if path.is_file():
            return cls(path, [SafetensorsFile(path)], names, ignore, composites, fp8_block)
        if (path / SINGLE_FILE).is_file():
            return cls(path / SINGLE_FILE, [SafetensorsFile(path / SINGLE_FILE)], names, ignore, composites, fp8_block)
        if (path / INDEX_FILE).is_file():
            return cls(path / INDEX_FILE, _open_shards(path / INDEX_FILE), names, ignore, composites, fp8_block)
        hint = " (pickle checkpoints are never loaded)" if any(path.glob("*.bin")) else ""
        raise WeightError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE} found{hint}")

    def fingerprint(self) -> list[dict[str, object]]:
        """What compiled code depends on in the stored files: each file's name and size, the
        sha256 of each safetensors header (names, dtypes, shapes, offsets) and of the index.
        Tensor data is read at run time and not hashed."""
        out: list[dict[str, object]] = []
        if self.label.name == INDEX_FILE:
            out.append({"file": INDEX_FILE, "size": self.label.stat().st_size,
                        "sha256": hashlib.sha256(self.label.read_bytes()).hexdigest()})
        for f in self.files:
            out.append({"file": f.path.name, "size": f.path.stat().st_size, "header_sha256": f.header_sha256})
        return out

    def names(self) -> list[str]:
        """The IR names of the stored tensors the model uses, sorted."""
        return sorted([*self._where, *self._assembled])

    def __contains__(self, name: str) -> bool:
        return name in self._where or name in self._assembled

    def info(self, name: str) -> tuple[tuple[int, ...], str]:
        """(shape, element type name) of tensor ``name`` (f32, bf16, ...: see strata.ir.dtypes)."""
        if name in self._assembled:
            comp, sources = self._assembled[name]
            e = self._stored_in[sources[0]].entries[sources[0]]
            shape = list(e.shape)
            if sources == comp.stack:
                shape = [len(sources), *shape]
            else:
                shape[comp.axis] //= comp.parts
            return tuple(shape), self._dtype_name(sources[0])
        f, stored = self._lookup(name)
        return f.entries[stored].shape, self._dtype_name(stored)

    def get(self, name: str) -> np.ndarray:
        """Tensor ``name``: a read-only, memory-mapped view (no copy), or for a tensor assembled
        from stored ones, a view of a merged tensor or an array stacked once and kept."""
        if name in self._assembled:
            return self._get_assembled(name)
        return self._array(self._lookup(name)[1])

    def piece(self, name: str, axis: int, pieces: int, parts: Sequence[int], index: int) -> np.ndarray:
        """This rank's piece of tensor ``name`` (op.param's `split`: piece `index` of `pieces`
        of each part of dim `axis`): a copy of the piece alone, the whole never kept (see
        `SafetensorsFile.piece`). Experts stored one by one are cut one by one; an fp8 weight is
        dequantized whole, then cut."""
        if name in self._assembled:
            comp, sources = self._assembled[name]
            if sources == comp.stack and axis > 0:
                cut = [split_piece(self._array(n), axis - 1, pieces, parts, index) for n in sources]
                out = np.stack(cut)
                out.flags.writeable = False
                return out
            return np.ascontiguousarray(split_piece(self._get_assembled(name), axis, pieces, parts, index))
        stored = self._lookup(name)[1]
        if stored in self._fp8:
            return np.ascontiguousarray(split_piece(self._array(stored), axis, pieces, parts, index))
        try:
            return self._stored_in[stored].piece(stored, axis, pieces, parts, index)
        except ValueError as e:
            raise WeightError(f"{self.label}: tensor '{stored}': {e}") from None

    def _get_assembled(self, name: str) -> np.ndarray:
        comp, sources = self._assembled[name]
        if sources != comp.stack:  # a part of the merged tensor
            whole = self._array(sources[0])
            if whole.shape[comp.axis] % comp.parts:
                raise WeightError(f"{self.label}: tensor '{sources[0]}' of shape {list(whole.shape)} does not split "
                                  f"into {comp.parts} parts along axis {comp.axis}")
            n = whole.shape[comp.axis] // comp.parts
            index = [slice(None)] * whole.ndim
            index[comp.axis] = slice(comp.part * n, (comp.part + 1) * n)
            return whole[tuple(index)]
        if name not in self._cache:
            parts = [self._array(n) for n in sources]
            if len({p.shape for p in parts}) != 1:
                raise WeightError(f"{self.label}: the tensors stacked as '{name}' ({sources[0]}, ...) differ in shape")
            stacked = np.stack(parts)
            stacked.flags.writeable = False
            self._cache[name] = stacked
        return self._cache[name]

    def stored_name(self, name: str) -> str:
        """The name under which tensor ``name`` is stored (its HF name; for an assembled
        tensor, the first it is assembled from)."""
        if name in self._assembled:
            return self._assembled[name][1][0]
        return self._lookup(name)[1]

    def check(self, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> None:
        """Check that the store holds every tensor of ``expected`` (name -> (shape, dtype)).

        An expected float dtype accepts any of FLOAT_STORAGE, since the store's dtypes are
        what the checkpoint has and the IR's type is what it computes in; other dtypes must
        match exactly.
        """
        for name, (shape, dtype) in expected.items():
            self._check_one(name, tuple(shape), dtype)

    def _check_one(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
        if name not in self:
            raise WeightError(f"{self.label}: tensor {self._both(name)} is missing; "
                              f"expected shape {list(shape)}")
        actual_shape, actual_dtype = self.info(name)
        f = self._stored_in[self._assembled[name][1][0]] if name in self._assembled else self._lookup(name)[0]
        if actual_shape != shape:
            raise WeightError(f"{f.path}: tensor {self._both(name)} has shape "
                              f"{list(actual_shape)}, expected {list(shape)}")
        is_float = dtype in FLOAT_STORAGE
        if (actual_dtype in FLOAT_STORAGE) != is_float or (not is_float and actual_dtype != dtype):
            want = f"a float type ({', '.join(FLOAT_STORAGE)})" if is_float else dtype
            raise WeightError(f"{f.path}: tensor {self._both(name)} has dtype "
                              f"{actual_dtype}, expected {want}")

    def _lookup(self, name: str) -> tuple[SafetensorsFile, str]:
        try:
            return self._where[name]
        except KeyError:
            raise WeightError(f"{self.label}: no tensor {self._both(name)}") from None

    def _both(self, name: str) -> str:
        """`'blk.0.attn_q.weight' (HF 'model.layers.0.self_attn.q_proj.weight')`."""
        stored = self._stored_name.get(name) or self._expected_stored.get(name)
        comp = self._composites.get(name)
        if stored is None and comp is not None:
            forms = ([f"'{comp.stack[0]}' ... one per index"] if comp.stack else []) + (
                [f"'{comp.merged}' part {comp.part + 1} of {comp.parts}"] if comp.merged else [])
            return f"'{name}' (HF {' or '.join(forms)})"
        return f"'{name}'" + (f" (HF '{stored}')" if stored and stored != name else "")


_FP8_CODE = dtypes.dtype_named("f8E4M3FN").safetensors


class Overlay:
    """A weight source (`.get(name)`, or a mapping) with some tensors replaced: what a
    weight transform (SmoothQuant, an int4 round trip) computes with, without a copy of the rest."""

    def __init__(self, base: Any, changed: Mapping[str, np.ndarray]) -> None:
        self.base, self.changed = base, changed

    def get(self, name: str) -> np.ndarray:
        if name in self.changed:
            return self.changed[name]
        return self.base[name] if isinstance(self.base, Mapping) else self.base.get(name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.get(name)


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
    found = dtypes.dtype_of_numpy(dtype)
    if found is None or found.safetensors is None:
        raise WeightError(f"tensor '{name}': cannot write dtype {dtype} to safetensors")
    return found.safetensors
