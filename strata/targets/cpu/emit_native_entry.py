"""The cpu target's C++ printer for a whole entry: one `extern "C"` function per decode step,
printed from the op-level IR the numpy printer reads, one handler per op (`ENTRY_EMITTER`),
a table for the element-wise math (`ELEMENTWISE`); the hand-tuned kernels (the quantized
products, flash attention over the float16 cache) are the native library's, called as C++
functions in the same translation unit (the printed source includes strata_kernels.cpp).

    source = print_entry(module, "decode")   # an EntrySource, or EntryUnsupported with the reason

The printed function

    int strata_entry_decode(const void* const* weights, const int64_t* const* orders,
                            void* const* states, int32_t token, int32_t pos, float* logits)

reads the weights by index (`EntrySource.weights` gives each index's tensor name: packed
blocks for the ops marked native, float32 arrays for the others; `orders[i]`, when not null,
the stored row of each of weight i's rows: llama's q / k rows, permuted in the file) and the
state buffers by index
(`EntrySource.states`), so no name from the model reaches the C++ source. Every shape and
stride is static (one token per step): views, permutes and reshapes of contiguous values are
address arithmetic at print time; every computed value has its own slot in one float32 arena.
Each op computes exactly what its numpy kernel computes, in float32, in the same order (see
native/entry_ops.h): the numbers equal the python host's.

The printer is op-level, not blueprint-level: the cpu target has no blueprint pipeline yet, and
the op level is what the numpy host prints, so both hosts read the same IR and their numbers
can be compared op for op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, BFloat16Type, Float16Type, Float32Type, IntegerType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue

from strata.dialects import op as O
from strata.ir.ggml_types import GGML_TYPE_IDS, ggml_type
from strata.ir.impls import Implementations
from strata.passes.cpu_native_kernels import ORDER_ATTR, REPACKED, is_native, native_weight_type
from strata.targets.codegen import CodegenError, sanitize_label

#: The entries the printer takes: entry name -> the exported function.
ENTRY_FUNCTIONS = {"decode": "strata_entry_decode"}


class EntryUnsupported(CodegenError):
    """An entry with an op (or a type) that has no C++ handler: the python host runs it."""


@dataclass(frozen=True)
class EntrySource:
    """A printed entry: its C++ source, the function's name, the tensor names of its weights
    in index order (kinds[i]: the i-th is bound as "packed" blocks, or a "float32", "float16" or
    "bfloat16" array), its state names in index order and the shape of its logits."""

    source: str
    function: str
    weights: tuple[str, ...]
    kinds: tuple[str, ...]
    states: tuple[str, ...]
    logits: tuple[int, ...]


@dataclass(frozen=True)
class Place:
    """Where a value lives: `base + offset` (elements of `ctype`), its shape and element strides."""

    base: str
    ctype: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def ptr(self) -> str:
        return f"({self.base} + {self.offset})" if self.offset else self.base

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape) or \
            all(s == c for s, c, d in zip(self.strides, contiguous_strides(self.shape), self.shape) if d != 1)


@dataclass(frozen=True)
class Packed:
    """A weight bound as its packed blocks: its index, ggml type id, rows, K and row bytes."""

    index: int
    type_id: int
    rows: int
    k: int
    row_bytes: int


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


#: Element types -> the C type a place holds ("bf16": bfloat16 bits in a uint16_t, weights only).
_CTYPES = {Float32Type: "float", Float16Type: "uint16_t", BFloat16Type: "bf16"}
#: How a float16 / bfloat16 operand is read as float32 (exactly, as numpy's astype).
_TO_FLOAT = {"uint16_t": "strata_entry::from_f16", "bf16": "bf16_to_f32"}


def _ctype(typ) -> str:
    elem = typ.get_element_type()
    if isinstance(elem, IntegerType):
        width = elem.width.data
        if width in (32, 64):
            return f"int{width}_t"
    found = _CTYPES.get(type(elem))
    if found is None:
        raise EntryUnsupported(f"element type {elem} has no C++ handler")
    return found


def _shape(v: SSAValue) -> tuple[int, ...]:
    shape = tuple(v.type.get_shape())  # type: ignore[attr-defined]
    if DYNAMIC_INDEX in shape:
        raise EntryUnsupported("a dynamic shape (the printed entries run one token per step)")
    return shape


def float_lit(x: float) -> str:
    """A C++ float literal of x rounded to float32 once, as np.float32(x) and ctypes' c_float
    round it (a decimal literal would be rounded from the decimal, not from the double)."""
    f = float(np.float32(x))
    if math.isinf(f):
        return "INFINITY" if f > 0 else "-INFINITY"
    if math.isnan(f):
        return "NAN"
    return f"{f.hex()}f"


class EntryPrinter:
    """Prints one entry function; `ENTRY_EMITTER` holds a handler per op class."""

    def __init__(self, fn: func.FuncOp, n_kv: int):
        self.fn = fn
        self.n_kv = n_kv
        self.lines: list[str] = []
        self.places: dict[SSAValue, Place] = {}
        self.packed: dict[SSAValue, Packed] = {}
        self.weights: dict[str, int] = {}
        self.weight_kinds: dict[int, str] = {}
        self.states: dict[str, int] = {}
        self.inputs: dict[tuple[str, str], Place] = {}
        self.arena: dict[str, int] = {"float": 0, "int32_t": 0, "int64_t": 0, "uint16_t": 0}
        self.logits: tuple[int, ...] = ()
        self.constants: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append("    " + text)

    def alloc(self, ctype: str, shape: tuple[int, ...]) -> Place:
        """A fresh slot of the `ctype` arena for a value of `shape` (slots start at multiples of 32
        elements; no slot is reused, so no value is overwritten before its last use)."""
        off = self.arena[ctype]
        self.arena[ctype] = off + -(-max(math.prod(shape), 1) // 32) * 32
        return Place(_ARENA[ctype], ctype, off, shape, contiguous_strides(shape))

    def result(self, op: Operation, ctype: str = "float") -> Place:
        place = self.alloc(ctype, _shape(op.results[0]))
        self.places[op.results[0]] = place
        return place

    def contiguous(self, v: SSAValue) -> Place:
        """v's place, copied into a fresh slot first when its strides are not row-major."""
        p = self.places[v]
        if p.contiguous:
            return p
        if p.ctype not in self.arena:
            raise EntryUnsupported(f"a strided {p.ctype} value")
        q = self.alloc(p.ctype, p.shape)
        self.loops(p.shape, [(q, "dst"), (p, "src")], lambda refs: f"{refs[0]} = {refs[1]};", convert=False)
        return q

    def loops(self, shape: tuple[int, ...], places: list[tuple[Place, str]], body: Callable[[list[str]], str],
              tiled: tuple[bool, ...] = (), convert: bool = True) -> None:
        """Nested loops over `shape` (size-1 dims dropped); body(refs) gets each place's element
        reference (a float16 operand's as float32 when `convert`); a place marked in `tiled` repeats
        over the loop shape (ggml's repeat)."""
        dims = [(i, d) for i, d in enumerate(shape) if d != 1]
        refs = []
        for n, (p, _) in enumerate(places):
            terms = [p.ptr]
            for i, d in dims:
                pd = p.shape[i - (len(shape) - len(p.shape))] if len(shape) - len(p.shape) <= i else 1
                stride = p.strides[i - (len(shape) - len(p.shape))] if len(shape) - len(p.shape) <= i else 0
                if stride == 0 or pd == 1:
                    continue
                index = f"i{i}" if not (tiled and tiled[n]) or pd == d else f"(i{i} % {pd})"
                terms.append(f"{index} * {stride}" if stride != 1 else index)
            ref = f"{terms[0]}[{' + '.join(terms[1:]) or '0'}]"
            # a float16 / bfloat16 operand is read as float32, exactly (numpy's astype before the op)
            refs.append(f"{_TO_FLOAT[p.ctype]}({ref})" if convert and p.ctype in _TO_FLOAT and n > 0 else ref)
        indent = ""
        for i, d in dims:
            self.line(f"{indent}for (int64_t i{i} = 0; i{i} < {d}; ++i{i})")
            indent += "    "
        self.line(indent + body(refs))

    def print_op(self, op: Operation) -> None:
        handler = ENTRY_EMITTER.get(type(op))
        if handler is None:
            raise EntryUnsupported(f"'{op.name}' has no C++ handler")
        handler(self, op)


