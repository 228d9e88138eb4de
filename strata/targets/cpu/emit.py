"""The CPU target: op-level IR -> one self-contained numpy module.

`CpuEmitter` is a printer with one handler per op-level op (registered with
`CPU_EMITTER`, keyed by op class) and no policy: every op becomes one Python statement
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
  entry with seed 003's arguments by name (``decode_rows(tokens, positions)``, ...) checked
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
from strata.targets.cpu.emit_entries import METHOD_NAMES, arg_spec, argument_names, entry_layout, entry_tables, method_head, signature
from strata.targets.cpu.kernel_library import CPU_KERNEL_MODULES, KernelLibrary
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
_MODULE_NAMES = {"np", "ml_dtypes", "Model", "annotations", "_bind", "_bind_piece", "MODEL_NAME", "N_CTX", "RANKS",
                 "torch", "dist", "tp_rank", "all_reduce", "all_gather"}
#: Attributes and methods of Model besides the bound params, state and constants.
_MODEL_ATTRS = {"reset", "weights", "PARAMS", "STATE", "OUTPUTS", "ENTRIES", "N_CTX", "MODEL_NAME", "RANKS", "group",
                "rank", "ARGS", "RESULTS", "LAYOUTS"}


class CpuEmitter:
    """Prints an op-level module (one func.func per entry) as a numpy Python module."""

    def __init__(self, module: ModuleOp, model_name: str | None = None):
        self.module = module
        self.model_name = sanitize_label(model_name) if model_name else None
        self.kernels_used: set[str] = set()
        self.reserved = set(_MODULE_NAMES) | set(dir(builtins)) | set(keyword.kwlist)
        self.reserved |= {name for m in CPU_KERNEL_MODULES for name in dir(m)}
        # Model attributes: params, state and constants, by a key that identifies them.
        self.attr_namer = Namer(self.reserved | _MODEL_ATTRS)
        self.params: dict[str, tuple[str, TensorType]] = {}  # ggml name -> (attr, type)
        self.param_reads: dict[str, tuple] = {}  # -> (stored, conversion, split piece)
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
        self.layout: dict | None = None
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
        ranks = {int(fn.attributes["op.ranks"].value.data) if "op.ranks" in fn.attributes else 1 for fn in self.entries}
        if len(ranks) > 1:
            raise CpuTargetError(f"cpu target: entries disagree on op.ranks ({sorted(ranks)})")
        self.ranks = ranks.pop()

        methods = IndentedWriter()
        methods.level = 1
        entry_names: set[str] = set()
        for fn in self.entries:
            name = fn.sym_name.data
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,99}", name) or name in self.reserved | _MODEL_ATTRS | METHOD_NAMES:
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
        for name in library.closure(self.kernels_used):
            out.line()
            out.line()
            out.block(library.text(name))
        if self.ranks > 1:
            from strata.targets.cpu.emit_collectives import tp_functions

            for text in tp_functions():
                out.line()
                out.line()
                out.block(text)
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
            out.line(f"    logits = model.{signature(fn, self.reserved)}")
        out.line()
        out.line(f"Entries: {entries}. Needs only numpy and ml_dtypes. The kernels below are copied")
        out.line("from strata.semantics.kernels (and strata.semantics.sampling); everything after them is printed")
        out.line("from the op-level IR.")
        out.line('"""')
        out.line()
        out.line("from __future__ import annotations")
        out.line()
        out.line("import ml_dtypes  # noqa: F401  (bfloat16 for numpy)")
        out.line("import numpy as np")
        if self.ranks > 1:  # a tensor-parallel program: collectives on torch.distributed
            out.line("import torch")
            out.line("import torch.distributed as dist")
        out.line()
        out.line(f"MODEL_NAME = {literal_name(self.model_name, 'model name') if self.model_name else None}")
        out.line(f"N_CTX = {self.n_ctx}")
        out.line(f"RANKS = {self.ranks}")

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
            out.line("if shape is None:  # the whole stored tensor, cut by _bind_piece")
            with out.indented():
                out.line("return array")
            out.line("if array.shape != shape:")
            with out.indented():
                out.line("raise ValueError(f'weight {name!r} has shape {list(array.shape)}, expected {list(shape)}')")
            out.line("if array.dtype != dtype:")
            with out.indented():
                out.line("array = array.astype(dtype)")
            out.line("return array")
        if self.ranks > 1:
            from strata.targets.cpu.emit_collectives import BIND_PIECE

            out.line()
            out.line()
            out.block(BIND_PIECE.rstrip())

    def print_class(self, out: IndentedWriter, methods: IndentedWriter) -> None:
        out.line("class Model:")
        with out.indented():
            out.line('"""The compiled model: bound weights, the state buffers and one method per entry."""')
            out.line()
            out.line("N_CTX = N_CTX")
            out.line("MODEL_NAME = MODEL_NAME")
            public = [fn for fn in self.entries if fn.sym_visibility is None or fn.sym_visibility.data != "private"]
            out.line(f"ENTRIES = {tuple(fn.sym_name.data for fn in public)!r}")
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
            for indent, text in entry_tables(self.entries, self.reserved, dtype_expr):
                out.line("    " * indent + text)
            out.line()
            out.line("def __init__(self, weights, group=None):" if self.ranks > 1 else "def __init__(self, weights):")
            with out.indented():
                if self.ranks > 1:
                    out.line("self.group = group  # a torch.distributed process group of RANKS ranks")
                    out.line("self.rank = tp_rank(group, RANKS)")
                for name, (attr, typ) in self.params.items():
                    stored, conv, piece = self.param_reads[name]  # a conversion is done once, here, at load
                    convert = f", {CPU_PARAM_CONVERSIONS[conv[0]]}, {int_tuple(conv[1])}" if conv else ""
                    where = f"{literal_name(stored, 'tensor name')}, {int_tuple(typ.get_shape())}, " \
                            f"{dtype_expr(typ.get_element_type())}"
                    if piece is None:
                        out.line(f"self.{attr} = _bind(weights, {where}{convert})")
                    else:
                        axis, pieces, parts = piece
                        out.line(f"self.{attr} = _bind_piece(weights, {where}, ({axis}, {pieces}, {int_tuple(parts)}), "
                                 f"self.rank * {pieces} // RANKS{convert})")
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

    def print_entry(self, fn: func.FuncOp, out: IndentedWriter) -> None:
        self.out = out
        self.names = {}
        self.labels = value_labels(fn)
        self.locals = Namer(self.reserved | METHOD_NAMES)
        self.inputs = {}
        outs = fn.function_type.outputs.data
        if not outs or not all(isinstance(t, TensorType) for t in outs):
            raise CpuTargetError(f"cpu target: entry @{fn.sym_name.data} must return tensors")
        if fn.function_type.inputs.data:
            self.print_entry_with_arguments(fn, out)
            return
        self.n_kv = int(fn.attributes["op.n_kv"].value.data) if "op.n_kv" in fn.attributes else self.n_ctx
        if self.n_kv is None:
            raise CpuTargetError(f"cpu target: entry @{fn.sym_name.data} has no op.n_kv attribute")
        ops = list(fn.body.walk())
        self.last_use = {}
        for op in ops:
            for v in op.operands:
                self.last_use[v] = op

        out.line()
        self.layout = entry_layout(fn)
        if self.layout is not None:
            self.locals.taken |= {n for n, _, _ in arg_spec(fn, self.reserved)}
        head, body, kernel = method_head(fn, self.reserved, self.n_ctx)
        self.kernels_used.add(kernel)
        out.line(head)
        with out.indented():
            for text in body:
                out.line(text)
            for op in ops:
                if op is not fn:
                    self.print_op(op)

    def print_entry_with_arguments(self, fn: func.FuncOp, out: IndentedWriter) -> None:
        """An entry whose inputs are its arguments (static shapes; no host inputs, no state)."""
        name = fn.sym_name.data
        params = argument_names(fn, self.reserved)
        self.locals.taken |= set(params)
        for op in fn.body.walk():
            if isinstance(op, (O.InputOp, O.StateOp)):
                raise CpuTargetError(f"cpu target: entry @{name} takes arguments and cannot also read "
                                     f"'{op.name}' (host inputs and state go with tokens and a position)")
        self.last_use = {v: op for op in fn.body.walk() for v in op.operands}
        out.line()
        out.line(f"def {name}(self, {', '.join(params)}):")
        with out.indented():
            out.line(f'"""Entry @{name}: {", ".join(params)} as the IR types them; returns its result."""')
            for param, arg in zip(params, fn.body.block.args):
                typ = arg.type
                if not isinstance(typ, TensorType) or DYNAMIC_INDEX in typ.get_shape():
                    raise CpuTargetError(f"cpu target: entry @{name}: argument {param} must be a tensor of static "
                                         f"shape, got {typ}")
                shape = int_tuple(typ.get_shape())
                out.line(f"{param} = np.asarray({param}, dtype={dtype_expr(typ.get_element_type())})")
                out.line(f"if {param}.shape != {shape}:")
                with out.indented():
                    out.line(f"raise ValueError(f'{name}: {param} has shape {{list({param}.shape)}}, expected "
                             f"{list(typ.get_shape())}')")
                self.names[arg] = param
            for op in fn.body.walk():
                if op is not fn:
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
    name, read = op.tensor_name.data, (op.stored_name, op.conversion, op.piece)
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
    if e.layout is not None:
        shape = tuple(-1 if d == DYNAMIC_INDEX else d for d in op.result.type.get_shape())
        e.assign(op, "call_input", repr(kind), "call", int_tuple(shape))
    else:
        e.assign(op, "host_input", repr(kind), "tokens", "start", str(e.n_kv))
    e.inputs[key] = e.names[op.result]


