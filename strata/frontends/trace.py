"""Export the op level as llama.cpp's eval-callback table (seed 000).

One row per non-leaf op in program order: the tensor name, the ggml op name, the
first two operands (`src0`, `src1`, as the callback prints them) with their shapes,
and the output shape. Shapes are in ggml order (fastest dim first) padded to 4.
Names follow ggml: an op's `name` attribute, else `<src> (view)` and friends for the
view-like ops, else `node_<index>`; unnamed leaves are `leaf_<index>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O

GGML_NAMES: dict[type[Operation], str] = {
    O.GetRowsOp: "GET_ROWS",
    O.RmsNormOp: "RMS_NORM",
    O.MulOp: "MUL",
    O.AddOp: "ADD",
    O.MulMatOp: "MUL_MAT",
    O.ReshapeOp: "RESHAPE",
    O.ViewOp: "VIEW",
    O.PermuteOp: "PERMUTE",
    O.TransposeOp: "TRANSPOSE",
    O.ContOp: "CONT",
    O.ScaleOp: "SCALE",
    O.CpyOp: "CPY",
    O.ArgmaxOp: "ARGMAX",
    O.SwigluOp: "SWIGLU",
    O.SetRowsOp: "SET_ROWS",
    O.SoftMaxOp: "SOFT_MAX",
    O.RopeOp: "ROPE",
    O.FlashAttnExtOp: "FLASH_ATTN_EXT",
}

HEADER = (
    "llama.cpp eval-callback — ggml op level\n"
    "| # | Tensor | Op | Operands | Output shape | |\n"
    "|---|---|---|---|---|---|"
)


def ggml_shape(value: SSAValue) -> str:
    """Row-major shape -> ggml's `{ne0, ne1, ne2, ne3}`."""
    dims = [("?" if d == DYNAMIC_INDEX else str(d)) for d in reversed(O.shape_of(value))]
    dims += ["1"] * (4 - len(dims))
    return "{" + ", ".join(dims) + "}"


class _Namer:
    """ggml's tensor names for the values of one function."""

    def __init__(self) -> None:
        self.names: dict[SSAValue, str] = {}
        self.nodes = 0
        self.leaves = 0

    def leaf(self, op: Operation) -> str:
        # ggml numbers every leaf, named or not, in the order the graph meets them.
        index = self.leaves
        self.leaves += 1
        if isinstance(op, O.ParamOp):
            return op.tensor_name.data
        if isinstance(op, O.StateOp):
            return op.state_name.data
        label = op.attributes.get("name")
        if label is not None:
            return label.data  # type: ignore[attr-defined]
        return f"leaf_{index}"

    def node(self, op: Operation, index: int) -> str:
        label = op.attributes.get("name")
        if label is not None:
            return label.data  # type: ignore[attr-defined]
        suffix = O.VIEW_SUFFIX.get(type(op))
        if suffix is not None:
            return f"{self.of(op.operands[0])} ({suffix})"
        if isinstance(op, O.SetRowsOp):
            return f"{self.of(op.dst)} (view)"
        if isinstance(op, O.CpyOp):
            return f"{self.of(op.lhs)} (copy of {self.of(op.rhs)})"
        return f"node_{index}"

    def of(self, value: SSAValue) -> str:
        name = self.names.get(value)
        if name is None:
            assert isinstance(value.owner, Operation)
            name = self.names[value] = self.leaf(value.owner)
        return name


def trace_rows(fn: func.FuncOp) -> Iterable[tuple[str, str, list[str], str]]:
    """(tensor, OP, operands, output shape) for each compute op of `fn`."""
    namer = _Namer()
    index = 0
    for op in fn.body.block.ops:
        if isinstance(op, O.LEAF_OPS) or isinstance(op, func.ReturnOp):
            continue
        kind = GGML_NAMES.get(type(op))
        if kind is None:
            raise ValueError(f"trace: {op.name} is not an op-level op")
        # ggml's callback prints src0 and src1; SET_ROWS' destination is not a source.
        srcs = list(op.operands[1:] if isinstance(op, O.SetRowsOp) else op.operands)[:2]
        operands = [f"{namer.of(s)}{ggml_shape(s)}" for s in srcs]
        name = namer.names[op.results[0]] = namer.node(op, index)
        yield name, kind, operands, ggml_shape(op.results[0])
        index += 1


def trace_table(module: ModuleOp, entry: str | None = None) -> str:
    """The markdown table for `entry` (the only function when None)."""
    fns = [o for o in module.ops if isinstance(o, func.FuncOp)]
    if entry is not None:
        fns = [f for f in fns if f.sym_name.data == entry]
    if len(fns) != 1:
        raise ValueError(f"trace: expected one op-level function{f' named {entry}' if entry else ''}, found {len(fns)}")
    lines = [HEADER]
    for i, (name, kind, operands, out) in enumerate(trace_rows(fns[0]), start=1):
        lines.append(f"| {i} | {name} | {kind} | {' , '.join(operands)} | → | {out} |")
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^\| (\d+) \| (.*?) \| ([A-Z_]+) \| (.*?) \| → \| (\{.*?\}) \|$")
_AUTO = re.compile(r"\b(node|leaf)_\d+\b")


def parse_trace(text: str) -> list[tuple[str, str, str, str]]:
    """The rows of a trace table, auto-generated numbers replaced by `N`."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows.append(tuple(_AUTO.sub(lambda g: g.group(1) + "_N", m.group(k)) for k in (2, 3, 4, 5)))
    return rows
