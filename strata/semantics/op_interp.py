"""Execute an op-level function op by op with the numpy kernels of `kernels.py`.

    state = alloc_state(fn)
    logits = run_function(fn, WeightStore.open(d), state, tokens, start=0)

Each op's semantics is registered with `INTERPRETER` (`@INTERPRETER.register(O.AddOp)`),
and computed by the numpy kernels of `kernels.py`.

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
from typing import Any, Protocol

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.traits import SymbolTable

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir import dtypes
from strata.ir.impls import Implementations
from strata.semantics import host_inputs as H
from strata.semantics import kernels as K
from strata.semantics import kernels_seq as KS


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
    _check_value(op, op.results[0], value)


def _check_value(op: Operation, res: SSAValue, value: np.ndarray) -> None:
    typ = res.type
    want = shape_with_holes(typ)
    ok = value.ndim == len(want) and all(w in (-1, g) for w, g in zip(want, value.shape))
    if not ok:
        raise InterpreterError(f"{_describe(op)}: computed shape {list(value.shape)}, IR type says {typ}")
    dtype = numpy_dtype(typ.get_element_type())  # type: ignore[attr-defined]
    if value.dtype != dtype:
        raise InterpreterError(f"{_describe(op)}: computed {value.dtype}, IR type says {typ}")


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


def alloc_state(fn: Operation) -> dict[str, np.ndarray]:
    """Zeroed buffers for every `op.state` of `fn` (a function, or a module of several), keyed by
    state name."""
    out: dict[str, np.ndarray] = {}
    for op in fn.walk():
        if isinstance(op, O.StateOp):
            typ = op.result.type
            shape = typ.get_shape()  # type: ignore[attr-defined]
            out[op.state_name.data] = np.zeros(shape, dtype=numpy_dtype(typ.get_element_type()))  # type: ignore[attr-defined]
    return out


# ---------------------------------------------------------------------------
# Implementations: op + operand arrays -> kernel call
# ---------------------------------------------------------------------------


class Env:
    """What leaves read: the weights, the state, and the call's host inputs: the tokens and start
    of a one-sequence prefill or decode, or the facts of an entry's call (`call`, from
    `strata.semantics.host_inputs.entry_call`)."""

    def __init__(self, fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray],
                 tokens: np.ndarray, start: int, call: dict | None = None):
        self.fn = fn
        self.weights = weights
        self.state = state
        self.call = call
        self.tokens = np.asarray(call["tokens"] if call is not None else tokens, dtype=np.int32).reshape(-1)
        self.start = int(start)
        n_kv = fn.attributes.get("op.n_kv")
        self.n_kv = n_kv.value.data if isinstance(n_kv, IntegerAttr) else None


def function_layout(fn: func.FuncOp) -> dict | None:
    """The function's `op.call` as plain values (None: a one-sequence prefill or decode)."""
    attr = fn.attributes.get("op.call")
    if attr is None:
        return None
    return {k: (v.data if hasattr(v, "data") and isinstance(v.data, str) else v.value.data)  # type: ignore[attr-defined]
            for k, v in attr.data.items()}  # type: ignore[attr-defined]


def function_args(fn: func.FuncOp) -> list[tuple[str, tuple[int, ...] | None, str]]:
    """The entry's arguments (`op.args`, `op.arg_types`) as (name, shape with -1 for the dynamic
    dim or None for a scalar, numpy dtype name)."""
    names, types = fn.attributes.get("op.args"), fn.attributes.get("op.arg_types")
    if names is None or types is None:
        raise InterpreterError(f"@{fn.sym_name.data}: the function records no entry arguments (op.args)")
    out = []
    for name, typ in zip(names.data, types.data):  # type: ignore[attr-defined]
        if isinstance(typ, TensorType):
            out.append((name.data, shape_with_holes(typ), numpy_dtype(typ.get_element_type()).name))
        else:
            out.append((name.data, None, numpy_dtype(typ).name))
    return out


def entry_call(fn: func.FuncOp, inputs: dict) -> dict:
    """The facts of a call of the entry `fn` on `inputs` (its arguments by name), checked."""
    layout = function_layout(fn)
    if layout is None:
        raise InterpreterError(f"@{fn.sym_name.data}: a one-sequence entry takes tokens and start (run_function)")
    try:
        return H.entry_call(layout, function_args(fn), inputs)
    except ValueError as e:
        raise InterpreterError(str(e)) from None


Impl = Callable[[Any, list, Env], np.ndarray]

#: op class -> its semantics: (op, operand arrays, env) -> the result array.
INTERPRETER: Implementations[Impl] = Implementations("op interpreter")


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


@INTERPRETER.register(O.ParamOp)
def _param(op: O.ParamOp, _: list, env: Env) -> np.ndarray:
    name, stored = op.tensor_name.data, op.stored_name
    try:
        w = env.weights.get(stored)
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


