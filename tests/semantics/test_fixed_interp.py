"""The fixed level's integer semantics, op by op, against float64 references computed on the
exact real values of the fixed inputs: every error within a stated multiple k of the result's
resolution 2^-frac (k derived per op in its test), saturation at the int32 limits, and the
accuracy of exp, the reciprocal and the square root stated and checked."""

from __future__ import annotations

import math

import numpy as np
import pytest
from xdsl.dialects import func

from ort_int4 import ort_dequantize_int4
from strata.dialects import parse_ir
from strata.dialects.fixed import Fixed
from strata.ir.int4 import dequantize_int4_block, pack_int4, quantize_int4_block
from strata.semantics.fixed_arith import INT32_MAX, INT32_MIN, rshift_round, to_fixed
from strata.semantics.fixed_interp import FIXED_INTERPRETER, FixedRunError, from_fixed, rope_tables, run_fixed

RNG = np.random.default_rng(0)


def T(shape, frac=None, el=None) -> str:
    el = el or f"!fixed.fp32<{frac}>"
    return "tensor<" + "x".join(map(str, shape)) + ("x" if shape else "") + el + ">"


def one_op(args: list[str], op: str, ret: str):
    """A function of one op `%y = <op>` over arguments %a0.. of types `args`, returning %y."""
    sig = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    text = f"func.func @f({sig}) -> {ret} {{\n  %y = {op}\n  func.return %y : {ret}\n}}"
    return next(o for o in parse_ir(text).walk() if isinstance(o, func.FuncOp))


def fx(shape, frac, scale=1.0):
    """Random fixed integers whose values are ~N(0, scale)."""
    return to_fixed(RNG.standard_normal(shape) * scale, frac)


def ulp_err(y, ref, frac):
    return np.abs(from_fixed(y, frac) - ref) / 2.0 ** -frac


def test_every_fixed_op_has_an_implementation():
    assert FIXED_INTERPRETER.missing(Fixed) == []


# ---------------------------------------------------------------------------------------------
# Element-wise ops


@pytest.mark.parametrize("fa,fb,fy", [(24, 24, 21), (27, 30, 28), (10, 12, 31)])
def test_mul_half_ulp(fa, fb, fy):
    a, b = fx((6, 40), fa, 2.0), fx((6, 40), fb, 0.5)
    (y,) = run_fixed(one_op([T((6, 40), fa), T((6, 40), fb)], f"fixed.mul %a0, %a1 : {T((6, 40), fa)}, {T((6, 40), fb)} -> {T((6, 40), fy)}", T((6, 40), fy)), {}, [a, b])
    ref = from_fixed(a, fa) * from_fixed(b, fb)
    ok = np.abs(ref) < 2.0 ** (31 - fy) - 2.0 ** -fy
    assert ulp_err(y, ref, fy)[ok].max() <= 0.5  # one rounding of the exact product
    assert (y[~ok] == np.where(ref[~ok] > 0, INT32_MAX, INT32_MIN)).all()


def test_mul_broadcasts_a_suffix_and_saturates():
    a = to_fixed(np.array([[3.0, -3.0], [0.5, 1.0]]), 29)
    b = to_fixed(np.array([3.0, 3.0]), 29)
    (y,) = run_fixed(one_op([T((2, 2), 29), T((2,), 29)], f"fixed.mul %a0, %a1 : {T((2, 2), 29)}, {T((2,), 29)} -> {T((2, 2), 28)}", T((2, 2), 28)), {}, [a, b])
    np.testing.assert_array_equal(y, [[INT32_MAX, INT32_MIN], [to_fixed(np.array(1.5), 28), to_fixed(np.array(3.0), 28)]])


