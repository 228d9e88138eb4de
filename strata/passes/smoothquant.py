"""smoothquant{alpha=0.5 ranges=FILE}: plan SmoothQuant's per-channel smoothing on the op level;
`strata.quant.smoothquant.smooth_weights` is the weight transform that carries the plan out.

SmoothQuant moves activation outliers into the weights: for a projection y = x W^T,
x_j / s_j times W[:, j] * s_j computes the same y. Here s is folded into the RMSNorm weight g
that feeds the projections (g_j / s_j), so the graph does not change at all: only weights do.
Hence the split (weights never enter the IR):

- the pass decides. On each op-level function it finds the smoothing groups: an RMSNorm weight
  (`op.mul %rms_norm, %g`) whose product feeds only projections (`op.mul_mat %W, %x`, W an
  `op.param`); q/k/v share one group (one s), gate/up another, the LM head the final norm's.
  It records them as `smoothquant.groups = [[norm, linear, ...], ...]` with `smoothquant.alpha`
  and `smoothquant.ranges` (the sha256 of `ranges=FILE`, from `strata calibrate`: required, for
  without ranges there is nothing to smooth by), after checking that the file has every
  linear's per-channel max|X| with K entries. A weight
  is left out (listed in `smoothquant.skipped` with the reason) when changing it would change
  something else: a norm weight or projection read elsewhere or through a conversion (a tied
  embedding, Qwen3.5's `1 + w`), a norm product with another consumer. o_proj and down_proj
  have no norm in front of them and are not smoothed.
- `smooth_weights(weights, groups, ranges, alpha)` computes, per group,

      max|W_j| = max over the group's projections and rows of |W[n, j]|, clamped at 1e-5
      s_j = max(max|X_j|^alpha / max|W_j|^(1 - alpha), 1e-5)

  (SmoothQuant's reference code, with max|X_j| from the ranges file, the max over the group's
  entries) and returns the changed tensors: g / s and each W * s (columns), float32. In exact
  arithmetic the model computes the same function; in f32 its logits move by rounding only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, FloatAttr, ModuleOp, StringAttr, f64

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir.ranges import read_ranges_document
from strata.passes.options import StrataPass

__all__ = ["SmoothQuantPass", "SmoothGroup", "SmoothQuantError", "groups_of", "plan_of", "read_ranges", "EPS"]

#: SmoothQuant's clamps: on max|W_j| and on s.
EPS = 1e-5


class SmoothQuantError(StrataError):
    """A SmoothQuant plan or ranges file that cannot be used."""


@dataclass(frozen=True)
class SmoothGroup:
    norm: str  # the RMSNorm weight's name (llama.cpp's)
    linears: tuple[str, ...]  # the projections it feeds, in program order


def _params_by_stored(fn: func.FuncOp) -> dict[str, list[O.ParamOp]]:
    out: dict[str, list[O.ParamOp]] = {}
    for op in fn.walk():
        if isinstance(op, O.ParamOp):
            out.setdefault(op.stored_name, []).append(op)
    return out


def _plain(p: O.ParamOp) -> bool:
    return p.conversion is None and p.source is None


def groups_of(fn: func.FuncOp) -> tuple[list[SmoothGroup], list[tuple[str, str]]]:
    """(the smoothing groups of an op-level function, [(weight, why it is left out)])."""
    params = _params_by_stored(fn)
    groups: list[SmoothGroup] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    order: dict[str, int] = {}  # a projection's place in program order
    for op in fn.walk():
        if isinstance(op, O.MulMatOp) and isinstance(op.operands[0].owner, O.ParamOp):
            order.setdefault(op.operands[0].owner.stored_name, len(order))
    for op in fn.walk():
        if not (isinstance(op, O.MulOp) and isinstance(op.operands[0].owner, O.RmsNormOp)
                and isinstance(op.operands[1].owner, O.ParamOp)):
            continue
        norm = op.operands[1].owner
        name = norm.stored_name
        if name in seen:
            continue
        seen.add(name)
        linears: list[str] = []
        why = None if _plain(norm) else "read through a conversion or from another tensor"
        for p in params[name]:  # every read of the norm weight must be such a product
            for use in p.result.uses:
                mul = use.operation
                if not (isinstance(mul, O.MulOp) and use.index == 1 and isinstance(mul.operands[0].owner, O.RmsNormOp)):
                    why = why or f"also read by {mul.name}"
                    continue
                for u in mul.result.uses:
                    mm = u.operation
                    if not (isinstance(mm, O.MulMatOp) and u.index == 1 and isinstance(mm.operands[0].owner, O.ParamOp)):
                        why = why or f"its product also feeds {mm.name}"
                        continue
                    w = mm.operands[0].owner
                    others = [q for q in params[w.stored_name] if any(
                        not (isinstance(x.operation, O.MulMatOp) and x.index == 0) for x in q.result.uses)]
                    if not _plain(w) or others:
                        why = why or f"projection '{w.tensor_name.data}' is read elsewhere or through a conversion"
                    elif w.stored_name not in linears:
                        linears.append(w.stored_name)
        if why is not None:
            skipped.append((name, why))
        elif linears:
            groups.append(SmoothGroup(name, tuple(sorted(linears, key=order.__getitem__))))
    return groups, skipped


def plan_of(fn: func.FuncOp) -> tuple[list[SmoothGroup], float]:
    """The groups and alpha the pass recorded on `fn`."""
    attr = fn.attributes.get("smoothquant.groups")
    alpha = fn.attributes.get("smoothquant.alpha")
    if not isinstance(attr, ArrayAttr) or not isinstance(alpha, FloatAttr):
        raise SmoothQuantError(f"@{fn.sym_name.data}: no SmoothQuant plan (run the smoothquant pass)")
    groups = [SmoothGroup(g.data[0].data, tuple(s.data for s in g.data[1:])) for g in attr.data]  # type: ignore[attr-defined]
    return groups, float(alpha.value.data)


def _check_ranges(groups: Sequence[SmoothGroup], ranges: Mapping[str, Any], shapes: Mapping[str, int],
                  label: str) -> None:
    linears = ranges.get("linears", {})
    for g in groups:
        for w in g.linears:
            row = linears.get(w)
            if row is None:
                raise SmoothQuantError(f"{label}: no calibration range for linear '{w}' (linears.{w})")
            if len(row["absmax"]) != shapes[w]:
                raise SmoothQuantError(f"{label}: linears.{w}.absmax has {len(row['absmax'])} channels, "
                                       f"the weight has K = {shapes[w]}")


@dataclass(frozen=True)
class SmoothQuantPass(StrataPass):
    """Record SmoothQuant's groups (norm weight -> projections) on every op-level function."""

    name = "smoothquant"

    alpha: float = 0.5
    ranges: str = ""

    def check(self) -> None:
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise SmoothQuantError(f"smoothquant: alpha must be in [0, 1], got {float(self.alpha)}")
        if not self.ranges:
            raise SmoothQuantError("smoothquant: give ranges=FILE, the activation ranges `strata calibrate` writes "
                                   "(SmoothQuant's scales come from them)")

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        self.check()
        alpha = float(self.alpha)
        ranges = read_ranges(self.ranges)
        digest = hashlib.sha256(Path(self.ranges).read_bytes()).hexdigest()
        for fn in module.walk():
            if not isinstance(fn, func.FuncOp) or not any(isinstance(o, O.MulMatOp) for o in fn.walk()):
                continue
            groups, skipped = groups_of(fn)
            shapes = {p.stored_name: p.result.type.get_shape()[-1] for p in fn.walk() if isinstance(p, O.ParamOp)}  # type: ignore[attr-defined]
            _check_ranges(groups, ranges, shapes, self.ranges)
            fn.attributes["smoothquant.alpha"] = FloatAttr(alpha, f64)
            fn.attributes["smoothquant.groups"] = ArrayAttr(
                [ArrayAttr([StringAttr(g.norm), *map(StringAttr, g.linears)]) for g in groups])
            if skipped:
                fn.attributes["smoothquant.skipped"] = ArrayAttr(
                    [ArrayAttr([StringAttr(n), StringAttr(why)]) for n, why in skipped])
            fn.attributes["smoothquant.ranges"] = StringAttr(digest)


def read_ranges(path: str | Path) -> dict[str, Any]:
    """A `strata calibrate` ranges file: the fields this pass reads, checked (one-line errors)."""
    p = Path(path)
    data = read_ranges_document(p, SmoothQuantError)
    linears = data.get("linears")
    if not isinstance(linears, dict):
        raise SmoothQuantError(f"{p}: field 'linears' is missing or not an object")
    for name, row in linears.items():
        amax = row.get("absmax") if isinstance(row, dict) else None
        if (not isinstance(amax, list) or not amax or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x >= 0 for x in amax)):
            raise SmoothQuantError(f"{p}: linears.{name}.absmax must be a non-empty list of finite numbers >= 0")
    return data
