"""ggml's Q4_K, Q5_K and Q6_K block formats, quantized bit for bit as ggml's reference
quantizers do (ggml-quants.c: quantize_row_q4_K_ref, _q5_K_ref, _q6_K_ref, which llama-quantize
runs when no importance matrix is given), packed as GGUF stores them, and dequantized.

    raw = quantize(w, "q4_K")             # uint8 [rows, row bytes], GGUF's bytes
    w_hat = dequantize(raw, "q4_K", w.shape)
    w_hat = round_trip(w, "q4_K")         # the values a weight has after the trip (f32)

A row is cut into super-blocks of 256 values. Q4_K and Q5_K split one into 8 blocks of 32, each
with a 6-bit scale and a 6-bit min found by ggml's search (`make_qkx2_quants`: weighted least
squares over 21 / 16 candidate scales), scaled by the super-block's f16 `d` and `dmin`; a value
is d*sc*q - dmin*m with q in 0..15 / 0..31. Q6_K splits one into 16 blocks of 16 with an 8-bit
signed scale each (`make_qx_quants`, 19 candidate scales) and the super-block's f16 `d`; a value
is d*sc*(q - 32), q in 0..63.

Every float operation is float32 in C's order, as ggml-base (built without FMA) computes it:
sums run element by element; `nearest_int` rounds halves to even. The blocks of all rows are
computed together (one numpy array per element position), the elements in order.
"""

from __future__ import annotations

import numpy as np

from strata.ir.ggml_types import QK_K, ggml_type

F32 = np.float32
K_TYPES = ("q4_K", "q5_K", "q6_K")
_EPS = F32(1e-15)  # GROUP_MAX_EPS


def _f16(x: np.ndarray) -> np.ndarray:
    """GGML_FP32_TO_FP16 then back: round to nearest even at half precision."""
    return np.asarray(x, F32).astype(np.float16).astype(F32)


def _rint(x: np.ndarray) -> np.ndarray:
    """ggml's nearest_int (x + 1.5 * 2^23, the mantissa's integer): halves to even."""
    return np.rint(np.asarray(x, F32))


def _blocks(w: np.ndarray, name: str) -> np.ndarray:
    w = np.asarray(w, F32)
    if name not in K_TYPES or w.ndim < 1 or w.shape[-1] % QK_K:
        raise ValueError(f"{name}: last dim {w.shape[-1] if w.ndim else 0} is not a multiple of {QK_K} "
                         f"(or the type is not one of {', '.join(K_TYPES)})")
    return w.reshape(-1, QK_K)


# ---------------------------------------------------------------------------------------------
# ggml's searches, over every block at once: x is [n, B] (element i of every block in row i)


