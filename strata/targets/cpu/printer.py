"""The CPU target's printer: `CpuEmitter` walks an op-level module and prints one numpy Python
module, one statement per op by the op's handler in `CPU_EMITTER` (the handlers: `emit.py`
for the kernels' ops, `emit_tp.py` for the collectives); literals and the names the generated
code reserves. `strata.targets.cpu.emit` is the entry (`emit_cpu`).
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from collections.abc import Callable, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from strata.dialects import op as O
from strata.ir import dtypes
from strata.ir.ggml_types import GGML_TYPE_IDS, ggml_type
from strata.ir.impls import Implementations
from strata.passes.cpu_native_kernels import is_native
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
                 "torch", "dist", "tp_rank", "all_reduce", "all_gather", "ctypes", "os", "NATIVE_LIBRARY"}
#: Attributes and methods of Model besides the bound params, state and constants.
_MODEL_ATTRS = {"reset", "weights", "PARAMS", "STATE", "OUTPUTS", "ENTRIES", "N_CTX", "MODEL_NAME", "RANKS", "group",
                "rank", "ARGS", "RESULTS", "LAYOUTS", "native_lib", "SLOT_STATES", "read_slot", "write_slot"}


class CpuEmitter:
    """Prints an op-level module (one func.func per entry) as a numpy Python module."""

    def __init__(self, module: ModuleOp, model_name: str | None = None, native_library: str | None = None,
                 native_entries: dict | None = None):
        self.module = module
        #: Entries printed as C++ into the native library (entry name -> its EntrySource): each
        #: runs as one native call, or as Python when the weights are not bound as it reads them.
        self.native_entries = dict(native_entries or {})
        #: The file name of the native kernels' library beside model.py (ops marked
        #: `kernel = "native"` call it), and the params bound as packed blocks: name -> ggml type.
        self.native_library = native_library
        self.native_params: dict[str, str] = {}
        self.native = False
        self.model_name = sanitize_label(model_name) if model_name else None
        self.kernels_used: set[str] = set()
        self.reserved = set(_MODULE_NAMES) | set(dir(builtins)) | set(keyword.kwlist)
        self.kernel_names = {name for m in CPU_KERNEL_MODULES for name in dir(m)}
        self.reserved |= self.kernel_names
        # Model attributes: params, state and constants, by a key that identifies them.
        self.attr_namer = Namer(self.reserved | _MODEL_ATTRS)
        self.params: dict[str, tuple[str, TensorType]] = {}  # ggml name -> (attr, type)
        self.param_reads: dict[str, tuple] = {}  # -> (stored, conversion, split piece)
        self.states: dict[str, tuple[str, TensorType]] = {}  # state name -> (attr, type)
        self.slot_states: set[str] = set()  # states written one row per sequence slot (by `state_write`)
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
        self.native = is_native(self.module) or any(is_native(o) for o in self.module.walk())
        if self.native:
            self.kernels_used.add("load_native_kernels")
        if self.native_entries:
            self.kernels_used |= {"bind_native_entry", "native_addresses", "run_native_entry"}
        if self.native and self.native_library is None:
            raise CpuTargetError("cpu target: the module has ops marked kernel = \"native\" but no native library "
                                 "was built for it")
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
        # A method is reached as self.<name> only, so it may share a kernel's name (the entry
        # `sample` and the sampler's kernel `sample`, which the methods call as a module function).
        method_reserved = (self.reserved - self.kernel_names) | _MODULE_NAMES | _MODEL_ATTRS | METHOD_NAMES
        for fn in self.entries:
            name = fn.sym_name.data
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,99}", name) or name in method_reserved:
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
        if self.native:
            out.line("import os")
        if self.ranks > 1:  # a tensor-parallel program: collectives on torch.distributed
            out.line("import torch")
            out.line("import torch.distributed as dist")
        out.line()
        out.line(f"MODEL_NAME = {literal_name(self.model_name, 'model name') if self.model_name else None}")
        out.line(f"N_CTX = {self.n_ctx}")
        out.line(f"RANKS = {self.ranks}")
        if self.native:
            out.line("# The native kernels, compiled with this module (a content-addressed name, beside it).")
            out.line(f"NATIVE_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "
                     f"{literal_name(self.native_library, 'library name')})")

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
            # The states that keep one row per sequence slot (a hybrid's conv and Gated DeltaNet
            # state): what a program reads and writes to save and restore one sequence's state.
            slot_states = "".join(f"{literal_name(name, 'state name')}, " for name in self.states
                                  if name in self.slot_states)
            out.line(f"SLOT_STATES = ({slot_states.rstrip()})")
            for indent, text in entry_tables(self.entries, self.reserved, dtype_expr):
                out.line("    " * indent + text)
            out.line()
            head = "self, weights, group=None" if self.ranks > 1 else "self, weights"
            out.line(f"def __init__({head}, threads=None):" if self.native else f"def __init__({head}):")
            with out.indented():
                if self.native:
                    out.line("self.native_lib = load_native_kernels(NATIVE_LIBRARY, threads)  # None: this process's cores")
                if self.ranks > 1:
                    out.line("self.group = group  # a torch.distributed process group of RANKS ranks")
                    out.line("self.rank = tp_rank(group, RANKS)")
                for name, (attr, typ) in self.params.items():
                    stored, conv, piece = self.param_reads[name]  # a conversion is done once, here, at load
                    convert = f", {CPU_PARAM_CONVERSIONS[conv[0]]}, {int_tuple(conv[1])}" if conv else ""
                    where = f"{literal_name(stored, 'tensor name')}, {int_tuple(typ.get_shape())}, " \
                            f"{dtype_expr(typ.get_element_type())}"
                    if name in self.native_params:  # its packed blocks, else (a store of arrays) its values
                        kind = ggml_type(self.native_params[name])
                        shape = typ.get_shape()
                        out.line(f"self.{attr} = bind_packed(weights, {literal_name(stored, 'tensor name')}, "
                                 f"{GGML_TYPE_IDS[kind.name]}, {int_tuple(shape)}, {kind.row_bytes(shape[-1])})")
                        out.line(f"if self.{attr} is None:")
                        out.line(f"    self.{attr} = _bind(weights, {where}{convert})")
                    elif piece is None:
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
                for entry, src in sorted(self.native_entries.items()):  # one native call per step
                    attrs = ", ".join(f"self.{self.params[w][0]}" for w in src.weights)
                    out.line(f"self._entry_{entry} = bind_native_entry(self.native_lib, {src.function!r}, "
                             f"({attrs},), {tuple(src.kinds)!r})")
                out.line("self.reset()")
            out.line()
            out.line("def reset(self):")
            with out.indented():
                out.line('"""Fresh, zeroed state buffers (the KV cache)."""')
                for name, (attr, typ) in self.states.items():
                    out.line(f"self.{attr} = np.zeros({int_tuple(typ.get_shape())}, "
                             f"dtype={dtype_expr(typ.get_element_type())})")
                for entry, src in sorted(self.native_entries.items()):
                    attrs = ", ".join(f"self.{self.states[n][0]}" for n in src.states)
                    out.line(f"self._entry_{entry}_states = native_addresses(({attrs},))")
                if not self.states and not self.native_entries:
                    out.line("pass")
            self.print_slot_methods(out)
        out.lines.extend(methods.lines)

    def print_slot_methods(self, out: IndentedWriter) -> None:
        """read_slot / write_slot: one sequence slot's rows of the SLOT_STATES, saved and restored."""
        slot_states = [(name, attr) for name, (attr, _) in self.states.items() if name in self.slot_states]
        out.line()
        out.line("def read_slot(self, slot):")
        with out.indented():
            out.line('"""A copy of sequence slot `slot`\'s row of each SLOT_STATES buffer, by name."""')
            out.line("return {" + ", ".join(f"{literal_name(name, 'state name')}: self.{attr}[slot].copy()"
                                            for name, attr in slot_states) + "}")
        out.line()
        out.line("def write_slot(self, slot, state):")
        with out.indented():
            out.line('"""Sequence slot `slot` of each SLOT_STATES buffer set to `state[name]` (as read_slot gave it)."""')
            for name, attr in slot_states:
                out.line(f"self.{attr}[slot] = state[{literal_name(name, 'state name')}]")
            if not slot_states:
                out.line("del slot, state")

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
            native = self.native_entries.get(fn.sym_name.data)
            if native is not None:
                entry = fn.sym_name.data
                out.line(f"if self._entry_{entry} is not None:  # the whole step in one native call")
                out.line(f"    return run_native_entry(self._entry_{entry}, self._entry_{entry}_states, token, start, "
                         f"{int_tuple(native.logits)}, {entry!r})")
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
