"""The native kernels against numpy's reference (the gguf package's dequantizer times the
activation rounded through ggml-cpu's blocks, strata.semantics.kernels_ggml), against themselves
(threads, the portable build) and, when llama.cpp is built, against ggml-cpu's own vec_dot."""

from __future__ import annotations

import numpy as np
import pytest

from native_support import ACTIVATION, TYPES, GgmlCpu, build_once, have_compiler, llama_cpp_dir, random_weight
from strata.semantics import kernels_ggml
from strata.targets.cpu.native.loader import native_flash_attn_f16, native_get_rows, native_load, native_mul_mat, \
    native_mul_mat_ggml, native_mul_mat_id, native_mul_mat_repacked, native_set_threads

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(not have_compiler(), reason="no g++ (nor clang++, $CXX or ziglang)")

ALL_TYPES = sorted(TYPES)
EPS32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    native, portable = build_once(root), build_once(root, portable=True)
    assert native is not None and portable is not None
    return native_load(native), native_load(portable)


def dequantize(type_id: int, w: np.ndarray, k: int) -> np.ndarray:
    name = TYPES[type_id][0]
    if type_id == 0:
        return w.view(np.float32).reshape(w.shape[0], k)
    kind = getattr(gguf.GGMLQuantizationType, name.upper())
    return np.asarray(gguf.quants.dequantize(w, kind), np.float32).reshape(w.shape[0], k)


