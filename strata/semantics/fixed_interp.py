"""Execute a `fixed`-level function in exact integer arithmetic (numpy int64).

    outs = run_fixed(fn, weights, [ids, cos, sin])      # int64 arrays (fixed values' integers)
    floats = [from_fixed(o, frac_of(t)) for o, t in zip(outs, fn.function_type.outputs)]

Each op's semantics is an `@impl` method of `FixedFunctions` (the decode ops': `FixedKvFunctions`,
`strata.semantics.fixed_kv_interp`); the run loop is xDSL's `Interpreter` (`strata.semantics.interpreter`).
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation, SSAValue

from strata.dialects import fixed as FX
from strata.dialects.fixed import frac_of
from strata.ir.checks import shape_of
from strata.ir.impls import Implementations
from strata.ir.int4 import pack_int4, quantize_int4_block, unpack_int4
from strata.semantics.fixed_arith import (
    I64,
    bit_length,
    ceil_log2,
    from_fixed,
    isqrt,
    rdiv,
    rshift_round,
    sat32,
    shift,
    sigmoid_q31,
    softmax_q31,
    to_fixed,
)
from strata.semantics.fixed_env import Env, FixedRunError
from strata.semantics.fixed_kv_interp import FixedKvFunctions
from strata.semantics.interpreter import Observer, first_unimplemented, implementations, run_body

V = PythonValues


def _out(op: Operation) -> int:
    return frac_of(op.results[0])


def _f(v: SSAValue) -> int:
    return frac_of(v)


def param_value(op: FX.ParamOp, env: Env) -> np.ndarray:
    """What a `fixed.param` yields: its weight rounded to the result's frac (`value`), or one part
    of its int4 packing, checked against its IR type; cached in `env` per (name, part, type)."""
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
    return env.cache[key]


def _check_fits(op: FX.ParamOp, w: np.ndarray, frac: int) -> None:
    """A weight beyond its format's range (by more than the one LSB Chimera's rule allows at an
    exact power of two) is an error, not a silent saturation."""
    top = float(np.abs(w).max()) if w.size else 0.0
    if top * 2.0 ** frac > 2.0 ** 31 + 0.5:
        raise FixedRunError(f"fixed.param: weight '{op.param.data}' ({op.part_name}) reaches {top:g}, beyond "
                            f"FixedPoint32<{frac}>'s range of +-{2.0 ** (31 - frac):g}")


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


def dequant_int4_fixed(b: np.ndarray, scales: np.ndarray, fs: int, zp: np.ndarray, k: int, fy: int) -> np.ndarray:
    """(q - zp) * scale per block (|q - zp| <= 15, |scale| < 2^31: < 2^35), to frac fy."""
    q, z = unpack_int4(np.asarray(b, np.uint8), np.asarray(zp, np.uint8), k)
    block = 2 * b.shape[2]
    zr = np.repeat(z.astype(I64), block, axis=-1)[:, :k]
    sr = np.repeat(np.asarray(scales, I64), block, axis=-1)[:, :k]
    return sat32(shift((q.astype(I64) - zr) * sr, fs - fy))


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


@register_impls
@dataclass
class FixedFunctions(InterpreterFunctions):
    """The fixed level's compute ops in exact integer arithmetic on `env` (weights, their cache)."""

    env: Env

    @impl(FX.ParamOp)
    def run_param(self, interpreter: Interpreter, op: FX.ParamOp, a: V) -> V:
        return (param_value(op, self.env),)

    @impl(FX.EmbedOp)
    def run_embed(self, interpreter: Interpreter, op: FX.EmbedOp, a: V) -> V:
        ids, table = np.asarray(a[0]).astype(np.int64), a[1]
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise FixedRunError(f"fixed.embed: token id outside [0, {table.shape[0]})")
        return (sat32(shift(table[ids], _f(op.table) - _out(op))),)

    @impl(FX.MulOp)
    def run_mul(self, interpreter: Interpreter, op: FX.MulOp, a: V) -> V:
        # |X * Z| < 2^62
        return (sat32(shift(a[0] * a[1], _f(op.lhs) + _f(op.rhs) - _out(op))),)

    @impl(FX.AddOp)
    def run_add(self, interpreter: Interpreter, op: FX.AddOp, a: V) -> V:
        fx, fz, fy = _f(op.lhs), _f(op.rhs), _out(op)
        fm = max(fx, fz, fy)
        # each aligned operand < 2^62, their sum < 2^63: exact; one rounding to the result
        return (sat32(shift((a[0] << (fm - fx)) + (a[1] << (fm - fz)), fm - fy)),)

    @impl(FX.RescaleOp)
    def run_rescale(self, interpreter: Interpreter, op: FX.RescaleOp, a: V) -> V:
        return (sat32(shift(a[0], _f(op.src) - _out(op))),)

    @impl(FX.RmsNormOp)
    def run_rms_norm(self, interpreter: Interpreter, op: FX.RmsNormOp, a: V) -> V:
        return (rms_norm_fixed(a[0], _f(op.src), a[1], _f(op.weight), _out(op), float(op.eps.value.data)),)

    @impl(FX.SoftmaxOp)
    def run_softmax(self, interpreter: Interpreter, op: FX.SoftmaxOp, a: V) -> V:
        return (sat32(shift(softmax_q31(a[0], _f(op.src)), 31 - _out(op))),)

    @impl(FX.SigmoidOp)
    def run_sigmoid(self, interpreter: Interpreter, op: FX.SigmoidOp, a: V) -> V:
        return (sat32(shift(sigmoid_q31(a[0], _f(op.src)), 31 - _out(op))),)

    @impl(FX.SiluOp)
    def run_silu(self, interpreter: Interpreter, op: FX.SiluOp, a: V) -> V:
        # X * sigmoid_Q31 < 2^31 * 2^31 = 2^62
        return (sat32(shift(a[0] * sigmoid_q31(a[0], _f(op.src)), _f(op.src) + 31 - _out(op))),)

    @impl(FX.RopeOp)
    def run_rope(self, interpreter: Interpreter, op: FX.RopeOp, a: V) -> V:
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

    @impl(FX.DequantInt4Op)
    def run_dequant_int4(self, interpreter: Interpreter, op: FX.DequantInt4Op, a: V) -> V:
        return (dequant_int4_fixed(a[0], a[1], _f(op.scales), a[2], shape_of(op.result)[1], _out(op)),)

    @impl(FX.MatmulW4A16Op)
    def run_matmul_w4a16(self, interpreter: Interpreter, op: FX.MatmulW4A16Op, a: V) -> V:
        x, b, s, zp = a
        wf = op.wfrac.value.data
        w = dequant_int4_fixed(b, s, _f(op.scales), zp, x.shape[1], wf)
        return (matmul_fixed(x, _f(op.src), w, wf, _out(op)),)

    @impl(FX.MatmulOp)
    def run_matmul(self, interpreter: Interpreter, op: FX.MatmulOp, a: V) -> V:
        return (matmul_fixed(a[0], _f(op.src), a[1], _f(op.weight), _out(op)),)

    @impl(FX.DequantInt8Op)
    def run_dequant_int8(self, interpreter: Interpreter, op: FX.DequantInt8Op, a: V) -> V:
        q, s = np.asarray(a[0], I64), np.asarray(a[1], I64)
        hd = op.head_dim.value.data
        sr = np.repeat(s, hd)[None, :]
        return (sat32(shift(q * sr, _f(op.scales) - _out(op))),)  # |q * s| < 2^38

    @impl(FX.QuantInt8Op)
    def run_quant_int8(self, interpreter: Interpreter, op: FX.QuantInt8Op, a: V) -> V:
        x, s = np.asarray(a[0], I64), np.asarray(a[1], I64)
        hd = op.head_dim.value.data
        fx, fs = _f(op.src), _f(op.scales)
        sr = np.repeat(s, hd)[None, :]
        safe = np.maximum(sr, 1)
        # x / s = X * 2^(fs - fx) / S; numerator or denominator shifted by <= 31 bits: < 2^62
        q = rdiv(x << max(fs - fx, 0), safe << max(fx - fs, 0))
        return (np.where(sr > 0, np.clip(q, -127, 127), 0).astype(np.int8),)

    @impl(FX.AttentionOp)
    def run_attention(self, interpreter: Interpreter, op: FX.AttentionOp, a: V) -> V:
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


