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
children without knowing which kinds they are. Every op an expansion creates records the
instance it was expanded from (`op.block`, see `strata.dialects.op.origin`): the graph
builder stamps the instance of the innermost `call`, `lo.param` the member too, and the host
inputs and the tables every layer shares are the model's (the root instance's).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, DictionaryAttr, IntegerAttr, StringAttr, TensorType, f32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from strata.dialects import module as M
from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.errors import StrataError
from strata.ir.dtypes import dtype_named
from strata.ir.ggml_types import ACTIVATION_TYPES, ggml_type
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


def stored_formats(model_op) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """The model's `ggml_formats` (ggml tensor name -> its GGUF block type) and
    `ggml_block_orders` (name -> the order of its blocked axis, see op.param), as a dict."""
    if not isinstance(model_op, M.ModelOp):
        return {}
    formats, orders = model_op.attributes.get("ggml_formats"), model_op.attributes.get("ggml_block_orders")
    if formats is None:
        return {}
    if not isinstance(formats, DictionaryAttr) or not all(isinstance(v, StringAttr) for v in formats.data.values()):
        raise LoweringError("convert-module-to-op: the model's ggml_formats must map tensor names to ggml type names")
    order_of = dict(orders.data) if isinstance(orders, DictionaryAttr) else {}
    return {name: (fmt.data, tuple(order_of[name].get_values()) if name in order_of else None)  # type: ignore[union-attr]
            for name, fmt in formats.data.items()}


