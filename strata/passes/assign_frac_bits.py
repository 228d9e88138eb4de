"""assign-frac-bits{headroom=2 ranges=FILE}: set every fixed op's result format from calibration
ranges, by Quadric Chimera's FixedPoint32 rules, and record the range it came from.

For each `fixed` compute op carrying `node` (in program order), with max|y| = max(|min|, |max|)
of its calibrated range:

    integer bits  I = ceil(log2 max|y|)          (exact: 8 -> 3, 8.1875 -> 4, 0.75 -> 0)
    frac          F = 31 - I - headroom          matmul outputs (fixed.matmul_w4a16: Chimera's
                                                 w4a16 outputs, IMF_HEADROOM)
                  F = 31 - I                     every other op (element-wise, norms, embedding,
                                                 rope, softmax, attention, dequantization)

then F is clamped to at most 31 (a range below 1 needs no integer bit; max|y| = 0 gives 31).
F < 0 is an error naming the op, its tensor and its range: the model overflows int32 under that
headroom. An exact power of two 2^I gets I integer bits, as Chimera gives [0, 1] frac 31: its
largest value, 2^I - 2^-F, saturates the top of the range by one LSB.

How ranges map to ops: an op's `node` is a key of the ranges file's `tensors` (`strata
calibrate`'s keys: the op level's printed value names, `Qcur-0_2`, `ffn_out-1`, `11`). A `node`
that is no key names a llama.cpp tensor (`Qcur-0`): the last tensor of that `name` in the file
(program order) is used, the value the name ends up holding (`Qcur-0` -> its rope, `Qcur-0_2`).
A node with neither is an error naming it and the file.

The pass sets each result's element type to `!fixed.fp32<F>` (consumers read their operands'
formats from the types, so they follow), writes `range = [min, max]` on the op, updates each
function's result types, and records `fixed.headroom` and `fixed.ranges` (the file's sha256) on
the function. `range_table(module)` prints Chimera's range table (op, range, frac) from that IR;
`strata-opt -p 'assign-frac-bits{...}' -t fixed-range-table` prints it too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, f64, i64
from xdsl.ir import Operation
from xdsl.rewriter import Rewriter

from strata.dialects import fixed as FX
from strata.errors import StrataError
from strata.ir.ranges import read_ranges_document
from strata.passes.options import StrataPass

MAX_FRAC = FX.MAX_FRAC


class FracBitsError(StrataError):
    """A ranges file or a range that cannot give a FixedPoint32 format."""


def integer_bits(absmax: float) -> int:
    """ceil(log2 absmax), exactly, for absmax > 0."""
    m, e = math.frexp(absmax)  # absmax = m * 2^e, m in [0.5, 1)
    return e - 1 if m == 0.5 else e


def frac_bits(lo: float, hi: float, headroom: int = 0) -> int:
    """Chimera's frac for a tensor in [lo, hi]: 31 - ceil(log2 max|y|) - headroom, at most 31;
    negative when the range does not fit (the caller reports it)."""
    a = max(abs(lo), abs(hi))
    if a == 0:
        return MAX_FRAC
    return min(MAX_FRAC, 31 - integer_bits(a) - headroom)


def read_tensor_ranges(path: str | Path) -> dict[str, Any]:
    """A `strata calibrate` file's `tensors` (checked; one-line errors naming the file)."""
    p = Path(path)
    data = read_ranges_document(p, FracBitsError)
    tensors = data.get("tensors")
    if not isinstance(tensors, dict):
        raise FracBitsError(f"{p}: field 'tensors' is missing or not an object")
    for key, row in tensors.items():
        ok = isinstance(row, dict) and all(
            isinstance(row.get(f), (int, float)) and not isinstance(row.get(f), bool) for f in ("min", "max"))
        if not ok:
            raise FracBitsError(f"{p}: tensors.{key} needs numbers 'min' and 'max'")
    return tensors


def lookup_range(tensors: Mapping[str, Any], node: str) -> tuple[str, float, float] | None:
    """(the key used, min, max) of `node`: a key, else the last tensor named `node`."""
    row = tensors.get(node)
    key = node
    if row is None:
        named = [(k, r) for k, r in tensors.items() if r.get("name") == node]
        if not named:
            return None
        key, row = named[-1]
    return key, float(row["min"]), float(row["max"])


