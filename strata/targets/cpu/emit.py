"""The CPU target: op-level IR -> one self-contained numpy module.

`CpuEmitter` is a printer with one handler per op-level op (registered with
`CPU_EMITTER`, keyed by op class) and no policy: every op becomes one Python statement
that calls the op's kernel, in program order. The generated module

* imports only ``numpy`` and ``ml_dtypes`` (never strata), and carries the source of
  just the kernels it calls, copied from :mod:`strata.semantics.kernels` (so each
  op's semantics is written down once in the repository);
* defines ``class Model``: ``__init__(weights)`` binds every ``op.param`` once to an
  attribute (a zero-copy view of the memory-mapped weight) and preallocates every
  ``op.state`` (the KV cache) from its IR type; one method per entry
  (``prefill(tokens, start)``, ``decode(token, pos)``) computes its host inputs with
  ``host_input`` and then runs the ops, with locals named after the IR values.

Model-supplied names (tensor names, the model name) are sanitized before they reach
the code: identifiers keep only ``[A-Za-z0-9_]``, and the only string literals are
``repr()`` of names that passed :func:`literal_name`. The output depends only on the
IR, so the same IR gives byte-identical source.

A dynamic dim (``?``) is the number of tokens of the call (``n_tokens``): the only
dynamic dim the op level has.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
from collections.abc import Callable, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, Float16Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from strata.dialects import op as O
from strata.ir import dtypes
from strata.ir.impls import Implementations
from strata.semantics import kernels as K
from strata.targets.cpu.kernel_library import KernelLibrary
from strata.targets.codegen import CodegenError, IndentedWriter, Namer, literal_name, sanitize_identifier, sanitize_label, value_labels


class CpuTargetError(CodegenError):
    """Op-level IR that the CPU target cannot print."""


# ---------------------------------------------------------------------------------------------
# Literals


def dtype_expr(elem: Attribute) -> str:
    """The numpy spelling of an element type (from the dtype table)."""
    found = dtypes.lookup(elem)
    if found is None or "cpu" not in found.spellings:
        raise CpuTargetError(f"cpu target: element type {elem} is not supported")
    return found.spelling("cpu")


def float_lit(x: float) -> str:
    x = float(x)
    if math.isnan(x):
        return "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "-float('inf')"
    return repr(x)


def int_tuple(values: Sequence[int]) -> str:
    items = [str(int(v)) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def type_comment(typ: Attribute) -> str:
    if isinstance(typ, TensorType):
        elem = typ.get_element_type()
        return f"{O.fmt_shape(typ.get_shape())} {elem}"
    return str(typ)


# ---------------------------------------------------------------------------------------------
# The printer


#: Module-level names of the generated code that locals and attributes must not shadow.
_MODULE_NAMES = {"np", "ml_dtypes", "Model", "annotations", "_bind", "MODEL_NAME", "N_CTX"}
#: Parameters and fixed locals of the entry methods.
_METHOD_NAMES = {"self", "tokens", "start", "token", "pos", "n_tokens"}
#: Attributes and methods of Model besides the bound params, state and constants.
_MODEL_ATTRS = {"reset", "weights", "PARAMS", "STATE", "OUTPUTS", "ENTRIES", "N_CTX", "MODEL_NAME"}


class CpuEmitter:
    """Prints an op-level module (one func.func per entry) as a numpy Python module."""

    def __init__(self, module: ModuleOp, model_name: str | None = None):
        self.module = module
        self.model_name = sanitize_label(model_name) if model_name else None
        self.kernels_used: set[str] = set()
        self.reserved = set(_MODULE_NAMES) | set(dir(K)) | set(dir(builtins)) | set(keyword.kwlist)
        # Model attributes: params, state and constants, by a key that identifies them.
        self.attr_namer = Namer(self.reserved | _MODEL_ATTRS)
        self.params: dict[str, tuple[str, TensorType]] = {}  # ggml name -> (attr, type)
        self.param_reads: dict[str, tuple[str, tuple[str, tuple[int, ...]] | None]] = {}  # -> (stored, conversion)
        self.states: dict[str, tuple[str, TensorType]] = {}  # state name -> (attr, type)
        self.constants: list[tuple[str, O.ConstantOp]] = []
        self.entries: list[func.FuncOp] = []
        # Per-entry state, set by print_entry.
        self.out = IndentedWriter()
        self.names: dict[SSAValue, str] = {}
        self.labels: dict[SSAValue, str] = {}
        self.locals = Namer(set())
        self.inputs: dict[tuple[str, Attribute], str] = {}
        self.n_kv = 0
        self.last_use: dict[SSAValue, Operation] = {}

    # -- driver ---------------------------------------------------------------------------

    def emit(self) -> str:
        try:
            self.module.verify()
        except VerifyException as e:
            raise CpuTargetError(f"cpu target: invalid op-level IR: {e}") from None
        self.entries = [o for o in self.module.ops if isinstance(o, func.FuncOp)]
        if not self.entries:
            raise CpuTargetError("cpu target: the module has no func.func entry")
        n_ctx = {int(fn.attributes["op.n_ctx"].value.data) for fn in self.entries if "op.n_ctx" in fn.attributes}
        if len(n_ctx) > 1:
            raise CpuTargetError(f"cpu target: entries disagree on op.n_ctx ({sorted(n_ctx)})")
        self.n_ctx = n_ctx.pop() if n_ctx else None

        methods = IndentedWriter()
        methods.level = 1
        entry_names: set[str] = set()
        for fn in self.entries:
            name = fn.sym_name.data
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,99}", name) or name in self.reserved | _MODEL_ATTRS | _METHOD_NAMES:
                raise CpuTargetError(f"cpu target: entry name {sanitize_label(name)!r} cannot be a method name")
            if name in entry_names:
                raise CpuTargetError(f"cpu target: two entries named {name!r}")
            entry_names.add(name)
        self.attr_namer.taken |= entry_names  # a param named like an entry must not hide it
        for fn in self.entries:
            self.print_entry(fn, methods)

        out = IndentedWriter()
        self.print_header(out)
        library = KernelLibrary()
        for name in library.closure(self.kernels_used | {"host_input"}):
            out.line()
            out.line()
            out.block(library.text(name))
        out.line()
        out.line()
        self.print_bind(out)
        out.line()
        out.line()
        self.print_class(out, methods)
        return out.text()

    # -- module parts ---------------------------------------------------------------------

    def print_header(self, out: IndentedWriter) -> None:
        entries = ", ".join(fn.sym_name.data for fn in self.entries)
        title = f"Model {self.model_name}" if self.model_name else "A model"
        out.line(f'"""{title} compiled by strata for the CPU (numpy); generated, do not edit.')
        out.line()
        out.line("    model = Model(weights)   # weights: ggml tensor name -> array (mapping or getter)")
        for fn in self.entries:
            out.line(f"    logits = model.{self._signature(fn)}")
        out.line()
        out.line(f"Entries: {entries}. Needs only numpy and ml_dtypes. The kernels below are copied")
        out.line("from strata.semantics.kernels; everything after them is printed from the op-level IR.")
        out.line('"""')
        out.line()
        out.line("from __future__ import annotations")
        out.line()
        out.line("import ml_dtypes  # noqa: F401  (bfloat16 for numpy)")
        out.line("import numpy as np")
        out.line()
        out.line(f"MODEL_NAME = {literal_name(self.model_name, 'model name') if self.model_name else None}")
        out.line(f"N_CTX = {self.n_ctx}")

    def print_bind(self, out: IndentedWriter) -> None:
        out.line("def _bind(weights, name, shape, dtype, convert=None, args=()):")
        with out.indented():
            out.line('"""Weight `name` from `weights` (a mapping or a getter), `convert(array, args)` if given, as an')
            out.line('array of `shape`: a view of the caller\'s (memory-mapped) array unless converted or retyped."""')
            out.line("get = getattr(weights, 'get', None)")
            out.line("array = get(name) if get is not None else weights(name) if callable(weights) else weights[name]")
            out.line("if array is None:")
            with out.indented():
                out.line("raise KeyError(f'weight {name!r} is missing')")
            out.line("array = np.asarray(array)")
            out.line("array = array if convert is None else convert(array, args)")
            out.line("if array.shape != shape:")
            with out.indented():
                out.line("raise ValueError(f'weight {name!r} has shape {list(array.shape)}, expected {list(shape)}')")
            out.line("if array.dtype != dtype:")
            with out.indented():
                out.line("array = array.astype(dtype)")
            out.line("return array")

    def print_class(self, out: IndentedWriter, methods: IndentedWriter) -> None:
        out.line("class Model:")
        with out.indented():
            out.line('"""The compiled model: bound weights, the state buffers and one method per entry."""')
            out.line()
            out.line("N_CTX = N_CTX")
            out.line("MODEL_NAME = MODEL_NAME")
            out.line(f"ENTRIES = {tuple(fn.sym_name.data for fn in self.entries)!r}")
            out.line("PARAMS = (")
            with out.indented():
                for name in self.params:
                    out.line(f"{literal_name(name, 'tensor name')},")
            out.line(")")
            out.line("STATE = {")
            with out.indented():
                for name, (_, typ) in self.states.items():
                    out.line(f"{literal_name(name, 'state name')}: ({int_tuple(typ.get_shape())}, "
                             f"{dtype_expr(typ.get_element_type())}),")
            out.line("}")
            out.line("OUTPUTS = {  # entry -> (shape, dtype) of its result; None: the number of tokens")
            with out.indented():
                for fn in self.entries:
                    (typ,) = fn.function_type.outputs.data
                    dims = ", ".join("None" if d == DYNAMIC_INDEX else str(d) for d in typ.get_shape())
                    dims += "," if len(typ.get_shape()) == 1 else ""
                    out.line(f"{fn.sym_name.data!r}: (({dims}), {dtype_expr(typ.get_element_type())}),")
            out.line("}")
            out.line()
            out.line("def __init__(self, weights):")
            with out.indented():
                for name, (attr, typ) in self.params.items():
                    stored, conv = self.param_reads[name]  # a conversion is done once, here, at load
                    convert = f", {CPU_PARAM_CONVERSIONS[conv[0]]}, {int_tuple(conv[1])}" if conv else ""
                    out.line(f"self.{attr} = _bind(weights, {literal_name(stored, 'tensor name')}, "
                             f"{int_tuple(typ.get_shape())}, {dtype_expr(typ.get_element_type())}{convert})")
                for attr, op in self.constants:
                    typ = op.result.type
                    elem = typ.get_element_type()
                    conv = float_lit if dtypes.is_float(elem) else (lambda v: str(int(v)))
                    values = ", ".join(conv(v) for v in op.value.get_values())
                    out.line(f"self.{attr} = np.array([{values}], dtype={dtype_expr(elem)})"
                             f".reshape({int_tuple(typ.get_shape())})")
                if not (self.params or self.constants):
                    out.line("del weights")
                out.line("self.reset()")
            out.line()
            out.line("def reset(self):")
            with out.indented():
                out.line('"""Fresh, zeroed state buffers (the KV cache)."""')
                for name, (attr, typ) in self.states.items():
                    out.line(f"self.{attr} = np.zeros({int_tuple(typ.get_shape())}, "
                             f"dtype={dtype_expr(typ.get_element_type())})")
                if not self.states:
                    out.line("pass")
        out.lines.extend(methods.lines)

    # -- entries --------------------------------------------------------------------------

    def _signature(self, fn: func.FuncOp) -> str:
        name = fn.sym_name.data
        return f"{name}(token, pos)" if name == "decode" else f"{name}(tokens, start)"

    def print_entry(self, fn: func.FuncOp, out: IndentedWriter) -> None:
        self.out = out
        self.names = {}
        self.labels = value_labels(fn)
        self.locals = Namer(self.reserved | _METHOD_NAMES)
        self.inputs = {}
        self.n_kv = int(fn.attributes["op.n_kv"].value.data) if "op.n_kv" in fn.attributes else self.n_ctx
        if self.n_kv is None:
            raise CpuTargetError(f"cpu target: entry @{fn.sym_name.data} has no op.n_kv attribute")
        if len(fn.function_type.outputs.data) != 1 or not isinstance(fn.function_type.outputs.data[0], TensorType):
            raise CpuTargetError(f"cpu target: entry @{fn.sym_name.data} must return one tensor")
        if fn.function_type.inputs.data:
            raise CpuTargetError(f"cpu target: entry @{fn.sym_name.data} must take no arguments "
                                 "(host data comes from op.input)")
        ops = list(fn.body.walk())
        self.last_use = {}
        for op in ops:
            for v in op.operands:
                self.last_use[v] = op

        out.line()
        name = fn.sym_name.data
        if name == "decode":
            out.line("def decode(self, token, pos):")
        else:
            out.line(f"def {name}(self, tokens, start):")
        with out.indented():
            if name == "decode":
                out.line('"""Entry @decode: one token at position `pos`; writes its cache rows, returns its logits."""')
            else:
                out.line(f'"""Entry @{name}: `tokens` from position `start`; writes their cache rows, returns the '
                         'logits of the rows the graph outputs."""')
            if name == "decode":
                out.line("tokens = np.asarray([token], dtype=np.int32)")
                out.line("start = int(pos)")
            else:
                out.line("tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)")
                out.line("start = int(start)")
            out.line("n_tokens = tokens.shape[0]")
            if self.n_ctx is not None:
                out.line(f"if n_tokens < 1 or start < 0 or start + n_tokens > {self.n_ctx}:")
                with out.indented():
                    out.line(f"raise ValueError(f'{name}: {{n_tokens}} tokens at position {{start}} do not fit "
                             f"the context of {self.n_ctx}')")
            for op in ops:
                if op is fn:
                    continue
                self.print_op(op)

    def print_op(self, op: Operation) -> None:
        handler = CPU_EMITTER.get(type(op))
        if handler is None:
            raise CpuTargetError(f"cpu target: no handler for '{op.name}'")
        handler(self, op)
        if isinstance(op, func.ReturnOp):
            return
        # Drop each local after its last use, so that a long entry keeps only live tensors.
        dead = [self.names[v] for v in op.operands if self.last_use.get(v) is op and self._is_local(v)]
        dead = list(dict.fromkeys(dead))
        if dead:
            self.out.line(f"del {', '.join(dead)}")

    def _is_local(self, v: SSAValue) -> bool:
        name = self.names.get(v, "")
        # Attributes (params, state, constants) stay; host inputs are shared by several ops.
        return name.isidentifier() and not isinstance(v.owner, O.InputOp)

    # -- helpers for handlers ---------------------------------------------------------------

    def ref(self, v: SSAValue | None) -> str:
        if v is None:
            return "None"
        return self.names[v]

    def shape(self, v: SSAValue) -> str:
        dims = v.type.get_shape()
        items = ["n_tokens" if d == DYNAMIC_INDEX else str(d) for d in dims]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def assign(self, op: Operation, kernel: str, *args: str) -> None:
        """``<result> = kernel(args)  # type``, naming the result after its IR value."""
        self.kernels_used.add(kernel)
        res = op.results[0]
        name = self.locals.fresh(self.labels.get(res, "v"))
        self.names[res] = name
        comment = type_comment(res.type)
        label = op.attributes.get("name")
        if label is not None and sanitize_identifier(label.data) != name:
            # The ggml name, verbatim when it is plain (a comment must never end early).
            comment = f"{sanitize_label(label.data)}: {comment}"
        self.out.line(f"{name} = {kernel}({', '.join(args)})  # {comment}")

    # -- leaves ---------------------------------------------------------------------------

    def _bind_attribute(self, table: dict, name: str, what: str, result: SSAValue) -> None:
        """A param or state is one attribute of the Model, whatever the ops that name it."""
        literal_name(name, f"{what} name")
        if name not in table:
            table[name] = (self.attr_namer.fresh(name), result.type)
        elif table[name][1] != result.type:
            raise CpuTargetError(f"cpu target: {what} '{name}' is used with two types ({table[name][1]} and {result.type})")
        self.names[result] = "self." + table[name][0]


