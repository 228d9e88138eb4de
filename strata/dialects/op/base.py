"""Shape helpers shared by the op dialect's verifiers, and the abstract bases of its ops.

Dynamic dims are `?` (xDSL's DYNAMIC_INDEX); every helper treats them as matching anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import Pure

from strata.ir.checks import elem_of, require, shape_of
from strata.ir.dtypes import AnyTensor, FloatTensor, is_float

# ---------------------------------------------------------------------------
# Shape helpers
# ---------------------------------------------------------------------------


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape) or "scalar"


def dim_eq(a: int, b: int) -> bool:
    return a == DYNAMIC_INDEX or b == DYNAMIC_INDEX or a == b


def shapes_eq(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(dim_eq(x, y) for x, y in zip(a, b))


def numel(shape: Sequence[int]) -> int | None:
    """Element count, or None when a dimension is dynamic."""
    n = 1
    for d in shape:
        if d == DYNAMIC_INDEX:
            return None
        n *= d
    return n


def can_repeat(small: Sequence[int], big: Sequence[int]) -> bool:
    """ggml_can_repeat: every dim of `big` is a multiple of the aligned dim of `small`."""
    if len(small) > len(big):
        return False
    for s, b in zip(reversed(small), reversed(big)):
        if s == DYNAMIC_INDEX or b == DYNAMIC_INDEX:
            continue
        if s == 0 or b % s != 0:
            return False
    return True


def check_float(op: Operation, value: SSAValue, what: str) -> None:
    require(is_float(elem_of(value)), f"{op.name}: {what} must be a float tensor, got {value.type}")


# ---------------------------------------------------------------------------
# Abstract bases
# ---------------------------------------------------------------------------


class OpBase(IRDLOperation):
    """Base of every op-level op: an optional ggml tensor name. Compute ops are `Pure`
    (through their bases); the state ops declare their memory effects instead. (IRDL merges
    the traits of base classes, so `Pure` sits on the bases of pure ops only.)"""

    tensor_label = opt_attr_def(StringAttr, attr_name="name")

    @property
    def label(self) -> str | None:
        return self.tensor_label.data if self.tensor_label is not None else None


class LeafOp(OpBase):
    """A tensor with no operands that stays the same through a call: a weight, a host
    input or a constant (the state buffer is `op.state`, which is not pure)."""

    result = result_def(AnyTensor)
    traits = traits_def(Pure())


class UnaryOp(OpBase):
    src = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())

    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"


class BinaryOp(OpBase):
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())

    assembly_format = (
        "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    )


class ElementwiseUnaryOp(UnaryOp):
    """A float op applied element by element: the result has the operand's shape."""

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), f"{self.name}: result shape must equal the operand's")
        check_float(self, self.src, "the operand")
        check_float(self, self.result, "the result")


class ElementwiseBinaryOp(OpBase):
    """ggml's broadcasting binary op: `rhs` repeats to the shape of `lhs`."""

    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure())

    assembly_format = BinaryOp.assembly_format

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(shapes_eq(a, r), f"{self.name}: result {fmt_shape(r)} must have the shape of lhs {fmt_shape(a)}")
        require(can_repeat(b, a), f"{self.name}: rhs {fmt_shape(b)} cannot be broadcast to lhs {fmt_shape(a)}")