_ARENA = {"float": "f32", "int32_t": "i32", "int64_t": "i64", "uint16_t": "f16"}
ENTRY_EMITTER: Implementations[Callable[[EntryPrinter, Operation], None]] = Implementations("cpu entry printer")


@ENTRY_EMITTER.register(O.ParamOp)
def _param(p: EntryPrinter, op: O.ParamOp) -> None:
    name = op.tensor_name.data
    if op.conversion is not None or op.piece is not None or op.stored_name != name:
        raise EntryUnsupported(f"weight '{sanitize_label(name)}' is converted or cut at load")
    packed = is_native(op)
    index = p.weights.setdefault(name, len(p.weights))
    p.weight_kinds.setdefault(index, "packed")
    shape = _shape(op.result)
    if packed:
        kind = ggml_type(native_weight_type(op))
        if len(shape) != 2:
            raise EntryUnsupported(f"packed weight '{sanitize_label(name)}' of {len(shape)} dims")
        p.packed[op.result] = Packed(index, GGML_TYPE_IDS[kind.name], shape[0], shape[1], kind.row_bytes(shape[1]))
        return
    ctype = _ctype(op.result.type)
    kind = {"float": "float32", "uint16_t": "float16", "bf16": "bfloat16"}.get(ctype)
    if kind is None:
        raise EntryUnsupported(f"weight '{sanitize_label(name)}' is not float32, float16 or bfloat16")
    p.weight_kinds[index] = kind
    ptr = f"((const {'uint16_t' if ctype == 'bf16' else ctype}*)weights[{index}])"
    p.places[op.result] = Place(ptr, ctype, 0, shape, contiguous_strides(shape))


