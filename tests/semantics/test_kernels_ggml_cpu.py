"""The element-wise kernels against ggml-cpu itself: rms_norm, silu, swiglu and soft_max equal
the llama.cpp build's own ops bit for bit (data/ggml_elementwise.c builds a one-op ggml graph
over numpy's arrays and computes it with libggml-cpu); rope_ggml's angles are ggml's, its
values within one ulp of ggml's cos and sin (glibc's cosf and sinf are not always the correctly
rounded values that numpy gives); and on the real SmolLM2 Q8_0 GGUF, `strata verify`'s sums
agree with llama-eval-callback's far longer than before these kernels."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from native_support import llama_cpp_dir

from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG

HARNESS = Path(__file__).resolve().parent / "data" / "ggml_elementwise.c"
NO_LLAMA = "no llama.cpp build (libggml-cpu.so; set LLAMA_CPP)"


@pytest.fixture(scope="module")
def ggml(tmp_path_factory) -> ctypes.CDLL:
    root = llama_cpp_dir()
    if root is None:
        pytest.skip(NO_LLAMA)
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc, cc)")
    lib_dir = root / "build" / "bin"
    out = tmp_path_factory.mktemp("ggml") / "ggml_elementwise.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(HARNESS), f"-I{root / 'ggml' / 'include'}",
                    f"-L{lib_dir}", "-lggml-cpu", "-lggml-base", "-lm", f"-Wl,-rpath,{lib_dir}"], check=True, timeout=120)
    return ctypes.CDLL(str(out))


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    assert a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.c_void_p)


def _rows(n: int, seed: int) -> np.ndarray:
    """9 rows of n floats at several magnitudes, with zeros and values where exp overflows."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((9, n)) * rng.choice([0.01, 1.0, 8.0, 40.0], (9, 1))).astype(np.float32)
    x[0, :min(n, 6)] = [0.0, -0.0, 90.0, -100.0, -120.0, 88.5][:min(n, 6)]
    return x


ROW_LENGTHS = [576, 1536, 37, 16, 5]  # SmolLM2's widths; leftovers past the 16-wide vectors


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_rms_norm_is_ggml_cpus(ggml, n) -> None:
    x = _rows(n, 1)
    want = np.empty_like(x)
    ggml.elementwise_rms_norm(_ptr(x), ctypes.c_long(n), ctypes.c_long(x.shape[0]), ctypes.c_float(1e-5), _ptr(want))
    np.testing.assert_array_equal(K.rms_norm(x, 1e-5), want)


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_silu_and_swiglu_are_ggml_cpus(ggml, n) -> None:
    g, u = _rows(n, 2), _rows(n, 3)
    want = np.empty_like(g)
    ggml.elementwise_silu(_ptr(g), ctypes.c_long(n), ctypes.c_long(g.shape[0]), _ptr(want))
    np.testing.assert_array_equal(K.silu(g), want)
    ggml.elementwise_swiglu(_ptr(g), _ptr(u), ctypes.c_long(n), ctypes.c_long(g.shape[0]), _ptr(want))
    np.testing.assert_array_equal(K.swiglu(g, u), want)


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_soft_max_is_ggml_cpus(ggml, n) -> None:
    x = _rows(n, 4)
    want = np.empty_like(x)
    ggml.elementwise_soft_max(_ptr(x), ctypes.c_long(n), ctypes.c_long(x.shape[0]), ctypes.c_float(0.125), _ptr(want))
    np.testing.assert_array_equal(K.soft_max(x, None, 0.125), want)


def test_vector_exp_is_ggml_v_expf_not_exp(ggml) -> None:
    """silu's exp is ggml's polynomial: on a row of 16 it differs from the correctly rounded exp
    somewhere, and ggml agrees with the polynomial."""
    x = np.linspace(-20.0, 20.0, 16 * 64, dtype=np.float32).reshape(64, 16)
    want = np.empty_like(x)
    ggml.elementwise_silu(_ptr(x), ctypes.c_long(16), ctypes.c_long(64), _ptr(want))
    exact = (x / (1.0 + np.exp(-x.astype(np.float64)).astype(np.float32))).astype(np.float32)
    assert not np.array_equal(exact, want)
    np.testing.assert_array_equal(K.silu(x), want)