class GraphBuilder:
    """Builds the op-level graph the way ggml does: ops are created first, then put in the
    block by `expand` (ggml_build_forward_expand), which appends a value's missing ancestors
    depth first, operands left to right. So the block's order is llama.cpp's node order,
    whatever order an expansion creates its ops in, and an op nothing expands (ggml leaves a
    tensor no output depends on out of its graph) is dropped by `finish`."""

    def __init__(self, block: Block, act_quant: bool = True):
        self.block = block
        self._created: list[Operation] = []
        #: The block instance whose expansion creates ops now (each op's `op.block`).
        self.origin: O.BlockOriginAttr | None = None
        #: Whether a product of a block-quantized weight quantizes its activations as ggml-cpu does.
        self.act_quant = act_quant

    def add(self, op: Operation, label: str | None = None) -> SSAValue:
        if label is not None:
            op.attributes["name"] = StringAttr(label)
        if self.origin is not None:
            op.attributes.setdefault(O.ORIGIN, self.origin)
        self._created.append(op)
        res = op.results[0]
        if label is not None:
            res.name_hint = value_hint(label)
        return res

    def expand(self, value: SSAValue) -> SSAValue:
        """Append `value`'s op and the ops it depends on that are not in the block yet, in
        ggml's depth-first order (operands left to right); returns `value`. Leaves (weights,
        inputs, state) are not nodes in ggml: each goes in just before its first user."""
        owner = value.owner
        if not self._pending(owner):
            return value
        stack: list[tuple[Operation, int]] = [(owner, 0)]
        while stack:  # iterative: a chain through every layer is deeper than Python's recursion
            op, i = stack[-1]
            if i < len(op.operands):
                stack[-1] = (op, i + 1)
                dep = op.operands[i].owner
                if self._pending(dep) and dep.operands:
                    stack.append((dep, 0))
                continue
            stack.pop()
            if self._pending(op):  # (an op reached twice on the stack goes in once)
                for operand in op.operands:
                    if self._pending(operand.owner):
                        self.block.add_op(operand.owner)
                self.block.add_op(op)
        return value

    @staticmethod
    def _pending(op: object) -> bool:
        return isinstance(op, Operation) and op.parent is None

    def finish(self) -> None:
        """Drop the ops no `expand` reached (latest first, so users go before what they use)."""
        for op in reversed(self._created):
            if op.parent is None:
                op.erase(safe_erase=False)
        self._created = []

    @staticmethod
    def rename(value: SSAValue, label: str) -> SSAValue:
        """ggml_set_name (llama.cpp's `cb`) on a value built earlier: the last name wins."""
        owner = value.owner
        assert isinstance(owner, Operation)
        owner.attributes["name"] = StringAttr(label)
        value.name_hint = value_hint(label)
        return value

    def unary(self, cls, x: SSAValue, shape, label=None, elem=None, **attrs) -> SSAValue:
        op = cls.create(operands=[x], result_types=[tensor(shape, elem or O.elem_of(x))], attributes=attrs)
        return self.add(op, label)

    def binary(self, cls, a: SSAValue, b: SSAValue, shape, label=None, elem=f32, **attrs) -> SSAValue:
        op = cls.create(operands=[a, b], result_types=[tensor(shape, elem)], attributes=attrs)
        return self.add(op, label)

    def mul_mat(self, w: SSAValue, x: SSAValue, label=None) -> SSAValue:
        ws, xs = O.shape_of(w), O.shape_of(x)
        return self.binary(O.MulMatOp, w, x, (*xs[:-1], ws[-2]), label, **self.activation_quant(w))

    def activation_quant(self, w: SSAValue) -> dict[str, Attribute]:
        """The `act` / `act_order` of a product of weight `w`: ggml-cpu quantizes the activation
        rows to the vec_dot_type of a block-quantized weight (`strata.ir.ggml_types`)."""
        param = w.owner
        if not self.act_quant or not isinstance(param, O.ParamOp) or param.format_name is None:
            return {}
        act = ggml_type(param.format_name).activation
        if act not in ACTIVATION_TYPES:  # Q8_1 (Q4_1, Q5_1): not emulated, float activations
            return {}
        attrs: dict[str, Attribute] = {"act": StringAttr(act)}
        if param.block_order is not None:
            attrs["act_order"] = param.block_order
        return attrs

    def reshape(self, x: SSAValue, shape, label=None) -> SSAValue:
        return self.unary(O.ReshapeOp, x, shape, label)

    def view(self, x: SSAValue, shape, label=None, offset: int = 0, strides: tuple[int, ...] | None = None,
             per_token: tuple[int, ...] | None = None) -> SSAValue:
        attrs: dict[str, Attribute] = {"offset": IntegerAttr(offset, i64)}
        if strides is not None:
            attrs["strides"] = DenseArrayBase.from_list(i64, strides)
        if per_token is not None and any(per_token):
            attrs["per_token"] = DenseArrayBase.from_list(i64, per_token)
        return self.unary(O.ViewOp, x, shape, label, **attrs)

    def permute(self, x: SSAValue, dims: tuple[int, ...], label=None) -> SSAValue:
        s = O.shape_of(x)
        return self.unary(O.PermuteOp, x, tuple(s[d] for d in dims), label, dims=DenseArrayBase.from_list(i64, dims))


@dataclass(frozen=True)
class CallPlan:
    """How the function of an entry that runs several sequences (or one, its rows' own way)
    meets its tokens: the N tokens of the call are one flat row of activations [N, H], and

    * `kv` says where attention finds K and V: "self" (the call's own; `writes`: also to the
      cache), "cache"
      (the contiguous cache of `batch` rows of `n_ctx` cells, written at each token's cell)
      or "paged" (the same cells seen as pages, read through a block table);
    * `streams` attention streams of `per_stream` tokens each see `n_kv` columns each
      (streams 1: one stream of every token, each token masked to its own sequence);
    * `state` says what the recurrent state does: "slots" (each of the call's `groups`
      sequences reads and writes a slot), "fresh" (each sequence starts from zero, nothing
      is kept);
    * `outputs`: the rows whose logits are returned (None: every token's).

    The host computes every input from the entry's arguments (`strata.semantics.host_inputs`,
    from the function's `op.call`)."""

    entry: str
    kv: str
    streams: int
    per_stream: int
    n_kv: int
    state: str
    groups: int
    outputs: int | None
    batch: int
    #: Whether the call's own K and V (kv "self") also go to the cache (prefill_slots).
    writes: bool = False

    @property
    def tokens(self) -> int:
        """N, the call's tokens (DYNAMIC_INDEX when dynamic)."""
        return DYNAMIC_INDEX if self.per_stream == DYNAMIC_INDEX else self.streams * self.per_stream