@INTERPRETER.register(O.StateOp)
def _state(op: O.StateOp, _: list, env: Env) -> np.ndarray:
    name = op.state_name.data
    if name not in env.state:
        raise InterpreterError(f"op.state '{name}': no buffer given (use alloc_state)")
    if op.recurrent is not None and env.start == 0:  # a new sequence: its recurrent state starts at 0
        env.state[name][...] = 0
    return env.state[name]


#: Host inputs with one (or, for M-RoPE's streams, four) entries per token of the call.
_PER_TOKEN = {"tokens": 1, "positions": 1, "kv_rows": 1, "kq_mask": 1, "mrope_positions": 4}


@INTERPRETER.register(O.InputOp)
def _input(op: O.InputOp, _: list, env: Env) -> np.ndarray:
    kind = op.kind.data
    if env.call is not None:
        return H.call_input(kind, env.call, shape_with_holes(op.result.type))
    shape = op.result.type.get_shape()  # type: ignore[attr-defined]
    n_kv = env.n_kv if env.n_kv is not None else (shape[1] if kind == "kq_mask" else 0)
    per = _PER_TOKEN.get(kind)
    if per is not None and shape[0] != DYNAMIC_INDEX and shape[0] != per * env.tokens.shape[0]:
        raise InterpreterError(f"op.input '{kind}': the function takes {shape[0] // per} tokens, got {env.tokens.shape[0]}")
    if n_kv and env.start + env.tokens.shape[0] > n_kv:
        raise InterpreterError(f"op.input '{kind}': {env.start} + {env.tokens.shape[0]} tokens exceed n_kv = {n_kv}")
    return K.host_input(kind, env.tokens, env.start, n_kv)


@INTERPRETER.register(O.ConstantOp)
def _constant(op: O.ConstantOp, _: list, env: Env) -> np.ndarray:
    typ = op.result.type
    values = op.value.get_values()
    return np.asarray(values, dtype=numpy_dtype(typ.get_element_type())).reshape(typ.get_shape())  # type: ignore[attr-defined]


@INTERPRETER.register(O.ViewOp)
def _view(op: O.ViewOp, a: list, env: Env) -> np.ndarray:
    t = env.tokens.shape[0]  # a dynamic dim of a view is the call's number of tokens
    shape = tuple(t if d == -1 else d for d in shape_with_holes(op.result.type))
    offset, strides = op.window(t)
    return K.view(a[0], shape, offset, strides)


@INTERPRETER.register(O.SoftMaxOp)
def _soft_max(op: O.SoftMaxOp, a: list, env: Env) -> np.ndarray:
    return K.soft_max(a[0], a[1] if len(a) > 1 else None, _float(op.scale))


@INTERPRETER.register(O.RopeOp)
def _rope(op: O.RopeOp, a: list, env: Env) -> np.ndarray:
    factors = a[2] if len(a) > 2 else None
    sections = op.sections.get_values() if op.sections is not None else None
    return K.rope(a[0], a[1], _int(op.n_dims), op.mode.data, _float(op.freq_base), _float(op.freq_scale), factors,
                  sections)


@INTERPRETER.register(O.GatedDeltaNetOp)
def _gated_delta_net(op: O.GatedDeltaNetOp, a: list, env: Env) -> np.ndarray:
    return K.gated_delta_net(*a, grouped=op.grouped is not None)


@INTERPRETER.register(O.FlashAttnExtOp)
def _flash(op: O.FlashAttnExtOp, a: list, env: Env) -> np.ndarray:
    return K.flash_attn_ext(a[0], a[1], a[2], a[3] if len(a) > 3 else None, _float(op.scale))


