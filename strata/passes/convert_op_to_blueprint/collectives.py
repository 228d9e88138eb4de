"""The collectives of a tensor-parallel op level, as blueprint nodes (see
`strata.dialects.blueprint.collective`): where the op level sums its ranks' partial rows
(`op.all_reduce` after a row-split projection or a sparse FFN) or joins their pieces
(`op.all_gather` of the vocabulary-split logits), the blueprint gets a node of the same
collective on the edge that stands for that value, its cost (`bytes_per_row`) read off the
edge's element type until a precision recipe gives it a wire format.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Operation, SSAValue

from strata.dialects import blueprint as B
from strata.dialects import op as O
from strata.dialects.blueprint.base import group_attrs
from strata.dialects.blueprint.collective import wire_bytes
from strata.passes.convert_op_to_blueprint.graph import ConversionError


def ranks_of(em) -> int:
    """The ranks of the op-level function being converted (1: not sharded)."""
    r = em.graph.fn.attributes.get("op.ranks")
    return int(r.value.data) if r is not None else 1  # type: ignore[attr-defined]


def sharded_attrs(em) -> dict:
    """The `group` and `ranks` of a node whose value depends on the rank ({} unsharded)."""
    return group_attrs(ranks_of(em)) if ranks_of(em) > 1 else {}


def _collective(em, cls: type[B.NodeOp], blk: str, name: str, x: SSAValue, dim: str, out: str) -> SSAValue:
    t = B.base.edge(x)
    (y,) = em.node(cls, blk, name, [x], [(out, t.rows.data, dim, t.element)], **group_attrs(ranks_of(em)))
    y.owner.attributes["bytes_per_row"] = IntegerAttr(wire_bytes(y.owner, em.dims.values), i64)
    return y


def _sums(em, start: Operation, depth: int) -> bool:
    """Whether an `op.all_reduce` is among the ops downstream of `start`, within `depth` ops
    (the caller's bound keeps it inside the block)."""
    seen, frontier = {start}, [start]
    for _ in range(depth):
        nxt = []
        for op in frontier:
            for r in op.results:
                for user in em.graph.uses.get(r, ()):
                    if isinstance(user, O.AllReduceOp):
                        return True
                    if user not in seen:
                        seen.add(user)
                        nxt.append(user)
        frontier = nxt
    return False


def reduced(em, blk: str, at: Operation, x: SSAValue, out: str = "sum", depth: int = 4) -> SSAValue:
    """`x` summed over the ranks where the op level sums `at`'s result (an `op.all_reduce`
    within `depth` ops of it); `x` itself otherwise."""
    if ranks_of(em) == 1 or not _sums(em, at, depth):
        return x
    if "bias" in x.owner.attributes:  # the ranks would each add it: the bias goes after the sum
        raise ConversionError(f"convert-op-to-blueprint: {blk}: a row-split projection with a bias (its "
                              "all-reduce comes before the bias) has no blueprint node")
    return _collective(em, B.AllReduceOp, blk, "all_reduce", x, B.base.edge(x).dim.data, out)


def gathered(em, blk: str, at: Operation, x: SSAValue, whole: str) -> SSAValue:
    """`x`'s pieces joined into `whole` columns where the op level gathers `at`'s result."""
    if not em.graph.users(at.results[0], O.AllGatherOp):
        return x
    return _collective(em, B.AllGatherOp, blk, "all_gather", x, whole, "gathered")
