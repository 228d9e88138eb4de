"""Execute a `fixed`-level function in exact integer arithmetic (numpy int64).

    outs = run_fixed(fn, weights, [ids, cos, sin])      # int64 arrays (fixed values' integers)
    floats = [from_fixed(o, frac_of(t)) for o, t in zip(outs, fn.function_type.outputs)]

One implementation per op, registered in `FIXED_INTERPRETER` (as `op_interp.INTERPRETER`).
A fixed tensor's value is an int64 array of its int32 integers (X meaning X * 2^-frac, the frac
read from the value's type); ui8/i8/i32 tensors are their numpy arrays. The arithmetic is
`strata.semantics.fixed_arith`'s: rounding half away from zero everywhere, saturation at the
int32 limits on every result, and each op's 64-bit intermediates bounded as its docstring in
`strata.dialects.fixed` says. The same inputs give the same integers on every machine.

Weights (`fixed.param`) are read by name from `weights` (a mapping or an object with `.get`,
as the blueprint interpreter takes them): `value` rounds the float weight to the result's frac;
the int4 parts quantize it with ONNX Runtime's block-wise asymmetric formula and MatMulNBits'
packing (`strata.ir.int4`), the scales rounded to their frac. Each is cached per
(name, part, type) in `cache`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from strata.dialects import fixed as FX
from strata.dialects.fixed import frac_of
from strata.errors import StrataError
from strata.ir.checks import shape_of
from strata.ir.impls import Implementations
from strata.ir.int4 import pack_int4, quantize_int4_block, unpack_int4
from strata.semantics.fixed_arith import (
    I64,
    ceil_log2,
    from_fixed,
    isqrt,
    bit_length,
    rdiv,
    rshift_round,
    sat32,
    shift,
    sigmoid_q31,
    softmax_q31,
    to_fixed,
)


class FixedRunError(StrataError):
    """A fixed-level function that cannot be executed (a missing weight, a bad input)."""


@dataclass
class Env:
    weights: Any
    cache: dict[tuple, np.ndarray] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # fixed.kv_state buffers, by name

    def weight(self, name: str) -> np.ndarray:
        try:
            w = self.weights[name] if isinstance(self.weights, Mapping) else self.weights.get(name)
        except (KeyError, StrataError):
            w = None
        if w is None:
            raise FixedRunError(f"fixed.param: no weight '{name}'")
        return np.asarray(w, np.float32)


FIXED_INTERPRETER: Implementations[Callable[[Operation, list, Env], tuple]] = Implementations("fixed interpreter")
R = FIXED_INTERPRETER.register


def _out(op: Operation) -> int:
    return frac_of(op.results[0])


def _f(v: SSAValue) -> int:
    return frac_of(v)


@R(FX.ParamOp)
def _param(op: FX.ParamOp, a: list, env: Env) -> tuple:
    t = op.result.type
    assert isinstance(t, TensorType)
    shape = tuple(t.get_shape())
    part = op.part_name
    key = (op.param.data, part, str(t))
    if key not in env.cache:
        w = env.weight(op.param.data)
        if part == "value":
            if w.size != int(np.prod(shape)):
                raise FixedRunError(f"fixed.param: weight '{op.param.data}' has shape {list(w.shape)}, the IR says {list(shape)}")
            _check_fits(op, w, frac_of(t))
            env.cache[key] = to_fixed(w.reshape(shape), frac_of(t))
        else:
            if w.ndim != 2:
                raise FixedRunError(f"fixed.param: int4 weight '{op.param.data}' must be 2-D, got {list(w.shape)}")
            assert op.block is not None
            block = op.block.value.data
            q, scale, zp = quantize_int4_block(w, block)
            b, zpp = pack_int4(q, zp, block)
            value = {"int4_b": b, "int4_zp": zpp}.get(part)
            if part == "int4_scales":
                _check_fits(op, scale, frac_of(t))
                value = to_fixed(scale, frac_of(t))
            assert value is not None
            if tuple(value.shape) != shape:
                raise FixedRunError(f"fixed.param: '{op.param.data}' {part} has shape {list(value.shape)}, the IR says {list(shape)}")
            env.cache[key] = value
    return (env.cache[key],)


def _check_fits(op: FX.ParamOp, w: np.ndarray, frac: int) -> None:
    """A weight beyond its format's range (by more than the one LSB seed 004's rule allows at an
    exact power of two) is an error, not a silent saturation."""
    top = float(np.abs(w).max()) if w.size else 0.0
    if top * 2.0 ** frac > 2.0 ** 31 + 0.5:
        raise FixedRunError(f"fixed.param: weight '{op.param.data}' ({op.part_name}) reaches {top:g}, beyond "
                            f"FixedPoint32<{frac}>'s range of +-{2.0 ** (31 - frac):g}")


@R(FX.EmbedOp)
def _embed(op: FX.EmbedOp, a: list, env: Env) -> tuple:
    ids, table = np.asarray(a[0]).astype(np.int64), a[1]
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise FixedRunError(f"fixed.embed: token id outside [0, {table.shape[0]})")
    return (sat32(shift(table[ids], _f(op.table) - _out(op))),)


@R(FX.MulOp)
def _mul(op: FX.MulOp, a: list, env: Env) -> tuple:
    # |X * Z| < 2^62
    return (sat32(shift(a[0] * a[1], _f(op.lhs) + _f(op.rhs) - _out(op))),)


@R(FX.AddOp)
def _add(op: FX.AddOp, a: list, env: Env) -> tuple:
    fx, fz, fy = _f(op.lhs), _f(op.rhs), _out(op)
    fm = max(fx, fz, fy)
    # each aligned operand < 2^62, their sum < 2^63: exact; one rounding to the result
    return (sat32(shift((a[0] << (fm - fx)) + (a[1] << (fm - fz)), fm - fy)),)


@R(FX.RescaleOp)
def _rescale(op: FX.RescaleOp, a: list, env: Env) -> tuple:
    return (sat32(shift(a[0], _f(op.src) - _out(op))),)


def rms_norm_fixed(x: np.ndarray, fx: int, w: np.ndarray, fw: int, fy: int, eps: float) -> np.ndarray:
    """fixed.rms_norm (see its docstring): each row of x [.., D] normalized, times w [D]."""
    x = np.asarray(x, I64)
    d = x.shape[-1]
    p = ceil_log2(d)
    s = rshift_round(x * x, p).sum(axis=-1, keepdims=True)  # < 2^62: D terms each < 2^(62-p)
    fm = 2 * fx - p  # the frac of s and of the mean
    m = rdiv(s, I64(d)) + int(min(round(eps * 2.0 ** fm), 2 ** 61))
    b = bit_length(m)
    t = 61 - b
    t = np.where((fm + t) % 2 != 0, t + 1, t)  # m * 2^t in [2^60, 2^62), 2 e = fm + t even
    mn = shift(m, -t)
    root = np.maximum(isqrt(mn), 1)  # root = rms * 2^e, in [2^30, 2^31)
    e = (fm + t) // 2
    inv = rdiv(I64(1) << 61, root)  # 1/rms * 2^(61 - e), in (2^30, 2^31]
    fn = 31 - (ceil_log2(d) + 1) // 2  # |x / rms| <= sqrt(D) <= 2^(31 - fn)
    n = sat32(shift(x * inv, fx + 61 - e - fn))  # x * inv < 2^62
    y = sat32(shift(n * np.asarray(w, I64), fn + fw - fy))
    return np.where(m == 0, 0, y)


@R(FX.RmsNormOp)
def _rms_norm(op: FX.RmsNormOp, a: list, env: Env) -> tuple:
    return (rms_norm_fixed(a[0], _f(op.src), a[1], _f(op.weight), _out(op), float(op.eps.value.data)),)


@R(FX.SoftmaxOp)
def _softmax(op: FX.SoftmaxOp, a: list, env: Env) -> tuple:
    return (sat32(shift(softmax_q31(a[0], _f(op.src)), 31 - _out(op))),)


@R(FX.SigmoidOp)
def _sigmoid(op: FX.SigmoidOp, a: list, env: Env) -> tuple:
    return (sat32(shift(sigmoid_q31(a[0], _f(op.src)), 31 - _out(op))),)


@R(FX.SiluOp)
def _silu(op: FX.SiluOp, a: list, env: Env) -> tuple:
    # X * sigmoid_Q31 < 2^31 * 2^31 = 2^62
    return (sat32(shift(a[0] * sigmoid_q31(a[0], _f(op.src)), _f(op.src) + 31 - _out(op))),)


@R(FX.RopeOp)
def _rope(op: FX.RopeOp, a: list, env: Env) -> tuple:
    x, c, s = a
    hd = op.head_dim.value.data
    n = x.shape[0]
    h = x.reshape(n, -1, hd)
    x1, x2 = h[..., :hd // 2], h[..., hd // 2:]
    c, s = c[:, None, :], s[:, None, :]
    sh = _f(op.src) + _f(op.cos) - _out(op)
    # each product < 2^62 (|cos|, |sin| < 2^31), a sum of two < 2^63
    y1 = shift(x1 * c - x2 * s, sh)
    y2 = shift(x2 * c + x1 * s, sh)
    return (sat32(np.concatenate([y1, y2], axis=-1).reshape(x.shape)),)


def dequant_int4_fixed(b: np.ndarray, scales: np.ndarray, fs: int, zp: np.ndarray, k: int, fy: int) -> np.ndarray:
    """(q - zp) * scale per block (|q - zp| <= 15, |scale| < 2^31: < 2^35), to frac fy."""
    q, z = unpack_int4(np.asarray(b, np.uint8), np.asarray(zp, np.uint8), k)
    block = 2 * b.shape[2]
    zr = np.repeat(z.astype(I64), block, axis=-1)[:, :k]
    sr = np.repeat(np.asarray(scales, I64), block, axis=-1)[:, :k]
    return sat32(shift((q.astype(I64) - zr) * sr, fs - fy))


@R(FX.DequantInt4Op)
def _dequant_int4(op: FX.DequantInt4Op, a: list, env: Env) -> tuple:
    return (dequant_int4_fixed(a[0], a[1], _f(op.scales), a[2], shape_of(op.result)[1], _out(op)),)


def matmul_fixed(x: np.ndarray, fx: int, w: np.ndarray, fw: int, fy: int) -> np.ndarray:
    """x [M, K] @ w [N, K]^T: each product (< 2^62) pre-shifted by g = ceil(log2 K), rounded,
    summed in int64 (< K * 2^(62-g) <= 2^62), one rounding shift to fy, saturated."""
    x, w = np.asarray(x, I64), np.asarray(w, I64)
    g = ceil_log2(x.shape[-1])
    out = np.empty((x.shape[0], w.shape[0]), I64)
    rows = max(1, (1 << 22) // max(1, w.size))
    for i in range(0, x.shape[0], rows):
        acc = rshift_round(x[i:i + rows, None, :] * w[None, :, :], g).sum(axis=-1)
        out[i:i + rows] = sat32(shift(acc, fx + fw - g - fy))
    return out


@R(FX.MatmulW4A16Op)
def _matmul_w4a16(op: FX.MatmulW4A16Op, a: list, env: Env) -> tuple:
    x, b, s, zp = a
    wf = op.wfrac.value.data
    w = dequant_int4_fixed(b, s, _f(op.scales), zp, x.shape[1], wf)
    return (matmul_fixed(x, _f(op.src), w, wf, _out(op)),)


@R(FX.MatmulOp)
def _matmul(op: FX.MatmulOp, a: list, env: Env) -> tuple:
    return (matmul_fixed(a[0], _f(op.src), a[1], _f(op.weight), _out(op)),)


@R(FX.DequantInt8Op)
def _dequant_int8(op: FX.DequantInt8Op, a: list, env: Env) -> tuple:
    q, s = np.asarray(a[0], I64), np.asarray(a[1], I64)
    hd = op.head_dim.value.data
    sr = np.repeat(s, hd)[None, :]
    return (sat32(shift(q * sr, _f(op.scales) - _out(op))),)  # |q * s| < 2^38


@R(FX.QuantInt8Op)
def _quant_int8(op: FX.QuantInt8Op, a: list, env: Env) -> tuple:
    x, s = np.asarray(a[0], I64), np.asarray(a[1], I64)
    hd = op.head_dim.value.data
    fx, fs = _f(op.src), _f(op.scales)
    sr = np.repeat(s, hd)[None, :]
    safe = np.maximum(sr, 1)
    # x / s = X * 2^(fs - fx) / S; numerator or denominator shifted by <= 31 bits: < 2^62
    q = rdiv(x << max(fs - fx, 0), safe << max(fx - fs, 0))
    return (np.where(sr > 0, np.clip(q, -127, 127), 0).astype(np.int8),)


@R(FX.AttentionOp)
def _attention(op: FX.AttentionOp, a: list, env: Env) -> tuple:
    q, k, v = (np.asarray(t, I64) for t in a)
    hd = op.head_dim.value.data
    n = q.shape[0]
    hq, hkv = q.shape[1] // hd, k.shape[1] // hd
    fq, fk, fv, fy = _f(op.q), _f(op.k), _f(op.v), _out(op)
    sf = op.sfrac.value.data
    scale = float(op.scale.value.data)
    fsc = 31 if scale < 1 else 30 - ceil_log2(int(np.ceil(scale)))  # the scale's own format
    sc = int(to_fixed(np.array(scale), fsc))
    gd, gj = ceil_log2(hd), ceil_log2(n)
    valid = np.tril(np.ones((n, n), bool))
    out = np.empty((n, hq, hd), I64)
    qh, kh, vh = q.reshape(n, hq, hd), k.reshape(n, hkv, hd), v.reshape(n, hkv, hd)
    for h in range(hq):
        j = h // (hq // hkv)
        raw = rshift_round(qh[:, h, None, :] * kh[None, :, j, :], gd).sum(axis=-1)  # < 2^62
        scores = sat32(shift(raw, fq + fk - gd - sf))  # q.k at sfrac
        scores = sat32(shift(scores * sc, fsc))  # times scale (Q fsc), still at sfrac
        p = softmax_q31(scores, sf, valid)  # Q31, <= 2^31
        acc = rshift_round(p[:, :, None] * vh[None, :, j, :], gj).sum(axis=1)  # < 2^62
        out[:, h, :] = sat32(shift(acc, 31 + fv - gj - fy))
    return (out.reshape(n, hq * hd),)


# ---------------------------------------------------------------------------------------------


def run_fixed(fn: func.FuncOp, weights: Any, inputs: Sequence[np.ndarray], *, cache: dict | None = None,
              observe: Callable[[Operation, tuple], None] | None = None,
              state: dict | None = None) -> list[np.ndarray]:
    """Run the fixed-level function `fn` on `inputs` (fixed tensors as their integers); returns
    the values of its `func.return`. `observe(op, results)` is called after each op; `state`
    holds the KV cache (`fixed.kv_state`) and persists across calls that share it."""
    args = fn.body.block.args
    if len(inputs) != len(args):
        raise FixedRunError(f"@{fn.sym_name.data}: takes {len(args)} inputs, got {len(inputs)}")
    env = Env(weights, cache if cache is not None else {}, state if state is not None else {})
    values: dict[SSAValue, np.ndarray] = {}
    for v, x in zip(args, inputs):
        x = np.asarray(x)
        t = v.type
        if isinstance(t, TensorType) and tuple(t.get_shape()) != x.shape:
            raise FixedRunError(f"@{fn.sym_name.data}: input {v.index} has shape {list(x.shape)}, expected {list(t.get_shape())}")
        if isinstance(t, TensorType) and isinstance(t.get_element_type(), FX.FixedPointType):
            if x.dtype.kind not in "iu":
                raise FixedRunError(f"@{fn.sym_name.data}: input {v.index} is fixed point: pass its integers (to_fixed)")
            x = x.astype(I64)
        values[v] = x
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            return [values[v] for v in op.operands]
        impl = FIXED_INTERPRETER.get(type(op))
        if impl is None:
            raise FixedRunError(f"no fixed-level semantics for op '{op.name}'")
        results = impl(op, [values[v] for v in op.operands], env)
        for v, r in zip(op.results, results):
            values[v] = r
        if observe is not None:
            observe(op, results)
    return []


def rope_tables(rows: int, head_dim: int, theta: float, pos: int = 0, frac: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """The host's cos and sin tables [rows, head_dim/2] at positions pos.., as FixedPoint32<frac>
    (seed 004 passes them as FixedPoint32<30>): NeoX frequencies theta^(-2i/head_dim)."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = (pos + np.arange(rows, dtype=np.float64))[:, None] * inv[None, :]
    return to_fixed(np.cos(ang), frac), to_fixed(np.sin(ang), frac)


from strata.semantics import fixed_kv_interp  # noqa: E402, F401  (registers the decode ops)

__all__ = ["FIXED_INTERPRETER", "FixedRunError", "run_fixed", "rope_tables", "rms_norm_fixed", "matmul_fixed",
           "dequant_int4_fixed", "from_fixed", "to_fixed"]