def test_expf_is_the_c_librarys(ggml) -> None:
    """The leftovers' exp is glibc's expf: on 2 million values it differs from the correctly
    rounded exp about once in a thousand, and from expf at most twice (glibc's FMA build fuses
    the polynomial's float64 steps; one value in 4 million seen apart)."""
    x = np.random.default_rng(6).uniform(-100.0, 90.0, 2_000_000).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.8]
    want = np.empty_like(x)
    ggml.libm_expf(_ptr(x), ctypes.c_long(x.size), _ptr(want))
    got = K._expf_libm(x)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert np.count_nonzero(~same) <= 2, x[~same]
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.count_nonzero(exact != want) > 1000


def _ggml_rope(ggml, x: np.ndarray, pos: np.ndarray, n_dims: int, mode: int, base: float, scale: float) -> np.ndarray:
    s, h, d = x.shape
    out = np.empty_like(x)
    ggml.elementwise_rope(_ptr(x), _ptr(pos), ctypes.c_long(d), ctypes.c_long(h), ctypes.c_long(s), ctypes.c_int(n_dims),
                          ctypes.c_int(mode), ctypes.c_float(base), ctypes.c_float(scale), _ptr(out))
    return out


@pytest.mark.parametrize("mode, ggml_mode", [("norm", 0), ("neox", 2)])
@pytest.mark.parametrize("base, scale", [(10000.0, 1.0), (100000.0, 1.0), (500000.0, 0.25)])
def test_rope_ggml_is_ggml_cpus_within_cosfs_rounding(ggml, mode, ggml_mode, base, scale) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 3, 64)).astype(np.float32)
    pos = np.array([0, 1, 5, 100, 1000, 4095, 8191, 30000], np.int32)
    want = _ggml_rope(ggml, x, pos, 64, ggml_mode, base, scale)
    got = KG.rope_ggml(x, pos, 64, mode, base, scale)
    # a cos or sin one ulp (<= 6e-8) apart moves an output by up to |x| (< 6 here) times that
    assert np.abs(got - want).max() <= 4e-7, np.abs(got - want).max()
    assert np.mean(got == want) > 0.98
    # the exact angles are another rope: far from ggml's at the large positions
    assert np.abs(K.rope(x, pos, 64, mode, base, scale) - want).max() > 1e-4


def test_rope_ggml_takes_ggmls_angles(ggml) -> None:
    """Unit vectors rotate to (cos, sin) of each pair's angle: ggml's and rope_ggml's agree to the
    ulp, and to the bit but where glibc's cosf or sinf is not the correctly rounded value (about
    2 in 100 here, positions up to 30000)."""
    pos = np.arange(0, 30000, 997, dtype=np.int32)
    e = np.zeros((pos.size, 1, 64), np.float32)
    e[..., :32] = 1.0
    want = _ggml_rope(ggml, e, pos, 64, 2, 10000.0, 1.0)
    got = KG.rope_ggml(e, pos, 64, "neox", 10000.0, 1.0)
    assert np.all(np.abs(got - want) <= np.spacing(np.float32(1.0)))
    assert np.mean(got == want) > 0.97


SMOLLM2_Q8_0 = Path("/root/.cache/smollm2/variants/smollm2-Q8_0.gguf")


def test_smollm2_q8_0_agrees_with_llama_cpp_much_longer(tmp_path) -> None:
    """With llama.cpp's KV cache and flash attention, on "The capital of France is": before
    these kernels the sums left verify's tolerance (1e-3 of a tensor's magnitude) at op 38 of
    936 (an activation quantized across a rounding boundary after rms_norm's last bit); now
    past op 200."""
    root = llama_cpp_dir()
    binary = None if root is None else root / "build" / "bin" / "llama-eval-callback"
    if binary is None or not binary.is_file():
        pytest.skip("no llama.cpp binary (llama-eval-callback; set LLAMA_CPP)")
    if not SMOLLM2_Q8_0.is_file():
        pytest.skip(f"no SmolLM2 Q8_0 GGUF ({SMOLLM2_Q8_0})")
    from strata.pipeline import load_model
    from strata.verify.llamacpp import compare, parse_callback_log, strata_values

    log_path = tmp_path / "q8_0.callback.log"
    with open(log_path, "w") as log_file:
        subprocess.run([str(binary), "-m", str(SMOLLM2_Q8_0), "-p", "The capital of France is", "-n", "1", "-c", "256",
                        "-t", "1"], stdout=log_file, stderr=subprocess.STDOUT, check=True, timeout=300)
    log = parse_callback_log(log_path)
    agreed, divergence = compare(log, strata_values(load_model(SMOLLM2_Q8_0), log.tokens, ctx=256, kv_pad=256), 1e-3)
    assert agreed > 200, divergence
