"""The collectives of a tensor-parallel blueprint: the nodes by which its ranks join their parts,
with their cost, and the mark of a node whose value depends on the rank.

A sharded blueprint (convert-op-to-blueprint of a `shard-tensor-parallel` op level, the function
carrying `blueprint.ranks`) is one SPMD program: every rank runs the same groups, each on its
own piece of the weights (the weight table's `split`). Its edges' dims are a rank's (`q_heads`
is the rank's heads); `ranks` is a dim symbol too, so that the vocabulary-split logits are
`vocab / ranks` wide before their all-gather.

Each collective names its `group` ("tp") and `ranks`, and carries `bytes_per_row`: the bytes
one rank sends per row of its edge on a ring (all-reduce: 2 (ranks - 1) / ranks of the row,
all-gather: (ranks - 1) pieces), in its wire format (the node's `output` precision once
assigned, else its edge's element). A call of R rows moves R times that.

A node whose value depends on the rank without exchanging anything (a vocabulary-split
`embed`, the expert nodes of whole experts per rank) carries `group` and `ranks` too
(`rank_sharded`); its semantics reads the rank (see the node's docstring).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr
from xdsl.irdl import irdl_op_definition, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.base import GROUPS, NodeOp, check_group, edge, group_attrs, rank_sharded, rowwise, same_expr
from strata.ir.checks import require
from strata.ir.dtypes import dtype_named
from strata.ir.shapes import parse_expr

def _collective_verify(op: NodeOp) -> None:
    require("group" in op.attributes and "ranks" in op.attributes, f"{op.name}: needs 'group' and 'ranks'")
    check_group(op)
    per_row = op.attributes.get("bytes_per_row")
    require(per_row is None or (isinstance(per_row, IntegerAttr) and per_row.value.data >= 0),
            f"{op.name}: 'bytes_per_row' must be a byte count, got {per_row}")


@irdl_op_definition
class AllReduceOp(NodeOp):
    """The sum over the ranks of each rank's partial rows (after a row-split projection); every
    rank gets the sum.

        %o = blueprint.all_reduce %p {group = "tp", ranks = 2 : i64, bytes_per_row = 4096 : i64} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.all_reduce"
    src = operand_def(EdgeType)
    result = result_def(EdgeType)
    bytes_per_row = opt_attr_def(IntegerAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"

    def verify_node(self) -> None:
        _collective_verify(self)
        rowwise(self, self.src, self.result, same_dim=True)


@irdl_op_definition
class AllGatherOp(NodeOp):
    """Each row joined from the ranks' pieces, rank 0's first (the vocabulary-split logits):
    the result's dim is `ranks` times the source's.

        %l = blueprint.all_gather %p {group = "tp", ranks = 2 : i64, bytes_per_row = 96 : i64} : !blueprint.edge<"n", "vocab / ranks", bf16> -> !blueprint.edge<"n", "vocab", bf16>
    """

    name = "blueprint.all_gather"
    src = operand_def(EdgeType)
    result = result_def(EdgeType)
    bytes_per_row = opt_attr_def(IntegerAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"

    def verify_node(self) -> None:
        _collective_verify(self)
        rowwise(self, self.src, self.result)
        piece, whole = edge(self.src).dim.data, edge(self.result).dim.data
        require(same_expr(piece, f"({whole}) / ranks") or same_expr(whole, f"({piece}) * ranks"),
                f"blueprint.all_gather: the source dim '{piece}' must be the result's '{whole}' / ranks")


COLLECTIVE_NODES = (AllReduceOp, AllGatherOp)


def wire_bytes(op: NodeOp, dims: dict[str, int]) -> int:
    """The bytes one rank sends per row of a collective (see the module docstring), in the node's
    output format if it has one, else in its edge's element type."""
    ranks = rank_sharded(op) or 1
    p = op.precision.fields() if op.precision is not None else {}
    fmt = p.get("output")
    elem = fmt.elem.data if fmt is not None else str(edge(op.results[0]).element)
    size = dtype_named(elem).numpy.itemsize
    width = int(parse_expr(edge(op.results[0]).dim.data).evaluate({**dims, "ranks": ranks}))  # type: ignore[attr-defined]
    if isinstance(op, AllReduceOp):
        return 2 * (ranks - 1) * width * size // ranks
    return (ranks - 1) * (width // ranks) * size


__all__ = ["GROUPS", "COLLECTIVE_NODES", "AllReduceOp", "AllGatherOp", "check_group", "group_attrs", "rank_sharded", "wire_bytes"]
