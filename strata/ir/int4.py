"""Block-wise asymmetric 4-bit weights as ONNX Runtime quantizes and packs them
(`com.microsoft.MatMulNBits`, `onnxruntime.quantization.matmul_nbits_quantizer`'s default
quantizer, MLAS's `BlockwiseQuantizer`): one implementation for the blueprint interpreter's
emulation, `quantize-w4a16` and the packed checkpoint.

    q, scale, zp = quantize_int4_block(w, 128)        # w [N, K] (HF's [out, in]), along K
    w_hat = dequantize_int4_block(q, scale, zp, 128)  # (q - zp) * scale, f32
    b, zp_packed = pack_int4(q, zp, 128)              # MatMulNBits' B and zero_points, byte-exact

Per block of `block` consecutive elements along the last axis, all in float32:

    mn = min(min x, 0); mx = max(max x, 0); scale = (mx - mn) / 15
    zp = clamp(roundf(-mn / scale), 0, 15)          (scale 0: zp = 0)
    q  = clamp(roundf(x * (1 / scale) + zp), 0, 15)  (scale 0: 1 / scale is taken as 0)

roundf rounds halves away from zero. As MLAS does, x is multiplied by the float32 reciprocal
of the scale rather than divided by it: the two differ in the last bit now and then, and a
tie then rounds the other way. An all-zero block has scale 0, q = zp = 0 and dequantizes to 0.

Packing (MatMulNBits with bits=4): B is uint8 [N, nb, block/2]; element k of block b of row n
(a column of ONNX's [K, N] weight) sits in B[n, b, k // 2], even k in the low nibble. Zero
points are uint8 [N, ceil(nb/2)], two per byte, even b in the low nibble; the unused high
nibble of an odd nb is 8. Past K, whole bytes are 0; for an odd K the high nibble of the last
element's byte is what MLAS leaves there: the previous element's code (its loop reuses the
pair buffer), or 0 when that element starts MLAS's 2*block-row work unit.
"""

from __future__ import annotations

import numpy as np

from strata.errors import StrataError

F32 = np.float32


class Int4Error(StrataError):
    """A weight or packed tensor that cannot be (un)packed as MatMulNBits int4."""


def roundf(x: np.ndarray) -> np.ndarray:
    """C's roundf: to nearest, halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + F32(0.5))


def n_blocks(k: int, block: int) -> int:
    return -(-k // block)


def _check_block(block: int) -> None:
    if isinstance(block, bool) or not isinstance(block, int) or block < 2 or block % 2:
        raise Int4Error(f"int4 block size must be an even integer >= 2, got {block!r}")


def quantize_int4_block(w: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Runtime's block-wise asymmetric int4 along the last axis:
    (q uint8 in 0..15 [.., K], scale f32 [.., nb], zero point uint8 [.., nb])."""
    _check_block(block)
    w = np.asarray(w, dtype=F32)
    if w.ndim == 0 or w.shape[-1] == 0:
        raise Int4Error(f"int4 quantization needs a non-empty last axis, got shape {list(w.shape)}")
    if not np.isfinite(w).all():
        raise Int4Error("int4 quantization of a tensor holding inf or nan")
    k = w.shape[-1]
    nb = n_blocks(k, block)
    pad = np.zeros((*w.shape[:-1], nb * block), F32)
    pad[..., :k] = w
    blocks = pad.reshape(*w.shape[:-1], nb, block)
    # Padding is 0, which min(., 0) / max(., 0) include anyway.
    mn = np.minimum(blocks.min(axis=-1), F32(0))
    mx = np.maximum(blocks.max(axis=-1), F32(0))
    scale = ((mx - mn) / F32(15)).astype(F32)
    nonzero = scale != 0
    safe = np.where(nonzero, scale, F32(1))
    zp = np.where(nonzero, np.clip(roundf((F32(0) - mn / safe).astype(F32)), 0, 15), F32(0)).astype(F32)
    recip = np.where(nonzero, (F32(1) / safe).astype(F32), F32(0))
    q = np.clip(roundf((blocks * recip[..., None] + zp[..., None]).astype(F32)), 0, 15)
    return (q.reshape(*w.shape[:-1], nb * block)[..., :k].astype(np.uint8), scale, zp.astype(np.uint8))


def dequantize_int4_block(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, block: int = 128) -> np.ndarray:
    """(q - zp) * scale per block, f32 with q's shape."""
    k = q.shape[-1]
    s = np.repeat(np.asarray(scale, F32), block, axis=-1)[..., :k]
    z = np.repeat(np.asarray(zp).astype(F32), block, axis=-1)[..., :k]
    return ((q.astype(F32) - z) * s).astype(F32)


def pack_int4(q: np.ndarray, zp: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """(B uint8 [N, nb, block/2], zero_points uint8 [N, ceil(nb/2)]) as MatMulNBits stores them,
    from q [N, K] and zp [N, nb] (see the module docstring for the layout)."""
    _check_block(block)
    q = np.asarray(q, np.uint8)
    if q.ndim != 2:
        raise Int4Error(f"pack_int4 takes q [N, K], got shape {list(q.shape)}")
    n, k = q.shape
    nb = n_blocks(k, block)
    if zp.shape != (n, nb):
        raise Int4Error(f"pack_int4: zero points have shape {list(zp.shape)}, expected {[n, nb]}")
    full = np.zeros((n, nb * block), np.uint8)
    full[:, :k] = q
    if k % 2 and k > 1 and (k - 1) % (2 * block):
        full[:, k] = q[:, k - 2]  # MLAS's stale nibble (see the module docstring)
    pairs = full.reshape(n, nb, block // 2, 2)
    b = (pairs[..., 0] & 0xF) | (pairs[..., 1] << 4)
    zfull = np.full((n, 2 * n_blocks(nb, 2)), 8, np.uint8)
    zfull[:, :nb] = zp
    zpacked = (zfull[:, 0::2] & 0xF) | (zfull[:, 1::2] << 4)
    return b.astype(np.uint8), zpacked.astype(np.uint8)


def unpack_int4(b: np.ndarray, zp_packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(q [N, K], zp [N, nb]) from MatMulNBits' B [N, nb, block/2] and zero points."""
    if b.ndim != 3:
        raise Int4Error(f"unpack_int4 takes B [N, nb, block/2], got shape {list(b.shape)}")
    n, nb, half = b.shape
    if not 0 < k <= nb * 2 * half or n_blocks(k, 2 * half) != nb:
        raise Int4Error(f"unpack_int4: K = {k} does not fit B of shape {list(b.shape)}")
    if zp_packed.shape != (n, n_blocks(nb, 2)):
        raise Int4Error(f"unpack_int4: zero points have shape {list(zp_packed.shape)}, expected {[n, n_blocks(nb, 2)]}")
    q = np.stack([b & 0xF, b >> 4], axis=-1).reshape(n, nb * 2 * half)[:, :k]
    zp = np.stack([zp_packed & 0xF, zp_packed >> 4], axis=-1).reshape(n, -1)[:, :nb]
    return q.astype(np.uint8), zp.astype(np.uint8)
