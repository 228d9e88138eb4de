"""What convert-op-to-blueprint reads off an op-level function: its params by layer, the
uses of each value, the ops that merely move data, and the model's dims.

The op level is ggml's graph (`op.mul_mat` of an `op.param`, `op.rms_norm` then `op.mul`
by a norm weight, ...). A blueprint node covers one such subgraph; the recognisers in
`blocks.py` find each subgraph from its anchors: the params (named as llama.cpp names its
tensors, `blk.N.attn_q.weight`) and the ops that use them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O
from strata.errors import StrataError


class ConversionError(StrataError):
    """The op level holds a subgraph convert-op-to-blueprint does not know."""


#: Ops that only move or reshape data: a blueprint edge passes through them.
TRANSPARENT = (O.ReshapeOp, O.ViewOp, O.PermuteOp, O.TransposeOp, O.ContOp)

_LAYER_PARAM = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass
class OpGraph:
    """An op-level function, indexed."""

    fn: func.FuncOp
    params: dict[str, O.ParamOp] = field(default_factory=dict)
    layers: dict[int, dict[str, O.ParamOp]] = field(default_factory=lambda: defaultdict(dict))
    uses: dict[SSAValue, list[Operation]] = field(default_factory=lambda: defaultdict(list))
    #: every op.param of a name (a tied embedding is read twice)
    aliases: dict[str, list[O.ParamOp]] = field(default_factory=lambda: defaultdict(list))

    @staticmethod
    def of(fn: func.FuncOp) -> OpGraph:
        g = OpGraph(fn)
        for op in fn.body.block.ops:
            for v in op.operands:
                g.uses[v].append(op)
            if isinstance(op, O.ParamOp):
                name = op.tensor_name.data
                g.params.setdefault(name, op)
                g.aliases[name].append(op)
                m = _LAYER_PARAM.match(name)
                if m:
                    g.layers[int(m.group(1))][m.group(2)] = op
        return g

    # -- queries ------------------------------------------------------------------------------

    def users(self, value: SSAValue, kind: type[Operation] | tuple[type[Operation], ...]) -> list[Operation]:
        """The ops of `kind` using `value`, looking through data movement."""
        found: list[Operation] = []
        todo = [value]
        while todo:
            v = todo.pop()
            for op in self.uses.get(v, ()):
                if isinstance(op, kind):
                    found.append(op)
                elif isinstance(op, TRANSPARENT):
                    todo.extend(op.results)
        return found

    def user(self, value: SSAValue, kind, what: str) -> Operation:
        found = self.users(value, kind)
        if not found:
            raise ConversionError(f"convert-op-to-blueprint: no {what} uses '{_name(value)}'")
        return found[0]

    def reach(self, value: SSAValue, kind, what: str, depth: int = 12) -> Operation:
        """The first op of `kind` downstream of `value` (within `depth` ops, through any op)."""
        frontier = [value]
        for _ in range(depth):
            nxt = []
            for v in frontier:
                for op in self.uses.get(v, ()):
                    if isinstance(op, kind):
                        return op
                    nxt.extend(op.results)
            frontier = nxt
        raise ConversionError(f"convert-op-to-blueprint: no {what} after '{_name(value)}'")

    def mul_mat_of(self, param: O.ParamOp) -> O.MulMatOp:
        return self.user(param.result, O.MulMatOp, f"op.mul_mat of {param.tensor_name.data}")  # type: ignore[return-value]

    def normed(self, param: O.ParamOp) -> tuple[O.MulOp, O.RmsNormOp]:
        """A norm weight's `op.mul(op.rms_norm(x), w)`."""
        mul = self.user(param.result, O.MulOp, f"op.mul by {param.tensor_name.data}")
        norm = next((root_op(v) for v in mul.operands if isinstance(root_op(v), O.RmsNormOp)), None)
        if norm is None:
            raise ConversionError(f"convert-op-to-blueprint: {param.tensor_name.data} does not scale an op.rms_norm")
        return mul, norm  # type: ignore[return-value]

    def state_read(self, value: SSAValue) -> O.StateOp | None:
        """The `op.state` whose rows `value` is: through data movement and the sequence's
        row gather (`op.get_rows` of the state)."""
        while isinstance(value.owner, (*TRANSPARENT, O.GetRowsOp)):
            value = value.owner.operands[0]
        return value.owner if isinstance(value.owner, O.StateOp) else None


def root(value: SSAValue) -> SSAValue:
    """`value` with data movement peeled off."""
    while isinstance(value.owner, TRANSPARENT):
        value = value.owner.operands[0]
    return value


def root_op(value: SSAValue) -> Operation | None:
    owner = root(value).owner
    return owner if isinstance(owner, Operation) else None


def shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def float_attr(op: Operation, name: str) -> float:
    return float(op.attributes[name].value.data)  # type: ignore[attr-defined]


def int_attr(op: Operation, name: str) -> int:
    return int(op.attributes[name].value.data)  # type: ignore[attr-defined]


def _name(value: SSAValue) -> str:
    return value.name_hint or str(value.type)


class Dims:
    """The model's dims (kbp-graph/v1's symbols: hidden, q_heads, lin_k_dim, ...), each read off
    the op level once and checked wherever it is read again."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def set(self, name: str, value: int, where: str) -> int:
        old = self.values.setdefault(name, int(value))
        if old != value:
            raise ConversionError(f"convert-op-to-blueprint: dim '{name}' is {old} but {where} gives {value}")
        return old

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def eval(self, expr: str) -> int:
        from strata.ir.shapes import parse_expr

        return int(parse_expr(expr).evaluate(self.values))  # type: ignore[attr-defined]

    def check(self, expr: str, actual: int, where: str) -> str:
        """`expr` (a dim expression of the edge), checked against the op level's size."""
        if self.eval(expr) != actual:
            raise ConversionError(f"convert-op-to-blueprint: {where} has {actual} columns, "
                                  f"not {expr} = {self.eval(expr)}")
        return expr
