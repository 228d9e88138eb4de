"""The ONNX exporter's graph builder (`Exporter`) and its registry of translations (`ONNX_EXPORT`).

`strata.exporters.onnx_ops` registers one translation per op-level op; `strata.exporters.onnx`
imports it, so the registry is complete wherever `export_onnx` is reachable. See
`strata.exporters.onnx` for how the entry's inputs, states and outputs map onto the graph.
"""


from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir.checks import shape_of
from strata.ir.impls import Implementations
from strata.semantics import kernels as K
from strata.semantics.op_interp import numpy_dtype

#: The ONNX opset of the exported models (onnxruntime 1.17+ runs it on its CPU provider).
OPSET = 21
#: The graph inputs that carry a call's first position, in order of preference (a recurrent
#: state is reset when it is 0); without one the graph takes a `start` input [1] int64.
POSITION_INPUTS = ("positions", "kv_rows", "mrope_positions")
#: The domain of ONNX Runtime's contrib ops (MatMulNBits, for int4 weights).
MS_DOMAIN = "com.microsoft"


class OnnxExportError(StrataError):
    """An op-level function that cannot be written as ONNX (or a model that cannot be saved)."""


def onnx_module():
    try:
        import onnx
    except ImportError:
        raise OnnxExportError("ONNX export needs the 'onnx' package (pip install onnx)") from None
    return onnx


