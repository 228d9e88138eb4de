"""Instantiate a `module.model`: the tree of block instances with concrete dims and names.

Walks the blocks from the root, binding each sub's generic arguments in its parent's
environment (`Linear<H, (Heads / Shards) * HeadDim, T>` with H=4096, ...), expanding arrays
(`[DecoderLayer<...>; Layers]`) and honouring instance knobs: an optional param exists only
where the sub asks for it (`bias`), a `tied` sub's weight is the param it names and not a
new one.

Every param and state instance gets its module path (`layers.3.attention.q_proj.weight`)
and its llama.cpp and HF names, joined from the `ggml` / `hf` segments the family stamped
on the subs and params (see `strata.dialects.module`). This tree is the one source of a
model's tensors: the module interpreter, `convert-module-to-op`, the listing, the weight
store's name map and the random checkpoints all read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute

from strata.dialects import module as M
from strata.errors import StrataError
from strata.ir.shapes import Expr, ShapeSyntaxError, parse_block_generics, parse_sub_type, parse_tensor_type


class InstanceError(StrataError):
    """A module.model whose block tree cannot be instantiated."""


@dataclass(frozen=True)
class TensorInstance:
    """A param or state of one block instance."""

    path: str  # layers.3.attention.q_proj.weight
    kind: str  # "param" or "state"
    ggml: str  # blk.3.attn_q.weight
    hf: str  # model.layers.3.self_attn.q_proj.weight
    shape: tuple[int, ...]
    dtype: str  # an element type name of strata.ir.dtypes (f32, bf16, ...)
    #: For a tied param (lm_head tied to the embedding): the HF name it would have untied,
    #: which a checkpoint may still hold as a copy.
    tied_from: str | None = None
    #: Stored in pieces: `hf` holds `*` for each index of the first dim, and `hf_merged` is
    #: the alternative `name:part/parts` (see module.param).
    hf_merged: str | None = None


@dataclass(eq=False)
class BlockInstance:
    """One instance of a block: its bound generics, tensors and children."""

    block: M.BlockOp
    path: str  # "" for the root
    env: dict[str, int | str]
    sub: M.SubOp | None
    parent: BlockInstance | None
    index: int | None = None  # the position in an array sub
    count: int | None = None  # the length of that array
    ggml_prefix: tuple[str, ...] = ()
    hf_prefix: tuple[str, ...] = ()
    params: dict[str, TensorInstance] = field(default_factory=dict)
    state: dict[str, TensorInstance] = field(default_factory=dict)
    children: dict[str, BlockInstance | list[BlockInstance]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.block.kind

    @property
    def name(self) -> str:
        return self.path or self.block.block_name

    def child(self, name: str) -> BlockInstance:
        c = self.children.get(name)
        if not isinstance(c, BlockInstance):
            raise InstanceError(f"{self.name} ({self.kind}): no sub-block '{name}'")
        return c

    def array(self, name: str) -> list[BlockInstance]:
        c = self.children.get(name)
        if not isinstance(c, list):
            raise InstanceError(f"{self.name} ({self.kind}): no array of sub-blocks '{name}'")
        return c

    def has(self, name: str) -> bool:
        return name in self.children or name in self.params

    def dim(self, name: str) -> int:
        v = self.env.get(name)
        if not isinstance(v, int):
            raise InstanceError(f"{self.name} ({self.kind}): generic '{name}' is not a bound dimension")
        return v

    def attr(self, name: str) -> Attribute | None:
        return self.block.attributes.get(name)

    def float_attr(self, name: str, default: float | None = None) -> float:
        a = self.attr(name)
        if isinstance(a, (FloatAttr, IntegerAttr)):
            return float(a.value.data)
        if default is None:
            raise InstanceError(f"{self.name} ({self.kind}): block @{self.block.block_name} needs a number '{name}'")
        return default

    def str_attr(self, name: str, default: str | None = None) -> str | None:
        a = self.attr(name)
        return a.data if isinstance(a, StringAttr) else default

    def knob(self, name: str) -> Attribute | None:
        """An instance knob: an attribute of the sub that made this instance (`bias`, `tied`)."""
        return self.sub.attributes.get(name) if self.sub is not None else None

    @property
    def layer(self) -> int | None:
        """The index of the nearest enclosing array element (the layer number)."""
        inst: BlockInstance | None = self
        while inst is not None:
            if inst.index is not None:
                return inst.index
            inst = inst.parent
        return None

    def walk(self) -> Iterator[BlockInstance]:
        yield self
        for c in self.children.values():
            for inst in c if isinstance(c, list) else [c]:
                yield from inst.walk()

    def tensors(self) -> Iterator[TensorInstance]:
        """Every param and state instance of this subtree, in declaration order."""
        for inst in self.walk():
            yield from inst.params.values()
            yield from inst.state.values()


# A model repeats the same type texts in every layer: parse each text once.
@lru_cache(maxsize=4096)
def _tensor(text: str):
    return parse_tensor_type(text)


@lru_cache(maxsize=4096)
def _sub(text: str):
    return parse_sub_type(text)


@lru_cache(maxsize=1024)
def _generics(items: tuple[str, ...]):
    return tuple(parse_block_generics(list(items)))


def _default(g) -> int | str:
    return int(g.default) if g.default.isdigit() else g.default


def _eval(expr: Expr | str, env: dict[str, int | str], where: str) -> int | str:
    if isinstance(expr, Expr) and expr.op == "name":
        name = expr.args[0]
        if name not in env:
            raise InstanceError(f"{where}: unbound name '{name}'")
        return env[name]
    try:
        assert isinstance(expr, Expr)
        return expr.evaluate({k: v for k, v in env.items() if isinstance(v, int)})
    except ShapeSyntaxError as e:
        raise InstanceError(f"{where}: {e}") from None


def _bind(block: M.BlockOp, args, env: dict[str, int | str], where: str) -> dict[str, int | str]:
    """The child block's environment from positional args evaluated in the parent's."""
    generics = _generics(tuple(g.data for g in block.generics.data))
    if len(args) > len(generics):
        raise InstanceError(f"{where}: {len(args)} arguments for the {len(generics)} generics of {block.block_name}")
    child: dict[str, int | str] = {}
    for i, g in enumerate(generics):
        if i < len(args):
            child[g.name] = _eval(args[i], env, where)
        elif g.default is not None:
            child[g.name] = _default(g)
        else:
            raise InstanceError(f"{where}: generic '{g.name}' of {block.block_name} is not bound")
    return child


def _dims(text: str, env: dict[str, int | str], where: str) -> tuple[tuple[int, ...], str]:
    t = _tensor(text)
    shape = []
    for d in t.dims:
        v = _eval(d, env, where)
        if not isinstance(v, int) or v <= 0:
            raise InstanceError(f"{where}: dim '{d}' of {text} is {v}, not a positive size")
        shape.append(v)
    return tuple(shape), str(env.get(t.dtype, t.dtype))


def _join(prefix: tuple[str, ...], segment: str) -> tuple[str, ...]:
    return prefix + (segment,) if segment else prefix


def root_env(model: M.ModelOp, bind: dict[str, int] | None = None) -> dict[str, int | str]:
    """The root block's generics: `bind` (dims a caller sets: Batch, PageSize, ...), the
    model's bindings, then the defaults."""
    root = model.block(model.root.data)
    if root is None:
        raise InstanceError(f"model @{model.sym_name.data}: no root block")
    env: dict[str, int | str] = {}
    for name, value in model.generics.data.items():
        env[name] = value.value.data if isinstance(value, IntegerAttr) else str(value)
    generics = _generics(tuple(s.data for s in root.generics.data))
    dims = {g.name for g in generics if g.kind == "Dim"}
    for name, value in (bind or {}).items():
        if name not in dims:
            raise InstanceError(f"model @{model.sym_name.data}: '{name}' is not a dim generic of the root block")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InstanceError(f"model @{model.sym_name.data}: generic '{name}' must be a positive size, got {value!r}")
        env[name] = value
    for g in generics:
        if g.name not in env:
            if g.default is None:
                raise InstanceError(f"model @{model.sym_name.data}: generic '{g.name}' is not bound")
            env[g.name] = _default(g)
    return env


