"""Export the op level as llama.cpp's eval-callback table (one row per ggml op of llama.cpp's graph).

One row per non-leaf op in program order: the tensor name, the ggml op name, the
first two operands (`src0`, `src1`, as the callback prints them) with their shapes,
and the output shape. Shapes are in ggml order (fastest dim first) padded to 4.
Names follow ggml: an op's `name` attribute, else `<src> (view)` and friends for the
view-like ops, else `node_<index>`; unnamed leaves are `leaf_<index>`. ggml names a view
when it creates it, from its source's name at that time: an unnamed source gives an empty
name there (` (reshaped)`, `cache_r_l0 (view) (copy of )`), not `node_<index>`, which
ggml assigns later. The table shows names without their leading and trailing spaces, as
llama.cpp's callback table does.

Each op registers its row with `TRACE` (`TraceRule`: ggml's op name, the operands the
callback prints, and how an unnamed result is named).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir.impls import Implementations


class TraceError(StrataError):
    """IR that is not one op-level function."""


@dataclass(frozen=True)
class TraceRule:
    """How one op appears in llama.cpp's eval-callback table."""

    ggml_op: str | None  # GET_ROWS, ...; None for a leaf (no row of its own)
    #: The operands the callback prints as src0 and src1.
    sources: Callable[[Operation], Sequence[SSAValue]] = lambda op: op.operands[:2]
    #: How ggml names an unnamed result, given each operand's ggml name ("" for an unnamed
    #: node); None: node_<index>.
    default_name: Callable[[Operation, Callable[[SSAValue], str]], str] | None = None
    #: Why the op has no row (an op that llama.cpp's graph never holds): the trace refuses it.
    refusal: str | None = None


def named_after_source(suffix: str) -> Callable[[Operation, Callable[[SSAValue], str]], str]:
    """ggml names a view after what it views: `<src> (<suffix>)`."""
    return lambda op, name_of: f"{name_of(op.operands[0])} ({suffix})"


def copy_name(op: Operation, name_of: Callable[[SSAValue], str]) -> str:
    """ggml_cpy's result, a view of the destination: `<dst> (copy of <src>)`, or
    `<src> (copy)` when the destination has no name."""
    dst, src = name_of(op.operands[1]), name_of(op.operands[0])
    return f"{dst} (copy of {src})" if dst else f"{src} (copy)"


#: op class -> its trace rule.
TRACE: Implementations[TraceRule] = Implementations("trace exporter")

for _leaf in O.LEAF_OPS:
    TRACE.add(_leaf, TraceRule(None))
for _cls, _ggml in [(O.GetRowsOp, "GET_ROWS"), (O.RmsNormOp, "RMS_NORM"), (O.MulOp, "MUL"), (O.AddOp, "ADD"),
                    (O.MulMatOp, "MUL_MAT"), (O.ScaleOp, "SCALE"), (O.ArgmaxOp, "ARGMAX"), (O.SwigluOp, "SWIGLU"),
                    (O.SoftMaxOp, "SOFT_MAX"), (O.RopeOp, "ROPE"), (O.FlashAttnExtOp, "FLASH_ATTN_EXT"),
                    (O.DivOp, "DIV"), (O.ClampOp, "CLAMP"), (O.SiluOp, "SILU"), (O.SigmoidOp, "SIGMOID"),
                    (O.SoftplusOp, "SOFTPLUS"), (O.SumRowsOp, "SUM_ROWS"), (O.ArgsortOp, "ARGSORT"),
                    (O.RepeatOp, "REPEAT"), (O.ConcatOp, "CONCAT"), (O.MulMatIdOp, "MUL_MAT_ID"),
                    (O.SsmConvOp, "SSM_CONV"), (O.GatedDeltaNetOp, "GATED_DELTA_NET"),
                    # A tensor-parallel entry's: ggml has no collectives; the table names them so.
                    (O.AllReduceOp, "ALL_REDUCE"), (O.AllGatherOp, "ALL_GATHER"), (O.GetRowsShardedOp, "GET_ROWS"),
                    (O.MulMatIdShardedOp, "MUL_MAT_ID"),
                    # ggml's GATED_DELTA_NET runs several sequences too; the others have no ggml op
                    # and show the op level's own name.
                    (O.GatedDeltaNetSeqOp, "GATED_DELTA_NET"), (O.TargetLogProbsOp, "TARGET_LOG_PROBS"),
                    (O.GenerateOp, "GENERATE"), (O.GenerateUntilOp, "GENERATE_UNTIL"),
                    (O.GenerateSampledOp, "GENERATE_SAMPLED")]:
    TRACE.add(_cls, TraceRule(_ggml))