def sanitize(name: str) -> str:
    """An ONNX-valid identifier ([A-Za-z_][A-Za-z0-9_]*) made from a model-supplied name."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else "_" + out


@dataclass(frozen=True)
class Alias:
    """A value that views a state buffer: the buffer read through view-like ops, at use time."""

    state: str
    chain: tuple[Operation, ...]


#: Ops that view their operand without copying (aliases when the operand is a state).
VIEW_LIKE = (O.ViewOp, O.ReshapeOp, O.PermuteOp, O.TransposeOp)


class Exporter:
    """Builds one graph: nodes, initializers, inputs, outputs, names and element types."""

    def __init__(self, fn: func.FuncOp, weights: Any, int4: Any = None):
        self.onnx = onnx_module()
        self.fn, self.weights = fn, weights
        # int4 weights written as MatMulNBits' initializers: a `strata.quant.w4a16.W4A16Weights`
        # (`.weights` its names, `.packed(name)`, `.block`), or None
        self.int4 = int4
        self.packed_params: dict[SSAValue, str] = {}  # an int4 op.param's result -> its stored name
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []  # the host inputs' value infos
        self.state_inputs: list = []
        self.host: dict[str, tuple[str, Any]] = {}  # kind -> (graph input, IR type)
        self.states: dict[str, tuple[str, TensorType, bool]] = {}  # state -> (graph input, type, recurrent)
        self.version: dict[str, str] = {}  # state -> its current version's tensor name
        self.values: dict[SSAValue, str | Alias] = {}
        self.elem: dict[str, int] = {}  # tensor name -> ONNX element type
        self.used: set[str] = set()
        self.consts: dict[tuple, str] = {}
        self.cache: dict[tuple, str] = {}  # (alias, version) -> materialized name
        self.tokens = token_count(fn)
        self.start: str | None = None

    # -- names and nodes --------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        base = sanitize(base)
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def node(self, op_type: str, inputs: list[str], base: str, elem: int | None = None, outputs: int = 1,
             **attrs) -> str:
        """Append a node; returns its (first) output, of element type `elem` (default: float)."""
        names = [self.fresh(f"{base}_{op_type}") for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, names, name=self.fresh(f"n_{names[0]}"), **attrs))
        for n in names:
            self.elem[n] = self.onnx.TensorProto.FLOAT if elem is None else elem
        return names[0]

    def const(self, array: np.ndarray, base: str = "c") -> str:
        """An initializer holding `array` (small constants are shared)."""
        array = np.ascontiguousarray(array)
        key = (array.dtype.str, array.shape, array.tobytes()) if array.size <= 4096 else None
        if key is not None and key in self.consts:
            return self.consts[key]
        name = self.fresh(base)
        tensor = self.onnx.numpy_helper.from_array(array, name)
        self.initializers.append(tensor)
        self.elem[name] = tensor.data_type
        if key is not None:
            self.consts[key] = name
        return name

    def i64(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "shape")

    def f32(self, value: str, base: str = "cast") -> str:
        """`value` as float32 (the kernels compute in float32)."""
        return value if self.elem[value] == self.onnx.TensorProto.FLOAT else self.cast(value, np.float32, base)

    def cast(self, value: str, dtype, base: str = "cast") -> str:
        to = self.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return value if self.elem[value] == to else self.node("Cast", [value], base, elem=to, to=to)

    def reshape(self, value: str, shape, base: str = "reshape") -> str:
        return self.node("Reshape", [value, self.i64(list(shape))], base, elem=self.elem[value], allowzero=1)

    def slice(self, value: str, starts, ends, axes, base: str = "slice", steps=None) -> str:
        ins = [value, self.i64(starts), self.i64(ends), self.i64(axes)] + ([self.i64(steps)] if steps else [])
        return self.node("Slice", ins, base, elem=self.elem[value])

    def transpose(self, value: str, perm, base: str = "transpose") -> str:
        return self.node("Transpose", [value], base, elem=self.elem[value], perm=list(perm))

    # -- values -----------------------------------------------------------------------------

    def get(self, value: SSAValue) -> str:
        """The tensor name of an operand, reading a state alias at this point of the program."""
        v = self.values[value]
        if isinstance(v, str):
            return v
        version = self.version[v.state]
        key = (v, version)
        if key not in self.cache:
            out = version
            for op in v.chain:
                out = self.view_like(op, out)
            self.cache[key] = out
        return self.cache[key]

    def view_like(self, op: Operation, src: str) -> str:
        base = label_of(op)
        shape = shape_of(op.results[0])
        if isinstance(op, (O.ReshapeOp, O.ContOp)):
            return self.reshape(src, shape, base)
        if isinstance(op, O.PermuteOp):
            return self.transpose(src, op.dims.get_values(), base)
        if isinstance(op, O.TransposeOp):
            rank = len(shape)
            return self.transpose(src, [*range(rank - 2), rank - 1, rank - 2], base)
        assert isinstance(op, O.ViewOp)
        src_shape = shape_of(op.src)
        total, count = numel(src_shape), numel(shape)
        offset, strides = op.window(self.tokens)
        flat = self.reshape(src, [total], base)
        if strides is None:
            if offset == 0 and count == total:
                return self.reshape(src, shape, base)
            return self.reshape(self.slice(flat, [offset], [offset + count], [0], base), shape, base)
        index = K.view(np.arange(total, dtype=np.int64), shape, offset, strides)
        return self.node("Gather", [flat, self.const(np.ascontiguousarray(index), "view_index")], base,
                         elem=self.elem[src], axis=0)

    def set(self, op: Operation, name: str) -> None:
        self.values[op.results[0]] = name

    def state_of(self, value: SSAValue) -> Alias:
        v = self.values[value]
        if not isinstance(v, Alias):
            raise OnnxExportError(f"{describe(value.owner)}: writes into a tensor that is not a state buffer "
                                  "(only op.state buffers can be written in the ONNX export)")
        return v

    def index_map(self, alias: Alias) -> np.ndarray:
        """For each element of the alias, its flat index in the state buffer."""
        shape = shape_of(self.states[alias.state][1])
        idx = np.arange(numel(shape), dtype=np.int64).reshape(shape)
        for op in alias.chain:
            if isinstance(op, O.ViewOp):
                offset, strides = op.window(self.tokens)
                idx = K.view(np.ascontiguousarray(idx), shape_of(op.results[0]), offset, strides)
            elif isinstance(op, O.ReshapeOp):
                idx = np.reshape(np.ascontiguousarray(idx), shape_of(op.results[0]))
            elif isinstance(op, O.PermuteOp):
                idx = np.transpose(idx, op.dims.get_values())
            else:
                idx = np.swapaxes(idx, -1, -2)
        return np.ascontiguousarray(idx)

    def write(self, alias: Alias, data: str, base: str) -> None:
        """Write `data` (the alias's elements, row-major) into the state: a new version."""
        state_shape = shape_of(self.states[alias.state][1])
        dtype = numpy_dtype(self.states[alias.state][1].get_element_type())
        cur = self.version[alias.state]
        index = self.index_map(alias).reshape(-1)
        if index.size == 0:
            return
        data = self.reshape(self.cast(data, dtype, base), [index.size], base)
        total = numel(state_shape)
        lo = int(index[0])
        if np.array_equal(index, np.arange(lo, lo + index.size)):  # a contiguous range
            parts = []
            flat = self.reshape(cur, [total], base)
            if lo > 0:
                parts.append(self.slice(flat, [0], [lo], [0], base))
            parts.append(data)
            if lo + index.size < total:
                parts.append(self.slice(flat, [lo + index.size], [total], [0], base))
            new = parts[0] if len(parts) == 1 else self.node("Concat", parts, base, elem=self.elem[cur], axis=0)
        else:
            flat = self.reshape(cur, [total], base)
            new = self.node("ScatterND", [flat, self.const(index.reshape(-1, 1), "write_index"), data], base,
                            elem=self.elem[cur])
        self.version[alias.state] = self.reshape(new, state_shape, base)

    # -- the graph --------------------------------------------------------------------------

    def host_input(self, kind: str, typ: TensorType) -> str:
        if kind in self.host:
            name, first = self.host[kind]
            if first != typ:
                raise OnnxExportError(f"op.input '{kind}': two inputs of this kind with different types "
                                      f"({first} and {typ})")
            return name
        name = self.fresh(kind)
        self.host[kind] = (name, typ)
        self.inputs.append(self.value_info(name, typ))
        self.elem[name] = self.onnx.helper.np_dtype_to_tensor_dtype(numpy_dtype(typ.get_element_type()))
        return name

    def value_info(self, name: str, typ: TensorType):
        elem = self.onnx.helper.np_dtype_to_tensor_dtype(numpy_dtype(typ.get_element_type()))
        return self.onnx.helper.make_tensor_value_info(name, elem, list(shape_of(typ)))

    def first_position(self) -> str:
        """The call's first position as a [1] int64 tensor (from a positional input)."""
        if self.start is None:
            for op in self.fn.body.block.ops:
                if isinstance(op, O.InputOp) and op.kind.data in POSITION_INPUTS:
                    src = self.host_input(op.kind.data, op.result.type)
                    break
            else:
                src = self.host_input("start", TensorType(i64, [1]))
            self.start = self.cast(self.slice(src, [0], [1], [0], "start"), np.int64, "start")
        return self.start

    def run(self):
        for op in self.fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                if len(op.arguments) != 1:
                    raise OnnxExportError(f"@{self.fn.sym_name.data}: expected one returned value")
                logits = self.node("Identity", [self.f32(self.get(op.arguments[0]))], "logits")
                return self.finish(logits, op.arguments[0].type)
            impl = ONNX_EXPORT.get(type(op))
            if impl is None:
                raise OnnxExportError(f"@{self.fn.sym_name.data}: no ONNX export for op '{op.name}'")
            impl(self, op)
        raise OnnxExportError(f"@{self.fn.sym_name.data}: the function has no func.return")

    def finish(self, logits: str, typ: TensorType):
        onnx = self.onnx
        # The returned value is named `logits`; rename the Identity's output.
        self.nodes[-1].output[0] = "logits"
        outputs = [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, list(shape_of(typ)))]
        states = []
        for state, (name, typ_s, _) in self.states.items():
            out = f"{name}_out"
            self.nodes.append(onnx.helper.make_node("Identity", [self.version[state]], [out], name=f"n_{out}"))
            outputs.append(self.value_info(out, typ_s))
            states.append([state, name, out])
        graph = onnx.helper.make_graph(self.nodes, sanitize(self.fn.sym_name.data), self.inputs + self.state_inputs,
                                       outputs,
                                       initializer=self.initializers)
        opsets = [onnx.helper.make_opsetid("", OPSET)]
        if any(n.domain == MS_DOMAIN for n in self.nodes):
            opsets.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
        model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="strata", ir_version=10)
        n_kv = self.fn.attributes.get("op.n_kv")
        meta = {"strata.entry": self.fn.sym_name.data,
                "strata.inputs": json.dumps({kind: name for kind, (name, _) in self.host.items()}),
                "strata.states": json.dumps(states),
                "strata.n_kv": str(n_kv.value.data if isinstance(n_kv, IntegerAttr) else 0)}
        onnx.helper.set_model_props(model, meta)
        return model


# ---------------------------------------------------------------------------------------------
# Helpers


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def token_count(fn: func.FuncOp) -> int:
    for op in fn.walk():
        if isinstance(op, O.InputOp) and op.kind.data == "tokens":
            return shape_of(op.result)[0]
    return 0


def label_of(op: Operation) -> str:
    label = op.attributes.get("name")
    return label.data if label is not None else op.name.split(".")[-1]  # type: ignore[attr-defined]


def describe(op: Operation | None) -> str:
    if op is None:
        return "a block argument"
    label = op.attributes.get("name")
    return op.name + (f" '{label.data}'" if label is not None else "")  # type: ignore[attr-defined]


def attr_float(attr) -> float:
    return float(attr.value.data)


# ---------------------------------------------------------------------------------------------
# The translations: op class -> (exporter, op) -> None (sets the op's result)

Impl = Callable[[Exporter, Any], None]
#: op class -> its ONNX translation.
ONNX_EXPORT: Implementations[Impl] = Implementations("onnx exporter")
