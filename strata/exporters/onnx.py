"""Export one op-level entry (prefill or decode) as an ONNX model of standard ops (opset 21).

    model = export_onnx(fn, store)            # an onnx.ModelProto, checked by onnx.checker
    save_onnx(model, "m.onnx")                # inline weights, or m.onnx.data beside it when large

The graph's inputs are the entry's host inputs, one per kind (`tokens`, `positions`, `kv_rows`,
`kq_mask`, `mrope_positions`, `state_copy`, `out_ids`, as `strata.semantics.kernels.host_input`
makes them), then every `op.state` buffer (the KV cache, the recurrent states) under its
sanitized name; the outputs are `logits`, then each buffer as updated by the call
(`<name>_out`), to be fed back as the next call's input. `metadata_props` records the
mapping (`strata.inputs`, `strata.states`, JSON) and the entry's `n_kv`.

How the op level's in-place state maps onto ONNX's values: each buffer has a current version (a
tensor name). `op.set_rows` and `op.cpy` into a state make a new version (ScatterND, or a
Concat of slices); views, reshapes and permutations of a state are aliases, evaluated against
the version current where a compute op reads them, so a read after a write sees it, as in
the interpreter. A recurrent state reads as zeros when the call starts at position 0 (a new
sequence): `Where(start == 0, 0, state)`, with start taken from the positional input.

Each op class registers its translation in `ONNX_EXPORT`. Every translation uses ONNX's own
ops (no `com.microsoft` op is needed: Scan carries Gated DeltaNet's recurrence, TopK gives
ARGSORT's stable order, primitive ops give RMS_NORM, ROPE and FLASH_ATTN_EXT) and computes in
float32 as the numpy kernels do (`strata.semantics.kernels`), in their order of operations
where it matters (ROPE's angles in float64, SILU as x / (1 + exp(-x)), CLAMP's NaN rule).

Shapes must be static: lower the entry with a token count (`tokens=N`). onnx is imported only
when this module is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, TensorType, i64
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O
from strata.errors import StrataError
from strata.ir.impls import Implementations
from strata.semantics import kernels as K
from strata.semantics.op_interp import numpy_dtype

#: The ONNX opset of the exported models (onnxruntime 1.17+ runs it on its CPU provider).
OPSET = 21
#: A model whose initializers hold more than this is saved with its weights in a separate
#: file (protobuf's limit is 2 GiB for one message).
INLINE_LIMIT = 1 << 30
#: The graph inputs that carry a call's first position, in order of preference (a recurrent
#: state is reset when it is 0); without one the graph takes a `start` input [1] int64.
POSITION_INPUTS = ("positions", "kv_rows", "mrope_positions")


class OnnxExportError(StrataError):
    """An op-level function that cannot be written as ONNX (or a model that cannot be saved)."""


def _onnx():
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

    def __init__(self, fn: func.FuncOp, weights: Any):
        self.onnx = _onnx()
        self.fn, self.weights = fn, weights
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
        self.tokens = _token_count(fn)
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
        base = _label(op)
        shape = _shape(op.results[0])
        if isinstance(op, (O.ReshapeOp, O.ContOp)):
            return self.reshape(src, shape, base)
        if isinstance(op, O.PermuteOp):
            return self.transpose(src, op.dims.get_values(), base)
        if isinstance(op, O.TransposeOp):
            rank = len(shape)
            return self.transpose(src, [*range(rank - 2), rank - 1, rank - 2], base)
        assert isinstance(op, O.ViewOp)
        src_shape = _shape(op.src)
        total, count = _numel(src_shape), _numel(shape)
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
            raise OnnxExportError(f"{_describe(value.owner)}: writes into a tensor that is not a state buffer "
                                  "(only op.state buffers can be written in the ONNX export)")
        return v

    def index_map(self, alias: Alias) -> np.ndarray:
        """For each element of the alias, its flat index in the state buffer."""
        shape = _shape_of_type(self.states[alias.state][1])
        idx = np.arange(_numel(shape), dtype=np.int64).reshape(shape)
        for op in alias.chain:
            if isinstance(op, O.ViewOp):
                offset, strides = op.window(self.tokens)
                idx = K.view(np.ascontiguousarray(idx), _shape(op.results[0]), offset, strides)
            elif isinstance(op, O.ReshapeOp):
                idx = np.reshape(np.ascontiguousarray(idx), _shape(op.results[0]))
            elif isinstance(op, O.PermuteOp):
                idx = np.transpose(idx, op.dims.get_values())
            else:
                idx = np.swapaxes(idx, -1, -2)
        return np.ascontiguousarray(idx)

    def write(self, alias: Alias, data: str, base: str) -> None:
        """Write `data` (the alias's elements, row-major) into the state: a new version."""
        state_shape = _shape_of_type(self.states[alias.state][1])
        dtype = numpy_dtype(self.states[alias.state][1].get_element_type())
        cur = self.version[alias.state]
        index = self.index_map(alias).reshape(-1)
        if index.size == 0:
            return
        data = self.reshape(self.cast(data, dtype, base), [index.size], base)
        total = _numel(state_shape)
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
        return self.onnx.helper.make_tensor_value_info(name, elem, list(_shape_of_type(typ)))

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
        outputs = [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, list(_shape_of_type(typ)))]
        states = []
        for state, (name, typ_s, _) in self.states.items():
            out = f"{name}_out"
            self.nodes.append(onnx.helper.make_node("Identity", [self.version[state]], [out], name=f"n_{out}"))
            outputs.append(self.value_info(out, typ_s))
            states.append([state, name, out])
        graph = onnx.helper.make_graph(self.nodes, sanitize(self.fn.sym_name.data), self.inputs + self.state_inputs,
                                       outputs,
                                       initializer=self.initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                       producer_name="strata", ir_version=10)
        n_kv = self.fn.attributes.get("op.n_kv")
        meta = {"strata.entry": self.fn.sym_name.data,
                "strata.inputs": json.dumps({kind: name for kind, (name, _) in self.host.items()}),
                "strata.states": json.dumps(states),
                "strata.n_kv": str(n_kv.value.data if isinstance(n_kv, IntegerAttr) else 0)}
        onnx.helper.set_model_props(model, meta)
        return model


