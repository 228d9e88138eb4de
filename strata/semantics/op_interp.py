"""Execute an op-level function op by op with the numpy kernels of `kernels.py`.

    state = alloc_state(fn)
    logits = run_function(fn, WeightStore.open(d), state, tokens, start=0)

Each op's semantics is an `@impl` method of `OpFunctions` (xDSL's interpreter shape: one
`@register_impls` class per level, the run loop is xDSL's `Interpreter`, see
`strata.semantics.interpreter`), computed by the numpy kernels of `kernels.py`.

The function is one entry produced by `convert-module-to-op` (`@prefill`, `@decode`):
no arguments, leaves for weights (`op.param`), persistent buffers (`op.state`),
host inputs (`op.input`) and constants. Ops run in program order, so a read of a
state buffer after an `op.set_rows` sees the write (the buffers are updated in place).

Every result is checked against its IR type (rank, static dims, element type), so a
kernel and a pass that disagree about a shape fail here, naming the op, rather than
somewhere downstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Attribute, Operation

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir import dtypes
from strata.ir.impls import Implementations
from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG
from strata.semantics.interpreter import Observer, first_unimplemented, implementations, run_body


class InterpreterError(StrataError):
    """An op-level function that cannot be executed (unknown op, bad input, bad shape)."""


class Weights(Protocol):
    def get(self, name: str) -> np.ndarray: ...


# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------


def numpy_dtype(elem: Attribute) -> np.dtype:
    """The numpy dtype of an IR element type (from the dtype table)."""
    found = dtypes.lookup(elem)
    if found is None:
        raise InterpreterError(f"no numpy dtype for element type {elem}")
    return found.numpy


def shape_with_holes(typ: Attribute) -> tuple[int, ...]:
    """The shape of a tensor type with dynamic dims as -1 (numpy's 'infer')."""
    assert isinstance(typ, TensorType)
    return tuple(-1 if d == DYNAMIC_INDEX else d for d in typ.get_shape())


def _describe(op: Operation) -> str:
    label = op.attributes.get("name")
    return f"{op.name}" + (f" '{label.data}'" if label is not None else "")  # type: ignore[attr-defined]


def _check_result(op: Operation, value: np.ndarray) -> None:
    typ = op.results[0].type
    want = shape_with_holes(typ)
    ok = value.ndim == len(want) and all(w in (-1, g) for w, g in zip(want, value.shape))
    if not ok:
        raise InterpreterError(f"{_describe(op)}: computed shape {list(value.shape)}, IR type says {typ}")
    dtype = numpy_dtype(typ.get_element_type())  # type: ignore[attr-defined]
    if value.dtype != dtype:
        raise InterpreterError(f"{_describe(op)}: computed {value.dtype}, IR type says {typ}")


class _ResultTypes(Interpreter.Listener):
    """Checks each op's result against its IR type right after the op runs."""

    def did_interpret_op(self, op: Operation, results: PythonValues) -> None:
        if op.results:
            _check_result(op, results[0])


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


def alloc_state(fn: func.FuncOp) -> dict[str, np.ndarray]:
    """Zeroed buffers for every `op.state` of `fn`, keyed by state name."""
    out: dict[str, np.ndarray] = {}
    for op in fn.walk():
        if isinstance(op, O.StateOp):
            typ = op.result.type
            shape = typ.get_shape()  # type: ignore[attr-defined]
            out[op.state_name.data] = np.zeros(shape, dtype=numpy_dtype(typ.get_element_type()))  # type: ignore[attr-defined]
    return out


# ---------------------------------------------------------------------------
# Leaves
# ---------------------------------------------------------------------------


class Env:
    """What leaves read: the weights, the state, and the call's host inputs."""

    def __init__(self, fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray],
                 tokens: np.ndarray, start: int):
        self.weights = weights
        self.state = state
        self.tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
        self.start = int(start)
        n_kv = fn.attributes.get("op.n_kv")
        self.n_kv = n_kv.value.data if isinstance(n_kv, IntegerAttr) else None


def _float(attr: Attribute) -> float:
    return float(attr.value.data)  # type: ignore[attr-defined]


def _int(attr: Attribute) -> int:
    return int(attr.value.data)  # type: ignore[attr-defined]


