"""Per-op comparison with llama.cpp: llama-eval-callback's log against the op interpreter.

    rows = parse_callback_log(Path("prefill.callback.log"))   # every tensor llama.cpp computed
    report = compare(rows, ours)                             # ours: (name, op, values) in order

llama-eval-callback prints each tensor it computes, in firing order, with its name, op, operand
shapes, output shape and `sum`. The op level follows llama.cpp's graph row for row (the trace
equals llama.cpp's), so the i-th computed op of ours is llama.cpp's i-th row: names and ops are
checked to agree, then sums are compared with a tolerance relative to the tensor's magnitude
(Σ|x| of ours), since a sum can cancel to near zero while its terms do not. `strata verify`
does both for a model and explains a divergence (`strata.verify.verify_llamacpp`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strata.errors import StrataError

_HEADER = re.compile(r"^common_debug_cb_eval:\s+(?P<name>.*?) = \((?P<type>\w+)\)\s+(?P<op>[A-Z_0-9]+)\(")
_SUM = re.compile(r"^\s*sum\s*=\s*(?P<sum>\S+)\s*$")
_TOKENS = re.compile(r"number of input tokens = (\d+)")
_TOKEN = re.compile(r"^\S+ I\s+(\d+)\s*$")


class VerifyError(StrataError):
    """A log that cannot be read, or a graph that does not line up with it."""


@dataclass(frozen=True)
class LogRow:
    name: str
    op: str
    sum: float


@dataclass(frozen=True)
class CallbackLog:
    tokens: tuple[int, ...]
    rows: tuple[LogRow, ...]


def parse_callback_log(path: Path) -> CallbackLog:
    """The prompt's tokens and every (tensor, op, sum) of a llama-eval-callback log."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise VerifyError(f"{path}: cannot read: {e.strerror or e}") from None
    tokens: list[int] = []
    expected_tokens = None
    rows: list[LogRow] = []
    pending: tuple[str, str] | None = None
    for number, line in enumerate(lines, start=1):
        m = _TOKENS.search(line)
        if m:
            expected_tokens = int(m.group(1))
            continue
        if expected_tokens is not None and len(tokens) < expected_tokens:
            t = _TOKEN.match(line)
            if t:
                tokens.append(int(t.group(1)))
                continue
        h = _HEADER.match(line)
        if h:
            pending = (h.group("name").strip(), h.group("op"))
            continue
        s = _SUM.match(line)
        if s and pending is not None:
            try:
                value = float(s.group("sum"))
            except ValueError:
                raise VerifyError(f"{path}:{number}: sum {s.group('sum')!r} is not a number") from None
            rows.append(LogRow(pending[0], pending[1], value))
            pending = None
    if expected_tokens is None or len(tokens) != expected_tokens:
        raise VerifyError(f"{path}: no prompt found (the 'number of input tokens' lines of llama-eval-callback)")
    if not rows:
        raise VerifyError(f"{path}: no tensors found (is this llama-eval-callback's output?)")
    return CallbackLog(tuple(tokens), tuple(rows))


@dataclass(frozen=True)
class Divergence:
    index: int  # 1-based row
    name: str
    op: str
    theirs: float
    ours: float
    scale: float
    why: str


def close(theirs: float, ours: float, scale: float, rtol: float) -> bool:
    """Whether two sums agree, relative to the tensor's magnitude (Σ|x|)."""
    if math.isnan(theirs) or math.isnan(ours):
        return math.isnan(theirs) and math.isnan(ours)
    return abs(theirs - ours) <= rtol * max(scale, 1e-30)


def compare(log: CallbackLog, ours: Sequence[tuple[str, str, np.ndarray]], rtol: float) -> tuple[int, Divergence | None]:
    """(rows that agree, the first that does not, or None). `ours` are (name, op, value) in order."""
    if len(ours) != len(log.rows):
        n = min(len(ours), len(log.rows))
        first = next((i for i in range(n) if (ours[i][0], ours[i][1]) != (log.rows[i].name, log.rows[i].op)), n)
        if first < n:
            row = log.rows[first]
            return first, Divergence(first + 1, row.name, row.op, row.sum, math.nan, 0.0,
                                     f"the graphs differ here: strata has {ours[first][1]} '{ours[first][0]}'")
        return n, Divergence(n + 1, "", "", math.nan, math.nan, 0.0,
                             f"llama.cpp computed {len(log.rows)} tensors, strata {len(ours)}")
    for i, (row, (name, op, value)) in enumerate(zip(log.rows, ours)):
        if (name, op) != (row.name, row.op):
            return i, Divergence(i + 1, row.name, row.op, row.sum, math.nan, 0.0,
                                 f"the graphs differ here: strata has {op} '{name}'")
        values = np.asarray(value, dtype=np.float64)
        ours_sum, scale = float(values.sum()), float(np.abs(values).sum())
        if not close(row.sum, ours_sum, scale, rtol):
            return i, Divergence(i + 1, row.name, row.op, row.sum, ours_sum, scale,
                                 f"sums differ beyond rtol {rtol} of the tensor's magnitude")
    return len(log.rows), None


#: llama.cpp's KV cache type: its default (-ctk/-ctv f16), which llama-eval-callback's logs use.
LLAMACPP_KV_TYPE = "f16"


def strata_values(model, tokens: Sequence[int], ctx: int, kv_pad: int, *,
                  act_quant: bool = True) -> list[tuple[str, str, np.ndarray]]:
    """(tensor name, ggml op, value) of every op of the model's prefill on `tokens`, in order,
    named as the trace names them (the names llama.cpp's log uses), computed as llama.cpp's CPU
    backend does: the KV cache in f16, and, for a GGUF's block-quantized weights, the
    activations quantized (`act_quant=False`: in f32)."""
    from xdsl.dialects import func

    from strata.exporters.trace import TRACE, trace_rows
    from strata.pipeline import entry_pipeline, lower
    from strata.semantics.op_interp import alloc_state, find_function, run_function

    fn = find_function(lower(model, entry_pipeline("prefill", tokens=len(tokens), start=0, ctx=ctx, kv_pad=kv_pad,
                                                   kv_type=LLAMACPP_KV_TYPE, act_quant=act_quant)))
    values: dict = {}
    run_function(fn, model.open_weights(quiet=True), alloc_state(fn), np.asarray(tokens, dtype=np.int32), 0,
                 observe=lambda op, value: values.__setitem__(op, np.array(value, copy=True)))
    ops = [op for op in fn.body.block.ops
           if not isinstance(op, func.ReturnOp) and TRACE[type(op)].ggml_op is not None]
    return [(name, kind, values[op]) for (name, kind, _, _), op in zip(trace_rows(fn), ops)]
