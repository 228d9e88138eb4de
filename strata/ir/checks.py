"""What the dialects' verifiers (and the code that reads their types) share.

    require(len(shape_of(op.src)) == 2, "fixed.matmul: the source is [rows, K]")

`require` turns a failed condition into xDSL's `VerifyException`, so a verifier reads as a list
of conditions with their messages; `shape_of` and `elem_of` read a tensor value's (or type's)
dims and element type.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.utils.exceptions import VerifyException


def require(cond: bool, message: str) -> None:
    """Raise VerifyException(message) unless `cond` holds."""
    if not cond:
        raise VerifyException(message)


def _tensor_type(value: SSAValue | Attribute) -> TensorType:
    typ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(typ, TensorType):
        raise VerifyException(f"expected a tensor, got {typ}")
    return typ


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The dims of a tensor value or type (a dynamic dim is xDSL's DYNAMIC_INDEX)."""
    return _tensor_type(value).get_shape()


def elem_of(value: SSAValue | Attribute) -> Attribute:
    """The element type of a tensor value or type."""
    return _tensor_type(value).get_element_type()