# compute ops

#: Ops printed as `kernel(operands...)`, with no attributes: op class -> kernel name.
PLAIN_KERNELS: dict[type[Operation], str] = {
    O.GetRowsOp: "get_rows", O.MulOp: "mul", O.AddOp: "add", O.TransposeOp: "transpose",
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


@CPU_EMITTER.register(O.SampleOp)
def _sample(e: CpuEmitter, op: O.SampleOp) -> None:
    # The sampler's step is a Python int; every other operand is an array (the kernel broadcasts
    # [1]-shaped parameters to the rows).
    args = [e.ref(op.logits), e.ref(op.key), f"int({e.ref(op.step)}[0])", *(e.ref(v) for v in op.params)]
    if op.prompt_counts is not None:
        args += [e.ref(op.prompt_counts), e.ref(op.output_counts)]
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


def _loop(e: CpuEmitter, op: O.GenerateOp | O.GenerateUntilOp) -> None:
    """`generate_loop(self.<step>, tokens, start, steps[, eos])`: the step is a method too."""
    step = op.callee.root_reference.data
    if step not in {fn.sym_name.data for fn in e.entries}:
        raise CpuTargetError(f"cpu target: {op.name}: no step function @{sanitize_label(step)}")
    args = [f"self.{step}", e.ref(op.tokens), e.ref(op.start), str(int(op.steps.value.data))]
    if isinstance(op, O.GenerateUntilOp):
        args.append(e.ref(op.eos))
    e.kernels_used.add("generate_loop")
    names = [e.locals.fresh(e.labels.get(r, "v")) for r in op.results]
    for r, n in zip(op.results, names):
        e.names[r] = n
    e.out.line(f"{', '.join(names)} = generate_loop({', '.join(args)})  # {type_comment(op.results[0].type)}")


CPU_EMITTER.add(O.GenerateOp, _loop)
CPU_EMITTER.add(O.GenerateUntilOp, _loop)


def emit_cpu(module: ModuleOp, model_name: str | None = None) -> str:
    """The generated numpy module for an op-level ``module`` (deterministic)."""
    emitter = CpuEmitter(module, model_name)
    source = emitter.emit()
    check_generated(source, emitter.kernels_used, torch=emitter.ranks > 1)
    return source


def check_generated(source: str, kernels: set[str], torch: bool = False) -> None:
    """Refuse generated code that imports anything but numpy and ml_dtypes (and torch, for the
    collectives of a tensor-parallel module), or lacks a kernel."""
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
            if m.split(".")[0] not in ("numpy", "ml_dtypes", "__future__") + (("torch",) if torch else ()):
                raise CpuTargetError(f"cpu target: generated code would import {m!r}")


# Tensor parallelism: the collectives print as calls of the functions a tensor-parallel module
# carries (strata/targets/cpu/collectives.py), on the Model's group.


def _call(e: CpuEmitter, op: Operation, fn: str, *args: str) -> None:
    """``<result> = fn(args)`` for a function that is not one of the kernels."""
    res = op.results[0]
    name = e.locals.fresh(e.labels.get(res, "v"))
    e.names[res] = name
    e.out.line(f"{name} = {fn}({', '.join(args)})  # {type_comment(res.type)}")


@CPU_EMITTER.register(O.AllReduceOp)
def _all_reduce(e: CpuEmitter, op: O.AllReduceOp) -> None:
    # In place when nothing reads the operand after the sum (a computed local, not a weight).
    inplace = e.last_use.get(op.src) is op and e._is_local(op.src) and not isinstance(op.src.owner, O.LEAF_OPS)
    _call(e, op, "all_reduce", e.ref(op.src), "self.group", str(inplace))


@CPU_EMITTER.register(O.AllGatherOp)
def _all_gather(e: CpuEmitter, op: O.AllGatherOp) -> None:
    _call(e, op, "all_gather", e.ref(op.src), str(int(op.axis.value.data)), "self.group", "RANKS")


@CPU_EMITTER.register(O.GetRowsShardedOp)
def _get_rows_sharded(e: CpuEmitter, op: O.GetRowsShardedOp) -> None:
    e.assign(op, "get_rows_sharded", e.ref(op.table), e.ref(op.ids), "self.rank")
