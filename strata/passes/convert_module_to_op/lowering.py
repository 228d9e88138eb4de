"""The machinery of convert-module-to-op: the graph builder, the per-run lowering state and
the registry of block-kind expansions.

An expansion is registered per block kind (the block's `path`) and has one method per
block function it expands (`forward`, `prefill`, `decode`, ...):

    @EXPANSIONS.register("std.nn.linear")
    class Linear:
        @staticmethod
        def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, label: str | None = None) -> SSAValue:
            ...

`lo.call(child, "forward", x)` dispatches on the child's kind, so a block composes its
children without knowing which kinds they are.
"""

from __future__ import annotations

from collections.abc import Hashable

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, StringAttr, TensorType, f32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.errors import StrataError
from strata.ir.dtypes import dtype_named
from strata.ir.impls import Implementations

#: block kind (path) -> its expansion (a class with one static method per function).
EXPANSIONS: Implementations[type] = Implementations("convert-module-to-op")


class LoweringError(StrataError):
    """A module.model that convert-module-to-op cannot expand."""


def tensor(shape: tuple[int, ...], elem: Attribute = f32) -> TensorType:
    return TensorType(elem, shape)


def value_hint(label: str) -> str:
    """An SSA name hint for a ggml tensor name (`Qcur-0` -> `Qcur-0`, `a b` -> `a_b`)."""
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in label)


class GraphBuilder:
    """Appends op-level ops to a block; each helper returns the new value."""

    def __init__(self, block: Block):
        self.block = block

    def add(self, op: Operation, label: str | None = None) -> SSAValue:
        if label is not None:
            op.attributes["name"] = StringAttr(label)
        self.block.add_op(op)
        res = op.results[0]
        if label is not None:
            res.name_hint = value_hint(label)
        return res

    def unary(self, cls, x: SSAValue, shape, label=None, elem=None, **attrs) -> SSAValue:
        op = cls.create(operands=[x], result_types=[tensor(shape, elem or O.elem_of(x))], attributes=attrs)
        return self.add(op, label)

    def binary(self, cls, a: SSAValue, b: SSAValue, shape, label=None, elem=f32, **attrs) -> SSAValue:
        op = cls.create(operands=[a, b], result_types=[tensor(shape, elem)], attributes=attrs)
        return self.add(op, label)

    def mul_mat(self, w: SSAValue, x: SSAValue, label=None) -> SSAValue:
        ws, xs = O.shape_of(w), O.shape_of(x)
        return self.binary(O.MulMatOp, w, x, (*xs[:-1], ws[-2]), label)

    def reshape(self, x: SSAValue, shape, label=None) -> SSAValue:
        return self.unary(O.ReshapeOp, x, shape, label)

    def view(self, x: SSAValue, shape, label=None, offset: int = 0) -> SSAValue:
        return self.unary(O.ViewOp, x, shape, label, offset=IntegerAttr(offset, i64))

    def permute(self, x: SSAValue, dims: tuple[int, ...], label=None) -> SSAValue:
        s = O.shape_of(x)
        return self.unary(O.PermuteOp, x, tuple(s[d] for d in dims), label, dims=DenseArrayBase.from_list(i64, dims))


class Lowering:
    """The state of lowering one entry: where ops go, the call's sizes, and the leaves
    (host inputs, state buffers, constants) created once and shared by every block."""

    def __init__(self, block: Block, entry: str, tokens: int, n_ctx: int, n_kv: int, flash_attn: bool):
        self.g = GraphBuilder(block)
        self.entry = entry
        self.S = tokens  # the call's token count (DYNAMIC_INDEX when dynamic)
        self.n_ctx = n_ctx
        self.n_kv = n_kv
        self.flash_attn = flash_attn
        # The last layer of a multi-token prefill computes only the rows whose logits are
        # returned (llama.cpp's GET_ROWS by out_ids); a one-token call has nothing to drop.
        self.prune = entry == "prefill" and tokens != 1
        self._leaves: dict[Hashable, SSAValue] = {}

    # -- dispatch -------------------------------------------------------------------------

    def call(self, inst: BlockInstance, fn: str, *args, **kwargs) -> SSAValue:
        """Expand function `fn` of block instance `inst` on `args`."""
        expansion = EXPANSIONS.get(inst.kind)
        if expansion is None:
            raise LoweringError(f"convert-module-to-op: block @{inst.block.block_name} has kind '{inst.kind}', "
                                f"which has no op-level expansion (known: {', '.join(sorted(EXPANSIONS.keys()))})")
        method = getattr(expansion, fn, None)
        if method is None:
            raise LoweringError(f"convert-module-to-op: block kind '{inst.kind}' has no expansion of '{fn}'")
        return method(self, inst, *args, **kwargs)

    @staticmethod
    def suffix(inst: BlockInstance) -> str:
        """llama.cpp's tensor-name suffix: `-<layer>` inside a layer, none outside."""
        layer = inst.layer
        return "" if layer is None else f"-{layer}"

    # -- leaves ---------------------------------------------------------------------------

    def once(self, key: Hashable, make) -> SSAValue:
        """The leaf for `key`, made by `make()` the first time it is asked for."""
        value = self._leaves.get(key)
        if value is None:
            value = self._leaves[key] = make()
        return value

    def param(self, inst: BlockInstance, name: str) -> SSAValue:
        """The weight `name` of `inst`, as an `op.param` with its llama.cpp name."""
        t = inst.params.get(name)
        if t is None:
            raise LoweringError(f"convert-module-to-op: {inst.name} has no param '{name}'")
        v = self.g.add(O.ParamOp(t.ggml, tensor(t.shape, dtype_named(t.dtype).attr)))
        v.name_hint = value_hint(t.ggml)
        return v

    def input(self, kind: str, shape: tuple[int, ...], elem: Attribute, hint: str, *,
              label: str | None = None, key: Hashable | None = None) -> SSAValue:
        """A host input (`op.input`), made once per `key` (default: kind and hint)."""

        def make() -> SSAValue:
            v = self.g.add(O.InputOp(kind, tensor(shape, elem), label))
            v.name_hint = hint
            return v

        return self.once(("input", key or (kind, hint)), make)

    def state(self, name: str, shape: tuple[int, ...], elem: Attribute) -> SSAValue:
        """The persistent buffer `name` (`op.state`), made once."""

        def make() -> SSAValue:
            v = self.g.add(O.StateOp(name, tensor(shape, elem)))
            v.name_hint = value_hint(name)
            return v

        return self.once(("state", name), make)