# ggml's views are named after what they view.
for _cls, _ggml, _suffix in [(O.ViewOp, "VIEW", "view"), (O.PermuteOp, "PERMUTE", "permuted"),
                             (O.TransposeOp, "TRANSPOSE", "transposed"), (O.ReshapeOp, "RESHAPE", "reshaped"),
                             (O.ContOp, "CONT", "cont")]:
    TRACE.add(_cls, TraceRule(_ggml, default_name=named_after_source(_suffix)))
# SET_ROWS writes into its destination, a view of the cache: the callback prints the written
# rows and their indices, not the destination.
TRACE.add(O.SetRowsOp, TraceRule("SET_ROWS", sources=lambda op: op.operands[1:3],
                                 default_name=named_after_source("view")))
TRACE.add(O.CpyOp, TraceRule("CPY", default_name=copy_name))
# llama.cpp samples outside its graph (llama_sampler on the logits the graph returns).
TRACE.add(O.SampleOp, TraceRule(None, refusal="llama.cpp samples outside its graph, so op.sample has no row in its "
                                              "eval-callback table; trace @prefill or @decode"))

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
        self.names: dict[SSAValue, str] = {}  # as the table shows them (node_<index> if unnamed)
        self.given: dict[SSAValue, str] = {}  # as ggml names derived tensors after them ("" if unnamed)
        self.nodes = 0
        self.leaves = 0

    def leaf(self, value: SSAValue) -> None:
        # ggml numbers every leaf, named or not, in the order the graph meets them.
        op = value.owner
        assert isinstance(op, Operation)
        index = self.leaves
        self.leaves += 1
        label = op.attributes.get("name")
        if isinstance(op, O.ParamOp):
            given = op.tensor_name.data
        elif isinstance(op, O.StateOp):
            given = op.state_name.data
        else:
            given = label.data if label is not None else ""  # type: ignore[attr-defined]
        self.given[value] = given
        self.names[value] = given.strip() or f"leaf_{index}"

    def node(self, op: Operation, rule: TraceRule, index: int) -> str:
        label = op.attributes.get("name")
        if label is not None:
            given = label.data  # type: ignore[attr-defined]
        elif rule.default_name is not None:
            given = rule.default_name(op, self.given_of)
        else:
            given = ""
        value = op.results[0]
        self.given[value] = given
        name = self.names[value] = given.strip() or f"node_{index}"
        return name

    def of(self, value: SSAValue) -> str:
        if value not in self.names:
            self.leaf(value)
        return self.names[value]

    def given_of(self, value: SSAValue) -> str:
        if value not in self.given:
            self.leaf(value)
        return self.given[value]


def trace_rows(fn: func.FuncOp) -> Iterable[tuple[str, str, list[str], str]]:
    """(tensor, OP, operands, output shape) for each compute op of `fn`."""
    namer = _Namer()
    index = 0
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        rule = TRACE.get(type(op))
        if rule is None:
            raise TraceError(f"trace: {op.name} has no trace rule (is it an op-level op?)")
        if rule.refusal is not None:
            raise TraceError(f"trace: @{fn.sym_name.data}: {rule.refusal}")
        if rule.ggml_op is None:
            continue
        operands = [f"{namer.of(s)}{ggml_shape(s)}" for s in rule.sources(op)]
        name = namer.node(op, rule, index)
        yield name, rule.ggml_op, operands, ggml_shape(op.results[0])
        index += 1


def trace_table(module: ModuleOp, entry: str | None = None) -> str:
    """The markdown table for `entry` (the only function when None)."""
    fns = [o for o in module.ops if isinstance(o, func.FuncOp)]
    if entry is not None:
        fns = [f for f in fns if f.sym_name.data == entry]
    if len(fns) != 1:
        raise TraceError(f"trace: expected one op-level function{f' named {entry}' if entry else ''}, found {len(fns)}")
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