#: op class -> its printer: (emitter, op) -> None, writing the op's statement.
CPU_EMITTER: Implementations[Callable[[CpuEmitter, Operation], None]] = Implementations("cpu emitter")


#: op.param's conversions (`O.PARAM_CONVERSIONS`) -> the kernel the generated `_bind` applies
#: at load, as `kernel(array, convert_args)`.
CPU_PARAM_CONVERSIONS: dict[str, str] = {"plus_one": "convert_plus_one", "neg_exp": "convert_neg_exp",
                                         "squeeze": "convert_squeeze", "ungroup_rows": "convert_ungroup_rows"}


@CPU_EMITTER.register(O.ParamOp)
def _param(e: CpuEmitter, op: O.ParamOp) -> None:
    name, read = op.tensor_name.data, (op.stored_name, op.conversion)
    if e.param_reads.setdefault(name, read) != read:
        raise CpuTargetError(f"cpu target: tensor '{sanitize_label(name)}' is read two ways")
    if read[1] is not None:  # the verifier admits only O.PARAM_CONVERSIONS, and each has a kernel here
        e.kernels_used.add(CPU_PARAM_CONVERSIONS[read[1][0]])
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
    e.assign(op, "host_input", repr(kind), "tokens", "start", str(e.n_kv))
    e.inputs[key] = e.names[op.result]


