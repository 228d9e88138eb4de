"""Instantiate a `module.model`: every param and state instance with a concrete shape.

Walks the blocks from the root, binding each sub's generic arguments in its parent's
environment (`Linear<H, (Heads / Shards) * HeadDim, T>` with H=4096, ...), expanding
arrays (`[DecoderLayer<...>; Layers]`) and honouring instance knobs: an optional
param exists only where the sub asks for it (`bias`), a `tied` sub's weight is the
tied param and not a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from xdsl.dialects.builtin import IntegerAttr

from strata.dialects import module as M
from strata.ir.shapes import Expr, ShapeSyntaxError, parse_block_generics, parse_sub_type, parse_tensor_type

class InstanceError(ValueError):
    pass


@dataclass(frozen=True)
class Instance:
    """A param or state of one block instance: `layers.3.attention.q_proj.weight`."""

    path: str
    kind: str  # "param" or "state"
    shape: tuple[int, ...]
    dtype: str


# A model repeats the same type texts in every layer: parse each text once.
@lru_cache(maxsize=4096)
def _tensor(text: str):
    return parse_tensor_type(text)


@lru_cache(maxsize=4096)
def _sub(text: str):
    kind, args, count = parse_sub_type(text)
    return kind, tuple(args), count


@lru_cache(maxsize=1024)
def _generics(items: tuple[str, ...]):
    return tuple(parse_block_generics(list(items)))


def _root_env(model: M.ModelOp) -> dict[str, int | str]:
    env: dict[str, int | str] = {}
    for name, value in model.generics.data.items():
        env[name] = value.value.data if isinstance(value, IntegerAttr) else str(value)
    return env


def _bind(block: M.BlockOp, args: list, env: dict[str, int | str], where: str) -> dict[str, int | str]:
    """The child block's environment from positional args evaluated in the parent's."""
    generics = _generics(tuple(g.data for g in block.generics.data))
    if len(args) > len(generics):
        raise InstanceError(f"{where}: {len(args)} arguments for the {len(generics)} generics of {block.block_name}")
    child: dict[str, int | str] = {}
    for i, g in enumerate(generics):
        if i < len(args):
            child[g.name] = _eval(args[i], env, where)
        elif g.default is not None:
            child[g.name] = int(g.default) if g.default.isdigit() else g.default
        else:
            raise InstanceError(f"{where}: generic '{g.name}' of {block.block_name} is not bound")
    return child


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


def _dims(text: str, env: dict[str, int | str], where: str) -> tuple[tuple[int, ...], str]:
    t = _tensor(text)
    shape = []
    for d in t.dims:
        v = _eval(d, env, where)
        if not isinstance(v, int) or v <= 0:
            raise InstanceError(f"{where}: dim '{d}' of {text} is {v}, not a positive size")
        shape.append(v)
    dtype = env.get(t.dtype, t.dtype)
    return tuple(shape), str(dtype)


def instantiate(model: M.ModelOp) -> list[Instance]:
    """Every param and state instance of the model, in declaration order."""
    root = model.block(model.root.data)
    if root is None:
        raise InstanceError(f"model @{model.sym_name.data}: no root block")
    out: list[Instance] = []
    _walk(model, root, _root_with_defaults(root, model), "", None, out)
    return out


def _root_with_defaults(root: M.BlockOp, model: M.ModelOp) -> dict[str, int | str]:
    env = _root_env(model)
    for g in _generics(tuple(s.data for s in root.generics.data)):
        if g.name not in env:
            if g.default is None:
                raise InstanceError(f"model @{model.sym_name.data}: generic '{g.name}' is not bound")
            env[g.name] = int(g.default) if g.default.isdigit() else g.default
    return env


def _walk(model: M.ModelOp, block: M.BlockOp, env: dict[str, int | str], prefix: str, via: M.SubOp | None, out: list[Instance]) -> None:
    for m in block.members():
        path = prefix + m.member_name
        if isinstance(m, M.ParamOp):
            if m.optional is not None and not (via is not None and via.bias is not None and m.member_name == "bias"):
                continue
            if via is not None and via.tied is not None and m.member_name == "weight":
                continue
            out.append(Instance(path, "param", *_dims(m.type_text, env, path)))
        elif isinstance(m, M.StateOp):
            out.append(Instance(path, "state", *_dims(m.type_text, env, path)))
        elif isinstance(m, M.SubOp):
            kind, args, count = _sub(m.type_text)
            child = model.block(kind)
            if child is None:
                raise InstanceError(f"{path}: no block named '{kind}'")
            child_env = _bind(child, args, env, path)
            if count is None:
                _walk(model, child, child_env, path + ".", m, out)
            else:
                n = _eval(count, env, path)
                if not isinstance(n, int) or n < 0:
                    raise InstanceError(f"{path}: array count {count} is not a size")
                for i in range(n):
                    _walk(model, child, child_env, f"{path}.{i}.", m, out)
