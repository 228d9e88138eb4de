"""The ONNX translation of each op-level op, registered with `ONNX_EXPORT` (see `onnx_graph.py`); `onnx.py` imports it.

Each translation mirrors the op's numpy kernel (`strata.semantics.kernels`): float32 compute,
ggml's broadcasting (REPEAT tiles), the kernel's formula where rounding could differ.
"""

from __future__ import annotations

import numpy as np

from strata.dialects import op as O
from strata.exporters.onnx_graph import (
    MS_DOMAIN,
    ONNX_EXPORT,
    VIEW_LIKE,
    Alias,
    Exporter,
    OnnxExportError,
    attr_float,
    label_of,
    numel,
    sanitize,
)
from strata.ir.checks import shape_of
from strata.semantics import kernels as K
from strata.semantics.op_interp import numpy_dtype, read_param

# ---------------------------------------------------------------------------------------------
# Leaves


#: Why a tensor-parallel entry is not exported: an ONNX graph is one process's, with no collectives.
SHARDED = "a tensor-parallel entry has no ONNX export (ONNX has no collectives); export the unsharded model"


@ONNX_EXPORT.register(*O.COLLECTIVE_OPS)
def _collective(ex: Exporter, op) -> None:
    raise OnnxExportError(f"{op.name}: {SHARDED}")


@ONNX_EXPORT.register(O.ParamOp)
def _param(ex: Exporter, op: O.ParamOp) -> None:
    if op.piece is not None:
        raise OnnxExportError(f"op.param '{op.tensor_name.data}' is one rank's piece: {SHARDED}")
    if _packed_int4(ex, op):
        return
    # The interpreter's param: the stored tensor, converted and checked against the IR type.
    array = read_param(op, ex.weights)
    try:
        name = ex.const(np.asarray(array), sanitize(op.tensor_name.data))
    except (TypeError, ValueError, KeyError) as e:
        raise OnnxExportError(f"op.param '{op.tensor_name.data}': its element type {array.dtype} has no ONNX "
                              f"equivalent ({e})") from None
    ex.set(op, name)


def _packed_int4(ex: Exporter, op: O.ParamOp) -> bool:
    """An int4 weight read only as the weight of 2-D MUL_MATs is left packed, for MatMulNBits
    (`_mul_mat`); one read any other way (a tied embedding's GET_ROWS) is its dequantized f32."""
    name = op.tensor_name.data
    if ex.int4 is None or name not in ex.int4.weights or len(shape_of(op.result)) != 2:
        return False
    n, k = ex.int4.weights[name]["N"], ex.int4.weights[name]["K"]
    if tuple(shape_of(op.result)) != (n, k):
        raise OnnxExportError(f"op.param '{name}': the model reads it as {list(shape_of(op.result))}, the int4 "
                              f"weights hold it as [{n}, {k}] (weights of another model?)")
    if not op.result.uses or not all(isinstance(u.operation, O.MulMatOp) and u.index == 0 for u in op.result.uses):
        return False
    ex.packed_params[op.result] = name
    return True


def _matmul_nbits(ex: Exporter, name: str, x: str, base: str) -> str:
    """x [..., K] @ W^T with W int4: ONNX Runtime's MatMulNBits on the packed bytes, zero points and
    scales of the w4a16 stage (the same bytes MatMulNBitsQuantizer writes; f32 compute)."""
    b, scales, zp = ex.int4.packed(name)
    n, k = ex.int4.weights[name]["N"], ex.int4.weights[name]["K"]
    base_w = sanitize(name)
    inputs = [x, ex.const(b, f"{base_w}_Q4"), ex.const(scales, f"{base_w}_scales"),
              ex.const(zp, f"{base_w}_zero_points")]
    return ex.node("MatMulNBits", inputs, base, domain=MS_DOMAIN, K=k, N=n, bits=4, block_size=ex.int4.block)


@ONNX_EXPORT.register(O.ConstantOp)
def _constant(ex: Exporter, op: O.ConstantOp) -> None:
    typ = op.result.type
    values = np.asarray(op.value.get_values(), dtype=numpy_dtype(typ.get_element_type())).reshape(typ.get_shape())
    ex.set(op, ex.const(values, label_of(op)))


@ONNX_EXPORT.register(O.InputOp)
def _input(ex: Exporter, op: O.InputOp) -> None:
    ex.set(op, ex.host_input(op.kind.data, op.result.type))