@ENTRY_EMITTER.register(O.StateOp)
def _state(p: EntryPrinter, op: O.StateOp) -> None:
    if op.recurrent is not None:
        raise EntryUnsupported("a recurrent state")
    ctype = _ctype(op.result.type)
    if ctype not in ("float", "uint16_t"):
        raise EntryUnsupported(f"a state of {ctype}")
    index = p.states.setdefault(op.state_name.data, len(p.states))
    shape = _shape(op.result)
    p.places[op.result] = Place(f"(({ctype}*)states[{index}])", ctype, 0, shape, contiguous_strides(shape))


@ENTRY_EMITTER.register(O.ConstantOp)
def _constant(p: EntryPrinter, op: O.ConstantOp) -> None:
    """A constant of the IR (llama 3's rope factors): a static array of the printed source."""
    ctype = _ctype(op.result.type)
    if ctype not in ("float", "int32_t", "int64_t"):
        raise EntryUnsupported(f"a constant of {ctype}")
    values = list(op.value.get_values())
    items = [float_lit(v) for v in values] if ctype == "float" else [str(int(v)) for v in values]
    name = f"constant_{len(p.constants)}"
    p.constants.append(f"const {ctype} {name}[{max(len(items), 1)}] = {{{', '.join(items) or '0'}}};")
    shape = _shape(op.result)
    p.places[op.result] = Place(name, ctype, 0, shape, contiguous_strides(shape))


#: Host inputs of one token at `pos`: kind -> the C++ statement filling its slot `x` of n elements.
HOST_INPUTS = {
    "tokens": "{x}[0] = token;",
    "positions": "{x}[0] = pos;",
    "kv_rows": "{x}[0] = pos;",
    "out_ids": "{x}[0] = 0;",
    "kq_mask": "for (int64_t j = 0; j < {n}; ++j) {x}[j] = j <= pos ? 0.0f : -INFINITY;",
}