def activations(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Rows with outliers (scaled by a log-normal factor), as real activations have."""
    return (rng.standard_normal((n, k)) * np.exp(rng.standard_normal((n, k)))).astype(np.float32)


def reference(type_id: int, w: np.ndarray, k: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, sum |w| |x|) in float64: the dequantized weight times x through the type's activation blocks."""
    name, block, nbytes, _ = TYPES[type_id]
    deq = dequantize(type_id, w, k).astype(np.float64)
    kind = ACTIVATION.get(type_id, "q8_K" if block == 256 else None)
    if kind == "q8_1":
        # q * d apart from the blocks' m: the same blocks with m zeroed, dequantized (exact)
        raw = w.reshape(w.shape[0], -1, nbytes).copy()
        m = raw[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
        raw[:, :, 2:4] = 0
        wq = dequantize(type_id, raw.reshape(w.shape), k)
        values, s = kernels_ggml.quantize_rows_q8_1(x)
        y = kernels_ggml.mul_mat_q8_1(wq, m, x).astype(np.float64)
        scale = np.abs(values).astype(np.float64) @ np.abs(wq.astype(np.float64)).T + np.abs(s) @ np.abs(m).T
        return y, scale
    if kind is None:  # float types: x rounded to the weight's type
        xr = x.astype(np.float64)
        if type_id == 1:
            xr = x.astype(np.float16).astype(np.float64)
        elif type_id == 30:
            xr = dequantize(30, random_bf16(x), k).astype(np.float64)
    else:
        xr = kernels_ggml.quantize_activation(x, kind).astype(np.float64)
    return xr @ deq.T, np.abs(xr) @ np.abs(deq).T


def random_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (nearest even), as uint8 bytes."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.uint8).reshape(x.shape[0], -1)


@pytest.mark.parametrize("type_id", ALL_TYPES, ids=[TYPES[t][0] for t in ALL_TYPES])
def test_mul_mat_matches_the_numpy_reference(libs, type_id):
    """Agreement to float32 summation-order rounding. The float sums differ from float64's only by
    rounding: each of the longest chain of dependent float32 operations (a lane's fused adds, one
    per block or per 64 values, the 8-to-1 reduction, the scale products and the dequantizer's
    roundings: at most chain + 8 of them) adds at most one unit roundoff of sum |w| |x|."""
    rng = np.random.default_rng(type_id)
    block = TYPES[type_id][1]
    rows, k, n = 16, 512, 3
    w = random_weight(type_id, rows, k, rng)
    x = activations(rng, n, k)
    y = native_mul_mat(libs[0], type_id, w, rows, k, w.shape[1], x)
    ref, scale = reference(type_id, w, k, x)
    chain = k // max(block, 64) + 8
    np.testing.assert_array_less(np.abs(y - ref), chain * EPS32 * scale + 1e-30)


@pytest.mark.parametrize("type_id", ALL_TYPES, ids=[TYPES[t][0] for t in ALL_TYPES])
def test_threads_portable_build_and_gemm_agree_bit_for_bit(libs, type_id):
    """1, 2 and 3 threads, the portable build (no AVX2) and n GEMVs give the same bits as one GEMM."""
    rng = np.random.default_rng(100 + type_id)
    block = TYPES[type_id][1]
    rows, k, n = 37, 768 if block != 256 else 512, 5
    w = random_weight(type_id, rows, k, rng)
    x = activations(rng, n, k)
    native, portable = libs
    outs = []
    for threads in (1, 2, 3):
        native_set_threads(native, threads)
        outs.append(native_mul_mat(native, type_id, w, rows, k, w.shape[1], x))
    native_set_threads(portable, 2)
    outs.append(native_mul_mat(portable, type_id, w, rows, k, w.shape[1], x))
    outs.append(np.stack([native_mul_mat(native, type_id, w, rows, k, w.shape[1], x[i:i + 1])[0] for i in range(n)]))
    for other in outs[1:]:
        assert np.array_equal(outs[0].view(np.uint32), other.view(np.uint32))
    ggml_order = []  # tinyBLAS's order where it applies: the same on every thread count and build
    for lib, threads in ((native, 1), (native, 3), (portable, 2)):
        native_set_threads(lib, threads)
        ggml_order.append(native_mul_mat_ggml(lib, type_id, w, rows, k, w.shape[1], x))
    for other in ggml_order[1:]:
        assert np.array_equal(ggml_order[0].view(np.uint32), other.view(np.uint32))


@pytest.mark.skipif(llama_cpp_dir() is None, reason="no llama.cpp build (libggml-cpu.so; set LLAMA_CPP)")
@pytest.mark.parametrize("type_id", ALL_TYPES, ids=[TYPES[t][0] for t in ALL_TYPES])
def test_mul_mat_equals_ggml_cpu_bit_for_bit(libs, type_id):
    """ggml-cpu's from_float + vec_dot (the oracle's build, this machine's instruction set) on the
    same bytes: every output bit-equal, native and portable, at sizes with leftover blocks."""
    ggml = GgmlCpu(llama_cpp_dir())
    rng = np.random.default_rng(200 + type_id)
    block = TYPES[type_id][1]
    for k in ((256, 1280) if block == 256 else (96, 608, 1000) if block == 1 else (96, 608)):
        w = random_weight(type_id, 9, k, rng)
        x = activations(rng, 2, k)
        ref = ggml.mul_mat(type_id, w, k, x)
        for lib in libs:
            got = native_mul_mat(lib, type_id, w, 9, k, w.shape[1], x)
            assert np.array_equal(ref.view(np.uint32), got.view(np.uint32)), (TYPES[type_id][0], k)


@pytest.mark.parametrize("type_id", ALL_TYPES, ids=[TYPES[t][0] for t in ALL_TYPES])
def test_get_rows_equals_the_dequantizer(libs, type_id):
    rng = np.random.default_rng(300 + type_id)
    rows, k = 7, 512
    w = random_weight(type_id, rows, k, rng)
    ids = np.array([6, 0, 3, 3], np.int32)
    out = native_get_rows(libs[0], type_id, w, rows, k, w.shape[1], ids)
    assert np.array_equal(out.view(np.uint32), dequantize(type_id, w, k)[ids].view(np.uint32))


def test_mul_mat_id_is_the_numpy_mul_mat_id(libs):
    """Expert slots: each is the expert's GEMV of its activation row (x [T, U, K] or [T, 1, K])."""
    rng = np.random.default_rng(7)
    experts, rows, k, t, used = 4, 24, 256, 3, 2
    w = random_weight(12, experts * rows, k, rng)  # Q4_K experts, one after another
    rb = w.shape[1]
    ids = np.array([[1, 3], [0, 1], [3, 3]], np.int32)
    for nb in (used, 1):
        x = activations(rng, t * nb, k).reshape(t, nb, k)
        y = native_mul_mat_id(libs[0], 12, w, experts, rows, k, rb, x, ids)
        yr = native_mul_mat_id(libs[0], 12, w, experts, rows, k, rb, x, ids, repacked=True)
        for ti in range(t):
            for j in range(used):
                e = int(ids[ti, j])
                one = native_mul_mat(libs[0], 12, w[e * rows:(e + 1) * rows], rows, k, rb, x[ti, j % nb][None])[0]
                assert np.array_equal(y[ti, j], one)
                # ggml's MUL_MAT_ID on repacked experts: one repacked GEMV per slot
                expert = w[e * rows:(e + 1) * rows]
                one = native_mul_mat_repacked(libs[0], 12, expert, rows, k, rb, x[ti, j % nb][None])[0]
                assert np.array_equal(yr[ti, j], one)


@pytest.mark.parametrize("s", [1, 5, 63])
def test_flash_attn_f16_equals_kernels_ggml_bit_for_bit(libs, s):
    rng = np.random.default_rng(s)
    hq, hkv, n, d = 4, 2, 40, 32
    q = rng.standard_normal((hq, s, d)).astype(np.float32)
    k = rng.standard_normal((hkv, n, d)).astype(np.float16)
    v = rng.standard_normal((hkv, n, d)).astype(np.float16)
    mask = np.where(np.arange(n)[None, :] <= (n - s + np.arange(s))[:, None], 0.0, -np.inf).astype(np.float32)
    mask[:, 30:] = -np.inf  # positions no row sees (not written yet)
    for m in (mask, None):
        ref = kernels_ggml.flash_attn_ext_f16(q, k, v, m, 1 / np.sqrt(d))
        for lib in libs:
            got = native_flash_attn_f16(lib, q, k, v, m, 1 / np.sqrt(d))
            assert np.array_equal(ref.view(np.uint32), got.view(np.uint32))


def test_flash_attn_f16_tiled_path_is_float32_attention(libs):
    """64 rows or more: float32 attention over the float16 cache. numpy's reference sums through
    BLAS in an order of its own, so the agreement is to float32 rounding (1e-5 relative)."""
    rng = np.random.default_rng(64)
    hq, hkv, s, d = 2, 1, 64, 16
    q = rng.standard_normal((hq, s, d)).astype(np.float32)
    k = rng.standard_normal((hkv, s, d)).astype(np.float16)
    v = rng.standard_normal((hkv, s, d)).astype(np.float16)
    mask = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    ref = kernels_ggml.flash_attn_ext_f16(q, k, v, mask, 0.25)
    got = native_flash_attn_f16(libs[0], q, k, v, mask, 0.25)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_bad_arguments_return_non_zero_and_write_nothing(libs):
    lib = libs[0]
    rng = np.random.default_rng(1)
    w = random_weight(2, 4, 64, rng)
    x = np.ones((1, 64), np.float32)
    y = np.full(4, 7.0, np.float32)
    wp, xp, yp = w.ctypes.data, x.ctypes.data, y.ctypes.data
    assert lib.strata_mul_mat(9, wp, 4, 64, 36, xp, 1, yp) != 0  # Q8_1 is not a weight type here
    assert lib.strata_mul_mat(4, wp, 4, 64, 36, xp, 1, yp) != 0  # a removed type id
    assert lib.strata_mul_mat(2, wp, 4, 48, 36, xp, 1, yp) != 0  # k not a multiple of 32
    assert lib.strata_mul_mat(2, wp, 4, 64, 35, xp, 1, yp) != 0  # rows shorter than two blocks
    assert lib.strata_mul_mat(2, wp, -1, 64, 36, xp, 1, yp) != 0
    assert lib.strata_mul_mat(2, None, 4, 64, 36, xp, 1, yp) != 0
    assert lib.strata_mul_mat(12, wp, 1, 64, 144, xp, 1, yp) != 0  # K types need multiples of 256
    ids = np.array([0, 4], np.int32)
    out = np.full((2, 64), 7.0, np.float32)
    assert lib.strata_get_rows(2, wp, 4, 64, 36, ids.ctypes.data, 2, out.ctypes.data) != 0
    assert lib.strata_get_rows(2, wp, 4, 64, 36, np.array([-1], np.int32).ctypes.data, 1, out.ctypes.data) != 0
    bad = np.array([[0, 2]], np.int32)
    assert lib.strata_mul_mat_id(2, wp, 2, 2, 64, 36, xp, 1, bad.ctypes.data, 2, out.ctypes.data) != 0
    assert lib.strata_flash_attn_f16(xp, 3, 1, 64, wp, wp, 2, 1, 64, None, 1.0, out.ctypes.data) != 0  # 3 % 2
    assert lib.strata_set_threads(0) != 0
    assert np.all(y == 7.0) and np.all(out == 7.0)
    with pytest.raises(ValueError, match="strata_mul_mat"):
        native_mul_mat(lib, 3, w, 4, 64, 36, x)


@pytest.mark.skipif(llama_cpp_dir() is None, reason="no llama.cpp build (libggml-cpu.so; set LLAMA_CPP)")
def test_numpy_q8_1_blocks_equal_ggml_cpu():
    """kernels_ggml.quantize_rows_q8_1 against ggml-cpu's quantize_row_q8_1 (its d, s and quants)."""
    import ctypes

    ggml = GgmlCpu(llama_cpp_dir())
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        ggml.lib.ggml_get_type_traits_cpu(9).contents.from_float)
    x = activations(np.random.default_rng(9), 1, 4096)[0]
    raw = np.zeros((128, 36), np.uint8)
    from_float(x.ctypes.data, raw.ctypes.data, 4096)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)[:, 0]
    s = raw[:, 2:4].copy().view(np.float16).astype(np.float32)[:, 0]
    q = raw[:, 4:].view(np.int8).astype(np.float32)
    values, sums = kernels_ggml.quantize_rows_q8_1(x)
    assert np.array_equal(values.reshape(128, 32), (q * d[:, None]).astype(np.float32))
    assert np.array_equal(sums, s)