def instantiate(model: M.ModelOp, bind: dict[str, int] | None = None) -> BlockInstance:
    """The model's tree of block instances, rooted at its root block (with the root's dim
    generics in `bind` set to those values, over the model's own bindings)."""
    root_block = model.block(model.root.data)
    if root_block is None:
        raise InstanceError(f"model @{model.sym_name.data}: no root block")
    root = BlockInstance(root_block, "", root_env(model, bind), None, None)
    _fill(model, root)
    by_path = {t.path: t for t in root.tensors()}
    for inst in root.walk():
        _tie(inst, by_path)
    return root


def _fill(model: M.ModelOp, inst: BlockInstance) -> None:
    prefix = inst.path + "." if inst.path else ""
    for m in inst.block.members():
        path = prefix + m.member_name
        if isinstance(m, M.ParamOp):
            if m.optional is not None and inst.knob(m.member_name) is None:
                continue  # an optional param (a bias) exists where the sub asks for it
            shape, dtype = _dims(m.type_text, inst.env, path)
            merged = ".".join(_join(inst.hf_prefix, m.hf_merged.data)) if m.hf_merged is not None else None
            inst.params[m.member_name] = TensorInstance(
                path, "param", ".".join(_join(inst.ggml_prefix, m.name_segment("ggml"))),
                ".".join(_join(inst.hf_prefix, m.name_segment("hf"))), shape, dtype, hf_merged=merged)
        elif isinstance(m, M.StateOp):
            shape, dtype = _dims(m.type_text, inst.env, path)
            inst.state[m.member_name] = TensorInstance(
                path, "state", ".".join(_join(inst.ggml_prefix, m.name_segment("ggml"))),
                ".".join(_join(inst.hf_prefix, m.name_segment("hf"))), shape, dtype)
        elif isinstance(m, M.SubOp):
            sub = _sub(m.type_text)
            kinds = []
            for kind, args in sub.alternatives:
                block = model.block(kind)
                if block is None:
                    raise InstanceError(f"{path}: no block named '{kind}'")
                kinds.append((block, _bind(block, args, inst.env, path)))
            ggml = _join(inst.ggml_prefix, m.name_segment("ggml"))
            hf = _join(inst.hf_prefix, m.name_segment("hf"))
            if sub.count is None:
                block, env = kinds[0]
                child = BlockInstance(block, path, env, m, inst, ggml_prefix=ggml, hf_prefix=hf)
                _fill(model, child)
                inst.children[m.member_name] = child
                continue
            n = _eval(sub.count, inst.env, path)
            if not isinstance(n, int) or n < 0:
                raise InstanceError(f"{path}: array count {sub.count} is not a size")
            pattern = list(m.pattern.get_values()) if m.pattern is not None else [0] * n
            if len(pattern) != n:
                raise InstanceError(f"{path}: pattern has {len(pattern)} entries for an array of {n}")
            items = []
            for i in range(n):
                block, env = kinds[pattern[i]]
                child = BlockInstance(block, f"{path}.{i}", env, m, inst, i, n, ggml + (str(i),), hf + (str(i),))
                _fill(model, child)
                items.append(child)
            inst.children[m.member_name] = items