#: op.param's conversions (`O.PARAM_CONVERSIONS`) -> (stored array, convert_args) -> the array.
PARAM_CONVERSIONS: Implementations[Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = Implementations(
    "op interpreter (op.param conversions)")
PARAM_CONVERSIONS.add("plus_one", K.convert_plus_one)
PARAM_CONVERSIONS.add("neg_exp", K.convert_neg_exp)
PARAM_CONVERSIONS.add("squeeze", K.convert_squeeze)
PARAM_CONVERSIONS.add("ungroup_rows", K.convert_ungroup_rows)


def read_param(op: O.ParamOp, weights: Weights) -> np.ndarray:
    """The weight an `op.param` reads: its stored tensor, converted as it says, checked against
    its IR type and cast to its element type (a checkpoint stored otherwise is converted)."""
    name, stored = op.tensor_name.data, op.stored_name
    try:
        w = weights.get(stored)
    except (KeyError, StrataError) as e:
        raise InterpreterError(f"op.param '{name}': '{stored}' is not in the weight store ({e})") from None
    if op.conversion is not None:
        kind, args = op.conversion
        w = PARAM_CONVERSIONS[kind](w, args)
    want = op.result.type.get_shape()  # type: ignore[attr-defined]
    if tuple(w.shape) != tuple(want):
        what = "stored" if op.conversion is None else f"'{op.conversion[0]}' of '{stored}' gives"
        raise InterpreterError(f"op.param '{name}': {what} shape {list(w.shape)}, IR type says {op.result.type}")
    dtype = numpy_dtype(op.result.type.get_element_type())  # type: ignore[attr-defined]
    # The IR's element type is the semantics; a checkpoint stored otherwise is converted.
    return w if w.dtype == dtype else w.astype(dtype)


#: Host inputs with one (or, for M-RoPE's streams, four) entries per token of the call.
_PER_TOKEN = {"tokens": 1, "positions": 1, "kv_rows": 1, "kq_mask": 1, "mrope_positions": 4}


# ---------------------------------------------------------------------------
# Implementations: op + operand arrays -> kernel call
# ---------------------------------------------------------------------------

V = PythonValues


@register_impls
@dataclass
class OpFunctions(InterpreterFunctions):
    """The op level's semantics: each op's numpy kernel on its operands' arrays, one result
    each; leaves read `env` (the weights, the state buffers, the call's tokens and start)."""

    env: Env

    @impl(O.ParamOp)
    def run_param(self, interpreter: Interpreter, op: O.ParamOp, a: V) -> V:
        return (read_param(op, self.env.weights),)

    @impl(O.StateOp)
    def run_state(self, interpreter: Interpreter, op: O.StateOp, a: V) -> V:
        name = op.state_name.data
        if name not in self.env.state:
            raise InterpreterError(f"op.state '{name}': no buffer given (use alloc_state)")
        if op.recurrent is not None and self.env.start == 0:  # a new sequence: its recurrent state starts at 0
            self.env.state[name][...] = 0
        return (self.env.state[name],)

    @impl(O.InputOp)
    def run_input(self, interpreter: Interpreter, op: O.InputOp, a: V) -> V:
        env, kind = self.env, op.kind.data
        shape = op.result.type.get_shape()  # type: ignore[attr-defined]
        n_kv = env.n_kv if env.n_kv is not None else (shape[1] if kind == "kq_mask" else 0)
        per = _PER_TOKEN.get(kind)
        if per is not None and shape[0] != DYNAMIC_INDEX and shape[0] != per * env.tokens.shape[0]:
            raise InterpreterError(f"op.input '{kind}': the function takes {shape[0] // per} tokens, got {env.tokens.shape[0]}")
        if n_kv and env.start + env.tokens.shape[0] > n_kv:
            raise InterpreterError(f"op.input '{kind}': {env.start} + {env.tokens.shape[0]} tokens exceed n_kv = {n_kv}")
        return (K.host_input(kind, env.tokens, env.start, n_kv),)

    @impl(O.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: O.ConstantOp, a: V) -> V:
        typ = op.result.type
        values = op.value.get_values()
        return (np.asarray(values, dtype=numpy_dtype(typ.get_element_type())).reshape(typ.get_shape()),)  # type: ignore[attr-defined]

    @impl(O.ViewOp)
    def run_view(self, interpreter: Interpreter, op: O.ViewOp, a: V) -> V:
        t = self.env.tokens.shape[0]  # a dynamic dim of a view is the call's number of tokens
        shape = tuple(t if d == -1 else d for d in shape_with_holes(op.result.type))
        offset, strides = op.window(t)
        return (K.view(a[0], shape, offset, strides),)

    @impl(O.SoftMaxOp)
    def run_soft_max(self, interpreter: Interpreter, op: O.SoftMaxOp, a: V) -> V:
        return (K.soft_max(a[0], a[1] if len(a) > 1 else None, _float(op.scale)),)

    @impl(O.RopeOp)
    def run_rope(self, interpreter: Interpreter, op: O.RopeOp, a: V) -> V:
        factors = a[2] if len(a) > 2 else None
        sections = op.sections.get_values() if op.sections is not None else None
        return (K.rope(a[0], a[1], _int(op.n_dims), op.mode.data, _float(op.freq_base), _float(op.freq_scale), factors,
                       sections),)

    @impl(O.GatedDeltaNetOp)
    def run_gated_delta_net(self, interpreter: Interpreter, op: O.GatedDeltaNetOp, a: V) -> V:
        return (K.gated_delta_net(*a, grouped=op.grouped is not None),)

    @impl(O.FlashAttnExtOp)
    def run_flash_attn_ext(self, interpreter: Interpreter, op: O.FlashAttnExtOp, a: V) -> V:
        # over a float16 KV cache, ggml-cpu's own numerics (kernels_ggml's docstring)
        f16 = a[1].dtype == np.float16 and a[2].dtype == np.float16
        kernel = KG.flash_attn_ext_f16 if f16 else K.flash_attn_ext
        return (kernel(a[0], a[1], a[2], a[3] if len(a) > 3 else None, _float(op.scale)),)

    @impl(O.GetRowsOp)
    def run_get_rows(self, interpreter: Interpreter, op: O.GetRowsOp, a: V) -> V:
        return (K.get_rows(a[0], a[1]),)

    @impl(O.RmsNormOp)
    def run_rms_norm(self, interpreter: Interpreter, op: O.RmsNormOp, a: V) -> V:
        return (K.rms_norm(a[0], _float(op.eps)),)

    @impl(O.MulOp)
    def run_mul(self, interpreter: Interpreter, op: O.MulOp, a: V) -> V:
        return (K.mul(a[0], a[1]),)

    @impl(O.AddOp)
    def run_add(self, interpreter: Interpreter, op: O.AddOp, a: V) -> V:
        return (K.add(a[0], a[1]),)

    @impl(O.DivOp)
    def run_div(self, interpreter: Interpreter, op: O.DivOp, a: V) -> V:
        return (K.div(a[0], a[1]),)

    @impl(O.MulMatOp)
    def run_mul_mat(self, interpreter: Interpreter, op: O.MulMatOp, a: V) -> V:
        quant = op.activation_quant  # ggml-cpu's quantized activations, as the op says
        return (K.mul_mat(a[0], a[1]) if quant is None else KG.mul_mat_quantized(a[0], a[1], *quant),)

    @impl(O.MulMatIdOp)
    def run_mul_mat_id(self, interpreter: Interpreter, op: O.MulMatIdOp, a: V) -> V:
        quant = op.activation_quant
        return (K.mul_mat_id(a[0], a[1], a[2]) if quant is None else KG.mul_mat_id_quantized(a[0], a[1], a[2], *quant),)

    @impl(O.ReshapeOp)
    def run_reshape(self, interpreter: Interpreter, op: O.ReshapeOp, a: V) -> V:
        return (K.reshape(a[0], shape_with_holes(op.result.type)),)

    @impl(O.PermuteOp)
    def run_permute(self, interpreter: Interpreter, op: O.PermuteOp, a: V) -> V:
        return (K.permute(a[0], op.dims.get_values()),)

    @impl(O.TransposeOp)
    def run_transpose(self, interpreter: Interpreter, op: O.TransposeOp, a: V) -> V:
        return (K.transpose(a[0]),)

    @impl(O.ContOp)
    def run_cont(self, interpreter: Interpreter, op: O.ContOp, a: V) -> V:
        return (K.cont(a[0], shape_with_holes(op.result.type)),)

    @impl(O.RepeatOp)
    def run_repeat(self, interpreter: Interpreter, op: O.RepeatOp, a: V) -> V:
        return (K.repeat(a[0], shape_with_holes(op.result.type)),)

    @impl(O.ConcatOp)
    def run_concat(self, interpreter: Interpreter, op: O.ConcatOp, a: V) -> V:
        return (K.concat(a[0], a[1], _int(op.axis)),)

    @impl(O.ScaleOp)
    def run_scale(self, interpreter: Interpreter, op: O.ScaleOp, a: V) -> V:
        return (K.scale(a[0], _float(op.scale)),)

    @impl(O.ClampOp)
    def run_clamp(self, interpreter: Interpreter, op: O.ClampOp, a: V) -> V:
        return (K.clamp(a[0], _float(op.min), _float(op.max)),)

    @impl(O.CpyOp)
    def run_cpy(self, interpreter: Interpreter, op: O.CpyOp, a: V) -> V:
        return (K.cpy(a[0], a[1]),)

    @impl(O.SetRowsOp)
    def run_set_rows(self, interpreter: Interpreter, op: O.SetRowsOp, a: V) -> V:
        return (K.set_rows(a[0], a[1], a[2]),)

    @impl(O.ArgmaxOp)
    def run_argmax(self, interpreter: Interpreter, op: O.ArgmaxOp, a: V) -> V:
        return (K.argmax(a[0]),)

    @impl(O.ArgsortOp)
    def run_argsort(self, interpreter: Interpreter, op: O.ArgsortOp, a: V) -> V:
        return (K.argsort(a[0], op.order.data),)

    @impl(O.SumRowsOp)
    def run_sum_rows(self, interpreter: Interpreter, op: O.SumRowsOp, a: V) -> V:
        return (K.sum_rows(a[0]),)

    @impl(O.SwigluOp)
    def run_swiglu(self, interpreter: Interpreter, op: O.SwigluOp, a: V) -> V:
        return (K.swiglu(a[0], a[1]),)

    @impl(O.SiluOp)
    def run_silu(self, interpreter: Interpreter, op: O.SiluOp, a: V) -> V:
        return (K.silu(a[0]),)

    @impl(O.SigmoidOp)
    def run_sigmoid(self, interpreter: Interpreter, op: O.SigmoidOp, a: V) -> V:
        return (K.sigmoid(a[0]),)

    @impl(O.SoftplusOp)
    def run_softplus(self, interpreter: Interpreter, op: O.SoftplusOp, a: V) -> V:
        return (K.softplus(a[0]),)

    @impl(O.SsmConvOp)
    def run_ssm_conv(self, interpreter: Interpreter, op: O.SsmConvOp, a: V) -> V:
        return (K.ssm_conv(a[0], a[1]),)


#: op class -> its semantics (the `@impl` methods of `OpFunctions`).
INTERPRETER: Implementations = implementations("op interpreter", OpFunctions)


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------


def run_function(fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray],
                 tokens: np.ndarray, start: int, *,
                 observe: Callable[[Operation, np.ndarray], None] | None = None) -> np.ndarray:
    """Run `fn` on `tokens` [S] at position `start`; returns its result (the logits).

    `state` (from :func:`alloc_state`) is updated in place by the cache writes.
    `observe`, if given, is called with each op and its result right after the op runs
    (leaves included), in program order: a per-op comparison (`strata verify`) or a
    debugger reads every intermediate without the interpreter keeping them all.
    """
    name = fn.sym_name.data
    unknown = first_unimplemented(fn, INTERPRETER)
    if unknown is not None:
        raise InterpreterError(f"@{name}: no reference semantics for op '{unknown.name}'")
    ret = fn.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        raise InterpreterError(f"@{name}: the function has no func.return")
    if len(ret.arguments) != 1:
        raise InterpreterError(f"@{name}: expected one returned value, got {len(ret.arguments)}")
    listeners: list[Interpreter.Listener] = [_ResultTypes()]
    if observe is not None:
        listeners.append(Observer(lambda op, results: observe(op, results[0])))
    (result,) = run_body(fn, [OpFunctions(Env(fn, weights, state, tokens, start))], (), listeners)
    return result


def find_function(module: Operation, name: str | None = None) -> func.FuncOp:
    """The `func.func` named `name` in `module` (or its only one)."""
    fns = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if name is not None:
        fns = [f for f in fns if f.sym_name.data == name]
    if len(fns) != 1:
        what = f"@{name}" if name else "func.func"
        raise InterpreterError(f"expected one {what} in the module, found {len(fns)}")
    return fns[0]
