"""`strata inspect`: a module-level model as a listing of its entry table, generics and blocks.

Entries with their signatures, the generics with the values the checkpoint binds,
every block with its members and functions, and every param instance with its
shape and dtype (in ggml names, the names the weight store and the op level use).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, ModuleOp

from strata.dialects import module as M
from strata.dialects.instances import find_model, instantiate


def _generic_value(attr) -> str:
    if isinstance(attr, IntegerAttr):
        return str(attr.value.data)
    return str(attr)


def _member_line(m: M.MemberOp) -> str:
    if isinstance(m, M.ParamOp):
        return f"param {m.member_name}: {m.type_text}{'?' if m.optional is not None else ''}"
    if isinstance(m, M.StateOp):
        return f"state {m.member_name}: {m.type_text}"
    if isinstance(m, M.SubOp):
        knobs = []
        if m.bias is not None:
            knobs.append("with bias")
        if m.tied is not None:
            knobs.append(f"tied to {m.tied.data}")
        if m.pattern is not None:
            knobs.append(f"kinds by index {list(m.pattern.get_values())}")
        return f"sub {m.member_name}: {m.type_text}" + (f"  ({', '.join(knobs)})" if knobs else "")
    assert isinstance(m, M.FnOp)
    kind = "entry" if m.entry is not None else "fn"
    return f"{'pub ' if m.pub is not None else ''}{kind} {m.member_name}{m.type_text}"


def model_listing(module: ModuleOp) -> str:
    model = find_model(module)
    out: list[str] = [f"Model {model.sym_name.data} ({model.arch.data})", "", "Entries", "", "Entry\tSignature"]
    for fn in model.entries():
        out.append(f"{fn.member_name}\t{fn.member_name}{fn.type_text}")
    out += ["", "Generics", "", "The root block's generics as this checkpoint binds them.", ""]
    for name, value in model.generics.data.items():
        out.append(f"{name}\t{_generic_value(value)}")
    out += ["", "Blocks", "", "Every block of the program with its members and functions.", ""]
    for blk in sorted(model.blocks(), key=lambda b: b.block_name):
        path = blk.attributes.get("path")
        prefix = f"{path.data}::" if path is not None else ""  # type: ignore[attr-defined]
        generics = ", ".join(g.data for g in blk.generics.data)
        out += [blk.block_name, "", f"{prefix}{blk.block_name}<{generics}>"]
        out += [f"  {_member_line(m)}" for m in blk.members()]
        knobs = {k: v for k, v in blk.attributes.items() if k not in ("sym_name", "generics", "path")}
        for k, v in sorted(knobs.items()):
            value = getattr(v, "value", None)
            out.append(f"  const {k} = {value.data if value is not None else v}")
        out.append("")
    tensors = list(instantiate(model).tensors())
    params = [t for t in tensors if t.kind == "param" and t.tied_from is None]
    out += ["Params", "", f"{len(params)} tensors, {sum(_numel(t.shape) for t in params):,} elements", ""]
    out += [f"{t.path}\t{t.ggml}\tTensor[{', '.join(map(str, t.shape))}; {t.dtype}]" for t in params]
    out += ["", "State", ""]
    out += [f"{t.path}\tTensor[{', '.join(map(str, t.shape))}; {t.dtype}]" for t in tensors if t.kind == "state"]
    return "\n".join(out) + "\n"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