def _tie(inst: BlockInstance, by_path: dict[str, TensorInstance]) -> None:
    """A `tied` sub's weight is the param it names (lm_head -> embedding.weight)."""
    tied = inst.knob("tied")
    if not isinstance(tied, StringAttr) or "weight" not in inst.params:
        return
    own = inst.params["weight"]
    target = by_path.get(tied.data)
    if target is None or target.kind != "param":
        raise InstanceError(f"{inst.name}: tied to '{tied.data}', which is not a param of the model")
    if target.shape != own.shape:
        raise InstanceError(f"{inst.name}: tied to '{tied.data}' of shape {list(target.shape)}, "
                            f"but its weight has shape {list(own.shape)}")
    inst.params["weight"] = TensorInstance(own.path, "param", target.ggml, target.hf, own.shape, own.dtype,
                                           tied_from=own.hf)


def model_params(model: M.ModelOp) -> dict[str, TensorInstance]:
    """Every distinct param of the model by its ggml name (tied params once), in order."""
    out: dict[str, TensorInstance] = {}
    for t in instantiate(model).tensors():
        if t.kind == "param" and t.tied_from is None:
            out[t.ggml] = t
    return out


def find_model(module) -> M.ModelOp:
    """The one `module.model` of a builtin.module."""
    models = [o for o in module.ops if isinstance(o, M.ModelOp)]
    if len(models) != 1:
        raise InstanceError(f"expected one module.model, found {len(models)}")
    return models[0]