INTERPRETER.add(O.GetRowsOp, lambda op, a, env: K.get_rows(a[0], a[1]))
INTERPRETER.add(O.RmsNormOp, lambda op, a, env: K.rms_norm(a[0], _float(op.eps)))
INTERPRETER.add(O.MulOp, lambda op, a, env: K.mul(a[0], a[1]))
INTERPRETER.add(O.AddOp, lambda op, a, env: K.add(a[0], a[1]))
INTERPRETER.add(O.MulMatOp, lambda op, a, env: K.mul_mat(a[0], a[1]))
INTERPRETER.add(O.ReshapeOp, lambda op, a, env: K.reshape(a[0], shape_with_holes(op.result.type)))
INTERPRETER.add(O.PermuteOp, lambda op, a, env: K.permute(a[0], op.dims.get_values()))
INTERPRETER.add(O.TransposeOp, lambda op, a, env: K.transpose(a[0]))
INTERPRETER.add(O.ContOp, lambda op, a, env: K.cont(a[0], shape_with_holes(op.result.type)))
INTERPRETER.add(O.ScaleOp, lambda op, a, env: K.scale(a[0], _float(op.scale)))
INTERPRETER.add(O.CpyOp, lambda op, a, env: K.cpy(a[0], a[1]))
INTERPRETER.add(O.ArgmaxOp, lambda op, a, env: K.argmax(a[0]))
INTERPRETER.add(O.SwigluOp, lambda op, a, env: K.swiglu(a[0], a[1]))
INTERPRETER.add(O.SetRowsOp, lambda op, a, env: K.set_rows(a[0], a[1], a[2]))
INTERPRETER.add(O.DivOp, lambda op, a, env: K.div(a[0], a[1]))
INTERPRETER.add(O.ClampOp, lambda op, a, env: K.clamp(a[0], _float(op.min), _float(op.max)))
INTERPRETER.add(O.SiluOp, lambda op, a, env: K.silu(a[0]))
INTERPRETER.add(O.SigmoidOp, lambda op, a, env: K.sigmoid(a[0]))
INTERPRETER.add(O.SoftplusOp, lambda op, a, env: K.softplus(a[0]))
INTERPRETER.add(O.SumRowsOp, lambda op, a, env: K.sum_rows(a[0]))
INTERPRETER.add(O.ArgsortOp, lambda op, a, env: K.argsort(a[0], op.order.data))
INTERPRETER.add(O.RepeatOp, lambda op, a, env: K.repeat(a[0], shape_with_holes(op.result.type)))
INTERPRETER.add(O.ConcatOp, lambda op, a, env: K.concat(a[0], a[1], _int(op.axis)))
INTERPRETER.add(O.MulMatIdOp, lambda op, a, env: K.mul_mat_id(a[0], a[1], a[2]))
INTERPRETER.add(O.SsmConvOp, lambda op, a, env: K.ssm_conv(a[0], a[1]))
INTERPRETER.add(O.GatedDeltaNetSeqOp,
                lambda op, a, env: KS.gated_delta_net_seq(*a[:6], a[6] if len(a) > 6 else None, op.grouped is not None))
INTERPRETER.add(O.TargetLogProbsOp, lambda op, a, env: KS.target_log_probs(a[0], a[1], a[2]))


def _step_function(op: O.GenerateOp | O.GenerateUntilOp, env: Env) -> func.FuncOp:
    module = env.fn.parent_op()
    step = SymbolTable.lookup_symbol(module, op.callee) if module is not None else None
    if not isinstance(step, func.FuncOp):
        raise InterpreterError(f"{op.name}: no step function {op.callee}")
    return step


def _loop(op: O.GenerateOp | O.GenerateUntilOp, a: list, env: Env):
    """Run the step function `steps` times (host_inputs.generate_loop), each step on the state."""
    step = _step_function(op, env)

    def run_step(token: np.ndarray, pos: int) -> np.ndarray:
        return run_entry(step, env.weights, env.state, {"token": token, "pos": np.int32(pos)})

    return H.generate_loop(run_step, a[0], a[1], int(op.steps.value.data), a[2] if len(a) > 2 else None)


INTERPRETER.add(O.GenerateOp, _loop)
INTERPRETER.add(O.GenerateUntilOp, _loop)


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
    return _run(Env(fn, weights, state, tokens, start), observe)


def run_entry(fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray], inputs: dict, *,
              observe: Callable[[Operation, np.ndarray], None] | None = None):
    """Run the entry `fn` on `inputs` (its arguments by seed 003's names, `op.args`): its result,
    or a tuple of its results. A one-sequence prefill or decode takes `tokens` and `start`
    (`pos` and `token` for decode, as its signature names them)."""
    if function_layout(fn) is None:
        tokens = inputs.get("tokens", inputs.get("token"))
        start = inputs.get("start", inputs.get("pos"))
        if tokens is None or start is None:
            raise InterpreterError(f"@{fn.sym_name.data}: takes tokens (or token) and start (or pos)")
        return run_function(fn, weights, state, np.asarray(tokens), int(np.asarray(start)), observe=observe)
    call = entry_call(fn, inputs)
    return _run(Env(fn, weights, state, call["tokens"], 0, call), observe)


def _run(env: Env, observe):
    fn = env.fn
    values: dict[SSAValue, np.ndarray] = {}
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            if not op.arguments:
                raise InterpreterError(f"@{fn.sym_name.data}: the function returns nothing")
            out = tuple(values[v] for v in op.arguments)
            return out[0] if len(out) == 1 else out
        impl = INTERPRETER.get(type(op))
        if impl is None:
            raise InterpreterError(f"@{fn.sym_name.data}: no reference semantics for op '{op.name}'")
        args = [values[v] for v in op.operands]
        result = impl(op, args, env)
        results = result if isinstance(op, O.GenerateUntilOp) else (result,)
        for res, value in zip(op.results, results):
            _check_value(op, res, value)
            values[res] = value
        if observe is not None:
            observe(op, result)
    raise InterpreterError(f"@{fn.sym_name.data}: the function has no func.return")


def find_function(module: Operation, name: str | None = None) -> func.FuncOp:
    """The `func.func` named `name` in `module` (or its only one)."""
    fns = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if name is not None:
        fns = [f for f in fns if f.sym_name.data == name]
    if len(fns) != 1:
        what = f"@{name}" if name else "func.func"
        raise InterpreterError(f"expected one {what} in the module, found {len(fns)}")
    return fns[0]