class Lowering:
    """The state of lowering one entry: where ops go, the call's sizes, and the leaves
    (host inputs, state buffers, constants) created once and shared by every block."""

    def __init__(self, block: Block, entry: str, tokens: int, n_ctx: int, n_kv: int, flash_attn: bool,
                 start: int = -1, ranks: int = 1, plan: CallPlan | None = None,
                 formats: dict[str, tuple[str, tuple[int, ...] | None]] | None = None,
                 act_quant: bool = True, kv_type: str | None = None):
        self.g = GraphBuilder(block, act_quant)
        #: The ranks of a tensor-parallel model (its `Shards`): each param may be a piece, read
        #: as the block's `tp_split` says, and the collectives join the ranks' results.
        self.ranks = ranks
        #: How an entry of several sequences meets its tokens; None: llama.cpp's graph of one
        #: sequence (prefill and decode of one row).
        self.plan = plan
        #: ggml tensor name -> (its ggml block type, its block order or None): the GGUF's own types.
        self.formats = formats or {}
        #: The KV cache's element type when not the model's (llama.cpp's default is f16).
        self.kv_type = kv_type
        self.entry = entry
        self.S = tokens  # the call's token count (DYNAMIC_INDEX when dynamic)
        self.start = start  # the call's first position (-1: known only at run time)
        self.n_ctx = n_ctx
        self.n_kv = n_kv
        self.flash_attn = flash_attn
        # The last layer of a multi-token prefill computes only the rows whose logits are
        # returned (llama.cpp's GET_ROWS by out_ids); a one-token call has nothing to drop.
        # The root block may say otherwise (`ggml_output_rows`, see CausalLM).
        self.prune = entry == "prefill" and tokens != 1 and plan is None
        #: The names llama.cpp gives the graph inputs (positions, k_rows, v_rows, out_ids,
        #: state_copy), stamped on the root block by the family; absent: llama.cpp's leaf_N.
        self.input_names: dict[str, str] = {}
        self._leaves: dict[Hashable, SSAValue] = {}
        self._root: O.BlockOriginAttr | None = None

    def input_name(self, key: str) -> str | None:
        """llama.cpp's name of the graph input `key` (positions, k_rows, v_rows, out_ids,
        state_copy), or None (an unnamed leaf, as llama.cpp's Qwen3-8B graph has)."""
        return self.input_names.get(key)

    @property
    def dynamic(self) -> bool:
        return self.S == DYNAMIC_INDEX

    def per_token(self, base: int, step: int) -> tuple[int, int]:
        """`base + step * T` as (static part, growth per token): folded when T is known."""
        return (base + step * self.S, 0) if not self.dynamic else (base, step)

    def view_t(self, x: SSAValue, shape, label: str | None = None, offset: tuple[int, int] = (0, 0),
               strides: list[tuple[int, int]] | None = None) -> SSAValue:
        """A view whose offset and strides may grow with the call's tokens T: each is a
        (base, per-token) pair, `base + per_token * T` (see `op.view`'s per_token)."""
        off = self.per_token(*offset)
        if strides is None:
            return self.g.view(x, shape, label, off[0], per_token=(off[1],))
        st = [self.per_token(*s) for s in strides]
        return self.g.view(x, shape, label, off[0], tuple(b for b, _ in st), (off[1], *(c for _, c in st)))

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
        outer = self.g.origin
        self.g.origin = origin = block_origin(inst)
        if self._root is None:
            self._root = origin
        try:
            return method(self, inst, *args, **kwargs)
        finally:  # what an entry builds after its model's call is the model's too
            self.g.origin = outer if outer is not None else origin

    @staticmethod
    def suffix(inst: BlockInstance) -> str:
        """llama.cpp's tensor-name suffix: `-<layer>` inside a layer, none outside."""
        layer = inst.layer
        return "" if layer is None else f"-{layer}"

    # -- leaves ---------------------------------------------------------------------------

    def once(self, key: Hashable, make, shared: bool = False) -> SSAValue:
        """The leaf for `key`, made by `make()` the first time it is asked for; a `shared` one
        (a host input, a table every layer reads) is the model's, whichever block asks first."""
        value = self._leaves.get(key)
        if value is None:
            outer = self.g.origin
            if shared and self._root is not None:
                self.g.origin = self._root
            try:
                value = self._leaves[key] = make()
            finally:
                self.g.origin = outer
        return value

    def param(self, inst: BlockInstance, name: str, *, convert: str | None = None,
              args: tuple[int, ...] | None = None, ggml: str | None = None,
              shape: tuple[int, ...] | None = None) -> SSAValue:
        """The weight `name` of `inst`, as an `op.param` with its llama.cpp name. Where
        llama.cpp's converter changes the tensor, `convert` (and `args`) say how (see
        `op.param`); `ggml` renames it (the stored tensor becomes the param's `source`) and
        `shape` gives the converted shape when the conversion changes it. In a tensor-parallel
        model it is this rank's piece where the plan says so (`tp_split`)."""
        t = inst.params.get(name)
        if t is None:
            raise LoweringError(f"convert-module-to-op: {inst.name} has no param '{name}'")
        split = tp_piece(inst, name, self.ranks)
        elem = dtype_named(t.dtype).attr
        if convert in ("plus_one", "neg_exp"):
            elem = f32  # computed in f32 and kept so, as llama.cpp's GGUF keeps such small tensors
        if convert == "squeeze" and shape is None:
            shape = tuple(d for d in t.shape if d != 1)
        label = ggml or t.ggml
        source = t.ggml if label != t.ggml else None
        fmt, order = self.formats.get(label, (None, None))
        op = O.ParamOp(label, tensor(shape or t.shape, elem), convert, args, source, split, fmt, order)
        op.attributes[O.ORIGIN] = block_origin(*_owner(inst, name))
        v = self.g.add(op)
        v.name_hint = value_hint(label)
        return v

    # -- collectives ------------------------------------------------------------------------

    def all_reduce(self, x: SSAValue, label: str | None = None) -> SSAValue:
        """The sum of the ranks' partial `x` (an `op.all_reduce` over the model's ranks)."""
        op = O.AllReduceOp.create(operands=[x], result_types=[x.type], attributes=O.group_attrs(self.ranks))
        return self.g.add(op, label)

    def all_gather(self, x: SSAValue, label: str | None = None) -> SSAValue:
        """The ranks' `x` joined along the last dim (an `op.all_gather`)."""
        shape = O.shape_of(x)
        attrs = O.group_attrs(self.ranks) | {"axis": IntegerAttr(len(shape) - 1, i64)}
        op = O.AllGatherOp.create(operands=[x], result_types=[tensor((*shape[:-1], shape[-1] * self.ranks),
                                                                     O.elem_of(x))], attributes=attrs)
        return self.g.add(op, label)


    def input(self, kind: str, shape: tuple[int, ...], elem: Attribute, hint: str, *,
              label: str | None = None, key: Hashable | None = None) -> SSAValue:
        """A host input (`op.input`), made once per `key` (default: kind and hint)."""

        def make() -> SSAValue:
            v = self.g.add(O.InputOp(kind, tensor(shape, elem), label))
            v.name_hint = hint
            return v

        return self.once(("input", key or (kind, hint)), make, shared=True)

    def state(self, name: str, shape: tuple[int, ...], elem: Attribute, recurrent: bool = False) -> SSAValue:
        """The persistent buffer `name` (`op.state`), made once; a `recurrent` one starts each
        sequence at 0."""

        def make() -> SSAValue:
            v = self.g.add(O.StateOp(name, tensor(shape, elem), recurrent))
            v.name_hint = value_hint(name)
            return v

        return self.once(("state", name), make)


