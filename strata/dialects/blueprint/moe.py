"""The mixture-of-experts nodes: router, top-k, the routed experts' projections and the blend."""

from __future__ import annotations

from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def, var_operand_def
from xdsl.traits import Pure

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.base import NodeOp, SplitNode, WeightedBinaryNode, WeightedNode, edge, rowwise
from strata.ir.dtypes import has_kind
from strata.ir.checks import require


@irdl_op_definition
class RouterOp(WeightedNode):
    """The router's logits, one per expert.

        %logits = blueprint.router %xn weight "model.layers.0.mlp.gate.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "experts", bf16>
    """

    name = "blueprint.router"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)


@irdl_op_definition
class TopKOp(SplitNode):
    """The top-k experts of each row: their softmax weights and their ids.

        %w, %ids = blueprint.top_k %logits : !blueprint.edge<"n", "experts", bf16> -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", i32>
    """

    name = "blueprint.top_k"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.first)
        rowwise(self, self.first, self.second, same_dim=True)
        require(has_kind(edge(self.second).element, "int"), "blueprint.top_k: expert ids must be an integer edge")


class _ExpertNode(WeightedBinaryNode):
    """A routed expert projection: `lhs` are the rows, `rhs` the expert ids [n, top_k]."""

    def verify_(self) -> None:
        require(has_kind(edge(self.rhs).element, "int"), f"{self.name}: expert ids must be an integer edge")
        super().verify_()


@irdl_op_definition
class ExpertGateUpOp(_ExpertNode):
    """The gate and up projections of each row's top-k experts (one output row per slot).

        %egu = blueprint.expert_gate_up %xn, %ids weight "model.layers.0.mlp.experts.gate_up_proj" : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "moe_inter*2", bf16>
    """

    name = "blueprint.expert_gate_up"


@irdl_op_definition
class ExpertDownOp(_ExpertNode):
    """The down projection of each slot's expert.

        %ed = blueprint.expert_down %act, %ids weight "model.layers.0.mlp.experts.down_proj" : !blueprint.edge<"n*top_k", "moe_inter", f32>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "hidden", bf16>
    """

    name = "blueprint.expert_down"

    def verify_node(self) -> None:
        rowwise(self, self.lhs, self.result)


@irdl_op_definition
class BlendOp(NodeOp):
    """The MoE output: the top-k weighted sum of the experts' rows, plus, when the block has
    a shared expert, the shared expert's row scaled by sigmoid of its gate (`shared` is then
    that row and the gate; without a shared expert it is empty).

        %f = blueprint.blend %w, %ed, %sd, %sg : !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n*top_k", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "hidden", bf16>
        %f2 = blueprint.blend %w, %ed : !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n*top_k", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.blend"
    weights = operand_def(EdgeType)
    experts = operand_def(EdgeType)
    shared = var_operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = (
        "$weights `,` $experts (`,` $shared^)? attr-dict `:` type($weights) `,` type($experts)"
        " (`,` type($shared)^)? `->` type($result)"
    )

    def verify_node(self) -> None:
        rowwise(self, self.weights, self.result)
        require(len(self.shared) in (0, 2), "blueprint.blend: the shared part is a row and its gate, or nothing")
        if self.shared:
            rowwise(self, self.shared[0], self.result, same_dim=True)
            rowwise(self, self.shared[1], self.result)
