"""The CPU target: op-level IR -> one self-contained numpy module.

`CpuEmitter` is a printer with one handler per op-level op (registered with
`CPU_EMITTER`, keyed by op class: the handlers below, and the tensor-parallel ops' table of
`emit_tp.py`, included at the end of this file) and no policy: every op becomes one Python statement
that calls the op's kernel, in program order. The generated module

* imports only ``numpy`` and ``ml_dtypes`` (never strata), and carries the source of
  just the kernels it calls, copied from :mod:`strata.semantics.kernels` and the sampler
  :mod:`strata.semantics.sampling` (so each op's semantics is written down once in the
  repository);
* defines ``class Model``: ``__init__(weights)`` binds every ``op.param`` once to an
  attribute (a zero-copy view of the memory-mapped weight) and preallocates every
  ``op.state`` (the KV cache) from its IR type; one method per entry computes its host
  inputs and then runs the ops, with locals named after the IR values: a one-sequence
  ``prefill(tokens, start)`` and ``decode(token, pos)`` with ``host_input``, every other
  entry with its arguments by name (``decode_rows(tokens, positions)``, ...) checked
  and turned into its inputs by ``entry_call`` and ``call_input`` (copied from
  :mod:`strata.semantics.host_inputs`); ``ARGS`` and ``RESULTS`` give each entry's
  arguments and results. A device loop calls its step function (a method too). An entry
  whose inputs are function arguments (the sampler, ``sample_logits(logits, key, ...)``)
  takes them as the method's parameters, named after the arguments, and checks their shapes.

Model-supplied names (tensor names, the model name) are sanitized before they reach
the code: identifiers keep only ``[A-Za-z0-9_]``, and the only string literals are
``repr()`` of names that passed :func:`literal_name`. The output depends only on the
IR, so the same IR gives byte-identical source.

A dynamic dim (``?``) is the number of tokens of the call (``n_tokens``): the only
dynamic dim the op level has.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, Float16Type, ModuleOp, StringAttr
from xdsl.ir import Operation

from strata.dialects import op as O
from strata.passes.cpu_native_kernels import ORDER_ATTR, REPACKED, is_native, native_weight_type
from strata.targets.codegen import literal_name, sanitize_label
from strata.targets.codegen import sanitize_identifier  # noqa: F401 - re-exported
from strata.targets.cpu.emit_tp import TP_PRINTERS
from strata.targets.cpu.printer import (  # noqa: F401 - the target's names, re-exported
    CPU_EMITTER,
    CPU_PARAM_CONVERSIONS,
    CpuEmitter,
    CpuTargetError,
    dtype_expr,
    float_lit,
    int_tuple,
    type_comment,
)


@CPU_EMITTER.register(O.ParamOp)
def _param(e: CpuEmitter, op: O.ParamOp) -> None:
    name, read = op.tensor_name.data, (op.stored_name, op.conversion, op.piece)
    if e.param_reads.setdefault(name, read) != read:
        raise CpuTargetError(f"cpu target: tensor '{sanitize_label(name)}' is read two ways")
    if read[1] is not None:  # the verifier admits only O.PARAM_CONVERSIONS; one without a kernel here is refused
        kernel = CPU_PARAM_CONVERSIONS.get(read[1][0])
        if kernel is None:
            raise CpuTargetError(f"cpu target: op.param '{sanitize_label(name)}': no kernel for conversion "
                                 f"'{read[1][0]}'")
        e.kernels_used.add(kernel)
    if is_native(op):  # bound as its packed blocks (the store permitting), for the native kernels
        e.native_params[name] = native_weight_type(op)
        e.kernels_used.add("bind_packed")
    e._bind_attribute(e.params, name, "tensor", op.result)


@CPU_EMITTER.register(O.StateOp)
def _state(e: CpuEmitter, op: O.StateOp) -> None:
    e._bind_attribute(e.states, op.state_name.data, "state", op.result)
    if op.recurrent is not None:
        e.out.line("if start == 0:  # a new sequence: its recurrent state starts at 0")
        e.out.line(f"    {e.names[op.result]}[...] = 0")


@CPU_EMITTER.register(O.ConstantOp)
def _constant(e: CpuEmitter, op: O.ConstantOp) -> None:
    label = op.label or "constant"
    attr = e.attr_namer.fresh(label)
    e.constants.append((attr, op))
    e.names[op.result] = "self." + attr


@CPU_EMITTER.register(O.InputOp)
def _input(e: CpuEmitter, op: O.InputOp) -> None:
    kind = op.kind.data
    if kind not in O.INPUT_KINDS:
        raise CpuTargetError(f"cpu target: unknown input kind {kind!r}")
    key = (kind, op.result.type)
    if key in e.inputs:  # the same host input again (k_idxs, v_idxs, ...): computed once
        e.names[op.result] = e.inputs[key]
        return
    if e.layout is not None:
        shape = tuple(-1 if d == DYNAMIC_INDEX else d for d in op.result.type.get_shape())
        e.assign(op, "call_input", repr(kind), "call", int_tuple(shape))
    else:
        e.assign(op, "host_input", repr(kind), "tokens", "start", str(e.n_kv))
    e.inputs[key] = e.names[op.result]


# compute ops

#: Ops printed as `kernel(operands...)`, with no attributes: op class -> kernel name.
PLAIN_KERNELS: dict[type[Operation], str] = {
    O.MulOp: "mul", O.AddOp: "add", O.TransposeOp: "transpose",
    O.CpyOp: "cpy", O.ArgmaxOp: "argmax", O.SwigluOp: "swiglu",
    O.DivOp: "div", O.SiluOp: "silu", O.SigmoidOp: "sigmoid", O.SoftplusOp: "softplus", O.SumRowsOp: "sum_rows",
    O.SsmConvOp: "ssm_conv", O.TargetLogProbsOp: "target_log_probs",
}


def _plain(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    return lambda e, op: e.assign(op, kernel, *(e.ref(v) for v in op.operands))


for _cls, _kernel in PLAIN_KERNELS.items():
    CPU_EMITTER.add(_cls, _plain(_kernel))

#: Ops printed as `kernel(src, result shape)`: op class -> kernel name.
SHAPED_KERNELS: dict[type[Operation], str] = {O.ReshapeOp: "reshape", O.ContOp: "cont", O.RepeatOp: "repeat"}


def _shaped(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    def emit(e: CpuEmitter, op: Operation) -> None:
        shape = e.shape(op.results[0])
        dims = op.results[0].type.get_shape()  # type: ignore[attr-defined]
        if kernel in ("reshape", "cont") and list(dims).count(DYNAMIC_INDEX) == 1:
            shape = int_tuple([-1 if d == DYNAMIC_INDEX else d for d in dims])  # the elements decide it
        e.assign(op, kernel, e.ref(op.operands[0]), shape)

    return emit


for _cls, _kernel in SHAPED_KERNELS.items():
    CPU_EMITTER.add(_cls, _shaped(_kernel))


@CPU_EMITTER.register(O.RmsNormOp)
def _rms_norm(e: CpuEmitter, op: O.RmsNormOp) -> None:
    e.assign(op, "rms_norm", e.ref(op.src), float_lit(op.eps.value.data))


@CPU_EMITTER.register(O.ViewOp)
def _view(e: CpuEmitter, op: O.ViewOp) -> None:
    # Offsets and strides that grow with the tokens (per_token) print as `a + b * n_tokens`.
    per = list(op.per_token.get_values()) if op.per_token is not None else []

    def term(base: int, per_token: int) -> str:
        return f"{base} + {per_token} * n_tokens" if per_token else str(base)

    args = [e.ref(op.src), e.shape(op.result), term(int(op.offset.value.data), per[0] if per else 0)]
    if op.strides is not None:
        steps = per[1:] or [0] * len(op.strides.get_values())
        items = [term(int(s), int(c)) for s, c in zip(op.strides.get_values(), steps)]
        args.append("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")")
    e.assign(op, "view", *args)


@CPU_EMITTER.register(O.PermuteOp)
def _permute(e: CpuEmitter, op: O.PermuteOp) -> None:
    e.assign(op, "permute", e.ref(op.src), int_tuple(op.dims.get_values()))


@CPU_EMITTER.register(O.ScaleOp)
def _scale(e: CpuEmitter, op: O.ScaleOp) -> None:
    e.assign(op, "scale", e.ref(op.src), float_lit(op.scale.value.data))


@CPU_EMITTER.register(O.ClampOp)
def _clamp(e: CpuEmitter, op: O.ClampOp) -> None:
    e.assign(op, "clamp", e.ref(op.src), float_lit(op.min.value.data), float_lit(op.max.value.data))


@CPU_EMITTER.register(O.ArgsortOp)
def _argsort(e: CpuEmitter, op: O.ArgsortOp) -> None:
    e.assign(op, "argsort", e.ref(op.src), literal_name(op.order.data, "sort order"))


@CPU_EMITTER.register(O.ConcatOp)
def _concat(e: CpuEmitter, op: O.ConcatOp) -> None:
    e.assign(op, "concat", e.ref(op.lhs), e.ref(op.rhs), str(int(op.axis.value.data)))


@CPU_EMITTER.register(O.GatedDeltaNetOp)
def _gated_delta_net(e: CpuEmitter, op: O.GatedDeltaNetOp) -> None:
    args = [e.ref(v) for v in op.operands]
    if op.grouped is not None:
        args.append("grouped=True")
    e.assign(op, "gated_delta_net", *args)


@CPU_EMITTER.register(O.SetRowsOp)
def _set_rows(e: CpuEmitter, op: O.SetRowsOp) -> None:
    # In place: the result is the written buffer ite.
    e.kernels_used.add("set_rows")
    if isinstance(op.dst.owner, O.StateOp) and isinstance(op.rows.owner, O.InputOp) \
            and op.rows.owner.kind.data == "state_write":  # one row per sequence slot: SLOT_STATES
        e.slot_states.add(op.dst.owner.state_name.data)
    e.out.line(f"set_rows({e.ref(op.dst)}, {e.ref(op.src)}, {e.ref(op.rows)})")
    e.names[op.result] = e.ref(op.dst)


@CPU_EMITTER.register(O.SoftMaxOp)
def _soft_max(e: CpuEmitter, op: O.SoftMaxOp) -> None:
    e.assign(op, "soft_max", e.ref(op.src), e.ref(op.mask), float_lit(op.scale.value.data))


@CPU_EMITTER.register(O.RopeOp)
def _rope(e: CpuEmitter, op: O.RopeOp) -> None:
    args = [e.ref(op.src), e.ref(op.positions), str(int(op.n_dims.value.data)),
            literal_name(op.mode.data, "rope mode"), float_lit(op.freq_base.value.data),
            float_lit(op.freq_scale.value.data)]
    if op.freq_factors is not None or op.sections is not None:
        args.append(e.ref(op.freq_factors))
    if op.sections is not None:
        args.append(int_tuple(op.sections.get_values()))
    e.assign(op, "rope", *args)


@CPU_EMITTER.register(O.GetRowsOp)
def _get_rows(e: CpuEmitter, op: O.GetRowsOp) -> None:
    if is_native(op):
        e.assign(op, "packed_get_rows", "self.native_lib", e.ref(op.lhs), e.ref(op.rhs))
    else:
        e.assign(op, "get_rows", e.ref(op.lhs), e.ref(op.rhs))


def _products(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    """MUL_MAT / MUL_MAT_ID: plain, or with ggml-cpu's quantized activations (`act`); marked
    native, the library's kernel on the packed weight (its `act` is the numpy fallback's)."""

    def emit(e: CpuEmitter, op: Operation) -> None:
        args = [e.ref(v) for v in op.operands]
        quant = op.activation_quant  # type: ignore[attr-defined]
        if is_native(op):
            kind, order = quant if quant is not None else (None, None)
            repacked = op.attributes.get(ORDER_ATTR) == StringAttr(REPACKED)
            e.assign(op, f"packed_{kernel}", "self.native_lib", *args, repr(kind),
                     int_tuple(order) if order else "None", *(["repacked=True"] if repacked else []))
            return
        if quant is None:
            e.assign(op, kernel, *args)
            return
        kind, order = quant
        e.assign(op, f"{kernel}_quantized", *args, repr(kind), int_tuple(order) if order else "None")

    return emit


CPU_EMITTER.add(O.MulMatOp, _products("mul_mat"))
CPU_EMITTER.add(O.MulMatIdOp, _products("mul_mat_id"))


@CPU_EMITTER.register(O.FlashAttnExtOp)
def _flash_attn_ext(e: CpuEmitter, op: O.FlashAttnExtOp) -> None:
    # ggml-cpu computes attention over a float16 KV cache its own way (kernels_ggml's docstring)
    f16 = all(isinstance(O.elem_of(v), Float16Type) for v in (op.k, op.v))
    if f16 and is_native(op):
        e.assign(op, "attention_f16", "self.native_lib", e.ref(op.q), e.ref(op.k), e.ref(op.v),
                 e.ref(op.mask), float_lit(op.scale.value.data))
        return
    e.assign(op, "flash_attn_ext_f16" if f16 else "flash_attn_ext", e.ref(op.q), e.ref(op.k), e.ref(op.v),
             e.ref(op.mask), float_lit(op.scale.value.data))


@CPU_EMITTER.register(O.SampleOp)
def _sample(e: CpuEmitter, op: O.SampleOp) -> None:
    # The sampler's step is a Python int; every other operand is an array (the kernel broadcasts
    # [1]-shaped parameters to the rows).
    args = [e.ref(op.logits), e.ref(op.key), f"int({e.ref(op.step)}[0])", *(e.ref(v) for v in op.params)]
    if op.prompt_counts is not None:
        args += [e.ref(op.prompt_counts), e.ref(op.output_counts)]
    if op.mask is not None:
        args.append(f"mask={e.ref(op.mask)}")
    e.assign(op, "sample", *args)


@CPU_EMITTER.register(func.ReturnOp)
def _return(e: CpuEmitter, op: func.ReturnOp) -> None:
    if not op.arguments:
        raise CpuTargetError("cpu target: an entry must return a tensor")
    e.out.line(f"return {', '.join(e.ref(v) for v in op.arguments)}")


@CPU_EMITTER.register(O.GatedDeltaNetSeqOp)
def _gated_delta_net_seq(e: CpuEmitter, op: O.GatedDeltaNetSeqOp) -> None:
    args = [e.ref(v) for v in op.operands]
    if op.state is None:
        args.append("None")
    if op.grouped is not None:
        args.append("grouped=True")
    e.assign(op, "gated_delta_net_seq", *args)


def _loop(e: CpuEmitter, op: O.GenerateOp | O.GenerateUntilOp | O.GenerateSampledOp) -> None:
    """`generate_loop(self.<step>, tokens, start, steps[, eos | key=, temperature=])`: the step
    is a method too."""
    step = op.callee.root_reference.data
    if step not in {fn.sym_name.data for fn in e.entries}:
        raise CpuTargetError(f"cpu target: {op.name}: no step function @{sanitize_label(step)}")
    args = [f"self.{step}", e.ref(op.tokens), e.ref(op.start), str(int(op.steps.value.data))]
    if isinstance(op, O.GenerateUntilOp):
        args.append(e.ref(op.eos))
    if isinstance(op, O.GenerateSampledOp):
        args += [f"key={e.ref(op.key)}", f"temperature={e.ref(op.temperature)}"]
    e.kernels_used.add("generate_loop")
    names = [e.locals.fresh(e.labels.get(r, "v")) for r in op.results]
    for r, n in zip(op.results, names):
        e.names[r] = n
    e.out.line(f"{', '.join(names)} = generate_loop({', '.join(args)})  # {type_comment(op.results[0].type)}")


CPU_EMITTER.add(O.GenerateOp, _loop)
CPU_EMITTER.add(O.GenerateUntilOp, _loop)
CPU_EMITTER.add(O.GenerateSampledOp, _loop)
#: The tensor-parallel ops (the collectives, the rank-dependent kernels) are printed in emit_tp.py.
CPU_EMITTER.include(TP_PRINTERS)


def emit_cpu(module: ModuleOp, model_name: str | None = None, native_library: str | None = None,
             native_entries: dict | None = None) -> str:
    """The generated numpy module for an op-level ``module`` (deterministic); ops marked
    `kernel = "native"` call the library `native_library` (a file name beside model.py), and
    the entries of `native_entries` (name -> EntrySource, printed into that library) are one
    native call per step."""
    emitter = CpuEmitter(module, model_name, native_library, native_entries)
    source = emitter.emit()
    check_generated(source, emitter.kernels_used, torch=emitter.ranks > 1, native=emitter.native)
    return source


def check_generated(source: str, kernels: set[str], torch: bool = False, native: bool = False) -> None:
    """Refuse generated code that imports anything but numpy and ml_dtypes (and torch, for the
    collectives of a tensor-parallel module; ctypes and os, for the native kernels' library),
    or lacks a kernel."""
    tree = ast.parse(source)
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    missing = sorted(set(kernels) - set(defined))
    if missing or len(defined) != len(set(defined)):
        raise CpuTargetError(f"cpu target: generated code lacks or repeats kernels (missing: {missing})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        for m in mods:
            allowed = ("numpy", "ml_dtypes", "__future__") + (("torch",) if torch else ()) + \
                (("ctypes", "os") if native else ())
            if m.split(".")[0] not in allowed:
                raise CpuTargetError(f"cpu target: generated code would import {m!r}")