def _make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
                      nstep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """make_qkx2_quants: (scale [B], -min [B], L [n, B]) of blocks of n values with weights w."""
    n = x.shape[0]
    lo, hi = x[0].copy(), x[0].copy()
    sum_w, sum_x = w[0].copy(), (w[0] * x[0]).astype(F32)
    for i in range(1, n):
        lo = np.where(x[i] < lo, x[i], lo)
        hi = np.where(x[i] > hi, x[i], hi)
        sum_w = (sum_w + w[i]).astype(F32)
        sum_x = (sum_x + w[i] * x[i]).astype(F32)
    lo = np.where(lo > 0, F32(0), lo)
    flat = hi == lo
    span = np.where(flat, F32(1), hi - lo).astype(F32)
    iscale = (F32(nmax) / span).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    L = np.clip(_rint(iscale * (x - lo)), 0, nmax)
    best = np.zeros_like(lo)
    for i in range(n):
        diff = ((scale * L[i]).astype(F32) + lo - x[i]).astype(F32)
        best = (best + w[i] * (diff * diff)).astype(F32)
    for step in range(nstep + 1):
        span = np.where(flat, F32(1), hi - lo).astype(F32)
        iscale = ((F32(rmin) + F32(rdelta) * F32(step)).astype(F32) + F32(nmax)).astype(F32) / span
        aux = np.clip(_rint(iscale.astype(F32) * (x - lo)), 0, nmax)
        sum_l, sum_l2, sum_xl = (np.zeros_like(lo) for _ in range(3))
        for i in range(n):
            wl = (w[i] * aux[i]).astype(F32)
            sum_l = (sum_l + wl).astype(F32)
            sum_l2 = (sum_l2 + wl * aux[i]).astype(F32)
            sum_xl = (sum_xl + wl * x[i]).astype(F32)
        d = ((sum_w * sum_l2).astype(F32) - (sum_l * sum_l).astype(F32)).astype(F32)
        ok = (d > 0) & ~flat
        dd = np.where(ok, d, F32(1))
        with np.errstate(divide="ignore", invalid="ignore"):
            this_scale = (((sum_w * sum_xl).astype(F32) - (sum_x * sum_l).astype(F32)) / dd).astype(F32)
            this_min = (((sum_l2 * sum_x).astype(F32) - (sum_l * sum_xl).astype(F32)) / dd).astype(F32)
            pos = this_min > 0
            this_scale = np.where(pos, (sum_xl / sum_l2).astype(F32), this_scale)
        this_min = np.where(pos, F32(0), this_min)
        cur = np.zeros_like(lo)
        for i in range(n):
            diff = ((this_scale * aux[i]).astype(F32) + this_min - x[i]).astype(F32)
            cur = (cur + w[i] * (diff * diff)).astype(F32)
        better = ok & (cur < best)
        L = np.where(better, aux, L)
        best = np.where(better, cur, best)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    scale = np.where(flat, F32(0), scale)
    L = np.where(flat, F32(0), L)
    return scale.astype(F32), (-lo).astype(F32), L


