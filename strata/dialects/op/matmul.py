"""Matrix products: MUL_MAT and the routed-expert MUL_MAT_ID.

A product whose weight is stored in a ggml block type (`op.param`'s `format`) may say how
ggml-cpu computes it: `act = "q8_0"` or `"q8_K"` quantizes each row of the activations to
that block type first and takes the integer dot products of the blocks (the weight's
`vec_dot_type`, `strata.ir.ggml_types`); `act_order` is the weight's `block_order`, the
order ggml's row has (see `op.param`). Without `act`, the activations stay float32.
"""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, Float32Type, StringAttr
from xdsl.irdl import irdl_op_definition, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.op.base import BinaryOp, OpBase, can_repeat, check_float, dim_eq, fmt_shape, shapes_eq
from strata.ir.dtypes import FloatTensor, IntTensor, WeightTensor, is_int
from strata.ir.checks import elem_of, require, shape_of
from strata.ir.ggml_types import ACTIVATION_TYPES


class QuantizedProduct:
    """The `act` / `act_order` attributes of a product (see the module docstring)."""

    @property
    def activation_quant(self) -> tuple[str, tuple[int, ...] | None] | None:
        """(the activation block type, its column order or None), or None for float rows."""
        act = self.attributes.get("act")  # type: ignore[attr-defined]
        if not isinstance(act, StringAttr):
            return None
        order = self.attributes.get("act_order")  # type: ignore[attr-defined]
        return act.data, tuple(order.get_values()) if isinstance(order, DenseArrayBase) else None

    def verify_act(self, k: int) -> None:
        q = self.activation_quant
        if q is None:
            require("act_order" not in self.attributes, f"{self.name}: act_order goes with act")  # type: ignore[attr-defined]
            return
        kind, order = q
        require(kind in ACTIVATION_TYPES, f"{self.name}: act '{kind}' is not an activation block type "  # type: ignore[attr-defined]
                                          f"({', '.join(ACTIVATION_TYPES)})")
        block = 32 if kind == "q8_0" else 256
        require(k != DYNAMIC_INDEX and k % block == 0,
                f"{self.name}: {kind} activations need rows of a multiple of {block} values, got {k}")  # type: ignore[attr-defined]
        if order is not None:
            require(len(order) == 3 and all(v > 0 for v in order) and order[0] * order[1] * order[2] == k,
                    f"{self.name}: act_order is [a, b, c] of positive sizes whose product is the row's {k}, "  # type: ignore[attr-defined]
                    f"got {list(order)}")


