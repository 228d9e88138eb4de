"""Element-wise ops: ggml's broadcasting binary ops, the unary activations, SCALE and CLAMP."""

from __future__ import annotations

import math

from xdsl.dialects.builtin import FloatAttr
from xdsl.irdl import attr_def, irdl_op_definition

from strata.dialects.op.base import BinaryOp, ElementwiseBinaryOp, ElementwiseUnaryOp, UnaryOp, check_float, shapes_eq
from strata.ir.checks import require, shape_of


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    """MUL: element-wise product, `rhs` broadcast to `lhs`.

        %y = op.mul %x, %w : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
    """

    name = "op.mul"


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    """ADD: element-wise sum, `rhs` broadcast to `lhs`.

        %y = op.add %x, %r : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.add"


@irdl_op_definition
class DivOp(ElementwiseBinaryOp):
    """DIV: element-wise quotient lhs / rhs, `rhs` broadcast (tiled) to `lhs` as in ADD.
    A zero divisor gives inf or NaN, as in ggml.

        %w = op.div %x, %s {name = "ffn_moe_weights_norm-0"} : tensor<3x2xf32>, tensor<3x1xf32> -> tensor<3x2xf32>
    """

    name = "op.div"


@irdl_op_definition
class ScaleOp(UnaryOp):
    """SCALE: x * scale (ggml_scale).

        %s = op.scale %x {scale = 0.25 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.scale"
    scale = attr_def(FloatAttr)

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), "op.scale: result shape must equal the operand's")
        check_float(self, self.src, "the operand")


@irdl_op_definition
class ClampOp(UnaryOp):
    """CLAMP (ggml_clamp): max(min(x, max), min), element-wise, with ggml's comparisons
    (a NaN becomes `max`). Either bound may be infinite.

        %c = op.clamp %s {min = 6.103515625e-05 : f64, max = 0x7FF0000000000000 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
    """

    name = "op.clamp"
    min = attr_def(FloatAttr)
    max = attr_def(FloatAttr)

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), "op.clamp: result shape must equal the operand's")
        check_float(self, self.src, "the operand")
        lo, hi = float(self.min.value.data), float(self.max.value.data)
        require(not (math.isnan(lo) or math.isnan(hi)), "op.clamp: min and max must be numbers")
        require(lo <= hi, f"op.clamp: min {lo} must not exceed max {hi}")


@irdl_op_definition
class SiluOp(ElementwiseUnaryOp):
    """SILU (ggml_silu): x / (1 + exp(-x)).

        %y = op.silu %x {name = "conv_output_silu-0"} : tensor<3x128xf32> -> tensor<3x128xf32>
    """

    name = "op.silu"


@irdl_op_definition
class SigmoidOp(ElementwiseUnaryOp):
    """SIGMOID (ggml_sigmoid): 1 / (1 + exp(-x)).

        %y = op.sigmoid %x {name = "beta_sigmoid-0"} : tensor<3x4x1xf32> -> tensor<3x4x1xf32>
    """

    name = "op.sigmoid"


@irdl_op_definition
class SoftplusOp(ElementwiseUnaryOp):
    """SOFTPLUS (ggml_softplus): x where x > 20, else log(1 + exp(x)) (ggml's threshold;
    `log(1 + e)`, not `log1p(e)`, as ggml computes it).

        %y = op.softplus %x {name = "a_softplus-0"} : tensor<3x4xf32> -> tensor<3x4xf32>
    """

    name = "op.softplus"


@irdl_op_definition
class SwigluOp(BinaryOp):
    """SWIGLU: silu(gate) * up (ggml_swiglu_split(gate, up)).

        %h = op.swiglu %g, %u : tensor<5x40xf32>, tensor<5x40xf32> -> tensor<5x40xf32>
    """

    name = "op.swiglu"

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(shapes_eq(a, b) and shapes_eq(a, r), "op.swiglu: gate, up and result must have one shape")
        check_float(self, self.lhs, "gate")