def _make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants with rmse_type 1 (weights x^2): (scale [B], L [n, B] in 0..2*nmax-1)."""
    n = x.shape[0]
    amax, mx = np.zeros(x.shape[1], F32), np.zeros(x.shape[1], F32)
    for i in range(n):
        ax = np.abs(x[i])
        bigger = ax > amax
        amax, mx = np.where(bigger, ax, amax), np.where(bigger, x[i], mx)
    zero = amax < _EPS
    mx = np.where(zero, F32(1), mx)
    wts = (x * x).astype(F32)

    def sums(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        l = np.clip(_rint(iscale * x), -nmax, nmax - 1)
        sumlx, suml2 = np.zeros_like(amax), np.zeros_like(amax)
        for i in range(n):
            sumlx = (sumlx + ((wts[i] * x[i]).astype(F32) * l[i])).astype(F32)
            suml2 = (suml2 + ((wts[i] * l[i]).astype(F32) * l[i])).astype(F32)
        return l, sumlx, suml2

    l, sumlx, suml2 = sums((F32(-nmax) / mx).astype(F32))
    L = l + nmax
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, (sumlx / suml2).astype(F32), F32(0))
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = (-(F32(nmax) + (F32(0.1) * F32(step)).astype(F32)).astype(F32) / mx).astype(F32)
        l, sumlx, suml2 = sums(iscale)
        better = (suml2 > 0) & ((sumlx * sumlx).astype(F32) > (best * suml2).astype(F32))
        L = np.where(better, l + nmax, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(better, (sumlx / suml2).astype(F32), scale)
        best = np.where(better, (scale * sumlx).astype(F32), best)
    return np.where(zero, F32(0), scale), np.where(zero, F32(0), L)


# ---------------------------------------------------------------------------------------------
# The formats: fields, values, bytes


def _q45_fields(blocks: np.ndarray, nmax: int, rmin: float, nstep: int):
    """Q4_K / Q5_K: (d [S], dmin [S], sc [S, 8], m [S, 8], L [S, 256]) of super-blocks [S, 256]."""
    s = blocks.shape[0]
    x = np.ascontiguousarray(blocks.reshape(s * 8, 32).T)  # [32, S*8]
    sum_x2 = np.zeros(x.shape[1], F32)
    for i in range(32):
        sum_x2 = (sum_x2 + x[i] * x[i]).astype(F32)
    av_x = np.sqrt((sum_x2 / F32(32)).astype(F32)).astype(F32)
    wts = (av_x + np.abs(x)).astype(F32)
    scales, mins, L = _make_qkx2_quants(x, wts, nmax, rmin, 0.1, nstep)
    scales, mins = scales.reshape(s, 8), mins.reshape(s, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
    sc = np.minimum(_rint(inv_scale[:, None] * scales), 63)
    m = np.minimum(_rint(inv_min[:, None] * mins), 63)
    d = _f16((max_scale / F32(63)).astype(F32))
    dmin = _f16((max_min / F32(63)).astype(F32))
    L = L.T.reshape(s, 8, 32)
    dl = (d[:, None] * sc).astype(F32)
    dm = (dmin[:, None] * m).astype(F32)
    live = dl != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_rint(((blocks.reshape(s, 8, 32) + dm[..., None]).astype(F32) / dl[..., None]).astype(F32)), 0, nmax)
    L = np.where(live[..., None], fresh, L)
    return d, dmin, sc, m, L.reshape(s, QK_K)


def _q6_fields(blocks: np.ndarray):
    """Q6_K: (d [S], sc [S, 16], L [S, 256] in 0..63) of super-blocks [S, 256]."""
    s = blocks.shape[0]
    x = np.ascontiguousarray(blocks.reshape(s * 16, 16).T)  # [16, S*16]
    scales, L = _make_qx_quants(x, 32)
    scales = scales.reshape(s, 16)
    L = L.T.reshape(s, 16, 16)
    amax, mx = np.zeros(s, F32), np.zeros(s, F32)
    for j in range(16):
        bigger = np.abs(scales[:, j]) > amax
        amax, mx = np.where(bigger, np.abs(scales[:, j]), amax), np.where(bigger, scales[:, j], mx)
    zero = amax < _EPS
    iscale = (F32(-128) / np.where(zero, F32(1), mx)).astype(F32)
    d = np.where(zero, F32(0), _f16((F32(1) / iscale).astype(F32)))
    sc = np.where(zero[:, None], F32(0), np.minimum(_rint(iscale[:, None] * scales), 127))
    dl = (d[:, None] * sc).astype(F32)
    live = dl != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_rint((blocks.reshape(s, 16, 16) / dl[..., None]).astype(F32)), -32, 31) + 32
    L = np.where(live[..., None], fresh, L)
    L = np.where(zero[:, None, None], F32(0), L)  # an all-zero super-block is all zero bytes (its values 0)
    return d, sc, L.reshape(s, QK_K)


def _values(name: str, fields) -> np.ndarray:
    """The f32 values of super-blocks from their fields, as dequantize_row_* computes them."""
    if name == "q6_K":
        d, sc, L = fields
        return ((d[:, None] * sc).astype(F32)[:, :, None] * (L.reshape(-1, 16, 16) - 32)).astype(F32)
    d, dmin, sc, m, L = fields
    d1 = (d[:, None] * sc).astype(F32)[:, :, None]
    m1 = (dmin[:, None] * m).astype(F32)[:, :, None]
    return ((d1 * L.reshape(-1, 8, 32)).astype(F32) - m1).astype(F32)


def _fields(blocks: np.ndarray, name: str):
    if name == "q4_K":
        return _q45_fields(blocks, 15, -1.0, 20)
    if name == "q5_K":
        return _q45_fields(blocks, 31, -0.5, 15)
    return _q6_fields(blocks)


def round_trip(w: np.ndarray, name: str) -> np.ndarray:
    """`w` (its last dim a multiple of 256) quantized to `name` and dequantized, f32."""
    blocks = _blocks(w, name)
    return _values(name, _fields(blocks, name)).reshape(np.shape(w))


def _pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K's 12 bytes of 6-bit scales and mins per super-block."""
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return out


