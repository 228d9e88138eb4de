"""ggml-cpu's activation quantization and float16 flash attention (strata.semantics.kernels_ggml),
against scalar code written as ggml's C reads (arch/x86/quants.c, ggml-quants.c, ops.cpp).
End to end they are checked against llama.cpp's own logs (tests/verify/test_llamacpp_quantized.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG

F32, F16 = np.float32, np.float16


def _f16(x) -> float:
    return float(F16(F32(x)))


def q8_0_scalar(block: np.ndarray) -> list[float]:
    """quantize_row_q8_0 (x86, AVX): d = amax / 127 in f16, q = round-half-even(x * (127 / amax))."""
    amax = F32(max(abs(float(v)) for v in block))
    d = F32(amax / F32(127))
    inv = F32(F32(127) / amax) if amax != 0 else F32(0)
    return [float(F32(np.rint(F32(v * inv))) * F32(_f16(d))) for v in block]


def q8_K_scalar(block: np.ndarray) -> list[float]:
    """quantize_row_q8_K_ref: the first value of largest magnitude m, iscale = -127 / m."""
    amax, m = F32(0), F32(0)
    for v in block:
        if abs(v) > amax:
            amax, m = abs(v), v
    if amax == 0:
        return [0.0] * len(block)
    iscale = F32(F32(-127) / m)
    return [float(F32(min(127.0, float(np.rint(F32(iscale * v)))) * F32(F32(1) / iscale))) for v in block]


def test_q8_0_is_ggml_cpus() -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 64)) * rng.uniform(0.01, 10, (3, 1))).astype(F32)
    x[1, :32] = 0  # an all-zero block
    want = np.array([q8_0_scalar(b) for b in x.reshape(-1, 32)], F32).reshape(x.shape)
    np.testing.assert_array_equal(KG.quantize_rows_q8_0(x), want)
    np.testing.assert_array_equal(KG.quantize_rows_q8_0(x)[1, :32], 0)


def test_q8_0_rounds_halves_to_even() -> None:
    """x * (127 / amax) = 2.5 exactly rounds to 2, not 3 (the reference quantizer's roundf would)."""
    block = np.zeros(32, F32)
    block[0], block[1] = 127.0, 2.5
    got = KG.quantize_rows_q8_0(block)
    assert got[1] == 2 * float(F16(1.0)) and got[0] == 127


def test_q8_K_is_ggmls() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 512)) * 3).astype(F32)
    x[0, 7], x[0, 9] = 5.0, -5.0  # equal magnitudes: the first (+5) decides the sign; -5 clamps to 127
    x[0, 256:] = 0
    want = np.array([q8_K_scalar(b) for b in x.reshape(-1, 256)], F32).reshape(x.shape)
    got = KG.quantize_rows_q8_K(x)
    np.testing.assert_array_equal(got, want)
    assert got[0, 9] == -got[0, 7] and np.all(got[0, 256:] == 0)


