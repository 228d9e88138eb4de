"""ggml-cpu's numerics where they are not plain float32: the quantization of activation rows
before a quantized MUL_MAT, and FLASH_ATTN_EXT over a float16 KV cache. Kernels of the op
level (and the CPU target's, copied into generated modules), under `kernels.py`'s rules:
numpy and ml_dtypes only, self-contained functions, no module constants.

**Activations.** For a weight stored in a ggml block type, ggml-cpu quantizes each row of the
other operand to the type's `vec_dot_type` (`strata.ir.ggml_types`) and takes integer dot
products of the blocks. Their result is the dot product of the dequantized weight with the
dequantized activation row (up to float32 rounding of the block sums), so a quantized MUL_MAT
is a MUL_MAT of the dequantized weight by the activation rounded through its blocks:

* q8_0 (ggml-cpu's quantize_row_q8_0 as built for x86 with AVX: arch/x86/quants.c): blocks of
  32, amax = max|x|, d = amax / 127 kept as float16, q = round-half-even(x * (127 / amax)),
  the value q * d;
* q8_1 (quantize_row_q8_1, the activations of Q4_1 and Q5_1 weights): Q8_0's blocks, plus the
  block's float16 s = d * sum(q) (d unrounded), which ggml's dot products use in place of the
  sum of the values: `mul_mat_q8_1` takes the weight's q * d and m apart to apply it;
* q8_K (quantize_row_q8_K_ref, which x86 uses): blocks of 256, m = the value of largest
  magnitude (the first, on a tie), iscale = -127 / m, q = min(127, round-half-even(iscale * x)),
  the value q * (1 / iscale) in float32.

`order` [a, b, c] says that ggml sees the row's columns in another order than the op level:
viewed as [a, b, c], ggml's row is [b, a, c] (Qwen3.5's value heads, stored tiled, are
grouped at the op level). The blocks are cut in ggml's order.

**Flash attention, f16 K and V** (ops.cpp, ggml_compute_forward_flash_attn_ext_f16). Fewer than
64 query rows (a decode, a short prefill) take the one-chunk path: each query row is rounded
to float16 (the K type's vec_dot_type), its dot products with the K rows are exact products
summed wider than float32, and an online softmax visits the unmasked KV positions in order,
keeping the running sum of V rows in a float16 accumulator: at each position the accumulator
is scaled by exp(M_old - M) when the maximum grows, and v * exp(s - M) is added with one fused
multiply-add, each rounded to float16. The sum S is kept in float32; the row is the
accumulator times 1 / S (0 where no position is visible). From 64 rows on, the tiled path
keeps Q and the accumulators in float32 over the float16 K and V.
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (as kernels.py: generated modules import it)
import numpy as np

# The float32 kernels these build on (in a generated module, the copies of both files share one namespace).
from strata.semantics.kernels import flash_attn_ext, mul_mat, mul_mat_id


def quantize_rows_q8_0(x: np.ndarray) -> np.ndarray:
    """x [..., K] (K a multiple of 32) through ggml-cpu's Q8_0 activation blocks, float32."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv)
    return (q * d).astype(np.float32).reshape(x.shape)


