"""`strata inspect`: a module-level model as a listing shaped like seed 003.

Entries with their signatures, the generics with the values the checkpoint binds,
every block with its members and functions, and every param instance with its
shape and dtype (in ggml names, the names the weight store and the op level use).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, ModuleOp

from strata.dialects import module as M
from strata.ir.instances import instantiate
from strata.models.llama import ggml_name


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
        return f"sub {m.member_name}: {m.type_text}" + (f"  ({', '.join(knobs)})" if knobs else "")
    assert isinstance(m, M.FnOp)
    kind = "entry" if m.entry is not None else "fn"
    return f"{'pub ' if m.pub is not None else ''}{kind} {m.member_name}{m.type_text}"


def model_listing(module: ModuleOp) -> str:
    models = [o for o in module.ops if isinstance(o, M.ModelOp)]
    if len(models) != 1:
        raise ValueError(f"inspect: expected one module.model, found {len(models)}")
    model = models[0]
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
    insts = instantiate(model)
    params = [i for i in insts if i.kind == "param"]
    out += ["Params", "", f"{len(params)} tensors, {sum(_numel(i.shape) for i in params):,} elements", ""]
    out += [f"{i.path}\t{ggml_name(i.path)}\tTensor[{', '.join(map(str, i.shape))}; {i.dtype}]" for i in params]
    out += ["", "State", ""]
    out += [f"{i.path}\tTensor[{', '.join(map(str, i.shape))}; {i.dtype}]" for i in insts if i.kind == "state"]
    return "\n".join(out) + "\n"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
