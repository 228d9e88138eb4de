"""What convert-op-to-blueprint reads off an op-level function: the block instances its ops
were expanded from and their params, the uses of each value, the ops that merely move data,
and the model's dims.

The op level is ggml's graph (`op.mul_mat` of an `op.param`, `op.rms_norm` then `op.mul`
by a norm weight, ...). Each op records the module-level block instance it came from
(`op.block`: its kind, its module path and, for a param, its member; see
`strata.dialects.op.origin`). A blueprint node covers one subgraph; the recognisers in
`blocks.py` find each subgraph from its anchors: the params of an instance, found by the
instance's path and the member's name (`layers.3.attention.q_proj`, `weight`), which are
the block kinds' own and the same in every family, and the ops that use them. The params'
tensor names are the family's and only name the weights the nodes read.
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

#: An element of an array of the root's subs: a layer (`layers.3`).
_LAYER = re.compile(r"^([^.]+)\.(\d+)$")


@dataclass
class OpGraph:
    """An op-level function, indexed."""

    fn: func.FuncOp
    #: every op.param by its tensor name (the first, where a tied weight is read twice)
    params: dict[str, O.ParamOp] = field(default_factory=dict)
    uses: dict[SSAValue, list[Operation]] = field(default_factory=lambda: defaultdict(list))
    #: block instance path -> its kind, for every instance an op records
    kinds: dict[str, str] = field(default_factory=dict)
    #: block instance path -> member name -> the op.params of that member (usually one; a
    #: weight the converter splits, as in_proj_qkvz into qkv and z, gives several)
    members: dict[str, dict[str, list[O.ParamOp]]] = field(default_factory=lambda: defaultdict(dict))

    @staticmethod
    def of(fn: func.FuncOp) -> OpGraph:
        g = OpGraph(fn)
        for op in fn.body.block.ops:
            for v in op.operands:
                g.uses[v].append(op)
            origin = O.origin_of(op)
            if origin is not None:
                g.kinds.setdefault(origin.instance, origin.kind.data)
            if isinstance(op, O.ParamOp):
                g.params.setdefault(op.tensor_name.data, op)
                if origin is not None and origin.member_name is not None:
                    g.members[origin.instance].setdefault(origin.member_name, []).append(op)
        if not g.kinds:
            raise ConversionError(f"convert-op-to-blueprint: @{fn.sym_name.data} records no block instances "
                                  "(op.block); lower the model with convert-module-to-op")
        return g

    # -- the block instances ---------------------------------------------------------------

    def layers(self) -> list[tuple[int, str]]:
        """The layers (the elements of the root's array of subs, `layers.<i>`), in order."""
        found: dict[str, set[int]] = defaultdict(set)
        for path in self.kinds:
            m = _LAYER.match(".".join(path.split(".")[:2]))
            if m:
                found[m.group(1)].add(int(m.group(2)))
        if len(found) > 1:
            raise ConversionError("convert-op-to-blueprint: the model has several arrays of layers "
                                  f"({', '.join(sorted(found))})")
        return [(i, f"{name}.{i}") for name, indices in found.items() for i in sorted(indices)]

    def kind(self, path: str) -> str | None:
        """The kind of the instance at `path` (None: no op records it)."""
        return self.kinds.get(path)

    def params_of(self, path: str, member: str) -> list[O.ParamOp]:
        return self.members.get(path, {}).get(member, [])

    def param(self, path: str, member: str) -> O.ParamOp:
        """The op.param of member `member` of the instance at `path`."""
        found = self.params_of(path, member)
        if len(found) != 1:
            kind = self.kinds.get(path)
            if kind is None:
                raise ConversionError(f"convert-op-to-blueprint: no op comes from the block instance '{path}' "
                                      f"(for its param '{member}')")
            have = "no" if not found else f"{len(found)} op.params of"
            raise ConversionError(f"convert-op-to-blueprint: {path} ({kind}) has {have} param '{member}'")
        return found[0]

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
