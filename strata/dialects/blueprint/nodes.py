"""The blueprint's row-wise nodes: embedding, norms, projections, element-wise ops and the head."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.blueprint.base import (
    BinaryNode,
    MultiWeightNode,
    NodeOp,
    SplitNode,
    UnaryNode,
    WeightedBinaryNode,
    WeightedNode,
    edge,
    rowwise,
    same_expr,
)
from strata.dialects.blueprint.attrs import EdgeType
from strata.ir.dtypes import has_kind
from strata.ir.checks import require


@irdl_op_definition
class EmbedOp(WeightedNode):
    """Gather the rows of the embedding table at the token ids.

        %h = blueprint.embed %tok weight "model.embed_tokens.weight" {node = "embed.embed"} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.embed"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)
        require(has_kind(edge(self.src).element, "int"), "blueprint.embed: token ids must be an integer edge")


class _NormNode(WeightedNode):
    """A norm: each row keeps its rows and dim."""

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result, same_dim=True)


@irdl_op_definition
class RmsNormOp(_NormNode):
    """RMS norm of each row, times the norm weight.

        %xn = blueprint.rms_norm %h weight "model.layers.0.input_layernorm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.rms_norm"


@irdl_op_definition
class FinalNormOp(_NormNode):
    """The model's last RMS norm, before the head.

        %xn = blueprint.final_norm %h weight "model.norm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.final_norm"


@irdl_op_definition
class QkNormOp(_NormNode):
    """RMS norm of each head of the query or key rows.

        %qn = blueprint.qk_norm %q weight "model.layers.3.self_attn.q_norm.weight" : !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
    """

    name = "blueprint.qk_norm"


@irdl_op_definition
class L2NormOp(UnaryNode):
    """L2 norm of the q and k heads of a Gated DeltaNet's mixed rows.

        %qkv = blueprint.l2_norm %conv : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
    """

    name = "blueprint.l2_norm"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result, same_dim=True)


@irdl_op_definition
class GatedRmsNormOp(WeightedBinaryNode):
    """RMS norm of the recurrence output (`rhs`), gated by silu of z taken from the
    projection (`lhs`).

        %g = blueprint.gated_rms_norm %qkvz, %core weight "model.layers.0.linear_attn.norm.weight" : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>, !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", bf16>
    """

    name = "blueprint.gated_rms_norm"

    def verify_node(self) -> None:
        rowwise(self, self.rhs, self.result, same_dim=True)


@irdl_op_definition
class LinearOp(WeightedNode):
    """A projection x @ W^T; `role` says which (kbp-graph/v1's `linear:qkvz`, `linear:o`, ...).

        %q = blueprint.linear %xn weight "model.layers.3.self_attn.q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim*2", bf16>
    """

    name = "blueprint.linear"
    role = attr_def(StringAttr)
    #: The projection's bias (a param name), added after the product.
    bias = opt_attr_def(StringAttr)

    assembly_format = "$src `weight` $param `role` $role attr-dict `:` type($src) `->` type($result)"

    def verify_node(self) -> None:
        require(self.role.data.isidentifier(), f"blueprint.linear: role must be a name, got '{self.role.data}'")
        rowwise(self, self.src, self.result)


@irdl_op_definition
class LmHeadOp(WeightedNode):
    """The output projection to the vocabulary.

        %logits = blueprint.lm_head %xn weight "lm_head.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "vocab", bf16>
    """

    name = "blueprint.lm_head"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)


@irdl_op_definition
class ArgmaxOp(UnaryNode):
    """The index of each row's largest value (greedy sampling).

        %tok = blueprint.argmax %logits : !blueprint.edge<"n", "vocab", bf16> -> !blueprint.edge<"n", "1", i32>
    """

    name = "blueprint.argmax"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)
        r = edge(self.result)
        require(has_kind(r.element, "int") and same_expr(r.dim.data, "1"),
                "blueprint.argmax: the result must be one integer per row")


@irdl_op_definition
class ResidualAddOp(BinaryNode):
    """The residual add: both edges and the result have the same rows and dim.

        %y = blueprint.residual_add %h, %o : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.residual_add"

    def verify_node(self) -> None:
        rowwise(self, self.lhs, self.result, same_dim=True)
        rowwise(self, self.rhs, self.result, same_dim=True)


@irdl_op_definition
class SigmoidGateMulOp(BinaryNode):
    """sigmoid(gate) * x, the gated attention's output gate (`lhs` is the gate).

        %ag = blueprint.sigmoid_gate_mul %gate, %a : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
    """

    name = "blueprint.sigmoid_gate_mul"

    def verify_node(self) -> None:
        rowwise(self, self.lhs, self.result, same_dim=True)
        rowwise(self, self.rhs, self.result, same_dim=True)


@irdl_op_definition
class SiluMulOp(UnaryNode):
    """silu(gate) * up over the two halves of each row.

        %act = blueprint.silu_mul %gu : !blueprint.edge<"n*top_k", "moe_inter*2", bf16> -> !blueprint.edge<"n*top_k", "moe_inter", f32>
    """

    name = "blueprint.silu_mul"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)


@irdl_op_definition
class SplitOp(SplitNode):
    """Split each row in two: the gated attention's query and gate, de-interleaved per head (results q, gate).

        %q, %gate = blueprint.split %qg : !blueprint.edge<"n", "q_heads*head_dim*2", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16>
    """

    name = "blueprint.split"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.first)
        rowwise(self, self.src, self.second)


@irdl_op_definition
class RopeOp(NodeOp):
    """Rotary position embedding of the query and key rows.

        %qr, %kr = blueprint.rope %qn, %kn : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
    """

    name = "blueprint.rope"
    q = operand_def(EdgeType)
    k = operand_def(EdgeType)
    q_out = result_def(EdgeType)
    k_out = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = (
        "$q `,` $k attr-dict `:` type($q) `,` type($k) `->` type($q_out) `,` type($k_out)"
    )

    def verify_node(self) -> None:
        rowwise(self, self.q, self.q_out, same_dim=True)
        rowwise(self, self.k, self.k_out, same_dim=True)


@irdl_op_definition
class SwigluFfnOp(MultiWeightNode):
    """A dense SwiGLU feed-forward block: down(silu(gate(x)) * up(x)); weights gate, up, down.

        %f = blueprint.swiglu_ffn %xn weights ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"] : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.swiglu_ffn"
    traits = traits_def(Pure())
    WEIGHT_COUNT: ClassVar[int] = 3

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result, same_dim=True)
