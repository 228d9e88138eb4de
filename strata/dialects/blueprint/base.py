"""The abstract bases of the blueprint ops: the attributes every node may carry, and the
operand shapes the nodes share.

Every node may carry `node` (kbp-graph/v1's node id), `edges` (its results' ids), `precision`,
`steps`, `placement`, `effects` (state effects), `slots` (the state buffers those effects act
on) and `point` (its specialization point). A node that reads a weight names it with `weight "param"` (a
param name, as the op level's `op.param`; weights never enter the IR); a node that reads
several names them with `weights [...]`. Nodes that touch state declare memory effects
and list the effects they may carry (`STATE_EFFECTS`); every other node is `Pure`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, attr_def, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.blueprint.attrs import EdgeType, PlacementAttr, PrecisionAttr, StateEffectAttr, StepAttr
from strata.ir.checks import require


#: The process groups a blueprint collective may name (the op level's).
GROUPS = ("tp",)


def group_attrs(ranks: int, group: str = "tp") -> dict[str, Attribute]:
    return {"group": StringAttr(group), "ranks": IntegerAttr(ranks, i64)}


def rank_sharded(op: Operation) -> int | None:
    """The ranks of a node whose value depends on the rank (a collective, a vocabulary-split
    embed, the experts of whole experts per rank); None for any other node."""
    ranks = op.attributes.get("ranks")
    return int(ranks.value.data) if isinstance(ranks, IntegerAttr) else None


def check_group(op: Operation) -> None:
    """A rank-dependent node's `group` and `ranks`."""
    group, ranks = op.attributes.get("group"), op.attributes.get("ranks")
    if group is None and ranks is None:
        return
    require(isinstance(group, StringAttr) and group.data in GROUPS,
            f"{op.name}: 'group' must be one of {', '.join(GROUPS)}, got {group}")
    require(isinstance(ranks, IntegerAttr) and ranks.value.data >= 1,
            f"{op.name}: 'ranks' must be a number of ranks >= 1, got {ranks}")


def edge(value: SSAValue) -> EdgeType:
    assert isinstance(value.type, EdgeType)
    return value.type


def same_expr(a: str, b: str) -> bool:
    """Two dim expressions written alike (spacing and redundant brackets aside)."""
    from strata.ir.shapes import parse_expr

    return str(parse_expr(a)) == str(parse_expr(b))


class NodeOp(IRDLOperation):
    """Base of every blueprint node."""

    node = opt_attr_def(StringAttr)
    precision = opt_attr_def(PrecisionAttr)
    steps = opt_attr_def(ArrayAttr[StepAttr])
    placement = opt_attr_def(PlacementAttr)
    effects = opt_attr_def(ArrayAttr[StateEffectAttr])
    #: The ids of the node's results, in order (kbp-graph/v1's edge ids, `l0.gdn.xn`).
    edges = opt_attr_def(ArrayAttr[StringAttr])
    #: The node's specialization point (kbp-graph/v1's `point`: `{gate = "softplus", decay = "head"}`).
    point = opt_attr_def(DictionaryAttr)
    #: The state buffers the node's `effects` act on, one per effect (`cache_r_l0`); absent: the
    #: effects' own state names.
    slots = opt_attr_def(ArrayAttr[StringAttr])
    #: More weights whose rows follow the node's `weight "param"` (a merged projection: qkv + z).
    concat = opt_attr_def(ArrayAttr[StringAttr])

    #: The state effects this node may carry (empty: a pure node).
    STATE_EFFECTS: ClassVar[tuple[str, ...]] = ()
    #: The number of weights a `weights [...]` node names (0: it has no such list).
    WEIGHT_COUNT: ClassVar[int] = 0

    @property
    def reads_weight(self) -> bool:
        return "param" in self.attributes or "weights" in self.attributes

    def verify_(self) -> None:
        if self.effects is not None:
            for eff in self.effects.data:
                require(eff.effect.data in self.STATE_EFFECTS,
                        f"{self.name}: state effect '{eff.state.data}:{eff.effect.data}' is not one this node has"
                        + (f" (it may {', '.join(self.STATE_EFFECTS)})" if self.STATE_EFFECTS else " (it touches no state)"))
        if self.edges is not None:
            require(len(self.edges.data) == len(self.results),
                    f"{self.name}: {len(self.edges.data)} edge ids for {len(self.results)} results")
        if self.slots is not None:
            require(self.effects is not None and len(self.slots.data) == len(self.effects.data),
                    f"{self.name}: one slot per state effect")
        if self.concat is not None:
            require("param" in self.attributes, f"{self.name}: 'concat' extends a node's single weight")
        if self.point is not None:
            require(all(isinstance(v, StringAttr) for v in self.point.data.values()),
                    f"{self.name}: a point maps names to strings")
        if self.precision is not None and "weight" in self.precision.fields():
            require(self.reads_weight, f"{self.name}: a weight format on a node that reads no weight")
        if self.WEIGHT_COUNT:
            names = self.attributes["weights"]
            assert isinstance(names, ArrayAttr)
            require(len(names.data) == self.WEIGHT_COUNT,
                    f"{self.name}: takes {self.WEIGHT_COUNT} weights, got {len(names.data)}")
        check_group(self)
        self.verify_node()

    def verify_node(self) -> None:
        """The node's own checks (after the common ones)."""


def rowwise(op: NodeOp, src: SSAValue, result: SSAValue, same_dim: bool = False) -> None:
    """The result has the source's rows (and, if `same_dim`, its dim)."""
    s, r = edge(src), edge(result)
    require(same_expr(s.rows.data, r.rows.data),
            f"{op.name}: result rows '{r.rows.data}' must be the source's '{s.rows.data}'")
    if same_dim:
        require(same_expr(s.dim.data, r.dim.data),
                f"{op.name}: result dim '{r.dim.data}' must be the source's '{s.dim.data}'")


class UnaryNode(NodeOp):
    """One edge in, one out."""

    src = operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"


class WeightedStateNode(NodeOp):
    """One edge in, one out, reading one weight; not pure (the subclass declares its effects)."""

    param = attr_def(StringAttr)
    src = operand_def(EdgeType)
    result = result_def(EdgeType)

    assembly_format = "$src `weight` $param attr-dict `:` type($src) `->` type($result)"


class WeightedNode(WeightedStateNode):
    """One edge in, one out, reading one weight."""

    traits = traits_def(Pure())


class MultiWeightNode(NodeOp):
    """One edge in, one out, reading `WEIGHT_COUNT` weights."""

    weights = attr_def(ArrayAttr[StringAttr])
    src = operand_def(EdgeType)
    result = result_def(EdgeType)

    assembly_format = "$src `weights` $weights attr-dict `:` type($src) `->` type($result)"


class BinaryNode(NodeOp):
    """Two edges in, one out."""

    lhs = operand_def(EdgeType)
    rhs = operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"


class WeightedBinaryNode(NodeOp):
    """Two edges in, one out, reading one weight."""

    param = attr_def(StringAttr)
    lhs = operand_def(EdgeType)
    rhs = operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = (
        "$lhs `,` $rhs `weight` $param attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    )


class SplitNode(NodeOp):
    """One edge in, two out."""

    src = operand_def(EdgeType)
    first = result_def(EdgeType)
    second = result_def(EdgeType)
    traits = traits_def(Pure())

    assembly_format = "$src attr-dict `:` type($src) `->` type($first) `,` type($second)"
