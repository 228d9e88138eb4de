"""fp8 (e4m3) block quantization: strata.ir.fp8."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from strata.ir.fp8 import (E4M3_MAX, E4M3_MIN_NORMAL, FP8, Fp8Error, dequantize_fp8_block, fp8_error,
                           quantize_fp8_block, round_e4m3, scale_shape)


def _reference_dequant(q, s, block=(128, 128)):
    """Element by element, the definition: q[i, j] * s[i // bn, j // bk]."""
    out = np.empty(q.shape, np.float32)
    qf = q.astype(np.float32)
    for i in range(q.shape[0]):
        for j in range(q.shape[1]):
            out[i, j] = qf[i, j] * s[i // block[0], j // block[1]]
    return out


@pytest.mark.parametrize("shape", [(256, 384), (200, 130), (1, 1), (129, 7), (5, 300)])
def test_shapes_and_round_trip_bound(shape):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 3.0)).astype(np.float32)
    q, s = quantize_fp8_block(w)
    assert q.dtype == FP8 and q.shape == shape
    assert s.dtype == np.float32 and s.shape == scale_shape(shape) == (-(-shape[0] // 128), -(-shape[1] // 128))
    d = dequantize_fp8_block(q, s)
    assert d.dtype == np.float32 and np.isfinite(d).all()
    # For values that land in e4m3's normal range, rounding to nearest is within half a
    # relative step of the 3-bit mantissa: 2^-4 relative (plus f32 rounding of the scaling).
    full_s = np.repeat(np.repeat(s, 128, 0), 128, 1)[:shape[0], :shape[1]]
    normal = np.abs(w) >= E4M3_MIN_NORMAL * full_s
    rel = np.abs(d[normal] - w[normal]) / np.abs(w[normal])
    assert rel.max() <= 2.0 ** -4 * (1 + 1e-5)
    # Subnormals: an absolute error of at most half the subnormal step 2^-9, times the scale.
    assert (np.abs(d - w)[~normal] <= 2.0 ** -10 * full_s[~normal] * (1 + 1e-5)).all()
    # Each block's largest element maps to exactly +-448.
    for bi in range(s.shape[0]):
        for bj in range(s.shape[1]):
            blk = q[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128].astype(np.float32)
            assert np.abs(blk).max() == E4M3_MAX


def test_dequant_equals_the_reference_exactly():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((300, 260)).astype(np.float32)
    q, s = quantize_fp8_block(w)
    np.testing.assert_array_equal(dequantize_fp8_block(q, s), _reference_dequant(q, s))


def test_quantize_matches_a_straightforward_reference():
    """Per block: s = max|w| / 448 over the real elements; q = RNE(w / s), saturated."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((140, 133)).astype(np.float32)
    w[130:, 129:] *= 100  # the partial corner block has its own, much larger scale
    q, s = quantize_fp8_block(w)
    for bi in range(2):
        for bj in range(2):
            blk = w[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128]
            want = np.float32(np.abs(blk).max()) / np.float32(448)
            assert s[bi, bj] == want
            ref = (blk / want).astype(ml_dtypes.float8_e4m3fn)
            np.testing.assert_array_equal(q[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128].view(np.uint8),
                                          ref.view(np.uint8))


def test_partial_blocks_take_the_max_over_real_elements_only():
    w = np.full((130, 3), -0.5, np.float32)
    w[128:, :] = 1e-3  # the bottom partial block: 2 rows
    q, s = quantize_fp8_block(w)
    assert s.shape == (2, 1)
    assert s[0, 0] == np.float32(0.5) / np.float32(448) and s[1, 0] == np.float32(1e-3) / np.float32(448)
    assert (q.astype(np.float32)[128:] == 448).all()


def test_all_zero_block_gets_scale_one():
    w = np.zeros((256, 128), np.float32)
    w[128:, :5] = 2.0
    q, s = quantize_fp8_block(w)
    assert s[0, 0] == 1.0 and s[1, 0] == np.float32(2.0) / np.float32(448)
    assert not q.astype(np.float32)[:128].any()
    d = dequantize_fp8_block(q, s)
    np.testing.assert_array_equal(d, w)
    e = fp8_error(np.zeros((3, 4), np.float32))
    assert e["max_abs"] == 0 and e["rel_rmse"] == 0


def test_round_e4m3_is_rne_with_saturation_as_torch_casts():
    """torch's `x.to(torch.float8_e4m3fn)` (checked here on the installed torch) rounds to
    nearest-even and saturates to +-448 where ml_dtypes' plain cast gives NaN; round_e4m3
    agrees with torch bit for bit, including ties, subnormals and out-of-range values."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, 1.0625, 1.1875, 1.3125, 447.0, 456.0, 460.0, 464.0, 470.0, 500.0, 1e6,
                         -1e6, 2.0 ** -9 * 0.5, 2.0 ** -9 * 1.5, 2.0 ** -9 * 2.5, 2.0 ** -7 * 1.0625,
                         2.0 ** -10, 1e-30], np.float32)
    x = np.concatenate([specials, -specials, rng.standard_normal(20000).astype(np.float32) * 300,
                        (rng.standard_normal(5000) * 0.01).astype(np.float32)])
    ours = round_e4m3(x).view(np.uint8)
    theirs = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(ours, theirs)
    # The ties: 1.0625 is halfway between 1 and 1.125 -> 1 (even); 1.1875 -> 1.25 (even).
    assert round_e4m3(np.float32([1.0625, 1.1875, 464.0, 1e6])).astype(np.float32).tolist() == [1.0, 1.25, 448.0,
                                                                                                  448.0]
    # And torch's quantization of a whole weight the same way gives the same q.
    w = rng.standard_normal((200, 150)).astype(np.float32)
    q, s = quantize_fp8_block(w)
    full_s = np.repeat(np.repeat(s, 128, 0), 128, 1)[:200, :150]
    tq = (torch.from_numpy(w) / torch.from_numpy(full_s)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(q.view(np.uint8), tq)


def test_error_report():
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((256, 200)) * 0.05).astype(np.float32)
    e = fp8_error(w)
    assert set(e) >= {"max_abs", "mean_abs", "rmse", "rel_rmse", "max_rel", "zero_frac"}
    assert e["max_rel"] <= 2.0 ** -4 * (1 + 1e-5)
    # Uniform rounding error of a 3-bit mantissa: ~2-3% rms for Gaussian weights.
    assert 0.01 < e["rel_rmse"] < 0.04
    assert e["max_abs"] <= np.abs(w).max() / 448 * 16  # half a step at the top binade [256, 448]


def test_bad_inputs():
    with pytest.raises(Fp8Error, match="2-D"):
        quantize_fp8_block(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(Fp8Error, match="NaN"):
        quantize_fp8_block(np.array([[np.nan]], np.float32))
    with pytest.raises(Fp8Error, match="float weight"):
        quantize_fp8_block(np.zeros((2, 2), np.int32))
    with pytest.raises(Fp8Error, match=r"expected \[2, 1\]"):
        dequantize_fp8_block(np.zeros((130, 5), FP8), np.ones((1, 1), np.float32))
    with pytest.raises(Fp8Error, match="block"):
        quantize_fp8_block(np.zeros((2, 2), np.float32), block=(0, 128))