@pytest.mark.parametrize("type_id", [2, 20, 12], ids=["q4_0", "iq4_nl", "q4_K"])
def test_repacked_order_threads_and_portable_build_agree(libs, type_id):
    rng = np.random.default_rng(400 + type_id)
    w = random_weight(type_id, 24, 512, rng)
    x = activations(rng, 5, 512)
    native, portable = libs
    outs = []
    for threads in (1, 3):
        native_set_threads(native, threads)
        outs.append(native_mul_mat_repacked(native, type_id, w, 24, 512, w.shape[1], x))
    outs.append(native_mul_mat_repacked(portable, type_id, w, 24, 512, w.shape[1], x))
    for other in outs[1:]:
        assert np.array_equal(outs[0].view(np.uint32), other.view(np.uint32))
    ref, scale = reference(type_id, w, 512, x)
    np.testing.assert_array_less(np.abs(outs[0] - ref), (512 // 32 + 8) * EPS32 * scale + 1e-30)
    with pytest.raises(ValueError, match="repacked"):
        native_mul_mat_repacked(native, 3, random_weight(3, 8, 512, rng), 8, 512, 320, x)


@pytest.mark.skipif(llama_cpp_dir() is None, reason="no llama.cpp build (libggml-cpu.so; set LLAMA_CPP)")
@pytest.mark.parametrize("type_id", [2, 20, 12], ids=["q4_0", "iq4_nl", "q4_K"])
def test_repacked_order_equals_ggml_cpu_repack_kernels(libs, type_id):
    """llama.cpp's CPU_REPACK path on x86 (the weight interleaved 8 rows at a time; its GEMM on 4
    activation rows at a time, its GEMV on the rest; 24 rows: Q4_K's GEMM takes 16 columns with
    AVX-512 and the last 8 with AVX2): bit for bit, and not vec_dot's numbers."""
    ggml = GgmlCpu(llama_cpp_dir())
    rng = np.random.default_rng(500 + type_id)
    for rows in (16, 24):
        w = random_weight(type_id, rows, 768, rng)
        x = activations(rng, 6, 768)
        ref = ggml.mul_mat_repacked_q4_K(w, 768, x) if type_id == 12 else ggml.mul_mat_repacked(type_id, w, 768, x)
        for lib in libs:
            got = native_mul_mat_repacked(lib, type_id, w, rows, 768, w.shape[1], x)
            assert np.array_equal(ref.view(np.uint32), got.view(np.uint32))
        assert not np.array_equal(ref, ggml.mul_mat(type_id, w, 768, x))


SGEMM_TYPES = [0, 1, 30, 20, 8, 2, 6]


@pytest.mark.skipif(llama_cpp_dir() is None, reason="no llama.cpp build (libggml-cpu.so; set LLAMA_CPP)")
@pytest.mark.parametrize("type_id", SGEMM_TYPES, ids=[TYPES[t][0] for t in SGEMM_TYPES])
def test_mul_mat_ggml_equals_llamafile_sgemm(libs, type_id):
    """Two or more activation rows on a weight ggml does not repack: llamafile's tinyBLAS, bit for
    bit (for Q8_0, Q4_0 and Q5_0 that is vec_dot's order; for the others it is not); one row:
    vec_dot."""
    ggml = GgmlCpu(llama_cpp_dir())
    rng = np.random.default_rng(600 + type_id)
    w = random_weight(type_id, 16, 512, rng)
    x = activations(rng, 3, 512)
    ref = ggml.sgemm(type_id, w, 512, x)
    for lib in libs:
        got = native_mul_mat_ggml(lib, type_id, w, 16, 512, w.shape[1], x)
        assert np.array_equal(ref.view(np.uint32), got.view(np.uint32))
        one = native_mul_mat_ggml(lib, type_id, w, 16, 512, w.shape[1], x[:1])
        assert np.array_equal(one.view(np.uint32), ggml.mul_mat(type_id, w, 512, x[:1]).view(np.uint32))
    assert np.array_equal(ref, ggml.mul_mat(type_id, w, 512, x)) == (type_id in (8, 2, 6))


def test_half_precision_conversions_are_exact_in_both_builds(libs):
    """Every float16 bit pattern read (get_rows), and float32 activations rounded to float16 (an
    F16 identity weight gives them back), subnormals, overflow and ties included, as numpy does."""
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    finite = every[np.isfinite(every.view(np.float16))]
    k = 64
    rows = finite[: finite.size // k * k].reshape(-1, k)
    identity = np.eye(k, dtype=np.float16).view(np.uint8).reshape(k, 2 * k)
    rng = np.random.default_rng(5)
    lo = rng.choice(finite[np.abs(finite.view(np.float16)) < 60000], k * 2).view(np.float16)
    up = np.nextafter(lo, np.where(lo < 0, -np.inf, np.inf).astype(np.float16))  # the next float16 away from 0
    ties = (lo.astype(np.float64) + up.astype(np.float64)) / 2
    x = np.concatenate([
        rng.standard_normal(k * 4) * 10.0 ** rng.integers(-9, 5, k * 4),  # subnormal to overflowing
        ties,                                                             # halfway: to even
    ]).astype(np.float32)
    x = x[np.abs(x) < 65504][: k * 4].reshape(-1, k)
    for lib in libs:
        every_row = np.arange(rows.shape[0], dtype=np.int32)
        got = native_get_rows(lib, 1, rows.view(np.uint8), rows.shape[0], k, 2 * k, every_row)
        assert np.array_equal(got, rows.view(np.float16).astype(np.float32))
        y = native_mul_mat(lib, 1, identity, k, k, 2 * k, x)
        # equal as floats: a sum of products gives +0 where float16(x) is -0
        assert np.array_equal(y, x.astype(np.float16).astype(np.float32))