@irdl_op_definition
class MulMatOp(BinaryOp, QuantizedProduct):
    """MUL_MAT: ggml_mul_mat(a, b) = b @ a^T over the last two dims.

    a is [..., M, K] (a weight is stored [out, in]), b is [..., N, K], the result is
    [..., N, M] in f32. Leading dims of `a` broadcast over `b`'s as in ggml: b's
    dim must be a multiple of a's and consecutive b slices share an a slice (GQA).

        %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<5x64xf32>
        %k = op.mul_mat %wk, %x {act = "q8_K"} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
    """

    name = "op.mul_mat"
    act = opt_attr_def(StringAttr)
    act_order = opt_attr_def(DenseArrayBase)

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(len(a) >= 2 and len(b) >= 2, "op.mul_mat: operands must have rank >= 2")
        require(len(a) <= len(b), "op.mul_mat: lhs rank must not exceed rhs rank")
        require(dim_eq(a[-1], b[-1]), f"op.mul_mat: contraction dims differ: {fmt_shape(a)} vs {fmt_shape(b)}")
        require(can_repeat(a[:-2], b[:-2]), f"op.mul_mat: batch dims of {fmt_shape(a)} do not broadcast to {fmt_shape(b)}")
        expect = (*b[:-1], a[-2])
        require(shapes_eq(r, expect), f"op.mul_mat: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
        require(WeightTensor.verifies(self.lhs.type), f"op.mul_mat: lhs must be a float, integer or packed tensor, got {self.lhs.type}")
        check_float(self, self.rhs, "rhs")
        require(isinstance(elem_of(self.result), Float32Type), "op.mul_mat: result must be f32")
        self.verify_act(b[-1])


@irdl_op_definition
class MulMatIdOp(OpBase, QuantizedProduct):
    """MUL_MAT_ID (ggml_mul_mat_id(as, b, ids)): the routed experts' matrix products.

    `experts` [E, M, K] holds one weight per expert, stored [out, in] like any weight;
    `b` [T, Nb, K] holds the rows to multiply (Nb is 1, one row per token shared by its
    experts, or U, one row per expert slot); `ids` [T, U] i32 names the experts of each
    token. The result [T, U, M] is f32, with

        result[t, j] = experts[ids[t, j]] @ b[t, j % Nb]

    Only the routed experts are computed (the semantics is a gather, not a dense product).

        %g = op.mul_mat_id %w, %x, %ids {name = "ffn_moe_gate-0"} : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
    """

    name = "op.mul_mat_id"
    experts = operand_def(WeightTensor)
    b = operand_def(FloatTensor)
    ids = operand_def(IntTensor)
    result = result_def(FloatTensor)
    act = opt_attr_def(StringAttr)
    act_order = opt_attr_def(DenseArrayBase)
    traits = traits_def(Pure())

    assembly_format = (
        "$experts `,` $b `,` $ids attr-dict `:` type($experts) `,` type($b) `,` type($ids) `->` type($result)"
    )

    def verify_(self) -> None:
        check_mul_mat_id(self)
        self.verify_act(shape_of(self.b)[2])


def check_mul_mat_id(op) -> None:
    """MUL_MAT_ID's operand and result shapes (op.mul_mat_id_sharded's too)."""
    a, b, i, r = (shape_of(v) for v in (op.experts, op.b, op.ids, op.result))
    name = op.name
    require(len(a) == 3, f"{name}: the experts must be [E, M, K], got {fmt_shape(a)}")
    require(len(b) == 3, f"{name}: b must be [T, Nb, K], got {fmt_shape(b)}")
    require(len(i) == 2 and is_int(elem_of(op.ids), 32), f"{name}: the ids must be [T, U] i32, got {op.ids.type}")
    require(dim_eq(a[2], b[2]), f"{name}: contraction dims differ: {fmt_shape(a)} vs {fmt_shape(b)}")
    require(dim_eq(i[0], b[0]), f"{name}: ids {fmt_shape(i)} and b {fmt_shape(b)} must have one row per token")
    shared = DYNAMIC_INDEX in (b[1], i[1]) or (b[1] > 0 and i[1] % b[1] == 0)
    require(shared, f"{name}: the {fmt_shape(i[1:])} expert slots must be a multiple of b's {fmt_shape(b[1:2])} rows")
    expect = (i[0] if i[0] != DYNAMIC_INDEX else b[0], i[1], a[1])
    require(shapes_eq(r, expect), f"{name}: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
    require(isinstance(elem_of(op.result), Float32Type), f"{name}: result must be f32")


@irdl_op_definition
class TargetLogProbsOp(OpBase):
    """The log-probability of each row's target under the logits `x` w^T, fused: MUL_MAT by
    the output weight, a stable log-softmax over the vocabulary and the target's entry, in
    f32, without the [P, Vocab] logits (the kernel goes through the vocabulary in chunks
    with a running maximum and sum).

    `x` [P, H] (the final norm's output), `weight` [Vocab, H] (stored [out, in]), `targets`
    [P] (ids in [0, Vocab)); the result [P] f32:

        result[p] = z[p, targets[p]] - log(sum_v exp(z[p, v])),  z = x w^T

        %lp = op.target_log_probs %x, %w, %t : tensor<5x64xf32>, tensor<128x64xf32>, tensor<5xi64> -> tensor<5xf32>
    """

    name = "op.target_log_probs"
    x = operand_def(FloatTensor)
    weight = operand_def(WeightTensor)
    targets = operand_def(IntTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure())

    assembly_format = "$x `,` $weight `,` $targets attr-dict `:` type($x) `,` type($weight) `,` type($targets) `->` type($result)"

    def verify_(self) -> None:
        x, w, t, r = (shape_of(v) for v in (self.x, self.weight, self.targets, self.result))
        name = "op.target_log_probs"
        require(len(x) == 2 and len(w) == 2, f"{name}: x must be [P, H] and the weight [Vocab, H], got {fmt_shape(x)} and {fmt_shape(w)}")
        require(dim_eq(x[1], w[1]), f"{name}: x {fmt_shape(x)} and the weight {fmt_shape(w)} have different H")
        require(shapes_eq(t, x[:1]) and is_int(elem_of(self.targets)), f"{name}: targets must be an integer tensor<{fmt_shape(x[:1])}>, got {self.targets.type}")
        require(shapes_eq(r, x[:1]) and isinstance(elem_of(self.result), Float32Type),
                f"{name}: result must be tensor<{fmt_shape(x[:1])}xf32>, got {self.result.type}")