@ONNX_EXPORT.register(O.StateOp)
def _state(ex: Exporter, op: O.StateOp) -> None:
    state = op.state_name.data
    if state not in ex.states:
        name = ex.fresh(state)
        ex.states[state] = (name, op.result.type, op.recurrent is not None)
        ex.state_inputs.append(ex.value_info(name, op.result.type))
        ex.elem[name] = ex.onnx.helper.np_dtype_to_tensor_dtype(numpy_dtype(op.result.type.get_element_type()))
        ex.version[state] = name
    if op.recurrent is not None:  # a new sequence (start 0) reads its recurrent state zeroed
        cur = ex.version[state]
        is_new = ex.node("Equal", [ex.first_position(), ex.i64([0])], f"{state}_new", elem=ex.onnx.TensorProto.BOOL)
        zero = ex.const(np.zeros((), dtype=numpy_dtype(op.result.type.get_element_type())), "zero")
        ex.version[state] = ex.node("Where", [is_new, zero, cur], f"{state}_read", elem=ex.elem[cur])
    ex.values[op.result] = Alias(state, ())


# ---------------------------------------------------------------------------------------------
# Layout


@ONNX_EXPORT.register(*VIEW_LIKE)
def _view_like(ex: Exporter, op) -> None:
    src = ex.values[op.src]
    if isinstance(src, Alias):  # a view of a state: evaluated where it is read
        ex.values[op.result] = Alias(src.state, src.chain + (op,))
    else:
        ex.set(op, ex.view_like(op, src))


@ONNX_EXPORT.register(O.ContOp)
def _cont(ex: Exporter, op: O.ContOp) -> None:
    ex.set(op, ex.view_like(op, ex.get(op.src)))


@ONNX_EXPORT.register(O.GetRowsOp)
def _get_rows(ex: Exporter, op: O.GetRowsOp) -> None:
    table, ids = ex.get(op.lhs), ex.cast(ex.get(op.rhs), np.int64, "ids")
    base = label_of(op)
    rank = len(shape_of(op.lhs))
    if rank == 2:
        rows = ex.node("Gather", [table, ids], base, elem=ex.elem[table], axis=0)
    else:  # batch b gathers from table[b]
        idx = ex.node("Unsqueeze", [ids, ex.i64([-1])], base, elem=ex.elem[ids])
        rows = ex.node("GatherND", [table, idx], base, elem=ex.elem[table], batch_dims=rank - 2)
    ex.set(op, ex.f32(rows, base))