@pytest.mark.parametrize("fa,fb,fy", [(27, 25, 25), (20, 31, 24), (10, 12, 14)])
def test_add_half_ulp_and_saturation(fa, fb, fy):
    a, b = fx((4, 32), fa, 4.0), fx((4, 32), fb, 0.4)
    (y,) = run_fixed(one_op([T((4, 32), fa), T((4, 32), fb)], f"fixed.add %a0, %a1 : {T((4, 32), fa)}, {T((4, 32), fb)} -> {T((4, 32), fy)}", T((4, 32), fy)), {}, [a, b])
    ref = from_fixed(a, fa) + from_fixed(b, fb)
    ok = np.abs(ref) < 2.0 ** (31 - fy) - 2.0 ** -fy
    assert ulp_err(y, ref, fy)[ok].max() <= 0.5  # exact sum, one rounding
    big = np.full((1, 1), INT32_MAX, np.int64)
    (s,) = run_fixed(one_op([T((1, 1), 30)] * 2, f"fixed.add %a0, %a1 : {T((1, 1), 30)}, {T((1, 1), 30)} -> {T((1, 1), 30)}", T((1, 1), 30)), {}, [big, big])
    assert s[0, 0] == INT32_MAX
    (s,) = run_fixed(one_op([T((1, 1), 30)] * 2, f"fixed.add %a0, %a1 : {T((1, 1), 30)}, {T((1, 1), 30)} -> {T((1, 1), 30)}", T((1, 1), 30)), {}, [-big - 1, -big - 1])
    assert s[0, 0] == INT32_MIN


def test_rescale_rounds_down_exact_up_saturates():
    x = np.array([5, -5, 7, 2 ** 30, -(2 ** 30)], np.int64)
    (y,) = run_fixed(one_op([T((5,), 20)], f"fixed.rescale %a0 : {T((5,), 20)} -> {T((5,), 19)}", T((5,), 19)), {}, [x])
    np.testing.assert_array_equal(y, [3, -3, 4, 2 ** 29, -(2 ** 29)])
    (y,) = run_fixed(one_op([T((5,), 20)], f"fixed.rescale %a0 : {T((5,), 20)} -> {T((5,), 22)}", T((5,), 22)), {}, [x])
    np.testing.assert_array_equal(y, [20, -20, 28, INT32_MAX, INT32_MIN])


def test_sigmoid_and_silu():
    x = to_fixed(np.linspace(-30, 30, 6001), 24).reshape(1, -1)
    t = T(x.shape, 24)
    (s,) = run_fixed(one_op([t], f"fixed.sigmoid %a0 : {t} -> {T(x.shape, 31)}", T(x.shape, 31)), {}, [x])
    xr = from_fixed(x, 24)
    sig = 1 / (1 + np.exp(-xr))
    ok = sig < 1 - 2.0 ** -31
    # Q31 sigmoid within 1.75 LSB of 2^-31, then the result's rounding (none at frac 31): k = 1.75
    assert ulp_err(s, sig, 31)[ok].max() <= 1.75
    assert s.max() == INT32_MAX  # sigmoid(30) rounds to 1.0 in Q31: saturated to 1 - 2^-31
    (y,) = run_fixed(one_op([t], f"fixed.silu %a0 : {t} -> {T(x.shape, 27)}", T(x.shape, 27)), {}, [x])
    # |x| * (sigmoid's 1.75 * 2^-31) + 0.5 ulp: k = 0.5 + 16 * 1.75 * 2^(27 - 31) = 2.25
    fits = xr * sig < 16 - 2.0 ** -27
    assert ulp_err(y, xr * sig, 27)[fits].max() <= 0.5 + 16 * 1.75 * 2.0 ** (27 - 31)
    assert (y[~fits] == INT32_MAX).all() and (~fits).sum() > 0  # silu(x) >= 16: saturated