@ENTRY_EMITTER.register(O.InputOp)
def _input(p: EntryPrinter, op: O.InputOp) -> None:
    kind = op.kind.data
    ctype = _ctype(op.result.type)
    key = (kind, str(op.result.type))
    if key in p.inputs:
        p.places[op.result] = p.inputs[key]
        return
    if kind not in HOST_INPUTS:
        raise EntryUnsupported(f"host input '{sanitize_label(kind)}' has no C++ handler")
    shape = _shape(op.result)
    if kind != "kq_mask" and shape != (1,) or kind == "kq_mask" and shape != (1, p.n_kv):
        raise EntryUnsupported(f"host input '{kind}' of shape {list(shape)} (one token per step)")
    place = p.result(op, ctype)
    p.line(HOST_INPUTS[kind].format(x=place.ptr, n=place.size))
    p.inputs[key] = place


@ENTRY_EMITTER.register(O.GetRowsOp)
def _get_rows(p: EntryPrinter, op: O.GetRowsOp) -> None:
    w = p.packed.get(op.lhs)
    ids = p.places[op.rhs]
    if ids.ctype != "int32_t" or len(ids.shape) != 1:
        raise EntryUnsupported("get_rows by ids that are not int32 [N]")
    if w is None:
        _get_rows_float(p, op, ids)
        return
    out = p.result(op)
    # A negative id gives a row of zeros, an id past the table an error (packed_get_rows).
    p.line(f"for (int64_t r = 0; r < {ids.size}; ++r) {{")
    p.line(f"    const int32_t id = {ids.ptr}[r * {ids.strides[0]}];")
    p.line(f"    if (id >= {w.rows}) return 3;")
    p.line(f"    const int32_t stored = id >= 0 && orders[{w.index}] ? (int32_t)orders[{w.index}][id] : id;")
    p.line(f"    if (id < 0) std::memset({out.ptr} + r * {w.k}, 0, {w.k} * sizeof(float));")
    p.line(f"    else if (strata_get_rows({w.type_id}, (const uint8_t*)weights[{w.index}], {w.rows}, {w.k}, "
           f"{w.row_bytes}, &stored, 1, {out.ptr} + r * {w.k})) return 4;")
    p.line("}")


def _get_rows_float(p: EntryPrinter, op: O.GetRowsOp, ids: Place) -> None:
    """Rows of a float32 matrix (the last token's row of the activations), as kernels.get_rows."""
    table = p.contiguous(op.lhs)
    if table.ctype != "float" or len(table.shape) != 2:
        raise EntryUnsupported("get_rows of a table that is not a float32 matrix")
    rows, c = table.shape
    out = p.result(op)
    p.line(f"for (int64_t r = 0; r < {ids.size}; ++r) {{")
    p.line(f"    const int32_t id = {ids.ptr}[r * {ids.strides[0]}];")
    p.line(f"    if (id >= {rows}) return 3;")
    p.line(f"    if (id < 0) std::memset({out.ptr} + r * {c}, 0, {c} * sizeof(float));")
    p.line(f"    else std::memcpy({out.ptr} + r * {c}, {table.ptr} + id * {c}, {c} * sizeof(float));")
    p.line("}")


@ENTRY_EMITTER.register(O.RmsNormOp)
def _rms_norm(p: EntryPrinter, op: O.RmsNormOp) -> None:
    x = p.contiguous(op.src)
    out = p.result(op)
    n = x.shape[-1]
    p.line(f"strata_entry::rms_norm({x.ptr}, {out.ptr}, {x.size // n}, {n}, {float_lit(op.eps.value.data)});")


#: Element-wise binary ops: op class -> the C++ expression of a and b (b tiles a, ggml's repeat).
ELEMENTWISE: dict[type[Operation], str] = {O.AddOp: "{a} + {b}", O.MulOp: "{a} * {b}", O.DivOp: "{a} / {b}"}