def _owner(inst: BlockInstance, name: str) -> tuple[BlockInstance, str]:
    """The instance whose member param `name` of `inst` is, and the member's name: its own, or
    for a `tied` sub's weight the param it is tied to (lm_head's weight is embedding's), so that
    both reads of a tied weight are one param."""
    tied = inst.knob("tied")
    if name != "weight" or not isinstance(tied, StringAttr):
        return inst, name
    owner = inst
    while owner.parent is not None:
        owner = owner.parent
    *path, member = tied.data.split(".")
    node: BlockInstance | list[BlockInstance] = owner
    for segment in path:  # a sub by name, an element of an array by its index
        if isinstance(node, list):
            node = node[int(segment)] if segment.isdigit() and int(segment) < len(node) else None  # type: ignore[assignment]
        else:
            node = node.children.get(segment)  # type: ignore[assignment]
        if node is None:
            break
    if not isinstance(node, BlockInstance) or member not in node.params:
        raise LoweringError(f"convert-module-to-op: {inst.name}: tied to '{tied.data}', which is not a param of a "
                            "block instance")
    return node, member


def block_origin(inst: BlockInstance, member: str = "") -> O.BlockOriginAttr:
    """The `op.block` record of an op expanded from `inst` (of its member `member`)."""
    return O.BlockOriginAttr(inst.kind, inst.path, member)


