"""epu-pack-projections: one output format for the w4a16 projections that read one value.

Quadric Chimera's pipeline packs q|k|v and gate|up into one `w4a16PackedProj<N, Frac, ...>` custom op, which writes
all N outputs in one FixedPoint32<Frac>. For every set of N >= 2 `fixed.matmul_w4a16` ops with
the same input, this pass sets each result's format to the smallest frac among them (the widest
range: no member's calibrated range is cut), and records the group on each op (`packed = N`).
Consumers read their operands' formats from the types, so they follow. Run it after
assign-frac-bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter

from strata.dialects import fixed as FX
from strata.passes.options import StrataPass


def pack_projections(module: ModuleOp) -> int:
    """Give the projections of each shared input one format; returns the number of groups."""
    groups: dict[SSAValue, list[FX.MatmulW4A16Op]] = {}
    for op in module.walk():
        if isinstance(op, FX.MatmulW4A16Op):
            groups.setdefault(op.src, []).append(op)
    count = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        count += 1
        frac = min(FX.frac_of(m.result) for m in members)
        for m in members:
            m.attributes["packed"] = IntegerAttr(len(members), i64)
            if FX.frac_of(m.result) != frac:
                t = m.result.type
                assert isinstance(t, TensorType)
                Rewriter.replace_value_with_new_type(m.result, TensorType(FX.FixedPointType(frac), t.get_shape()))
    for fn in module.walk():
        if isinstance(fn, func.FuncOp) and isinstance(fn.body.block.last_op, func.ReturnOp):
            fn.function_type = func.FunctionType.from_lists(fn.function_type.inputs.data,
                                                            [v.type for v in fn.body.block.last_op.operands])
    return count


@dataclass(frozen=True)
class EpuPackProjectionsPass(StrataPass):
    """The w4a16 projections of one input share the smallest of their formats."""

    name = "epu-pack-projections"

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        pack_projections(module)
