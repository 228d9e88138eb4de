"""The `blueprint` dialect: fused kernel groups with precision, placement and state effects (kbp-graph/v1).

A blueprint is a graph of semantic nodes (kbp-graph/v1's `op`: `blueprint.rms_norm`,
`blueprint.linear` with its role, `blueprint.gdn_recurrence`, ...) joined by edges. Edges
are SSA values of type `!blueprint.edge<rows, dim, element>` whose rows and dim are
symbolic dim expressions kept as written (`"n*top_k"`, `"hidden"`). What a node decides
is in typed attributes (`strata.dialects.blueprint.attrs`): its `precision` (weight,
activation, output and accumulator `#blueprint.format`s), `steps`, `placement` (host or
device) and state `effects` (`#blueprint.effect<conv:update>`). A node that reads a
weight names it (`weight "param"`); weights never enter the IR. Nodes that touch state
(conv1d_update, state_snapshot, gdn_recurrence, kv_write, paged_attention, attention)
declare memory effects; the others are `Pure`.

Fused kernels are `blueprint.group` region ops carrying their fusion rule and placement;
a group yields the edges it hands on, and groups do not nest.

A blueprint function carries its model's facts as typed attributes (`strata.dialects.
blueprint.facts`): `blueprint.dims` (`#blueprint.dims<hidden = 2048, ...>`, the sizes of the
edges' dim symbols) and `blueprint.weights` (how each weight is read from the store).

Files by theme: `attrs`, `facts` (the function's dims and weight table), `base` (bases and
shared checks), `nodes` (row-wise nodes and the head), `gdn`, `moe`, `attention`, `sampling`
(the sampler, `blueprint.sample`), `group`, `collective` (a tensor-parallel blueprint's
all-reduce and all-gather, and their cost).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from strata.dialects.blueprint.attention import AttentionOp, KvWriteOp, PagedAttentionOp
from strata.dialects.blueprint.attrs import (
    ATTRIBUTES,
    EdgeType,
    FormatAttr,
    PlacementAttr,
    PrecisionAttr,
    StateEffectAttr,
    StepAttr,
)
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint.collective import COLLECTIVE_NODES, AllGatherOp, AllReduceOp, rank_sharded, wire_bytes
from strata.dialects.blueprint.facts import ATTRIBUTES as FACT_ATTRIBUTES
from strata.dialects.blueprint.facts import (
    DimsAttr,
    WeightRead,
    WeightReadAttr,
    WeightsAttr,
    function_dims,
    function_weights,
)
from strata.dialects.blueprint.gdn import Conv1dUpdateOp, GdnGatesOp, GdnRecurrenceOp, StateSnapshotOp
from strata.dialects.blueprint.group import GroupOp, YieldOp
from strata.dialects.blueprint.moe import BlendOp, ExpertDownOp, ExpertGateUpOp, RouterOp, TopKOp
from strata.dialects.blueprint.sampling import SampleOp
from strata.dialects.blueprint.nodes import (
    ArgmaxOp,
    EmbedOp,
    FinalNormOp,
    GatedRmsNormOp,
    L2NormOp,
    LinearOp,
    LmHeadOp,
    QkNormOp,
    ResidualAddOp,
    RmsNormOp,
    RopeOp,
    SigmoidGateMulOp,
    SiluMulOp,
    SplitOp,
    SwigluFfnOp,
)

NODE_OPS: list[type[NodeOp]] = [
    EmbedOp, RmsNormOp, LinearOp, GdnGatesOp, Conv1dUpdateOp, StateSnapshotOp, L2NormOp,
    GdnRecurrenceOp, GatedRmsNormOp, ResidualAddOp, RouterOp, TopKOp, ExpertGateUpOp, SiluMulOp,
    ExpertDownOp, BlendOp, SplitOp, QkNormOp, RopeOp, KvWriteOp, PagedAttentionOp,
    SigmoidGateMulOp, FinalNormOp, LmHeadOp, ArgmaxOp, SwigluFfnOp, AttentionOp, SampleOp, AllReduceOp,
    AllGatherOp,
]

Blueprint = Dialect("blueprint", [*NODE_OPS, GroupOp, YieldOp], [*ATTRIBUTES, *FACT_ATTRIBUTES])

__all__ = [
    "NODE_OPS", "Blueprint", "EdgeType", "FormatAttr", "PlacementAttr", "PrecisionAttr",
    "StateEffectAttr", "StepAttr", "DimsAttr", "WeightRead", "WeightReadAttr", "WeightsAttr", "function_dims",
    "function_weights", "GroupOp", "YieldOp", "COLLECTIVE_NODES", "rank_sharded", "wire_bytes", *[c.__name__ for c in NODE_OPS],
]