def string_dict(inst: BlockInstance, attr: str) -> dict[str, str]:
    """A block attribute that maps names to strings (`{residual = "attn_residual"}`), as a dict;
    empty when the block has none."""
    a = inst.attr(attr)
    if a is None:
        return {}
    if not isinstance(a, DictionaryAttr) or not all(isinstance(v, StringAttr) for v in a.data.values()):
        raise LoweringError(f"convert-module-to-op: {inst.name}: attribute '{attr}' must map names to strings")
    return {k: v.data for k, v in a.data.items()}  # type: ignore[attr-defined]


def flag(inst: BlockInstance, attr: str) -> bool:
    """A block's flag attribute: present and not 0."""
    a = inst.attr(attr)
    return a is not None and not (isinstance(a, IntegerAttr) and a.value.data == 0)


#: A Linear's `tp_split` knob -> the dim of its weight and of its bias that is split.
_LINEAR_SPLITS = {"out": {"weight": 0, "bias": 0}, "in": {"weight": 1}, "vocab": {"weight": 0}}


def tp_piece(inst: BlockInstance, name: str, ranks: int) -> tuple[int, ...] | None:
    """op.param's `split` for param `name` of `inst` in a model of `ranks` ranks (None: whole):
    the param's own `tp_split` (an array [axis, pieces, parts...]), or, for a Linear's weight
    and bias and an embedding's table, the sub's `tp_split` knob (`out`, `in`, `vocab`) with its
    `tp_pieces` (default: the ranks) and `tp_parts`. The shard-tensor-parallel pass stamps them."""
    if ranks == 1:
        return None
    member = inst.block.member(name)
    own = member.attributes.get("tp_split") if member is not None else None
    if isinstance(own, DenseArrayBase):
        return tuple(int(v) for v in own.get_values())
    knob = inst.knob("tp_split")
    if not isinstance(knob, StringAttr):
        return None
    axis = _LINEAR_SPLITS.get(knob.data, {}).get(name)
    if axis is None:
        return None
    pieces = inst.knob("tp_pieces")
    parts = inst.knob("tp_parts")
    return (axis, pieces.value.data if isinstance(pieces, IntegerAttr) else ranks,
            *(parts.get_values() if isinstance(parts, DenseArrayBase) else ()))
