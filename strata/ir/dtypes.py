"""The one table of element types: each IR element type with its numpy / ml_dtypes type, its
safetensors code, its HF `torch_dtype` name and its spelling in each target.

    dtype_of(BFloat16Type()).numpy        -> ml_dtypes.bfloat16
    dtype_named("bf16").attr              -> BFloat16Type()
    dtype_of(f32).spelling("cpu")         -> "np.float32"

Kinds: `float` (f64 ... fp8), `int` (i64 ... i8, u8), `packed` (i4/u4: two elements per byte
in storage; their numpy type is ml_dtypes' one-element-per-byte int4/uint4) and `fixed` (the
fixed-point level's `!fixed.fp32<frac>`, one entry per `frac`, made by :func:`fixed_dtype`).
Unsigned types are spelled as the IR prints them (`ui8`, `ui4`). The table is complete once this
module is imported: no other module adds to it.

Verifiers use :class:`TensorOf`, a constraint built on the kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    SignednessAttr,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.irdl import AttrConstraint
from xdsl.irdl.constraints import ConstraintContext
from xdsl.utils.exceptions import VerifyException

from strata.errors import StrataError
from strata.ir.fixed_point import FixedPointType

KINDS = ("float", "int", "packed", "fixed")


class DTypeError(StrataError):
    """An element type that the table does not know, or a target cannot spell."""


@dataclass(frozen=True)
class DType:
    """One element type and its names everywhere."""

    name: str  # the IR / module-notation spelling: f32, bf16, f8E4M3FN, i32, i4
    kind: str  # float, int or packed
    bits: int
    attr: Attribute  # the IR element type
    numpy: np.dtype  # one element per numpy item (ml_dtypes for bf16, fp8, int4)
    safetensors: str | None = None  # the safetensors dtype code, None if it has none
    hf: str | None = None  # HF config `torch_dtype` / `dtype` name
    spellings: Mapping[str, str] = field(default_factory=dict)  # target -> type expression

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory (a packed i4 takes half a byte in storage, one in numpy)."""
        return self.numpy.itemsize

    @property
    def storage_bits(self) -> int:
        return self.bits

    def spelling(self, target: str) -> str:
        try:
            return self.spellings[target]
        except KeyError:
            raise DTypeError(f"element type {self.name} has no spelling in the {target} target") from None


def _int(width: int, signed: bool = True) -> IntegerType:
    return IntegerType(width, SignednessAttr(Signedness.SIGNLESS if signed else Signedness.UNSIGNED))


_TABLE: list[DType] = [
    DType("f64", "float", 64, Float64Type(), np.dtype(np.float64), "F64", "float64",
          {"cpu": "np.float64", "cuda": "tl.float64", "cpp": "double"}),
    DType("f32", "float", 32, Float32Type(), np.dtype(np.float32), "F32", "float32",
          {"cpu": "np.float32", "cuda": "tl.float32", "cpp": "float"}),
    DType("f16", "float", 16, Float16Type(), np.dtype(np.float16), "F16", "float16",
          {"cpu": "np.float16", "cuda": "tl.float16", "cpp": "_Float16"}),
    DType("bf16", "float", 16, BFloat16Type(), np.dtype(ml_dtypes.bfloat16), "BF16", "bfloat16",
          {"cpu": "ml_dtypes.bfloat16", "cuda": "tl.bfloat16", "cpp": "__bf16"}),
    DType("f8E4M3FN", "float", 8, Float8E4M3FNType(), np.dtype(ml_dtypes.float8_e4m3fn), "F8_E4M3", None,
          {"cpu": "ml_dtypes.float8_e4m3fn", "cuda": "tl.float8e4nv"}),
    DType("f8E5M2", "float", 8, Float8E5M2Type(), np.dtype(ml_dtypes.float8_e5m2), "F8_E5M2", None,
          {"cpu": "ml_dtypes.float8_e5m2", "cuda": "tl.float8e5"}),
    DType("i64", "int", 64, _int(64), np.dtype(np.int64), "I64", None,
          {"cpu": "np.int64", "cuda": "tl.int64", "cpp": "int64_t"}),
    DType("i32", "int", 32, _int(32), np.dtype(np.int32), "I32", None,
          {"cpu": "np.int32", "cuda": "tl.int32", "cpp": "int32_t"}),
    DType("i16", "int", 16, _int(16), np.dtype(np.int16), "I16", None,
          {"cpu": "np.int16", "cuda": "tl.int16", "cpp": "int16_t"}),
    DType("i8", "int", 8, _int(8), np.dtype(np.int8), "I8", None,
          {"cpu": "np.int8", "cuda": "tl.int8", "cpp": "int8_t"}),
    DType("ui8", "int", 8, _int(8, signed=False), np.dtype(np.uint8), "U8", None,
          {"cpu": "np.uint8", "cuda": "tl.uint8", "cpp": "uint8_t"}),
    DType("i4", "packed", 4, _int(4), np.dtype(ml_dtypes.int4), None, None,
          {"cpu": "ml_dtypes.int4", "cpp": "int8_t"}),
    DType("ui4", "packed", 4, _int(4, signed=False), np.dtype(ml_dtypes.uint4), None, None,
          {"cpu": "ml_dtypes.uint4", "cpp": "uint8_t"}),
]