def _binary(p: EntryPrinter, op: Operation) -> None:
    a, b = p.places[op.operands[0]], p.places[op.operands[1]]
    if a.ctype not in ("float", *_TO_FLOAT) or b.ctype not in ("float", *_TO_FLOAT):
        raise EntryUnsupported(f"'{op.name}' of {a.ctype} and {b.ctype}")
    out = p.result(op)
    if out.shape != a.shape or len(b.shape) > len(a.shape) or \
            any(da % db for da, db in zip(a.shape[len(a.shape) - len(b.shape):], b.shape)):
        raise EntryUnsupported(f"'{op.name}' whose second operand does not tile the first")
    b = Place(b.base, b.ctype, b.offset, (1,) * (len(a.shape) - len(b.shape)) + b.shape,
              (0,) * (len(a.shape) - len(b.shape)) + b.strides)
    expr = ELEMENTWISE[type(op)]
    p.loops(out.shape, [(out, "out"), (a, "a"), (b, "b")],
            lambda r: f"{r[0]} = {expr.format(a=r[1], b=r[2])};", tiled=(False, False, True))


for _cls in ELEMENTWISE:
    ENTRY_EMITTER.add(_cls, _binary)


@ENTRY_EMITTER.register(O.SwigluOp)
def _swiglu(p: EntryPrinter, op: Operation) -> None:
    g, u = p.contiguous(op.operands[0]), p.contiguous(op.operands[1])
    out = p.result(op)
    if g.shape != u.shape or g.shape != out.shape:
        raise EntryUnsupported("swiglu of operands of two shapes")
    p.line(f"strata_entry::swiglu({g.ptr}, {u.ptr}, {out.ptr}, {out.size});")


@ENTRY_EMITTER.register(O.ReshapeOp, O.ContOp)
def _reshape(p: EntryPrinter, op: Operation) -> None:
    src = p.contiguous(op.operands[0])
    shape = _shape(op.results[0])
    p.places[op.results[0]] = Place(src.base, src.ctype, src.offset, shape, contiguous_strides(shape))


@ENTRY_EMITTER.register(O.ViewOp)
def _view(p: EntryPrinter, op: O.ViewOp) -> None:
    src = p.contiguous(op.src)
    per = list(op.per_token.get_values()) if op.per_token is not None else []
    per += [0] * (1 + len(_shape(op.result)) - len(per))
    # One token per step: a per-token offset or stride grows by its coefficient once.
    offset = int(op.offset.value.data) + per[0]
    shape = _shape(op.result)
    strides = tuple(int(s) + int(c) for s, c in zip(op.strides.get_values(), per[1:])) \
        if op.strides is not None else contiguous_strides(shape)
    reach = offset + sum((d - 1) * s for d, s in zip(shape, strides)) if all(shape) else offset
    if offset < 0 or reach >= max(src.size, 1) and src.size:
        raise EntryUnsupported("a view past its source")
    p.places[op.result] = Place(src.base, src.ctype, src.offset + offset, shape, strides)


@ENTRY_EMITTER.register(O.PermuteOp)
def _permute(p: EntryPrinter, op: O.PermuteOp) -> None:
    src = p.places[op.src]
    dims = [int(d) for d in op.dims.get_values()]
    p.places[op.result] = Place(src.base, src.ctype, src.offset, tuple(src.shape[d] for d in dims),
                                tuple(src.strides[d] for d in dims))


@ENTRY_EMITTER.register(O.SetRowsOp)
def _set_rows(p: EntryPrinter, op: O.SetRowsOp) -> None:
    dst, src, rows = p.places[op.dst], p.contiguous(op.src), p.places[op.rows]
    if not dst.contiguous or len(dst.shape) != 2 or src.size % dst.shape[1] or rows.ctype != "int64_t":
        raise EntryUnsupported("set_rows into a buffer that is not rows of a matrix")
    n, c = src.size // dst.shape[1], dst.shape[1]
    convert = "strata_entry::to_f16(s[j])" if dst.ctype == "uint16_t" else "s[j]"
    p.line(f"for (int64_t r = 0; r < {n}; ++r) {{")
    p.line(f"    const int64_t row = {rows.ptr}[r * {rows.strides[0]}];")
    p.line("    if (row < 0) continue;")
    p.line(f"    if (row >= {dst.shape[0]}) return 3;")
    p.line(f"    const float* s = {src.ptr} + r * {c};")
    p.line(f"    {dst.ctype}* d = {dst.ptr} + row * {c};")
    p.line(f"    for (int64_t j = 0; j < {c}; ++j) d[j] = {convert};")
    p.line("}")
    p.places[op.result] = dst