@ONNX_EXPORT.register(O.RepeatOp)
def _repeat(ex: Exporter, op: O.RepeatOp) -> None:
    src, shape = ex.get(op.src), shape_of(op.result)
    small = shape_of(op.src)
    small = (1,) * (len(shape) - len(small)) + small
    x = ex.reshape(src, small, label_of(op))
    reps = [d // s if s else 1 for d, s in zip(shape, small)]
    ex.set(op, ex.node("Tile", [x, ex.i64(reps)], label_of(op), elem=ex.elem[src]))


@ONNX_EXPORT.register(O.ConcatOp)
def _concat(ex: Exporter, op: O.ConcatOp) -> None:
    a, b = ex.get(op.lhs), ex.get(op.rhs)
    ex.set(op, ex.node("Concat", [a, b], label_of(op), elem=ex.elem[a], axis=int(op.axis.value.data)))


# ---------------------------------------------------------------------------------------------
# Writes


@ONNX_EXPORT.register(O.SetRowsOp)
def _set_rows(ex: Exporter, op: O.SetRowsOp) -> None:
    dst = ex.state_of(op.dst)
    base = label_of(op)
    src, rows = ex.get(op.src), ex.cast(ex.get(op.rows), np.int64, "rows")
    if dst.chain:  # rows of a view of the state: write through the view's element map
        index = ex.index_map(dst)  # [R, C]
        where = ex.node("Gather", [ex.const(index, "rows_index"), rows], base, elem=ex.elem[rows], axis=0)
        state_type = ex.states[dst.state][1]
        total = numel(state_type.get_shape())
        cur = ex.reshape(ex.version[dst.state], [total], base)
        data = ex.cast(src, numpy_dtype(state_type.get_element_type()), base)
        flat_where = ex.reshape(where, [-1, 1], base)
        flat = ex.node("ScatterND", [cur, flat_where, ex.reshape(data, [-1], base)], base, elem=ex.elem[cur])
        ex.version[dst.state] = ex.reshape(flat, state_type.get_shape(), base)
    else:
        cur = ex.version[dst.state]
        dtype = numpy_dtype(ex.states[dst.state][1].get_element_type())
        idx = ex.node("Unsqueeze", [rows, ex.i64([-1])], base, elem=ex.elem[rows])
        ex.version[dst.state] = ex.node("ScatterND", [cur, idx, ex.cast(src, dtype, base)], base, elem=ex.elem[cur])
    ex.values[op.result] = dst


@ONNX_EXPORT.register(O.CpyOp)
def _cpy(ex: Exporter, op: O.CpyOp) -> None:
    dst = ex.state_of(op.rhs)
    if numel(shape_of(op.rhs)) > 0:
        ex.write(dst, ex.get(op.lhs), label_of(op))
    ex.values[op.result] = dst


# ---------------------------------------------------------------------------------------------
# Element-wise


def _binary(onnx_op: str):
    def translate(ex: Exporter, op) -> None:
        a, b = ex.f32(ex.get(op.lhs)), ex.f32(ex.get(op.rhs))
        sa, sb = shape_of(op.lhs), shape_of(op.rhs)
        sb_full = (1,) * (len(sa) - len(sb)) + sb
        if any(db not in (1, da) for da, db in zip(sa, sb_full)):  # ggml repeat: b tiles a
            b = ex.node("Tile", [ex.reshape(b, sb_full), ex.i64([da // db for da, db in zip(sa, sb_full)])], "tile")
        ex.set(op, ex.node(onnx_op, [a, b], label_of(op)))

    return translate


ONNX_EXPORT.add(O.AddOp, _binary("Add"))
ONNX_EXPORT.add(O.MulOp, _binary("Mul"))
ONNX_EXPORT.add(O.DivOp, _binary("Div"))


def _scalar(ex: Exporter, value: float) -> str:
    return ex.const(np.asarray(value, dtype=np.float32), "scalar")


@ONNX_EXPORT.register(O.ScaleOp)
def _scale(ex: Exporter, op: O.ScaleOp) -> None:
    ex.set(op, ex.node("Mul", [ex.f32(ex.get(op.src)), _scalar(ex, attr_float(op.scale))], label_of(op)))


def _sigmoid_parts(ex: Exporter, x: str, base: str) -> str:
    """1 + exp(-x), as the kernels compute silu and sigmoid."""
    e = ex.node("Exp", [ex.node("Neg", [x], base)], base)
    return ex.node("Add", [e, _scalar(ex, 1.0)], base)


@ONNX_EXPORT.register(O.SiluOp)
def _silu(ex: Exporter, op: O.SiluOp) -> None:
    x = ex.f32(ex.get(op.src))
    ex.set(op, ex.node("Div", [x, _sigmoid_parts(ex, x, label_of(op))], label_of(op)))


@ONNX_EXPORT.register(O.SigmoidOp)
def _sigmoid(ex: Exporter, op: O.SigmoidOp) -> None:
    x = ex.f32(ex.get(op.src))
    ex.set(op, ex.node("Reciprocal", [_sigmoid_parts(ex, x, label_of(op))], label_of(op)))


@ONNX_EXPORT.register(O.SwigluOp)
def _swiglu(ex: Exporter, op: O.SwigluOp) -> None:
    g, u = ex.f32(ex.get(op.lhs)), ex.f32(ex.get(op.rhs))
    base = label_of(op)
    silu = ex.node("Div", [g, _sigmoid_parts(ex, g, base)], base)
    ex.set(op, ex.node("Mul", [silu, u], base))


@ONNX_EXPORT.register(O.SoftplusOp)
def _softplus(ex: Exporter, op: O.SoftplusOp) -> None:
    x, base = ex.f32(ex.get(op.src)), label_of(op)
    twenty = _scalar(ex, 20.0)
    y = ex.node("Exp", [ex.node("Min", [x, twenty], base)], base)
    y = ex.node("Log", [ex.node("Add", [y, _scalar(ex, 1.0)], base)], base)
    big = ex.node("Greater", [x, twenty], base, elem=ex.onnx.TensorProto.BOOL)
    ex.set(op, ex.node("Where", [big, x, y], base))


@ONNX_EXPORT.register(O.ClampOp)
def _clamp(ex: Exporter, op: O.ClampOp) -> None:
    # ggml's MAX(MIN(x, hi), lo) with its comparisons: a NaN becomes hi.
    x, base = ex.f32(ex.get(op.src)), label_of(op)
    lo, hi = _scalar(ex, attr_float(op.min)), _scalar(ex, attr_float(op.max))
    y = ex.node("Where", [ex.node("Less", [x, hi], base, elem=ex.onnx.TensorProto.BOOL), x, hi], base)
    ex.set(op, ex.node("Where", [ex.node("Greater", [y, lo], base, elem=ex.onnx.TensorProto.BOOL), y, lo], base))


# ---------------------------------------------------------------------------------------------
# Row-wise


@ONNX_EXPORT.register(O.RmsNormOp)
def _rms_norm(ex: Exporter, op: O.RmsNormOp) -> None:
    x, base = ex.f32(ex.get(op.src)), label_of(op)
    ms = ex.node("ReduceMean", [ex.node("Mul", [x, x], base), ex.i64([-1])], base, keepdims=1)
    root = ex.node("Sqrt", [ex.node("Add", [ms, _scalar(ex, attr_float(op.eps))], base)], base)
    ex.set(op, ex.node("Div", [x, root], base))


@ONNX_EXPORT.register(O.SumRowsOp)
def _sum_rows(ex: Exporter, op: O.SumRowsOp) -> None:
    ex.set(op, ex.node("ReduceSum", [ex.f32(ex.get(op.src)), ex.i64([-1])], label_of(op), keepdims=1))


@ONNX_EXPORT.register(O.ArgmaxOp)
def _argmax(ex: Exporter, op: O.ArgmaxOp) -> None:
    i = ex.node("ArgMax", [ex.f32(ex.get(op.src))], label_of(op), elem=ex.onnx.TensorProto.INT64, axis=-1, keepdims=0)
    ex.set(op, ex.cast(i, np.int32, label_of(op)))


@ONNX_EXPORT.register(O.SampleOp)
def _sample(ex: Exporter, op: O.SampleOp) -> None:
    # ONNX's random ops draw from an unspecified generator: none gives the Philox 4x32-10 words
    # every other target draws, so the sampler is not exported (onnxruntime programs sample on
    # the host, with the same numpy sampler).
    raise OnnxExportError("op.sample: ONNX has no counter-based (Philox 4x32-10) random op, so the sampler has "
                          "no ONNX form; export @prefill and @decode, and sample their logits on the host")


@ONNX_EXPORT.register(O.ArgsortOp)
def _argsort(ex: Exporter, op: O.ArgsortOp) -> None:
    # TopK of every column: equal values keep their index order (ONNX's tie rule), a stable sort.
    x, base = ex.f32(ex.get(op.src)), label_of(op)
    n = shape_of(op.src)[-1]
    largest = 1 if op.order.data == "desc" else 0
    ex.node("TopK", [x, ex.i64([n])], base, outputs=2, axis=-1, largest=largest, sorted=1)
    idx = ex.nodes[-1].output[1]
    ex.elem[idx] = ex.onnx.TensorProto.INT64
    ex.set(op, ex.cast(idx, np.int32, base))


@ONNX_EXPORT.register(O.SoftMaxOp)
def _soft_max(ex: Exporter, op: O.SoftMaxOp) -> None:
    x, base = ex.f32(ex.get(op.src)), label_of(op)
    z = ex.node("Mul", [x, _scalar(ex, attr_float(op.scale))], base)
    if op.mask is not None:
        z = ex.node("Add", [z, ex.f32(ex.get(op.mask))], base)
    ex.set(op, ex.node("Softmax", [z], base, axis=-1))


# ---------------------------------------------------------------------------------------------
# Matrix products and attention


def _matmul_bt(ex: Exporter, a: str, b: str, sa, sb, base: str) -> str:
    """b @ a^T over the last two dims, a's leading dims shared by consecutive b slices (ggml)."""
    rank = len(sa)
    at = ex.transpose(a, [*range(rank - 2), rank - 1, rank - 2], base)
    if rank == 2:
        return ex.node("MatMul", [b, at], base)
    lead_a = (1,) * (len(sb) - len(sa)) + tuple(sa[:-2])
    a_split, b_split = [], []
    for da, db in zip(lead_a, sb[:-2]):
        b_split += [da, db // da]
        a_split += [da, 1]
    a5 = ex.reshape(at, a_split + [sa[-1], sa[-2]], base)
    b5 = ex.reshape(b, b_split + list(sb[-2:]), base)
    out = ex.node("MatMul", [b5, a5], base)
    return ex.reshape(out, list(sb[:-2]) + [sb[-2], sa[-2]], base)


@ONNX_EXPORT.register(O.MulMatOp)
def _mul_mat(ex: Exporter, op: O.MulMatOp) -> None:
    if op.lhs in ex.packed_params:
        ex.set(op, _matmul_nbits(ex, ex.packed_params[op.lhs], ex.f32(ex.get(op.rhs)), label_of(op)))
        return
    a, b = ex.f32(ex.get(op.lhs)), ex.f32(ex.get(op.rhs))
    ex.set(op, _matmul_bt(ex, a, b, shape_of(op.lhs), shape_of(op.rhs), label_of(op)))


@ONNX_EXPORT.register(O.MulMatIdOp)
def _mul_mat_id(ex: Exporter, op: O.MulMatIdOp) -> None:
    # Gather each slot's expert [T, U, M, K] (only the routed experts are read and upcast),
    # then one batched product with the slot's row of b.
    base = label_of(op)
    ids = ex.cast(ex.get(op.ids), np.int64, base)
    w = ex.f32(ex.node("Gather", [ex.get(op.experts), ids], base, elem=ex.elem[ex.get(op.experts)], axis=0), base)
    b = ex.f32(ex.get(op.b))
    t, u = shape_of(op.ids)
    n_b = shape_of(op.b)[1]
    if n_b not in (1, u):  # slot j reads row j % Nb
        b = ex.node("Gather", [b, ex.i64([j % n_b for j in range(u)])], base, axis=1)
    col = ex.node("Unsqueeze", [b, ex.i64([-1])], base)
    out = ex.node("MatMul", [w, col], base)
    ex.set(op, ex.node("Squeeze", [out, ex.i64([-1])], base))


@ONNX_EXPORT.register(O.FlashAttnExtOp)
def _flash_attn_ext(ex: Exporter, op: O.FlashAttnExtOp) -> None:
    base = label_of(op)
    q, k, v = (ex.f32(ex.get(x)) for x in (op.q, op.k, op.v))
    hq, s, d = shape_of(op.q)
    hkv, n, dv = shape_of(op.v)
    group = hq // hkv
    qg = ex.reshape(q, [hkv, group * s, d], base)
    kq = ex.node("MatMul", [qg, ex.transpose(k, [0, 2, 1], base)], base)
    z = ex.node("Mul", [ex.reshape(kq, [hkv, group, s, n], base), _scalar(ex, attr_float(op.scale))], base)
    if op.mask is not None:
        z = ex.node("Add", [z, ex.f32(ex.get(op.mask))], base)
    p = ex.reshape(ex.node("Softmax", [z], base, axis=-1), [hkv, group * s, n], base)
    out = ex.reshape(ex.node("MatMul", [p, v], base), [hq, s, dv], base)
    ex.set(op, ex.transpose(out, [1, 0, 2], base))


@ONNX_EXPORT.register(O.RopeOp)
def _rope(ex: Exporter, op: O.RopeOp) -> None:
    base = label_of(op)
    x = ex.f32(ex.get(op.src))
    s, heads, d = shape_of(op.src)
    n_dims, mode = int(op.n_dims.value.data), op.mode.data
    half = n_dims // 2
    # Angles in float64, cos and sin rounded to float32, as the kernel.
    inv = float(attr_float(op.freq_base)) ** (-np.arange(half, dtype=np.float64) * 2.0 / n_dims)
    pos = ex.cast(ex.get(op.positions), np.float64, base)
    if op.freq_factors is not None:
        factors = ex.cast(ex.slice(ex.get(op.freq_factors), [0], [half], [0], base), np.float64, base)
        c = ex.node("Div", [ex.const(inv, "rope_inv"), factors], base, elem=ex.elem[pos])
        c = ex.node("Mul", [c, ex.const(np.asarray(attr_float(op.freq_scale), dtype=np.float64), "scalar")], base,
                    elem=ex.elem[pos])
    else:
        c = ex.const(float(attr_float(op.freq_scale)) * inv, "rope_freq")
    if mode in ("mrope", "imrope"):
        which = K._mrope_streams(half, op.sections.get_values(), mode == "imrope")
        streams = ex.reshape(pos, [4, s], base)
        p = ex.transpose(ex.node("Gather", [streams, ex.const(which, "rope_streams")], base, elem=ex.elem[pos],
                                 axis=0), [1, 0], base)  # [S, half]
    else:
        p = ex.node("Unsqueeze", [pos, ex.i64([1])], base, elem=ex.elem[pos])  # [S, 1]
    theta = ex.node("Mul", [p, c], base, elem=ex.elem[pos])  # [S, half]
    cos = ex.reshape(ex.cast(ex.node("Cos", [theta], base, elem=ex.elem[pos]), np.float32, base), [s, 1, half], base)
    sin = ex.reshape(ex.cast(ex.node("Sin", [theta], base, elem=ex.elem[pos]), np.float32, base), [s, 1, half], base)
    if mode == "norm":  # adjacent pairs (2i, 2i+1)
        pairs = ex.reshape(ex.slice(x, [0], [n_dims], [2], base), [s, heads, half, 2], base)
        x0 = ex.reshape(ex.slice(pairs, [0], [1], [3], base), [s, heads, half], base)
        x1 = ex.reshape(ex.slice(pairs, [1], [2], [3], base), [s, heads, half], base)
    else:
        x0, x1 = ex.slice(x, [0], [half], [2], base), ex.slice(x, [half], [n_dims], [2], base)
    o0 = ex.node("Sub", [ex.node("Mul", [x0, cos], base), ex.node("Mul", [x1, sin], base)], base)
    o1 = ex.node("Add", [ex.node("Mul", [x0, sin], base), ex.node("Mul", [x1, cos], base)], base)
    if mode == "norm":
        o0, o1 = (ex.node("Unsqueeze", [o, ex.i64([3])], base) for o in (o0, o1))
        rot = ex.reshape(ex.node("Concat", [o0, o1], base, axis=3), [s, heads, n_dims], base)
    else:
        rot = ex.node("Concat", [o0, o1], base, axis=2)
    if n_dims < d:  # partial rotary: the rest passes through
        rot = ex.node("Concat", [rot, ex.slice(x, [n_dims], [d], [2], base)], base, axis=2)
    ex.set(op, rot)


# ---------------------------------------------------------------------------------------------
# Linear attention


@ONNX_EXPORT.register(O.SsmConvOp)
def _ssm_conv(ex: Exporter, op: O.SsmConvOp) -> None:
    # result[t, ch] = sum_i sx[ch, t + i] * c[ch, i], summed in order of i (as the kernel).
    base = label_of(op)
    sx, c = ex.f32(ex.get(op.lhs)), ex.f32(ex.get(op.rhs))
    shape_x = shape_of(op.lhs)
    k = shape_of(op.rhs)[1]
    t = shape_x[-1] - k + 1
    axis = len(shape_x) - 1
    acc = None
    for i in range(k):
        win = ex.slice(sx, [i], [i + t], [axis], base)
        term = ex.node("Mul", [win, ex.slice(c, [i], [i + 1], [1], base)], base)
        acc = term if acc is None else ex.node("Add", [acc, term], base)
    rank = len(shape_x)
    ex.set(op, ex.transpose(acc, [*range(rank - 2), rank - 1, rank - 2], base))


@ONNX_EXPORT.register(O.GatedDeltaNetOp)
def _gated_delta_net(ex: Exporter, op: O.GatedDeltaNetOp) -> None:
    """The delta rule's recurrence over the tokens as an ONNX Scan (state [Hv, D, D] carried)."""
    helper, TP = ex.onnx.helper, ex.onnx.TensorProto
    base = label_of(op)
    t, hk, d = shape_of(op.q)
    hv = shape_of(op.v)[1]
    gw = shape_of(op.g)[2]
    heads = np.arange(hv) // (hv // hk) if op.grouped is not None else np.arange(hv) % hk
    head_idx = ex.const(heads.astype(np.int64), "gdn_heads")
    qh = ex.node("Gather", [ex.f32(ex.get(op.q)), head_idx], base, axis=1)  # [T, Hv, D]
    kh = ex.node("Gather", [ex.f32(ex.get(op.k)), head_idx], base, axis=1)
    v = ex.f32(ex.get(op.v))
    decay = ex.node("Exp", [ex.f32(ex.get(op.g))], base)  # [T, Hv, 1 or D]
    beta = ex.f32(ex.get(op.beta))  # [T, Hv, 1]
    s0 = ex.f32(ex.get(op.state))
    scale = float(np.float32(1.0 / np.sqrt(np.float32(d))))

    p = ex.fresh(f"{base}_scan")  # body names: unique in the whole model
    nm = lambda s: f"{p}_{s}"  # noqa: E731
    body_nodes = [
        helper.make_node("Constant", [], [nm("ax1")], value=helper.make_tensor(nm("ax1v"), TP.INT64, [1], [1])),
        helper.make_node("Constant", [], [nm("ax2")], value=helper.make_tensor(nm("ax2v"), TP.INT64, [1], [2])),
        helper.make_node("Constant", [], [nm("scale")], value=helper.make_tensor(nm("scalev"), TP.FLOAT, [], [scale])),
        helper.make_node("Unsqueeze", [nm("g"), nm("ax1")], [nm("g3")]),  # [Hv, 1, 1|D]
        helper.make_node("Mul", [nm("s_in"), nm("g3")], [nm("s1")]),
        helper.make_node("Unsqueeze", [nm("k"), nm("ax2")], [nm("kc")]),  # [Hv, D, 1]
        helper.make_node("MatMul", [nm("s1"), nm("kc")], [nm("sk3")]),
        helper.make_node("Squeeze", [nm("sk3"), nm("ax2")], [nm("sk")]),  # S^T k
        helper.make_node("Sub", [nm("v"), nm("sk")], [nm("vd")]),
        helper.make_node("Mul", [nm("vd"), nm("b")], [nm("u")]),
        helper.make_node("Unsqueeze", [nm("u"), nm("ax2")], [nm("uc")]),  # [Hv, D, 1]
        helper.make_node("Unsqueeze", [nm("k"), nm("ax1")], [nm("kr")]),  # [Hv, 1, D]
        helper.make_node("Mul", [nm("uc"), nm("kr")], [nm("outer")]),
        helper.make_node("Add", [nm("s1"), nm("outer")], [nm("s_out")]),
        helper.make_node("Unsqueeze", [nm("q"), nm("ax2")], [nm("qc")]),
        helper.make_node("MatMul", [nm("s_out"), nm("qc")], [nm("o3")]),
        helper.make_node("Squeeze", [nm("o3"), nm("ax2")], [nm("o1")]),
        helper.make_node("Mul", [nm("o1"), nm("scale")], [nm("o")]),
    ]
    f = lambda n, shape: helper.make_tensor_value_info(nm(n), TP.FLOAT, shape)  # noqa: E731
    body = helper.make_graph(
        body_nodes, nm("body"),
        [f("s_in", [hv, d, d]), f("q", [hv, d]), f("k", [hv, d]), f("v", [hv, d]), f("g", [hv, gw]), f("b", [hv, 1])],
        [f("s_out", [hv, d, d]), f("o", [hv, d])])
    s_final, outs = ex.fresh(f"{base}_state"), ex.fresh(f"{base}_out")
    ex.nodes.append(helper.make_node("Scan", [s0, qh, kh, v, decay, beta], [s_final, outs], name=ex.fresh(f"n_{p}"),
                                     body=body, num_scan_inputs=5))
    ex.elem[s_final] = ex.elem[outs] = TP.FLOAT
    flat = ex.node("Concat", [ex.reshape(outs, [t * hv * d], base), ex.reshape(s_final, [hv * d * d], base)], base,
                   axis=0)
    ex.set(op, ex.reshape(flat, list(shape_of(op.result)), base))


# ---------------------------------------------------------------------------------------------
# The entries of several sequences (their host inputs come from the entries' arguments, which
# an exported prefill or decode does not take): refused, naming the op.


@ONNX_EXPORT.register(O.GatedDeltaNetSeqOp, O.TargetLogProbsOp, O.GenerateOp, O.GenerateUntilOp,
                      O.GenerateSampledOp)
def _entries_only(ex: Exporter, op) -> None:
    raise OnnxExportError(f"{op.name}: no ONNX export; the ONNX export covers the one-sequence prefill and decode "
                          "(run the other entries with strata call)")
