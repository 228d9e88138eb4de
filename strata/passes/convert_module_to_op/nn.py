"""Op-level expansions of the standard layers: embedding, RMS norm, linear, SwiGLU MLP.

Each builds llama.cpp's subgraph with its tensor names; a caller passes the name of the
block's output (`attn_norm-0`, `Qcur-0`), the block adds its inner names (`norm-0`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, StringAttr, f64
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering, LoweringError
from strata.passes.convert_module_to_op.lowering import tensor as lo_tensor


def tp_split(inst: BlockInstance) -> str | None:
    """The instance's `tp_split` knob (see shard-tensor-parallel), or None."""
    knob = inst.knob("tp_split")
    return knob.data if isinstance(knob, StringAttr) else None


@EXPANSIONS.register("std.nn.embedding")
class Embedding:
    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, ids: SSAValue, label: str = "embd") -> SSAValue:
        table = lo.param(inst, "weight")
        shape = (O.shape_of(ids)[0], O.shape_of(table)[1])
        if tp_split(inst) != "vocab":
            return lo.g.binary(O.GetRowsOp, table, ids, shape, label)
        # Split by vocabulary: each rank looks up the ids in its rows, the sum joins them.
        op = O.GetRowsShardedOp.create(operands=[table, ids], result_types=[lo_tensor(shape)],
                                       attributes=O.group_attrs(lo.ranks))
        return lo.all_reduce(lo.g.add(op), label)


@EXPANSIONS.register("std.nn.norm")
class RmsNorm:
    """RMS_NORM then MUL by the weight: `norm-<il>`, then the caller's name. A zero-centred
    norm (`weight_offset` 1: x·rsqrt(mean x²+eps)·(1+w)) multiplies by 1 + w, which
    llama.cpp's converter bakes into the weight: the param converts (`plus_one`)."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, label: str | None = None) -> SSAValue:
        shape = O.shape_of(x)
        eps = FloatAttr(inst.float_attr("eps"), f64)
        normed = lo.g.unary(O.RmsNormOp, x, shape, "norm" + lo.suffix(inst), eps=eps)
        offset = inst.float_attr("weight_offset", 0.0)
        if offset not in (0.0, 1.0):
            raise LoweringError(f"convert-module-to-op: {inst.name}: weight_offset {offset} (only 0 or 1 are llama.cpp's)")
        weight = lo.param(inst, "weight", convert="plus_one" if offset else None)
        return lo.g.binary(O.MulOp, normed, weight, shape, label)


@EXPANSIONS.register("std.nn.gated_norm")
class GatedRmsNorm:
    """rms(x)·w·silu(z) over the last dim, as llama.cpp's build_norm_gated: RMS_NORM
    (`norm-<il>`), MUL by the (plain) weight, SILU of the gate, MUL."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, z: SSAValue) -> SSAValue:
        g, shape = lo.g, O.shape_of(x)
        eps = FloatAttr(inst.float_attr("eps"), f64)
        normed = g.binary(O.MulOp, g.unary(O.RmsNormOp, x, shape, "norm" + lo.suffix(inst), eps=eps),
                          lo.param(inst, "weight"), shape)
        return g.binary(O.MulOp, normed, g.unary(O.SiluOp, z, O.shape_of(z)), shape)


@EXPANSIONS.register("std.nn.linear")
class Linear:
    """MUL_MAT by the [out, in] weight, then ADD of the bias where the instance has one.

    Tensor-parallel knobs (stamped by shard-tensor-parallel): `tp_split` `out` (column
    parallel: the rank's rows of the weight and bias) or `in` (row parallel: its columns, a
    partial product); `tp_reduce`: the ranks' products summed before the bias (vLLM's
    RowParallelLinear); `tp_gather`: the ranks' outputs joined (a vocabulary-parallel head)."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, label: str | None = None) -> SSAValue:
        y = lo.g.mul_mat(lo.param(inst, "weight"), x, label)
        if lo.ranks > 1 and inst.knob("tp_reduce") is not None:
            y = lo.all_reduce(y, label)
        if "bias" in inst.params:
            y = lo.g.binary(O.AddOp, y, lo.param(inst, "bias"), O.shape_of(y), label)
        if lo.ranks > 1 and inst.knob("tp_gather") is not None:
            y = lo.all_gather(y, label)
        return y


@EXPANSIONS.register("std.nn.mlp")
class SwiGlu:
    """down(silu(gate(x)) * up(x)) as ffn_gate, ffn_up, ffn_swiglu and ffn_out (or the
    caller's name for the output: a shared expert's is `ffn_shexp`)."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, label: str | None = None) -> SSAValue:
        sfx = lo.suffix(inst)
        gate = lo.call(inst.child("gate"), "forward", x, label=f"ffn_gate{sfx}")
        up = lo.call(inst.child("up"), "forward", x, label=f"ffn_up{sfx}")
        act = lo.g.binary(O.SwigluOp, gate, up, O.shape_of(gate), f"ffn_swiglu{sfx}")
        return lo.call(inst.child("down"), "forward", act, label=label or f"ffn_out{sfx}")
