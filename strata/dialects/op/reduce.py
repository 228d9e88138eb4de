"""Row-wise ops over the last dimension: RMS_NORM, SUM_ROWS, ARGMAX, ARGSORT."""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, StringAttr
from xdsl.irdl import attr_def, irdl_op_definition

from strata.dialects.op.base import UnaryOp, check_float, fmt_shape, shapes_eq
from strata.ir.dtypes import is_int
from strata.ir.checks import elem_of, require, shape_of

#: ARGSORT's orders (ggml_sort_order).
SORT_ORDERS = ("asc", "desc")


@irdl_op_definition
class RmsNormOp(UnaryOp):
    """RMS_NORM over the last dimension: x / sqrt(mean(x^2) + eps), no weight.

        %n = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.rms_norm"
    eps = attr_def(FloatAttr)

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), "op.rms_norm: result shape must equal the operand's")
        check_float(self, self.src, "the operand")


@irdl_op_definition
class SumRowsOp(UnaryOp):
    """SUM_ROWS (ggml_sum_rows): the sum over the last dim, kept as a dim of size 1:
    [..., C] -> [..., 1].

        %s = op.sum_rows %w {name = "ffn_moe_weights_sum-0"} : tensor<3x2xf32> -> tensor<3x1xf32>
    """

    name = "op.sum_rows"

    def verify_(self) -> None:
        a, r = shape_of(self.src), shape_of(self.result)
        require(len(a) >= 1, "op.sum_rows: the operand must have rank >= 1")
        require(shapes_eq(r, (*a[:-1], 1)), f"op.sum_rows: result must be {fmt_shape((*a[:-1], 1))}, got {fmt_shape(r)}")
        check_float(self, self.src, "the operand")
        check_float(self, self.result, "the result")


@irdl_op_definition
class ArgmaxOp(UnaryOp):
    """ARGMAX over the last dim: [R, C] -> [R] i32.

        %i = op.argmax %logits : tensor<1x32xf32> -> tensor<1xi32>
    """

    name = "op.argmax"

    def verify_(self) -> None:
        a, r = shape_of(self.src), shape_of(self.result)
        require(len(a) == 2, "op.argmax: operand must have rank 2")
        require(shapes_eq(r, a[:1]) and is_int(elem_of(self.result), 32), f"op.argmax: result must be tensor<{fmt_shape(a[:1])}xi32>")


@irdl_op_definition
class ArgsortOp(UnaryOp):
    """ARGSORT (ggml_argsort): per row (last dim), the column indices that sort it, i32,
    in `order` "desc" (largest first) or "asc". Equal values keep their index order (ggml's
    std::sort leaves ties unspecified). llama.cpp's top-k (ggml_argsort_top_k) is an ARGSORT
    "desc" followed by an `op.view` of its first k columns (strides [C, 1]).

        %s = op.argsort %p {order = "desc", name = "ffn_moe_argsort-0"} : tensor<3x8xf32> -> tensor<3x8xi32>
        %k = op.view %s {offset = 0 : i64, strides = array<i64: 8, 1>, name = "ffn_moe_topk-0"} : tensor<3x8xi32> -> tensor<3x2xi32>
    """

    name = "op.argsort"
    order = attr_def(StringAttr)

    def verify_(self) -> None:
        a, r = shape_of(self.src), shape_of(self.result)
        require(self.order.data in SORT_ORDERS, f"op.argsort: order must be 'asc' or 'desc', got '{self.order.data}'")
        require(len(a) >= 1, "op.argsort: the operand must have rank >= 1")
        check_float(self, self.src, "the operand")
        require(shapes_eq(a, r) and is_int(elem_of(self.result), 32), f"op.argsort: result must be tensor<{fmt_shape(a)}xi32>")