def initializer_bytes(model) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def _check(model_or_path, what: str) -> None:
    onnx = _onnx()
    try:
        onnx.checker.check_model(model_or_path, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxExportError(f"{what}: the exported model fails onnx.checker: {first}") from None


def check_onnx_file(path) -> None:
    """onnx.checker (full_check) on a saved model, its external data beside it."""
    _check(str(path), str(path))


def export_onnx(fn: func.FuncOp, weights: Any, *, check: bool = True):
    """The op-level function `fn` (one entry) as an ONNX ModelProto; `weights` maps the params'
    stored names to arrays (a WeightStore). Checked with onnx.checker (full_check) unless told
    not, or unless its weights exceed INLINE_LIMIT: the checker then needs the saved files
    (`check_onnx_file`), as protobuf cannot hold it in one message."""
    for op in fn.walk():
        for r in op.results:
            if isinstance(r.type, TensorType) and DYNAMIC_INDEX in r.type.get_shape():
                raise OnnxExportError(f"@{fn.sym_name.data}: {_describe(op)} has a dynamic shape ({r.type}); "
                                      "the ONNX export needs a static token count (lower with tokens=N)")
    model = Exporter(fn, weights).run()
    if check and initializer_bytes(model) <= INLINE_LIMIT:
        _check(model, f"@{fn.sym_name.data}")
    return model


# ---------------------------------------------------------------------------------------------
# Helpers


def _shape_of_type(typ) -> tuple[int, ...]:
    return tuple(typ.get_shape())


def _shape(value: SSAValue) -> tuple[int, ...]:
    return _shape_of_type(value.type)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _token_count(fn: func.FuncOp) -> int:
    for op in fn.walk():
        if isinstance(op, O.InputOp) and op.kind.data == "tokens":
            return _shape(op.result)[0]
    return 0


def _label(op: Operation) -> str:
    label = op.attributes.get("name")
    return label.data if label is not None else op.name.split(".")[-1]  # type: ignore[attr-defined]


def _describe(op: Operation | None) -> str:
    if op is None:
        return "a block argument"
    label = op.attributes.get("name")
    return op.name + (f" '{label.data}'" if label is not None else "")  # type: ignore[attr-defined]


def _f(attr) -> float:
    return float(attr.value.data)


# ---------------------------------------------------------------------------------------------
# The translations: op class -> (exporter, op) -> None (sets the op's result)

Impl = Callable[[Exporter, Any], None]
#: op class -> its ONNX translation.
ONNX_EXPORT: Implementations[Impl] = Implementations("onnx exporter")

from strata.exporters import onnx_ops  # noqa: E402,F401  (registers the translations)
