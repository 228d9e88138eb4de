"""The Gated DeltaNet nodes: gates, the causal conv's state update, its snapshot and the recurrence."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.base import NodeOp, WeightedStateNode, edge, rowwise, same_expr
from strata.ir.checks import require


@irdl_op_definition
class GdnGatesOp(NodeOp):
    """The decay and beta gates from the `ba` projection ([b | a]); weights A = -exp(A_log)
    (llama.cpp's ssm_a) and dt_bias: decay = softplus(a + dt_bias) * A (a log decay), beta = sigmoid(b).

        %decay, %beta = blueprint.gdn_gates %ba weights ["blk.0.ssm_a", "blk.0.ssm_dt.bias"] : !blueprint.edge<"n", "lin_v_heads*2", f32> -> !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>
    """

    name = "blueprint.gdn_gates"
    weights = attr_def(ArrayAttr[StringAttr])
    src = operand_def(EdgeType)
    decay = result_def(EdgeType)
    beta = result_def(EdgeType)
    traits = traits_def(Pure())
    WEIGHT_COUNT: ClassVar[int] = 2

    assembly_format = "$src `weights` $weights attr-dict `:` type($src) `->` type($decay) `,` type($beta)"

    def verify_node(self) -> None:
        rowwise(self, self.src, self.decay)
        rowwise(self, self.decay, self.beta, same_dim=True)


@irdl_op_definition
class Conv1dUpdateOp(WeightedStateNode):
    """The short causal conv over the mixed q/k/v rows, shifting the conv state
    (`conv:update`); the result is silu of the conv.

        %conv = blueprint.conv1d_update %qkvz weight "model.layers.0.linear_attn.conv1d.weight" {effects = [#blueprint.effect<conv:update>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
    """

    name = "blueprint.conv1d_update"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("update",)

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result)


@irdl_op_definition
class StateSnapshotOp(NodeOp):
    """Copy a state after the node that produced `src` into its snapshot slot (`conv:snapshot`),
    so that a rejected draft can roll back.

        blueprint.state_snapshot %conv {effects = [#blueprint.effect<conv:snapshot>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
    """

    name = "blueprint.state_snapshot"
    src = operand_def(EdgeType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("snapshot",)

    assembly_format = "$src attr-dict `:` type($src)"


@irdl_op_definition
class GdnRecurrenceOp(NodeOp):
    """The gated delta rule over the recurrent state h (`h:update`): per row, decay h,
    write beta-scaled k/v, read with q.

        %core = blueprint.gdn_recurrence %decay, %beta, %qkv {effects = [#blueprint.effect<h:update>]} : !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32>
    """

    name = "blueprint.gdn_recurrence"
    decay = operand_def(EdgeType)
    beta = operand_def(EdgeType)
    qkv = operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("update",)

    assembly_format = (
        "$decay `,` $beta `,` $qkv attr-dict `:` type($decay) `,` type($beta) `,` type($qkv) `->` type($result)"
    )

    def verify_node(self) -> None:
        rowwise(self, self.qkv, self.result)
        d, b = edge(self.decay), edge(self.beta)
        require(same_expr(d.dim.data, b.dim.data),
                f"blueprint.gdn_recurrence: decay dim '{d.dim.data}' and beta dim '{b.dim.data}' differ")
