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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.traits import SymbolTable

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir import dtypes
from strata.ir.impls import Implementations
from strata.ir.split import split_piece
from strata.semantics import host_inputs as H
from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG
from strata.semantics import kernels_seq as KS
from strata.semantics import sampling as S
from strata.semantics.ranks import Group, SoloGroup
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


def _check_result(op: Operation, value: np.ndarray, res: SSAValue | None = None) -> None:
    typ = (res or op.results[0]).type
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
        for res, value in zip(op.results, results):
            _check_result(op, value, res)


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
# Leaves
# ---------------------------------------------------------------------------


class Env:
    """What leaves read: the weights, the state, and the call's host inputs: the tokens and start
    of a one-sequence prefill or decode, or the facts of an entry's call (`call`, from
    `strata.semantics.host_inputs.entry_call`)."""

    def __init__(self, fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray],
                 tokens: np.ndarray, start: int, group: Group | None = None, call: dict | None = None):
        self.fn = fn
        self.weights = weights
        #: The rank's group in a tensor-parallel entry (`strata.semantics.ranks`); one rank else.
        self.group: Group = group if group is not None else SoloGroup()
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
    return {k: (v.data if isinstance(getattr(v, "data", None), str) else v.value.data)  # type: ignore[attr-defined]
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


def read_param(op: O.ParamOp, weights: Weights, group: Group | None = None) -> np.ndarray:
    """The weight an `op.param` reads: its stored tensor (or, split, the rank's piece of it),
    converted as it says, checked against its IR type and cast to its element type (a checkpoint
    stored otherwise is converted)."""
    name, stored = op.tensor_name.data, op.stored_name
    try:
        w = _stored_or_piece(op, weights, group or SoloGroup())
    except (KeyError, StrataError) as e:
        raise InterpreterError(f"op.param '{name}': '{stored}' is not in the weight store ({e})") from None
    except ValueError as e:  # a split that does not fit the stored tensor
        raise InterpreterError(f"op.param '{name}': {e}") from None
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


def _stored_or_piece(op: O.ParamOp, weights: Weights, group: Group) -> np.ndarray:
    """The stored tensor of `op`, or this rank's piece of it (a weight store reads only the piece)."""
    piece = op.piece
    if piece is None:
        return weights.get(op.stored_name)
    axis, pieces, parts = piece
    index = group.rank * pieces // group.size
    read = getattr(weights, "piece", None)
    if read is not None:
        return read(op.stored_name, axis, pieces, parts, index)
    return split_piece(weights.get(op.stored_name), axis, pieces, parts, index)


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
        return (read_param(op, self.env.weights, self.env.group),)

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
        if env.call is not None:  # an entry's call: the input from its arguments
            return (H.call_input(kind, env.call, shape_with_holes(op.result.type)),)
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

    @impl(O.SampleOp)
    def run_sample(self, interpreter: Interpreter, op: O.SampleOp, a: V) -> V:
        logits, key, step, *rest = a
        counts = rest[7:9] if op.prompt_counts is not None else (None, None)
        mask = rest[-1] if op.mask is not None else None
        return (S.sample(logits, key, int(step[0]), *rest[:7], prompt_counts=counts[0], output_counts=counts[1],
                         mask=mask),)

    # The entries of several sequences.

    @impl(O.GatedDeltaNetSeqOp)
    def run_gated_delta_net_seq(self, interpreter: Interpreter, op: O.GatedDeltaNetSeqOp, a: V) -> V:
        return (KS.gated_delta_net_seq(*a[:6], a[6] if len(a) > 6 else None, op.grouped is not None),)

    @impl(O.TargetLogProbsOp)
    def run_target_log_probs(self, interpreter: Interpreter, op: O.TargetLogProbsOp, a: V) -> V:
        return (KS.target_log_probs(a[0], a[1], a[2]),)

    @impl(O.GenerateOp)
    def run_generate(self, interpreter: Interpreter, op: O.GenerateOp, a: V) -> V:
        return (self._loop(op, a),)

    @impl(O.GenerateUntilOp)
    def run_generate_until(self, interpreter: Interpreter, op: O.GenerateUntilOp, a: V) -> V:
        return self._loop(op, a)

    @impl(O.GenerateSampledOp)
    def run_generate_sampled(self, interpreter: Interpreter, op: O.GenerateSampledOp, a: V) -> V:
        return (self._loop(op, a),)

    def _loop(self, op: O.GenerateOp | O.GenerateUntilOp | O.GenerateSampledOp, a: V):
        """The step function run `steps` times on the state (host_inputs.generate_loop)."""
        env = self.env
        module = env.fn.parent_op()
        step = SymbolTable.lookup_symbol(module, op.callee) if module is not None else None
        if not isinstance(step, func.FuncOp):
            raise InterpreterError(f"{op.name}: no step function {op.callee}")

        def run_step(token: np.ndarray, pos: int, *draw) -> np.ndarray:
            inputs = {"token": token, "pos": np.int32(pos)}
            inputs.update(zip(("key", "temperature", "step"), draw))  # a sampling step's own arguments
            return run_entry(step, env.weights, env.state, inputs)

        if isinstance(op, O.GenerateSampledOp):
            return H.generate_loop(run_step, a[0], a[1], _int(op.steps), key=a[2], temperature=a[3])
        return H.generate_loop(run_step, a[0], a[1], _int(op.steps), a[2] if len(a) > 2 else None)

    # The collectives: this rank's part; the group (simulated ranks, or one) joins the others.

    @impl(O.AllReduceOp)
    def run_all_reduce(self, interpreter: Interpreter, op: O.AllReduceOp, a: V) -> V:
        return (self.env.group.all_reduce(a[0]),)

    @impl(O.AllGatherOp)
    def run_all_gather(self, interpreter: Interpreter, op: O.AllGatherOp, a: V) -> V:
        return (self.env.group.all_gather(a[0], _int(op.axis)),)

    @impl(O.GetRowsShardedOp)
    def run_get_rows_sharded(self, interpreter: Interpreter, op: O.GetRowsShardedOp, a: V) -> V:
        return (K.get_rows_sharded(a[0], a[1], self.env.group.rank),)

    @impl(O.MulMatIdShardedOp)
    def run_mul_mat_id_sharded(self, interpreter: Interpreter, op: O.MulMatIdShardedOp, a: V) -> V:
        return (K.mul_mat_id_sharded(a[0], a[1], a[2], self.env.group.rank),)


#: op class -> its semantics (the `@impl` methods of `OpFunctions`).
INTERPRETER: Implementations = implementations("op interpreter", OpFunctions)


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------


def run_function(fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray],
                 tokens: np.ndarray, start: int, *, args: Sequence[np.ndarray] = (),
                 observe: Callable[[Operation, np.ndarray], None] | None = None,
                 group: Group | None = None) -> np.ndarray:
    """Run `fn` on `tokens` [S] at position `start`; returns its result (the logits).

    `state` (from :func:`alloc_state`) is updated in place by the cache writes. `args` are the
    function's arguments, for an entry that takes its inputs as arguments (the sampler,
    `@sample_logits`), each checked against its IR type. A sharded
    function (`op.ranks` > 1, see `strata.passes.shard_tensor_parallel`) runs as one rank of
    `group` (`strata.semantics.ranks`: `run_ranks` simulates them all).
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
    env = Env(fn, weights, state, tokens, start, group)
    if function_ranks(fn) != env.group.size:
        raise InterpreterError(f"@{name} runs on {function_ranks(fn)} rank(s), the group has {env.group.size}")
    listeners: list[Interpreter.Listener] = [_ResultTypes()]
    if observe is not None:
        listeners.append(Observer(lambda op, results: observe(op, results[0])))
    (result,) = run_body(fn, [OpFunctions(env)], _bind_arguments(fn, args), listeners)
    return result


def run_entry(fn: func.FuncOp, weights: Weights, state: dict[str, np.ndarray], inputs: dict, *,
              observe: Callable[[Operation, np.ndarray], None] | None = None):
    """Run the entry `fn` on `inputs` (its arguments by the module level's names, `op.args`): its result,
    or a tuple of its results. A one-sequence prefill or decode takes `tokens` and `start`
    (`token` and `pos`, as its signature names them, too)."""
    name = fn.sym_name.data
    if function_layout(fn) is None:
        tokens = inputs.get("tokens", inputs.get("token"))
        start = inputs.get("start", inputs.get("pos"))
        if tokens is None or start is None:
            raise InterpreterError(f"@{name}: takes tokens (or token) and start (or pos)")
        return run_function(fn, weights, state, np.asarray(tokens), int(np.asarray(start)), observe=observe)
    unknown = first_unimplemented(fn, INTERPRETER)
    if unknown is not None:
        raise InterpreterError(f"@{name}: no reference semantics for op '{unknown.name}'")
    call = entry_call(fn, inputs)
    env = Env(fn, weights, state, call["tokens"], 0, call=call)
    listeners: list[Interpreter.Listener] = [_ResultTypes()]
    if observe is not None:
        listeners.append(Observer(lambda op, results: observe(op, results[0])))
    results = run_body(fn, [OpFunctions(env)], (), listeners)
    return results[0] if len(results) == 1 else tuple(results)


def function_ranks(fn: func.FuncOp) -> int:
    """How many ranks run `fn` (its `op.ranks`; 1 for an entry that is not sharded)."""
    ranks = fn.attributes.get("op.ranks")
    return int(ranks.value.data) if isinstance(ranks, IntegerAttr) else 1


def _bind_arguments(fn: func.FuncOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    block_args = fn.body.block.args
    if len(args) != len(block_args):
        raise InterpreterError(f"@{fn.sym_name.data}: takes {len(block_args)} arguments, got {len(args)}")
    out = []
    for i, (arg, value) in enumerate(zip(block_args, args)):
        want = shape_with_holes(arg.type)
        array = np.asarray(value, dtype=numpy_dtype(arg.type.get_element_type()))  # type: ignore[attr-defined]
        if array.ndim != len(want) or any(w not in (-1, g) for w, g in zip(want, array.shape)):
            raise InterpreterError(f"@{fn.sym_name.data}: argument {i} has shape {list(array.shape)}, "
                                   f"the IR type is {arg.type}")
        out.append(array)
    return out


def find_function(module: Operation, name: str | None = None) -> func.FuncOp:
    """The `func.func` named `name` in `module` (or its only one)."""
    fns = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if name is not None:
        fns = [f for f in fns if f.sym_name.data == name]
    if len(fns) != 1:
        what = f"@{name}" if name else "func.func"
        raise InterpreterError(f"expected one {what} in the module, found {len(fns)}")
    return fns[0]
