"""fp8 (e4m3) block quantization, stored the way DeepSeek-V3 and Qwen FP8 checkpoints store it.

A weight ``W`` [N, K] becomes ``q`` float8_e4m3fn [N, K] and ``scale_inv`` f32
[ceil(N/128), ceil(K/128)]; ``W ~= q * scale_inv[i // 128, j // 128]``.

Per block: ``scale_inv = max|W_block| / 448`` (448: e4m3fn's largest finite value), taken over
the block's real elements (a partial block at the right or bottom edge is not padded with
anything that could change it), and ``q = e4m3(W / scale_inv)``, rounded to nearest-even and
saturated to +-448 (`round_e4m3`).

All-zero blocks: max|W| = 0 would give a scale of 0 and 0/0 = NaN. DeepSeek's and transformers'
(`finegrained_fp8`) quantizers do not guard this (transformers computes ``448 / amax`` and gets
inf, then NaN); vLLM clamps amax to a small epsilon. We store ``scale_inv = 1`` for such a
block: q is then exactly 0 and dequantizes to exactly 0, and no reader divides by the scale.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from strata.errors import StrataError

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
#: e4m3fn's largest finite value.
E4M3_MAX = 448.0
#: Relative step of e4m3's 3-bit mantissa: the relative error of rounding a normal value to
#: nearest is at most half of it, 2^-4.
E4M3_REL_STEP = 2.0 ** -3
#: The smallest normal e4m3fn value (2^-6); below it the step is the fixed 2^-9.
E4M3_MIN_NORMAL = 2.0 ** -6
BLOCK = (128, 128)


class Fp8Error(StrataError, ValueError):
    """An array that cannot be (de)quantized as asked."""


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """``x`` (float) cast to float8_e4m3fn: round to nearest-even, saturating at +-448.

    ml_dtypes' cast rounds to nearest-even but turns values beyond the range into NaN (e4m3fn
    has no infinity), so the value is clipped first; clipping is exact (448 is representable)
    and NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32)
    return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(FP8)


def scale_shape(shape: tuple[int, ...], block: tuple[int, int] = BLOCK) -> tuple[int, int]:
    """The shape of the scale of a [N, K] weight: [ceil(N/bn), ceil(K/bk)]."""
    n, k = shape
    return math.ceil(n / block[0]), math.ceil(k / block[1])


def _check_block(block: tuple[int, int]) -> tuple[int, int]:
    if len(block) != 2 or not all(isinstance(b, (int, np.integer)) and b > 0 for b in block):
        raise Fp8Error(f"block must be two positive integers, got {block!r}")
    return int(block[0]), int(block[1])


def _expand(scale: np.ndarray, shape: tuple[int, int], block: tuple[int, int]) -> np.ndarray:
    """``scale`` [ceil(N/bn), ceil(K/bk)] repeated to [N, K]."""
    full = np.repeat(np.repeat(scale, block[0], axis=0), block[1], axis=1)
    return full[:shape[0], :shape[1]]


def block_amax(w: np.ndarray, block: tuple[int, int] = BLOCK) -> np.ndarray:
    """max|w| per block, f32 [ceil(N/bn), ceil(K/bk)], over each block's real elements."""
    bn, bk = _check_block(block)
    n, k = w.shape
    sn, sk = scale_shape(w.shape, (bn, bk))
    padded = np.zeros((sn * bn, sk * bk), dtype=np.float32)  # |0| never raises a max of |w| >= 0
    padded[:n, :k] = np.abs(w)
    return padded.reshape(sn, bn, sk, bk).max(axis=(1, 3))


def quantize_fp8_block(w: np.ndarray, block: tuple[int, int] = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(q float8_e4m3fn [N, K], scale_inv f32 [ceil(N/bn), ceil(K/bk)]) of a 2-D float ``w``."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise Fp8Error(f"fp8 block quantization takes a 2-D weight, got shape {list(w.shape)}")
    if w.dtype.kind != "f" and w.dtype != np.dtype(ml_dtypes.bfloat16):
        raise Fp8Error(f"fp8 block quantization takes a float weight, got {w.dtype}")
    w = w.astype(np.float32)
    if not np.isfinite(w).all():
        raise Fp8Error("fp8 block quantization: the weight holds NaN or infinite values")
    block = _check_block(block)
    amax = block_amax(w, block)
    scale_inv = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
    q = round_e4m3(w / _expand(scale_inv, w.shape, block))
    return q, scale_inv


def dequantize_fp8_block(q: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int] = BLOCK) -> np.ndarray:
    """f32 [N, K]: ``q[i, j] * scale_inv[i // bn, j // bk]``."""
    block = _check_block(block)
    if q.ndim != 2:
        raise Fp8Error(f"fp8 dequantization takes a 2-D weight, got shape {list(q.shape)}")
    want = scale_shape(q.shape, block)
    if tuple(scale_inv.shape) != want:
        raise Fp8Error(f"scale of shape {list(scale_inv.shape)} does not fit a weight of shape "
                       f"{list(q.shape)} in blocks of {list(block)}: expected {list(want)}")
    return q.astype(np.float32) * _expand(np.asarray(scale_inv, dtype=np.float32), q.shape, block)


def fp8_error(w: np.ndarray, block: tuple[int, int] = BLOCK) -> dict[str, float]:
    """The error of quantizing ``w`` to fp8 blocks and back: max_abs, mean_abs, rmse, rel_rmse
    (rmse / rms of w), max_rel (over elements whose |w| is at least e4m3's smallest normal
    times their block's scale), and zero_frac (the fraction of nonzero elements that became 0)."""
    w32 = np.asarray(w, dtype=np.float32)
    return fp8_error_of(w32, *quantize_fp8_block(w32, block), block)


def fp8_error_of(w: np.ndarray, q: np.ndarray, s: np.ndarray, block: tuple[int, int] = BLOCK) -> dict[str, float]:
    """`fp8_error` of ``w`` given its quantization (``q``, ``s``) already in hand (a writer
    reports the error of what it wrote without quantizing twice)."""
    w32 = np.asarray(w, dtype=np.float32)
    d = dequantize_fp8_block(q, s, block)
    err = (d.astype(np.float64) - w32)
    rms = float(np.sqrt(np.mean(np.square(w32, dtype=np.float64)))) if w32.size else 0.0
    rmse = float(np.sqrt(np.mean(np.square(err)))) if w32.size else 0.0
    normal = np.abs(w32) >= E4M3_MIN_NORMAL * _expand(s, w32.shape, _check_block(block))
    rel = np.abs(err[normal]) / np.abs(w32[normal])
    nonzero = w32 != 0
    return {
        "max_abs": float(np.abs(err).max()) if w32.size else 0.0,
        "mean_abs": float(np.abs(err).mean()) if w32.size else 0.0,
        "rmse": rmse,
        "rel_rmse": rmse / rms if rms else 0.0,
        "max_rel": float(rel.max()) if rel.size else 0.0,
        "zero_frac": float(np.count_nonzero(nonzero & (d == 0)) / max(1, np.count_nonzero(nonzero))),
    }