#: op class -> its semantics (the `@impl` methods of `FixedFunctions` and `FixedKvFunctions`).
FIXED_INTERPRETER: Implementations = implementations("fixed interpreter", FixedFunctions, FixedKvFunctions)


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
    unknown = first_unimplemented(fn, FIXED_INTERPRETER)
    if unknown is not None:
        raise FixedRunError(f"no fixed-level semantics for op '{unknown.name}'")
    values = []
    for v, x in zip(args, inputs):
        x = np.asarray(x)
        t = v.type
        if isinstance(t, TensorType) and tuple(t.get_shape()) != x.shape:
            raise FixedRunError(f"@{fn.sym_name.data}: input {v.index} has shape {list(x.shape)}, expected {list(t.get_shape())}")
        if isinstance(t, TensorType) and isinstance(t.get_element_type(), FX.FixedPointType):
            if x.dtype.kind not in "iu":
                raise FixedRunError(f"@{fn.sym_name.data}: input {v.index} is fixed point: pass its integers (to_fixed)")
            x = x.astype(I64)
        values.append(x)
    env = Env(weights, cache if cache is not None else {}, state if state is not None else {})
    listeners = [Observer(observe)] if observe is not None else []
    return list(run_body(fn, [FixedFunctions(env), FixedKvFunctions(env)], values, listeners))


def rope_tables(rows: int, head_dim: int, theta: float, pos: int = 0, frac: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """The host's cos and sin tables [rows, head_dim/2] at positions pos.., as FixedPoint32<frac>
    (Chimera passes them as FixedPoint32<30>): NeoX frequencies theta^(-2i/head_dim)."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = (pos + np.arange(rows, dtype=np.float64))[:, None] * inv[None, :]
    return to_fixed(np.cos(ang), frac), to_fixed(np.sin(ang), frac)


__all__ = ["FIXED_INTERPRETER", "Env", "FixedFunctions", "FixedRunError", "run_fixed", "rope_tables", "rms_norm_fixed",
           "matmul_fixed", "dequant_int4_fixed", "param_value", "from_fixed", "to_fixed"]