# compute ops

#: Ops printed as `kernel(operands...)`, with no attributes: op class -> kernel name.
PLAIN_KERNELS: dict[type[Operation], str] = {
    O.GetRowsOp: "get_rows", O.MulOp: "mul", O.AddOp: "add", O.TransposeOp: "transpose",
    O.CpyOp: "cpy", O.ArgmaxOp: "argmax", O.SwigluOp: "swiglu",
    O.DivOp: "div", O.SiluOp: "silu", O.SigmoidOp: "sigmoid", O.SoftplusOp: "softplus", O.SumRowsOp: "sum_rows",
    O.SsmConvOp: "ssm_conv",
}


def _plain(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    return lambda e, op: e.assign(op, kernel, *(e.ref(v) for v in op.operands))


for _cls, _kernel in PLAIN_KERNELS.items():
    CPU_EMITTER.add(_cls, _plain(_kernel))

#: Ops printed as `kernel(src, result shape)`: op class -> kernel name.
SHAPED_KERNELS: dict[type[Operation], str] = {O.ReshapeOp: "reshape", O.ContOp: "cont", O.RepeatOp: "repeat"}


def _shaped(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    return lambda e, op: e.assign(op, kernel, e.ref(op.operands[0]), e.shape(op.results[0]))


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


def _products(kernel: str) -> Callable[[CpuEmitter, Operation], None]:
    """MUL_MAT / MUL_MAT_ID: plain, or with ggml-cpu's quantized activations (`act`)."""

    def emit(e: CpuEmitter, op: Operation) -> None:
        args = [e.ref(v) for v in op.operands]
        quant = op.activation_quant  # type: ignore[attr-defined]
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
    e.assign(op, "flash_attn_ext_f16" if f16 else "flash_attn_ext", e.ref(op.q), e.ref(op.k), e.ref(op.v),
             e.ref(op.mask), float_lit(op.scale.value.data))


@CPU_EMITTER.register(func.ReturnOp)
def _return(e: CpuEmitter, op: func.ReturnOp) -> None:
    if len(op.arguments) != 1:
        raise CpuTargetError("cpu target: an entry must return exactly one tensor")
    e.out.line(f"return {e.ref(op.arguments[0])}")


def emit_cpu(module: ModuleOp, model_name: str | None = None) -> str:
    """The generated numpy module for an op-level ``module`` (deterministic)."""
    emitter = CpuEmitter(module, model_name)
    source = emitter.emit()
    check_generated(source, emitter.kernels_used | {"host_input"})
    return source


def check_generated(source: str, kernels: set[str]) -> None:
    """Refuse generated code that imports anything but numpy and ml_dtypes, or lacks a kernel."""
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
            if m.split(".")[0] not in ("numpy", "ml_dtypes", "__future__"):
                raise CpuTargetError(f"cpu target: generated code would import {m!r}")