def _halves(d: np.ndarray) -> np.ndarray:
    return d.astype(np.float16).reshape(-1, 1).view(np.uint8)


def quantize(w: np.ndarray, name: str) -> np.ndarray:
    """`w` [..., K] (K a multiple of 256) as GGUF stores it in `name`: uint8 [..., row bytes]."""
    blocks = _blocks(w, name)
    fields = _fields(blocks, name)
    L = fields[-1].astype(np.uint8).reshape(-1, QK_K // 64, 64)  # [S, chunk, 64]
    if name == "q6_K":
        d, sc, _ = fields
        L = L.reshape(-1, 2, 128)
        q = [L[:, :, 32 * k:32 * k + 32] for k in range(4)]
        ql = np.concatenate([q[0] & 0xF | ((q[2] & 0xF) << 4), q[1] & 0xF | ((q[3] & 0xF) << 4)], axis=-1)
        qh = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6)
        parts = [ql.reshape(-1, 128), qh.reshape(-1, 64), sc.astype(np.int8).view(np.uint8), _halves(d)]
    else:
        d, dmin, sc, m, _ = fields
        lo, hi = L[:, :, :32], L[:, :, 32:]
        parts = [_halves(d), _halves(dmin), _pack_scales(sc, m)]
        if name == "q5_K":
            bits = ((lo >> 4) & 1) << (2 * np.arange(4, dtype=np.uint8))[None, :, None]
            bits |= ((hi >> 4) & 1) << (2 * np.arange(4, dtype=np.uint8) + 1)[None, :, None]
            parts.append(np.bitwise_or.reduce(bits, axis=1))
        parts.append(((lo & 0xF) | ((hi & 0xF) << 4)).reshape(-1, 128))
    raw = np.concatenate(parts, axis=1)
    assert raw.shape[1] == ggml_type(name).nbytes
    return raw.reshape(*np.shape(w)[:-1], -1)


def dequantize(raw: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """GGUF's bytes of a `name` tensor (uint8, any shape holding whole super-blocks) as f32 `shape`."""
    t = ggml_type(name)
    b = np.ascontiguousarray(raw, np.uint8).reshape(-1, t.nbytes)
    half = lambda a: a.copy().view(np.float16).astype(F32).reshape(-1)  # noqa: E731
    if name == "q6_K":
        ql, qh, sc, d = b[:, :128], b[:, 128:192], b[:, 192:208].view(np.int8).astype(F32), half(b[:, 208:210])
        ql, qh = ql.reshape(-1, 2, 64), qh.reshape(-1, 2, 32)
        q = [(ql[:, :, :32] & 0xF), (ql[:, :, 32:] & 0xF), (ql[:, :, :32] >> 4), (ql[:, :, 32:] >> 4)]
        q = np.concatenate([q[k] | (((qh >> (2 * k)) & 3) << 4) for k in range(4)], axis=-1)
        return _values(name, (d, sc, q.reshape(-1, QK_K).astype(F32))).reshape(shape)
    d, dmin, s = half(b[:, 0:2]), half(b[:, 2:4]), b[:, 4:16]
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1).astype(F32)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1).astype(F32)
    qs = b[:, -128:].reshape(-1, 4, 32)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 4, 2, 32)
    if name == "q5_K":
        qh = b[:, 16:48]
        high = np.stack([(qh >> (2 * c + h)) & 1 for c in range(4) for h in range(2)], axis=1).reshape(-1, 4, 2, 32)
        q = q | (high << 4)
    return _values(name, (d, dmin, sc, m, q.reshape(-1, QK_K).astype(F32))).reshape(shape)