def _retype(op: Operation, frac: int) -> None:
    t = op.results[0].type
    assert isinstance(t, TensorType)
    Rewriter.replace_value_with_new_type(op.results[0], TensorType(FX.FixedPointType(frac), t.get_shape()))


def check_headroom(headroom: int) -> int:
    """The headroom of the w4a16 outputs' formats: 0 to 31 bits."""
    if isinstance(headroom, bool) or not isinstance(headroom, int) or not 0 <= headroom <= 31:
        raise FracBitsError(f"assign-frac-bits: headroom must be an integer in 0..31, got {headroom!r}")
    return headroom


def assign(module: ModuleOp, tensors: Mapping[str, Any], headroom: int, source: str = "the ranges") -> None:
    """Set the formats of `module`'s fixed ops from `tensors` (see the module docstring)."""
    check_headroom(headroom)
    for op in module.walk():
        if not isinstance(op, FX.FixedOp) or op.node is None:
            continue
        node = op.node.data
        found = lookup_range(tensors, node)
        if found is None:
            raise FracBitsError(f"assign-frac-bits: {source} has no range for tensor '{node}' ({op.name})")
        _, lo, hi = found
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise FracBitsError(f"assign-frac-bits: {source}: tensor '{node}' ({op.name}) has range [{lo}, {hi}], "
                                "not a finite [min, max]")
        room = headroom if isinstance(op, FX.MATMUL_OPS) else 0
        frac = frac_bits(lo, hi, room)
        if frac < 0:
            raise FracBitsError(
                f"assign-frac-bits: {op.name} '{node}': range [{lo:g}, {hi:g}] needs "
                f"{integer_bits(max(abs(lo), abs(hi)))} integer bits + {room} headroom, more than FixedPoint32's 31")
        _retype(op, frac)
        op.attributes["range"] = ArrayAttr([FloatAttr(lo, f64), FloatAttr(hi, f64)])
    for fn in module.walk():
        if isinstance(fn, func.FuncOp) and fn.body.blocks:
            ret = fn.body.block.last_op
            if isinstance(ret, func.ReturnOp):
                fn.function_type = func.FunctionType.from_lists(fn.function_type.inputs.data,
                                                                [v.type for v in ret.operands])


@dataclass(frozen=True)
class AssignFracBitsPass(StrataPass):
    """Set every fixed op's result format from the calibration ranges (Chimera's FixedPoint32 rules)."""

    name = "assign-frac-bits"

    headroom: int = 2
    ranges: str = ""

    def check(self) -> None:
        if not self.ranges:
            raise FracBitsError("assign-frac-bits: needs ranges=FILE (from `strata calibrate`)")
        check_headroom(self.headroom)

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        self.check()
        tensors = read_tensor_ranges(self.ranges)
        assign(module, tensors, self.headroom, self.ranges)
        digest = hashlib.sha256(Path(self.ranges).read_bytes()).hexdigest()
        for fn in module.walk():
            if isinstance(fn, func.FuncOp):
                fn.attributes["fixed.headroom"] = IntegerAttr(self.headroom, i64)
                fn.attributes["fixed.ranges"] = StringAttr(digest)


# ---------------------------------------------------------------------------------------------
# The range table

HEADERS = ("Source name", "Op", "Output 0 Range", "Output 0 Frac Bits", "Output 1 Range", "Output 1 Frac Bits")


def _num(x: float) -> str:
    return f"{x:g}f"


def range_rows(module: ModuleOp) -> list[tuple[str, str, str, str, str, str]]:
    """One row per fixed op that has a calibrated range, in program order."""
    rows = []
    for op in module.walk():
        if isinstance(op, FX.FixedOp) and op.node is not None and op.calibrated is not None:
            lo, hi = (f.value.data for f in op.calibrated.data)
            rows.append((op.node.data, op.name, f"[{_num(lo)}, {_num(hi)}]", str(FX.frac_of(op.results[0])), "N/A", "N/A"))
    return rows


def range_table(module: ModuleOp) -> str:
    """Chimera's range table: a header line, dashes under each column, one line per op; columns
    as wide as their widest cell, two spaces apart, left-aligned."""
    rows = range_rows(module)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADERS)]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(HEADERS), "  ".join("-" * w for w in widths), *map(line, rows)]) + "\n"