_BY_ATTR: dict[Attribute, DType] = {d.attr: d for d in _TABLE}
_BY_NAME: dict[str, DType] = {d.name: d for d in _TABLE}


def fixed_dtype(attr: FixedPointType) -> DType:
    """The entry of `!fixed.fp32<frac>`: int32 in memory, FixedPoint32<frac> in C++."""
    f = attr.frac
    return DType(f"fp32<{f}>", "fixed", 32, attr, np.dtype(np.int32), None, None,
                 {"cpp": f"FixedPoint32<{f}>", "cpu": "np.int32"})


def lookup(attr: Attribute) -> DType | None:
    """The entry of an IR element type, or None."""
    found = _BY_ATTR.get(attr)
    if found is not None:
        return found
    if isinstance(attr, FixedPointType):
        return fixed_dtype(attr)
    return None


def dtype_of(attr: Attribute) -> DType:
    """The entry of an IR element type; DTypeError if the table does not know it."""
    found = lookup(attr)
    if found is None:
        raise DTypeError(f"element type {attr} is not supported")
    return found


def dtype_named(name: str) -> DType:
    """The entry for an IR spelling (`bf16`), as the module level writes element types."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown element type '{name}' (known: {', '.join(_BY_NAME)})") from None


def dtype_of_safetensors(code: str) -> DType | None:
    return next((d for d in _TABLE if d.safetensors == code), None)


def dtype_of_hf(name: str) -> DType | None:
    return next((d for d in _TABLE if d.hf == name), None)


def dtype_of_numpy(dtype: np.dtype) -> DType | None:
    dtype = np.dtype(dtype)
    if dtype.byteorder == ">":
        dtype = dtype.newbyteorder("<")
    return next((d for d in _TABLE if d.numpy == dtype), None)


def numpy_dtype(attr: Attribute) -> np.dtype:
    return dtype_of(attr).numpy


def names(kind: str | None = None) -> list[str]:
    return [d.name for d in _TABLE if kind is None or d.kind == kind]


def has_kind(attr: Attribute, *kinds: str) -> bool:
    found = lookup(attr)
    return found is not None and found.kind in kinds


def is_float(attr: Attribute) -> bool:
    return has_kind(attr, "float")


def is_int(attr: Attribute, width: int | None = None) -> bool:
    return isinstance(attr, IntegerType) and has_kind(attr, "int") and (width is None or attr.width.data == width)


@dataclass(frozen=True)
class TensorOf(AttrConstraint):
    """A tensor type whose element type is of one of `kinds` in the table (any shape)."""

    kinds: tuple[str, ...]

    def verify(self, attr: Attribute, constraint_context: ConstraintContext) -> None:
        if not isinstance(attr, TensorType):
            raise VerifyException(f"expected a tensor, got {attr}")
        if not has_kind(attr.get_element_type(), *self.kinds):
            raise VerifyException(f"expected a tensor of {' or '.join(self.kinds)} elements, got {attr}")

    def get_bases(self) -> set[type[Attribute]] | None:
        return {TensorType}

    def mapping_type_vars(self, type_var_mapping):  # no type variables inside
        return self


FloatTensor = TensorOf(("float",))
IntTensor = TensorOf(("int",))
#: What a weight may be: a float tensor, or a quantized one (fp8 is float; int4 is packed).
WeightTensor = TensorOf(("float", "int", "packed"))
AnyTensor = TensorOf(KINDS)