@ENTRY_EMITTER.register(O.RopeOp)
def _rope(p: EntryPrinter, op: O.RopeOp) -> None:
    mode = op.mode.data
    if mode not in ("neox", "norm") or op.sections is not None:
        raise EntryUnsupported(f"rope mode '{sanitize_label(mode)}' (or sections)")
    factors = ""
    if op.freq_factors is not None:
        ff = p.contiguous(op.freq_factors)
        if ff.ctype != "float" or ff.size < int(op.n_dims.value.data) // 2:
            raise EntryUnsupported("rope frequency factors that are not float32 [n_dims / 2]")
        factors = f", {ff.ptr}"
    x, pos = p.contiguous(op.src), p.places[op.positions]
    if len(x.shape) != 3 or pos.ctype != "int32_t" or not pos.contiguous:
        raise EntryUnsupported("rope of a value not [S, heads, D]")
    out = p.result(op)
    s, h, d = x.shape
    p.line(f"strata_entry::rope({x.ptr}, {pos.ptr}, {out.ptr}, {s}, {h}, {d}, {int(op.n_dims.value.data)}, "
           f"{'true' if mode == 'neox' else 'false'}, {float(op.freq_base.value.data)!r}, "
           f"{float(op.freq_scale.value.data)!r}{factors});")


def _products(p: EntryPrinter, op: Operation) -> None:
    w = p.packed.get(op.operands[0])
    if w is None or not is_native(op):
        raise EntryUnsupported("mul_mat of a weight not bound as packed blocks")
    x = p.contiguous(op.operands[1])
    if x.ctype != "float" or x.shape[-1] != w.k:
        raise EntryUnsupported("mul_mat of activations that are not float32 rows of K")
    out = p.result(op)
    stored = p.alloc("float", out.shape)  # the rows as the file stores them, put in the IR's order
    n = x.size // w.k
    fn = "strata_mul_mat_repacked" if op.attributes.get(ORDER_ATTR) == StringAttr(REPACKED) else "strata_mul_mat_ggml"
    p.line(f"if (orders[{w.index}]) {{")
    p.line(f"    if ({fn}({w.type_id}, (const uint8_t*)weights[{w.index}], {w.rows}, {w.k}, {w.row_bytes}, {x.ptr}, "
           f"{n}, {stored.ptr})) return 4;")
    p.line(f"    for (int64_t r = 0; r < {n}; ++r)")
    p.line(f"        for (int64_t i = 0; i < {w.rows}; ++i) {out.ptr}[r * {w.rows} + i] = "
           f"{stored.ptr}[r * {w.rows} + orders[{w.index}][i]];")
    p.line(f"}} else if ({fn}({w.type_id}, (const uint8_t*)weights[{w.index}], {w.rows}, {w.k}, {w.row_bytes}, "
           f"{x.ptr}, {n}, {out.ptr})) return 4;")


ENTRY_EMITTER.add(O.MulMatOp, _products)


