"""The attention nodes: the KV-cache write, paged attention, and the dense families' whole attention."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.base import MultiWeightNode, NodeOp, edge, rowwise, same_expr
from strata.ir.checks import require


@irdl_op_definition
class KvWriteOp(NodeOp):
    """Write the rows' keys and values into the KV cache (`k:write`, `v:write`).

        blueprint.kv_write %kr, %v {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>]} : !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
    """

    name = "blueprint.kv_write"
    k = operand_def(EdgeType)
    v = operand_def(EdgeType)
    traits = traits_def(MemoryWriteEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("write",)

    assembly_format = "$k `,` $v attr-dict `:` type($k) `,` type($v)"

    def verify_node(self) -> None:
        k, v = edge(self.k), edge(self.v)
        require(same_expr(k.rows.data, v.rows.data), "blueprint.kv_write: k and v rows differ")


@irdl_op_definition
class PagedAttentionOp(NodeOp):
    """Attention of the query rows over the paged KV cache (`k:read`, `v:read`); `k` and
    `v` are the rows just written, which order this read after the write.

        %a = blueprint.paged_attention %qr, %kr, %v {effects = [#blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
    """

    name = "blueprint.paged_attention"
    q = operand_def(EdgeType)
    k = operand_def(EdgeType)
    v = operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(MemoryReadEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("read",)

    assembly_format = (
        "$q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type($result)"
    )

    def verify_node(self) -> None:
        rowwise(self, self.q, self.result, same_dim=True)


@irdl_op_definition
class AttentionOp(MultiWeightNode):
    """A dense family's whole attention block: q, k, v projections, rope, the KV-cache
    write and read, and the output projection; weights q, k, v, o.

        %o = blueprint.attention %xn weights ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"] {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>, #blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.attention"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ("read", "write")
    WEIGHT_COUNT: ClassVar[int] = 4

    def verify_node(self) -> None:
        rowwise(self, self.src, self.result, same_dim=True)