def test_the_block_order_cuts_blocks_in_ggmls_order() -> None:
    """[a, b, c] = [2, 8, 16]: ggml's row is the [8, 2, 16] transpose (heads of 16, half a Q8_0
    block); its blocks are quantized. Heads of whole blocks ([2, 4, 32]) are blocks either way."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 256)) * rng.uniform(0.1, 9, (1, 256))).astype(F32)
    ggml_row = x.reshape(5, 2, 8, 16).transpose(0, 2, 1, 3).reshape(5, 256)
    want = KG.quantize_rows_q8_0(ggml_row).reshape(5, 8, 2, 16).transpose(0, 2, 1, 3).reshape(5, 256)
    got = KG.quantize_activation(x, "q8_0", (2, 8, 16))
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, KG.quantize_activation(x, "q8_0"))
    np.testing.assert_array_equal(KG.quantize_activation(x, "q8_0", (2, 4, 32)), KG.quantize_activation(x, "q8_0"))


def test_quantized_products_multiply_by_the_quantized_rows() -> None:
    rng = np.random.default_rng(4)
    w, x = rng.standard_normal((8, 256)).astype(F32), rng.standard_normal((3, 256)).astype(F32)
    np.testing.assert_array_equal(KG.mul_mat_quantized(w, x, "q8_K"), K.mul_mat(w, KG.quantize_rows_q8_K(x)))
    experts, b, ids = rng.standard_normal((4, 8, 256)).astype(F32), x[:, None], np.array([[1, 3], [0, 1], [2, 2]], np.int32)
    np.testing.assert_array_equal(KG.mul_mat_id_quantized(experts, b, ids, "q8_0"),
                                  K.mul_mat_id(experts, KG.quantize_rows_q8_0(b), ids))
    with pytest.raises(ValueError, match="'q8_1' is not emulated"):
        KG.quantize_activation(x, "q8_1")


def fa_one_chunk(q, k, v, mask, scale) -> np.ndarray:
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk for f16 K and V, one row at a time."""
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    out = np.zeros((s, hq, dv), F32)
    for h in range(hq):
        kh, vh = k[h // (hq // hkv)].astype(F16), v[h // (hq // hkv)].astype(F16)
        for i in range(s):
            qi = q[h, i].astype(F16)
            acc = np.zeros(dv, F16)
            total, top = F32(0), F32(-math.inf)
            for ic in range(n):
                mv = F32(F16(mask[i, ic]))
                if mv == -math.inf:
                    continue
                sc = F32(F32(math.fsum(float(a) * float(b) for a, b in zip(qi, kh[ic]))) * F32(scale))
                sc = F32(sc + mv)
                ms = vs = F32(1)
                if sc > top:
                    ms, top = F32(math.exp(float(top - sc))), sc
                    acc = (acc.astype(F32) * ms).astype(F16)
                else:
                    vs = F32(math.exp(float(sc - top)))
                acc = np.array([F16(F32(float(a) + float(b) * float(vs))) for a, b in zip(acc, vh[ic])], F16)
                total = F32(float(total) * float(ms) + float(vs))
            out[i, h] = acc.astype(F32) * (F32(0) if total == 0 else F32(F32(1) / total))
    return out


def test_flash_attention_over_an_f16_cache_is_ggml_cpus() -> None:
    rng = np.random.default_rng(5)
    q = rng.standard_normal((4, 3, 8)).astype(F32)
    k, v = (rng.standard_normal((2, 6, 8)).astype(F16) for _ in range(2))
    mask = K.host_input("kq_mask", np.arange(3), 2, 6)
    mask[1, 0] = -np.inf  # a hole in a row
    np.testing.assert_array_equal(KG.flash_attn_ext_f16(q, k, v, mask, 0.35), fa_one_chunk(q, k, v, mask, 0.35))
    float32 = K.flash_attn_ext(q, k.astype(F32), v.astype(F32), mask, 0.35)
    assert 1e-5 < np.abs(KG.flash_attn_ext_f16(q, k, v, mask, 0.35) - float32).max() < 1e-2


def test_a_row_that_sees_nothing_is_zero_and_64_rows_are_tiled() -> None:
    rng = np.random.default_rng(6)
    k, v = (rng.standard_normal((1, 70, 8)).astype(F16) for _ in range(2))
    q = rng.standard_normal((2, 2, 8)).astype(F32)
    mask = np.zeros((2, 70), F32)
    mask[0] = -np.inf
    np.testing.assert_array_equal(KG.flash_attn_ext_f16(q, k, v, mask, 0.3)[0], 0)
    q64 = rng.standard_normal((2, 64, 8)).astype(F32)  # 64 rows: ggml's tiled path, f32 accumulators
    mask64 = K.host_input("kq_mask", np.arange(64), 0, 70)
    np.testing.assert_array_equal(KG.flash_attn_ext_f16(q64, k, v, mask64, 0.3),
                                  K.flash_attn_ext(q64, k.astype(F32), v.astype(F32), mask64, 0.3))
