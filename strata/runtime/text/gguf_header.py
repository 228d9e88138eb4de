"""Read the metadata of a GGUF file (its key-value header), never its tensors.

    meta = read_gguf_metadata("ggml-vocab-qwen2.gguf")
    meta["tokenizer.ggml.model"]         # 'gpt2'
    meta["tokenizer.ggml.tokens"][:2]    # ['!', '"']
    meta.get("tokenizer.ggml.add_bos_token", False)

Why not `gguf.GGUFReader`: it builds a numpy view for every element of every array, which takes
some 25 s for Qwen2's 151,936 tokens and 151,387 merges; a tokenizer has to load in about a
second. This reads the same header format with the `gguf` package's own value types
(`gguf.GGUFValueType`) from a memory map of the file: the tensor data after the header is never
touched, so a multi-gigabyte model costs no more than a vocabulary-only file.

Numeric arrays come back as numpy arrays, string arrays as lists of `str`, scalars as Python
values. Every problem (not GGUF, truncated, an unknown value type, a string that is not UTF-8) is
one `TokenizerError` naming the file and the key.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from strata.runtime.text.errors import TokenizerError

_MAGIC = b"GGUF"


def _value_types():
    try:
        from gguf import GGUFValueType
    except ImportError:
        raise TokenizerError("reading a GGUF vocabulary needs the 'gguf' package (pip install gguf)") from None
    return GGUFValueType


class GgufMetadata(Mapping[str, Any]):
    """A GGUF file's key-value metadata: a read-only mapping from key to value."""

    def __init__(self, path: Path, values: dict[str, Any], version: int, tensor_count: int) -> None:
        self.path = path
        self.version = version
        #: How many tensors the file declares (0 for a vocabulary-only GGUF).
        self.tensor_count = tensor_count
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def read_gguf_metadata(path: str | Path) -> GgufMetadata:
    """The metadata of the GGUF file at `path` (see the module docstring)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = path.stat().st_size
            if size < 24:
                head = fh.read(4)
                if head == _MAGIC[: len(head)]:
                    raise TokenizerError(f"{path}: truncated GGUF file ({size} bytes)")
                raise TokenizerError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _Parser(path, mm, size).parse()
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read: {e.strerror or e}") from None


class _Truncated(Exception):
    pass


class _Parser:
    def __init__(self, path: Path, buf: mmap.mmap, size: int) -> None:
        self.path, self.buf, self.size = path, buf, size
        self.pos = 0
        self.order = "<"
        self.types = _value_types()
        self._scalar = {
            self.types.UINT8: "B", self.types.INT8: "b", self.types.UINT16: "H", self.types.INT16: "h",
            self.types.UINT32: "I", self.types.INT32: "i", self.types.FLOAT32: "f", self.types.BOOL: "?",
            self.types.UINT64: "Q", self.types.INT64: "q", self.types.FLOAT64: "d",
        }

    def parse(self) -> GgufMetadata:
        if self.buf[:4] != _MAGIC:
            raise TokenizerError(f"{self.path}: not a GGUF file (it does not start with 'GGUF')")
        self.pos = 4
        version = self._unpack("I")
        if version & 0xFFFF == 0:  # written on a big-endian machine: the version reads byte-swapped
            self.order = ">"
            version = struct.unpack(">I", self.buf[4:8])[0]
        if version not in (2, 3):
            raise TokenizerError(f"{self.path}: GGUF version {version} is not supported (2 and 3 are)")
        key = "the header"
        values: dict[str, Any] = {}
        try:
            tensor_count = self._unpack("Q")
            kv_count = self._unpack("Q")
            for _ in range(kv_count):
                key = self._string("a key")
                values[key] = self._value(key, self._unpack("I"))
        except _Truncated:
            raise TokenizerError(f"{self.path}: truncated GGUF file ({self.size} bytes; it ends inside "
                                 f"{'the header' if key == 'the header' else repr(key)})") from None
        return GgufMetadata(self.path, values, version, tensor_count)

    # -- primitives -------------------------------------------------------------------------

    def _unpack(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise _Truncated
        (v,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += n
        return v

    def _string(self, key: str) -> str:
        n = self._unpack("Q")
        if self.pos + n > self.size:
            raise _Truncated
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TokenizerError(f"{self.path}: {key} is not valid UTF-8 (byte {e.start})") from None

    def _value(self, key: str, vtype: int) -> Any:
        t = self.types
        if vtype == t.STRING:
            return self._string(f"metadata key '{key}'")
        if vtype == t.ARRAY:
            item_type = self._unpack("I")
            count = self._unpack("Q")
            return self._array(key, item_type, count)
        fmt = self._scalar.get(vtype)
        if fmt is None:
            raise TokenizerError(f"{self.path}: metadata key '{key}' has an unknown value type {vtype}")
        return self._unpack(fmt)

    def _array(self, key: str, item_type: int, count: int) -> Any:
        t = self.types
        fmt = self._scalar.get(item_type)
        if fmt is not None:
            dtype = np.dtype(self.order + fmt) if fmt != "?" else np.dtype(np.bool_)
            nbytes = dtype.itemsize * count
            if self.pos + nbytes > self.size:
                raise _Truncated
            out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).astype(dtype.newbyteorder("="))
            self.pos += nbytes
            return out
        if item_type == t.STRING:
            # Each string needs at least its 8-byte length: a corrupt count fails here, not in a huge loop.
            if self.pos + 8 * count > self.size:
                raise _Truncated
            return self._strings(key, count)
        if item_type == t.ARRAY:
            return [self._array(key, self._unpack("I"), self._unpack("Q")) for _ in range(count)]
        raise TokenizerError(f"{self.path}: metadata key '{key}' is an array of unknown value type {item_type}")

    def _strings(self, key: str, count: int) -> list[str]:
        buf, pos, size, out = self.buf, self.pos, self.size, []
        length = struct.Struct(self.order + "Q").unpack_from
        for i in range(count):
            if pos + 8 > size:
                raise _Truncated
            (n,) = length(buf, pos)
            pos += 8
            end = pos + n
            if end > size:
                raise _Truncated
            try:
                out.append(buf[pos:end].decode("utf-8"))
            except UnicodeDecodeError as e:
                raise TokenizerError(f"{self.path}: metadata key '{key}' item {i} is not valid UTF-8 "
                                     f"(byte {e.start})") from None
            pos = end
        self.pos = pos
        return out