def quantize_rows_q8_1(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [..., K] (K a multiple of 32) through ggml-cpu's Q8_1 activation blocks -> (values
    [..., K], s [..., K/32]) float32: the values as Q8_0's (q * d, d kept as float16), s the
    block's float16 sum d * sum(q) taken with the unrounded d (ggml's dot products read s in
    place of the sum of the values)."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d32 = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv)
    d = d32.astype(np.float16).astype(np.float32)
    s = (d32[:, 0] * q.sum(axis=-1, dtype=np.float32)).astype(np.float16).astype(np.float32)
    return (q * d).astype(np.float32).reshape(x.shape), s.reshape(x.shape[:-1] + (x.shape[-1] // 32,))


def mul_mat_q8_1(wq: np.ndarray, wm: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MUL_MAT of a Q4_1 / Q5_1 weight by `b`, whose rows ggml-cpu quantizes to Q8_1: the weight
    given as wq [M, K] (each value's q * d, without the block's m) and wm [M, K/32] (the blocks'
    m) -> [..., M] float32 = wq . b's values + wm . b's block sums s (ggml's m * s terms)."""
    values, s = quantize_rows_q8_1(b)
    wq = np.asarray(wq, dtype=np.float64)
    wm = np.asarray(wm, dtype=np.float64)
    return (values.astype(np.float64) @ wq.T + s.astype(np.float64) @ wm.T).astype(np.float32)


def quantize_rows_q8_K(x: np.ndarray) -> np.ndarray:
    """x [..., K] (K a multiple of 256) through ggml's Q8_K activation blocks, float32."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(-1, 256)
    first = np.abs(blocks).argmax(axis=-1)[:, None]  # argmax takes the first of equal magnitudes
    m = np.take_along_axis(blocks, first, axis=-1)
    zero = m == 0
    iscale = (np.float32(-127) / np.where(zero, np.float32(1), m)).astype(np.float32)
    q = np.minimum(np.rint(blocks * iscale), np.float32(127))
    d = (np.float32(1) / iscale).astype(np.float32)
    return np.where(zero, np.float32(0), q * d).astype(np.float32).reshape(x.shape)


def quantize_activation(x: np.ndarray, kind: str, order=None) -> np.ndarray:
    """x's rows through ggml-cpu's activation blocks of `kind` (q8_0, q8_K), cut in ggml's
    column order when `order` [a, b, c] says that differs (see the module docstring)."""
    quantize = quantize_rows_q8_0 if kind == "q8_0" else quantize_rows_q8_K
    if kind not in ("q8_0", "q8_K"):
        raise ValueError(f"activation quantization '{kind}' is not emulated (q8_0, q8_K are)")
    x = np.asarray(x, dtype=np.float32)
    if order is None or len(order) == 0:
        return quantize(x)
    a, b, c = (int(v) for v in order)
    lead = x.shape[:-1]
    ggml = np.swapaxes(x.reshape(*lead, a, b, c), -3, -2)
    return np.swapaxes(quantize(np.ascontiguousarray(ggml)).reshape(*lead, b, a, c), -3, -2).reshape(x.shape)


def mul_mat_quantized(a: np.ndarray, b: np.ndarray, kind: str, order=None) -> np.ndarray:
    """MUL_MAT of a quantized weight `a` (its dequantized values) by `b`, whose rows ggml-cpu
    quantizes to `kind` first: mul_mat(a, b's rows through their blocks)."""
    return mul_mat(a, quantize_activation(b, kind, order))


def mul_mat_id_quantized(experts: np.ndarray, b: np.ndarray, ids: np.ndarray, kind: str, order=None) -> np.ndarray:
    """MUL_MAT_ID of quantized experts by `b`, its rows quantized to `kind` first."""
    return mul_mat_id(experts, quantize_activation(b, kind, order), ids)


def flash_attn_ext_f16(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask, scale: float) -> np.ndarray:
    """FLASH_ATTN_EXT over float16 K and V as ggml-cpu computes it -> [S, Hq, Dv] float32
    (q [Hq, S, D], k [Hkv, N, D], v [Hkv, N, Dv], mask [S, N] or None; see the docstring)."""
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    if s >= 64:  # the tiled path: float32 Q and accumulators
        return flash_attn_ext(q, k.astype(np.float32), v.astype(np.float32), mask, scale)
    group = hq // hkv
    m = np.zeros((s, n), np.float32) if mask is None else np.asarray(mask, np.float32)
    m = m.astype(np.float16).astype(np.float32)  # llama.cpp's mask is float16
    qh = np.asarray(q, np.float32).astype(np.float16).astype(np.float64)
    kh = np.repeat(np.asarray(k, np.float16), group, axis=0).astype(np.float64)
    vh = np.repeat(np.asarray(v, np.float16), group, axis=0).astype(np.float32)  # [Hq, N, Dv]
    kq = (np.matmul(qh, np.swapaxes(kh, -1, -2)).astype(np.float32) * np.float32(scale)).astype(np.float32)
    kq = (kq + m[None]).astype(np.float32)  # [Hq, S, N]
    acc = np.zeros((hq, s, dv), np.float32)  # float16 values
    total = np.zeros((hq, s), np.float32)
    top = np.full((hq, s), -np.inf, np.float32)
    for ic in np.flatnonzero(~np.all(np.isneginf(m), axis=0)).tolist():
        live = ~np.isneginf(m[:, ic])[None, :]  # [1, S]: the rows that see position ic
        sc = kq[:, :, ic]
        grows = live & (sc > top)
        with np.errstate(invalid="ignore", over="ignore"):
            ms = np.where(grows, np.exp((top - sc).astype(np.float64)).astype(np.float32), np.float32(1))
            vs = np.where(grows, np.float32(1), np.exp((sc - top).astype(np.float64)).astype(np.float32))
        vs = np.where(live, vs, np.float32(0))
        top = np.where(grows, sc, top)
        acc = np.where(grows[..., None], (acc * ms[..., None]).astype(np.float16).astype(np.float32), acc)
        fma = vh[:, ic][:, None, :].astype(np.float64) * vs[..., None].astype(np.float64) + acc.astype(np.float64)
        acc = np.where(live[..., None], fma.astype(np.float32).astype(np.float16).astype(np.float32), acc)
        total = np.where(live, (total.astype(np.float64) * ms + vs).astype(np.float32), total)
    with np.errstate(divide="ignore"):
        inv = np.where(total == 0, np.float32(0), np.float32(1) / total).astype(np.float32)
    out = (acc * inv[..., None]).astype(np.float32)
    return np.ascontiguousarray(out.transpose(1, 0, 2))
