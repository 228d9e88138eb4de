"""ONNX Runtime's block-wise asymmetric int4 and MatMulNBits' packing (strata/ir/int4.py), checked
byte for byte against ONNX Runtime's own quantizer (MLAS's, through its Python binding and
through MatMulNBitsQuantizer on an ONNX MatMul)."""

from __future__ import annotations

import numpy as np
import pytest

from strata.ir.int4 import Int4Error, dequantize_int4_block, pack_int4, quantize_int4_block, roundf, unpack_int4

pytest.importorskip("onnxruntime")

from ort_int4 import ort_quantize_int4 as ort_quantize  # noqa: E402 - ONNX Runtime's quantizer on W [N, K]


def ours(w: np.ndarray, block: int):
    q, s, z = quantize_int4_block(w, block)
    b, zp = pack_int4(q, z, block)
    return b, s, zp


def test_formula_by_hand():
    w = np.array([[-1.5, 0.5, 4.0, 13.5]], np.float32)
    q, scale, zp = quantize_int4_block(w, 4)
    # mn = -1.5, mx = 13.5, scale = 1, zp = roundf(1.5) = 2; q = roundf(x + 2), halves away from 0
    assert scale.tolist() == [[1.0]] and zp.tolist() == [[2]]
    assert q.tolist() == [[1, 3, 6, 15]]
    np.testing.assert_array_equal(dequantize_int4_block(q, scale, zp, 4), [[-1.0, 1.0, 4.0, 13.0]])
    assert roundf(np.array([0.5, -0.5, 1.5, 2.5, -2.5], np.float32)).tolist() == [1, -1, 2, 3, -3]
    # an all-positive block: mn = 0, zp = 0; all-zero: scale 0, q = zp = 0
    q, scale, zp = quantize_int4_block(np.array([[1.0, 3.0], [0.0, 0.0]], np.float32), 2)
    assert zp.tolist() == [[0], [0]] and scale[1].tolist() == [0.0] and q[1].tolist() == [0, 0]


def test_reciprocal_not_division():
    """x * (1/scale) and x / scale round a tie differently here; ONNX Runtime multiplies."""
    w = np.zeros((1, 16), np.float32)
    w[0, :3] = [np.float32(-1.3304044), np.float32(0.38036475), np.float32(-0.7413333)]
    s = np.float32((w.max() - w.min()) / np.float32(15))
    zp = np.float32(roundf(np.float32(0) - w.min() / s))
    divided = roundf(np.float32(w[0, 2] / s + zp))
    assert divided != roundf(np.float32(w[0, 2] * np.float32(np.float32(1) / s) + zp))  # the case is a real tie
    q, _, _ = quantize_int4_block(w, 16)
    b, sc, z = ort_quantize(w, 16)
    assert q[0, 2] != divided
    assert (b[0, 0, 1] & 0xF) == q[0, 2]
    assert np.array_equal(ours(w, 16)[0], b)


@pytest.mark.parametrize("n, k, block", [(3, 256, 128), (5, 200, 64), (4, 96, 32), (2, 255, 64), (3, 17, 16),
                                         (6, 129, 128), (1, 1, 16), (7, 384, 128), (2, 33, 16)])
@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "ties", "zeros"])
def test_bytes_equal_onnxruntime(n, k, block, kind):
    rng = np.random.default_rng(n * 1000 + k + block)
    w = rng.standard_normal((n, k)).astype(np.float32)
    if kind == "positive":
        w = np.abs(w)
    elif kind == "negative":
        w = -np.abs(w)
    elif kind == "ties":
        w = (rng.integers(-8, 8, (n, k)) * np.float32(0.5)).astype(np.float32)
    elif kind == "zeros":
        w[:, ::3] = 0
        w[0] = 0
    b, s, z = ort_quantize(w, block)
    mb, ms, mz = ours(w, block)
    assert ms.tobytes() == s.tobytes()
    assert mz.tobytes() == z.tobytes()
    assert mb.tobytes() == b.tobytes()
    # and back
    q, zp = unpack_int4(mb, mz, k)
    np.testing.assert_array_equal(q, quantize_int4_block(w, block)[0])
    np.testing.assert_array_equal(zp, quantize_int4_block(w, block)[2])


def test_random_sweep_bytes_equal_onnxruntime():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n, k = int(rng.integers(1, 6)), int(rng.integers(1, 400))
        block = int(rng.choice([16, 32, 64, 128]))
        w = (rng.standard_normal((n, k)) * rng.choice([1e-3, 1.0, 40.0])).astype(np.float32)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(ours(w, block), ort_quantize(w, block))), (n, k, block)


def test_unused_zero_point_nibble_is_8():
    w = np.random.default_rng(0).standard_normal((2, 3 * 16)).astype(np.float32)  # 3 blocks: one byte half used
    _, _, z = ours(w, 16)
    assert z.shape == (2, 2) and ((z[:, 1] >> 4) == 8).all()


def test_errors():
    with pytest.raises(Int4Error, match="inf or nan"):
        quantize_int4_block(np.array([[1.0, np.nan]], np.float32), 16)
    with pytest.raises(Int4Error, match="even integer"):
        quantize_int4_block(np.ones((1, 4), np.float32), 3)
    with pytest.raises(Int4Error, match="zero points have shape"):
        pack_int4(np.zeros((2, 16), np.uint8), np.zeros((2, 2), np.uint8), 16)
    with pytest.raises(Int4Error, match="does not fit"):
        unpack_int4(np.zeros((2, 1, 8), np.uint8), np.zeros((2, 1), np.uint8), 17)