@pytest.mark.parametrize("fin,L", [(26, 6), (20, 16), (31, 3)])
def test_softmax(fin, L):
    x = fx((5, L), fin, 2.0 ** (29 - fin) if fin < 29 else 0.5)
    t = T(x.shape, fin)
    (p,) = run_fixed(one_op([t], f"fixed.softmax %a0 : {t} -> {T(x.shape, 31)}", T(x.shape, 31)), {}, [x])
    xr = from_fixed(x, fin)
    e = np.exp(xr - xr.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    # exp's 1.25 LSB on each term and L of them in the sum (S >= 2^31), 2^-31 for the 31-bit
    # normalized sum and the reciprocal each, 0.5 for the last rounding:
    bound = 0.5 + 1.25 + 1.25 * L * ref + 2.0
    assert (ulp_err(p, ref, 31) <= bound).all()
    assert (p >= 0).all()


def test_rms_norm():
    d, fxr, fw, fy = 64, 26, 30, 28
    x, w = fx((4, d), fxr, 3.0), to_fixed(RNG.uniform(0.5, 1.5, d), fw)
    x[1] = 0  # an all-zero row stays zero (eps rounds into the mean)
    x[2, :] = INT32_MAX  # the largest sum of squares: pre-shifted, no overflow
    ft = (T(x.shape, fxr), T((d,), fw))
    fn = one_op(list(ft), f"fixed.rms_norm %a0, %a1 {{eps = 1.0e-05 : f64}} : {ft[0]}, {ft[1]} -> {T(x.shape, fy)}", T(x.shape, fy))
    (y,) = run_fixed(fn, {}, [x, w])
    xr, wr = from_fixed(x, fxr), from_fixed(w, fw)
    n = xr / np.sqrt(np.mean(xr * xr, -1, keepdims=True) + 1e-5)
    # normalized value at fn = 31 - ceil(log2(D)/2) = 28: 0.5 * 2^-28 rounding + a relative
    # 2^-29 (isqrt floor 2^-30, reciprocal 2^-31, mean and eps below 2^-40); times |w|; then
    # the result's 0.5 ulp: k = 0.5 + |w| * 2^(fy - 28) * (0.5 + |n| * 2^(28 - 29))
    k = 0.5 + wr * 2.0 ** (fy - 28) * (0.5 + np.abs(n) * 0.5)
    assert (ulp_err(y, n * wr, fy) <= k).all()
    assert (y[1] == 0).all()
    assert ulp_err(y, n * wr, fy).max() <= 2.0


# ---------------------------------------------------------------------------------------------
# Rope, int4, int8, matmul, attention


def test_rope_exact_then_half_ulp():
    n, heads, hd, f = 5, 3, 8, 27
    x = fx((n, heads * hd), f)
    c, s = rope_tables(n, hd, 1e4, pos=3)
    ts = (T(x.shape, f), T(c.shape, 30), T(s.shape, 30))
    fn = one_op(list(ts), f"fixed.rope %a0, %a1, %a2 {{head_dim = {hd} : i64}} : {ts[0]}, {ts[1]}, {ts[2]} -> {T(x.shape, f)}", T(x.shape, f))
    (y,) = run_fixed(fn, {}, [x, c, s])
    h = from_fixed(x, f).reshape(n, heads, hd)
    cr, sr = from_fixed(c, 30)[:, None], from_fixed(s, 30)[:, None]
    x1, x2 = h[..., :hd // 2], h[..., hd // 2:]
    ref = np.concatenate([x1 * cr - x2 * sr, x2 * cr + x1 * sr], -1).reshape(n, -1)
    assert ulp_err(y, ref, f).max() <= 0.5  # exact products and sum, one rounding
    # against the true angles: the tables' 0.5 * 2^-30 each adds |x1| + |x2| halves of 2^-30
    ang = (3 + np.arange(n))[:, None] * (1.0 / 1e4 ** (np.arange(0, hd, 2) / hd))[None]
    ct, st = np.cos(ang)[:, None], np.sin(ang)[:, None]
    true = np.concatenate([x1 * ct - x2 * st, x2 * ct + x1 * st], -1).reshape(n, -1)
    assert ulp_err(y, true, f).max() <= 0.5 + 2 * 4.5 * 0.5 * 2.0 ** (f - 30)


def _int4(n, k, block, fs):
    w = RNG.standard_normal((n, k)).astype(np.float32) * 0.05
    q, scale, zp = quantize_int4_block(w, block)
    b, zpp = pack_int4(q, zp, block)
    return w, q, scale, zp, b, zpp, to_fixed(scale, fs)


def test_dequant_int4_matches_ort_formula():
    n, k, block, fs, fy = 6, 200, 64, 31, 31
    w, q, scale, zp, b, zpp, s = _int4(n, k, block, fs)
    nb = b.shape[1]
    ts = (T(b.shape, el="ui8"), T((n, nb), fs), T(zpp.shape, el="ui8"))
    fn = one_op(list(ts), f"fixed.dequant_int4 %a0, %a1, %a2 : {ts[0]}, {ts[1]}, {ts[2]} -> {T((n, k), fy)}", T((n, k), fy))
    (y,) = run_fixed(fn, {}, [b, s, zpp])
    exact = dequantize_int4_block(q, from_fixed(s, fs), zp, block).astype(np.float64)
    ref = (q.astype(np.float64) - np.repeat(zp, block, -1)[:, :k]) * np.repeat(from_fixed(s, fs), block, -1)[:, :k]
    assert ulp_err(y, ref, fy).max() <= 0.5
    # against ORT's float dequantization: plus |q - zp| <= 15 times the scale's 0.5 * 2^-fs
    orig = (q.astype(np.float64) - np.repeat(zp, block, -1)[:, :k]) * np.repeat(scale.astype(np.float64), block, -1)[:, :k]
    assert ulp_err(y, orig, fy).max() <= 0.5 + 15 * 0.5
    assert np.abs(exact - orig).max() < 2.0 ** -26
    # `orig` is ORT's: MatMulNBits on the same bytes computes it, then rounds it to f32 (half an ulp)
    ort = ort_dequantize_int4(b, scale, zpp, block, k).astype(np.float64)
    assert (np.abs(ort - orig) <= np.abs(orig) * 2.0 ** -24).all()


def test_matmul_w4a16():
    m, n, k, block, fx_, fs, wf, fy = 5, 12, 256, 128, 27, 31, 31, 26
    w, q, scale, zp, b, zpp, s = _int4(n, k, block, fs)
    x = fx((m, k), fx_, 1.0)
    ts = (T((m, k), fx_), T(b.shape, el="ui8"), T(s.shape, fs), T(zpp.shape, el="ui8"))
    fn = one_op(list(ts), f"fixed.matmul_w4a16 %a0, %a1, %a2, %a3 {{wfrac = {wf} : i64}} : {', '.join(ts)} -> {T((m, n), fy)}", T((m, n), fy))
    (y,) = run_fixed(fn, {}, [x, b, s, zpp])
    wfx = np.clip(np.sign(ref_w := (q.astype(np.float64) - np.repeat(zp, block, -1)) * np.repeat(from_fixed(s, fs), block, -1))
                  * np.floor(np.abs(ref_w) * 2.0 ** wf + 0.5), INT32_MIN, INT32_MAX) * 2.0 ** -wf
    ref = from_fixed(x, fx_) @ wfx.T
    # K products each rounded by 2^(g - fx - wf) / 2 (g = ceil(log2 K) = 8), then 0.5 ulp:
    k_bound = 0.5 + k * 2.0 ** (8 - 1 - fx_ - wf) / 2.0 ** -fy
    assert ulp_err(y, ref, fy).max() <= k_bound <= 0.51
    # against ORT's float weights: plus sum |x| * (wf's 0.5 LSB + 15 * scale's 0.5 LSB)
    orig = from_fixed(x, fx_) @ dequantize_int4_block(q, scale, zp, block).astype(np.float64).T
    extra = np.abs(from_fixed(x, fx_)).sum(-1, keepdims=True) * (0.5 * 2.0 ** -wf + 15 * 0.5 * 2.0 ** -fs)
    assert (np.abs(from_fixed(y, fy) - orig) <= k_bound * 2.0 ** -fy + extra).all()


def test_matmul_fixed_weights():
    m, n, k, fx_, fw, fy = 4, 9, 100, 28, 31, 27
    x, w = fx((m, k), fx_), fx((n, k), fw, 0.05)
    ts = (T((m, k), fx_), T((n, k), fw))
    (y,) = run_fixed(one_op(list(ts), f"fixed.matmul %a0, %a1 : {ts[0]}, {ts[1]} -> {T((m, n), fy)}", T((m, n), fy)), {}, [x, w])
    ref = from_fixed(x, fx_) @ from_fixed(w, fw).T
    # K products rounded at 2^(g - fx - fw) (g = 7), then 0.5 ulp
    assert ulp_err(y, ref, fy).max() <= 0.5 + k * 2.0 ** (7 - 1 - fx_ - fw + fy)


def test_matmul_w4a16_saturates():
    w, q, scale, zp, b, zpp, s = _int4(4, 128, 128, 31)
    x = np.full((1, 128), INT32_MAX, np.int64)
    signs = np.sign(dequantize_int4_block(q, scale, zp, 128).sum(-1))
    ts = (T((1, 128), 20), T(b.shape, el="ui8"), T(s.shape, 31), T(zpp.shape, el="ui8"))
    fn = one_op(list(ts), f"fixed.matmul_w4a16 %a0, %a1, %a2, %a3 {{wfrac = 31 : i64}} : {', '.join(ts)} -> {T((1, 4), 31)}", T((1, 4), 31))
    (y,) = run_fixed(fn, {}, [x, b, s, zpp])
    np.testing.assert_array_equal(y[0], np.where(signs > 0, INT32_MAX, INT32_MIN))


def test_int8_per_head_round_trip():
    hd, heads, f, fs = 4, 2, 28, 31
    x = fx((3, heads * hd), f, 1.0)
    xr = from_fixed(x, f).reshape(3, heads, hd)
    scale = np.abs(xr).max(axis=(0, 2)) / 127
    s = to_fixed(scale, fs)
    tx, ts, tq = T(x.shape, f), T((heads,), fs), T(x.shape, el="i8")
    (q,) = run_fixed(one_op([tx, ts], f"fixed.quant_int8 %a0, %a1 {{head_dim = {hd} : i64}} : {tx}, {ts} -> {tq}", tq), {}, [x, s])
    sr = np.repeat(from_fixed(s, fs), hd)
    np.testing.assert_array_equal(q, np.clip(np.sign(r := from_fixed(x, f) / sr) * np.floor(np.abs(r) + 0.5), -127, 127))
    assert q.dtype == np.int8
    (y,) = run_fixed(one_op([tq, ts], f"fixed.dequant_int8 %a0, %a1 {{head_dim = {hd} : i64}} : {tq}, {ts} -> {tx}", tx), {}, [q, s])
    assert ulp_err(y, q * sr, f).max() <= 0.5
    assert np.abs(from_fixed(y, f) - from_fixed(x, f)).max() <= sr.max() * 0.5 + 2.0 ** -f


def test_attention_causal_gqa():
    n, hq, hkv, hd, fq, fv, sf, fy = 6, 4, 2, 8, 27, 28, 26, 28
    q, k, v = fx((n, hq * hd), fq), fx((n, hkv * hd), fq), fx((n, hkv * hd), fv)
    scale = 1 / math.sqrt(hd)
    ts = (T(q.shape, fq), T(k.shape, fq), T(v.shape, fv))
    fn = one_op(list(ts), f"fixed.attention %a0, %a1, %a2 {{head_dim = {hd} : i64, scale = {scale!r} : f64, sfrac = {sf} : i64}} : "
                f"{', '.join(ts)} -> {T(q.shape, fy)}", T(q.shape, fy))
    (y,) = run_fixed(fn, {}, [q, k, v])
    qr, kr, vr = (from_fixed(a, f).reshape(n, -1, hd) for a, f in ((q, fq), (k, fq), (v, fv)))
    kr, vr = np.repeat(kr, hq // hkv, 1), np.repeat(vr, hq // hkv, 1)
    s = np.einsum("ihd,jhd->hij", qr, kr) * scale
    s = np.where(np.tril(np.ones((n, n), bool))[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = np.einsum("hij,jhd->ihd", p, vr).reshape(n, -1)
    # score error: q.k rounded to sfrac (0.5 * 2^-sf, the D pre-shifted products far below), times
    # the scale, rounded again: ds = 0.5 * 2^-sf * (scale + 1) + the scale's 2^-32 * |q.k|;
    # softmax moves each p by <= 2 ds p (plus its Q31 error, ~6 * 2^-31), so the output by
    # <= max|v| * (2 ds + 6 * n * 2^-31); p.v's n products pre-shifted by ceil(log2 n), then 0.5 ulp.
    ds = 0.5 * 2.0 ** -sf * (scale + 1) + 2.0 ** -32 * np.abs(s[np.isfinite(s)]).max() / scale
    bound = 0.5 * 2.0 ** -fy + np.abs(vr).max() * (2 * ds + 6 * n * 2.0 ** -31) + n * 2.0 ** (3 - 1 - 31 - fv)
    assert np.abs(from_fixed(y, fy) - ref).max() <= bound
    assert bound / 2.0 ** -fy < 64  # the bound stays within 6 bits of the result's resolution


def test_param_refuses_a_weight_beyond_its_format():
    text = 'func.func @f() -> tensor<2x!fixed.fp32<30>> {\n  %g = fixed.param "g" : tensor<2x!fixed.fp32<30>>\n  func.return %g : tensor<2x!fixed.fp32<30>>\n}'
    fn = next(o for o in parse_ir(text).walk() if isinstance(o, func.FuncOp))
    (g,) = run_fixed(fn, {"g": np.array([2.0, -1.0], np.float32)}, [])  # 2 = 2^1: saturates one LSB (Chimera's FixedPoint32 rule)
    assert g[0] == INT32_MAX
    with pytest.raises(FixedRunError, match="weight 'g' \\(value\\) reaches 2.5, beyond FixedPoint32<30>'s range of \\+-2"):
        run_fixed(fn, {"g": np.array([2.5, -1.0], np.float32)}, [])


def test_param_rounds_weights_and_packs_int4():
    w = (RNG.standard_normal((8, 256)) * 0.1).astype(np.float32)
    g = np.linspace(0.5, 1.5, 8).astype(np.float32)
    text = ("func.func @f() -> (tensor<8x!fixed.fp32<30>>, tensor<8x2x64xui8>, tensor<8x2x!fixed.fp32<31>>, tensor<8x1xui8>) {\n"
            '  %g = fixed.param "g" : tensor<8x!fixed.fp32<30>>\n'
            '  %b = fixed.param "w" {part = "int4_b", block = 128 : i64} : tensor<8x2x64xui8>\n'
            '  %s = fixed.param "w" {part = "int4_scales", block = 128 : i64} : tensor<8x2x!fixed.fp32<31>>\n'
            '  %z = fixed.param "w" {part = "int4_zp", block = 128 : i64} : tensor<8x1xui8>\n'
            "  func.return %g, %b, %s, %z : tensor<8x!fixed.fp32<30>>, tensor<8x2x64xui8>, tensor<8x2x!fixed.fp32<31>>, tensor<8x1xui8>\n}")
    fn = next(o for o in parse_ir(text).walk() if isinstance(o, func.FuncOp))
    gq, b, s, z = run_fixed(fn, {"g": g, "w": w}, [])
    np.testing.assert_array_equal(gq, to_fixed(g, 30))
    q, scale, zp = quantize_int4_block(w, 128)
    eb, ez = pack_int4(q, zp, 128)
    np.testing.assert_array_equal(b, eb)
    np.testing.assert_array_equal(z, ez)
    np.testing.assert_array_equal(s, to_fixed(scale, 31))
    with pytest.raises(FixedRunError, match="no weight 'g'"):
        run_fixed(fn, {"w": w}, [])


def test_embed_gathers_and_rescales():
    table = to_fixed(RNG.standard_normal((10, 4)), 29)
    ti, tt, tr = T((3,), el="i32"), T((10, 4), 29), T((3, 4), 27)
    fn = one_op([ti, tt], f"fixed.embed %a0, %a1 : {ti}, {tt} -> {tr}", tr)
    (y,) = run_fixed(fn, {}, [np.array([3, 0, 9], np.int32), table])
    np.testing.assert_array_equal(y, rshift_round(table[[3, 0, 9]], 2))
    with pytest.raises(FixedRunError, match="token id outside"):
        run_fixed(fn, {}, [np.array([3, 0, 10], np.int32), table])


def test_deterministic_and_input_checks():
    x = fx((2, 8), 27)
    t = T((2, 8), 27)
    fn = one_op([t], f"fixed.softmax %a0 : {t} -> {T((2, 8), 31)}", T((2, 8), 31))
    a, b = run_fixed(fn, {}, [x])[0], run_fixed(fn, {}, [x.copy()])[0]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(FixedRunError, match="pass its integers"):
        run_fixed(fn, {}, [x.astype(np.float32)])
    with pytest.raises(FixedRunError, match="shape"):
        run_fixed(fn, {}, [x[:1]])