@ENTRY_EMITTER.register(O.FlashAttnExtOp)
def _flash_attn_ext(p: EntryPrinter, op: O.FlashAttnExtOp) -> None:
    k, v = p.places[op.k], p.places[op.v]
    if not is_native(op) or k.ctype != "uint16_t" or v.ctype != "uint16_t" or op.mask is None:
        raise EntryUnsupported("flash_attn_ext over a float32 KV cache (compile with --set kv_type=f16)")
    q = p.contiguous(op.q)
    mask = p.contiguous(op.mask)
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    if s != 1 or mask.shape != (1, n):
        raise EntryUnsupported("flash_attn_ext of more than one query row")
    # Only the KV rows the mask shows are copied out of the cache (a prefix: the mask is
    # causal); the kernel skips the others, so the numbers are those of the whole cache.
    kc, vc = p.alloc("uint16_t", k.shape), p.alloc("uint16_t", v.shape)
    out = p.result(op)
    p.line("{")
    p.line(f"    int64_t live = {n};")
    p.line(f"    while (live > 1 && std::isinf({mask.ptr}[live - 1]) && {mask.ptr}[live - 1] < 0) --live;")
    for src, dst, depth in ((k, kc, d), (v, vc, dv)):
        p.line(f"    for (int64_t h = 0; h < {hkv}; ++h)")
        p.line("        for (int64_t j = 0; j < live; ++j)")
        p.line(f"            std::memcpy({dst.ptr} + (h * live + j) * {depth}, {src.ptr} + h * {src.strides[0]} + "
               f"j * {src.strides[1]}, {depth} * sizeof(uint16_t));")
    if k.strides[2] != 1 or v.strides[2] != 1:
        raise EntryUnsupported("flash_attn_ext over a KV cache whose rows are not contiguous")
    p.line(f"    if (strata_flash_attn_f16({q.ptr}, {hq}, {s}, {d}, {kc.ptr}, {vc.ptr}, {hkv}, live, {dv}, "
           f"{mask.ptr}, {float_lit(op.scale.value.data)}, {out.ptr})) return 4;")
    p.line("}")


@ENTRY_EMITTER.register(func.ReturnOp)
def _return(p: EntryPrinter, op: func.ReturnOp) -> None:
    if len(op.arguments) != 1:
        raise EntryUnsupported("an entry of more than one result")
    res = p.contiguous(op.arguments[0])
    if res.ctype != "float":
        raise EntryUnsupported("an entry whose result is not float32")
    p.logits = res.shape
    p.line(f"std::memcpy(logits, {res.ptr}, {res.size} * sizeof(float));")
    p.line("return 0;")


def print_entry(module: ModuleOp, entry: str, model_name: str | None = None) -> EntrySource:
    """The C++ source of `entry` (deterministic), or EntryUnsupported naming the first op,
    type or shape without a C++ handler."""
    if entry not in ENTRY_FUNCTIONS:
        raise EntryUnsupported(f"entry @{sanitize_label(entry)} has no C++ printer")
    fns = [o for o in module.ops if isinstance(o, func.FuncOp) and o.sym_name.data == entry]
    if not fns:
        raise EntryUnsupported(f"no entry @{sanitize_label(entry)}")
    fn = fns[0]
    if fn.function_type.inputs.data or "op.n_kv" not in fn.attributes:
        raise EntryUnsupported(f"entry @{entry} takes arguments")
    p = EntryPrinter(fn, int(fn.attributes["op.n_kv"].value.data))
    for op in fn.body.walk():
        if op is not fn:
            p.print_op(op)
    name = ENTRY_FUNCTIONS[entry]
    title = f"model {sanitize_label(model_name)}" if model_name else "a model"
    arenas = "\n".join(f"std::vector<{ctype}> {var}_arena({max(p.arena[ctype], 1)});"
                       for ctype, var in _ARENA.items())
    locals_ = "\n".join(f"    {ctype}* const {var} = {var}_arena.data();" for ctype, var in _ARENA.items())
    source = f"""// Entry @{entry} of {title}, printed by strata from the op-level IR; generated, do not edit.
// Weights and states by index; one token per call; every shape static.
#include "strata_kernels.cpp"
#include "entry_ops.h"

namespace {{
{arenas}
{chr(10).join(p.constants)}
}}  // namespace

extern "C" int {name}(const void* const* weights, const int64_t* const* orders, void* const* states,
                      int32_t token, int32_t pos, float* logits) {{
    if (!weights || !orders || !states || !logits) return 1;
    if (pos < 0 || pos >= {p.n_kv}) return 2;
{locals_}
    (void)f32; (void)i32; (void)i64; (void)f16; (void)token;
{chr(10).join(p.lines)}
}}
"""
    kinds = tuple(p.weight_kinds[i] for i in range(len(p.weights)))
    return EntrySource(source, name, tuple(p.weights), kinds, tuple(p.states), p.logits)
