"""The GGUF frontend (strata/frontends/gguf.py) against llama.cpp's own converter.

tests/frontends/data holds tiny GGUFs made by llama.cpp's convert_hf_to_gguf.py (F32 and Q8_0,
every family; make_gguf.py there regenerates them) from random HF checkpoints, whose configs and
seeds are in fixtures.json: each test rebuilds the checkpoint (strata's random writer depends only
on config and seed) and checks that the GGUF gives

* the same config (its metadata) and, in F32, the checkpoint's tensors (every change the converter
  made undone: llama's q/k permutation, 1 + w norms, -exp(A_log), the squeezed conv1d, the tiled
  value heads, Qwen3-Next's split in_proj_qkvz);
* through the CPU target, F32: the HF directory's 32 greedy ids, logits within 1e-4; Q8_0: top-1
  agreement on at least 30 of 32 steps, teacher-forced on the HF ids;
* Q4_0 (llama.cpp's llama-quantize of the F32 file): each block decoded as the format says;
* bad files: one line naming the file and what is wrong, exit 1.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from support import run_tool

from strata.frontends.gguf import GgufError, GgufFile
from strata.ir.text import print_ir
from strata.passes.pipelines import lowered
from strata.models import save_random_checkpoint
from strata.pipeline import compile_model, load_model
from strata.targets.cpu.program import load_compiled
from support import cpu_generate

gguf = pytest.importorskip("gguf")

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = json.loads((DATA / "fixtures.json").read_text())
FAMILIES = sorted(FIXTURES)
PROMPT = FIXTURES["llama"]["prompt"]  # "hello" in tok.py's byte-level vocabulary, then two more ids
STEPS = FIXTURES["llama"]["steps"]
CTX = 64


@dataclasses.dataclass
class Case:
    family: str
    hf: object  # the HF directory's Model
    compiled: object  # the generated module, compiled once from the HF model
    hf_ids: list[int]
    hf_logits: np.ndarray


def hf_checkpoint(family: str, directory: Path) -> Path:
    fx = FIXTURES[family]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(fx["config"]))
    cfg = load_model(directory).config
    return save_random_checkpoint(cfg, directory, seed=fx["seed"], std=fx["std"])


def gguf_path(family: str, kind: str) -> Path:
    return DATA / f"{family}-{kind}.gguf"


def generate(instance, prompt, steps, feed=None):
    """Greedy steps of a compiled Model instance (the runtime's loop): (ids, logits [steps, vocab])."""
    return cpu_generate(instance, None, prompt, steps, feed=feed)


@pytest.fixture(scope="module", params=FAMILIES)
def case(request, tmp_path_factory) -> Case:
    family = request.param
    root = tmp_path_factory.mktemp(f"gguf-{family}")
    model = load_model(hf_checkpoint(family, root / family))
    compiled = load_compiled(compile_model(model, "cpu", root / "out", {"ctx": CTX}))
    ids, logits = generate(compiled.Model(model.open_weights(quiet=True)), PROMPT, STEPS)
    assert len(set(ids)) >= 8, f"{family}: degenerate greedy ids {ids}"  # see make_gguf.py's pick_seed
    return Case(family, model, compiled, ids, logits)


@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_metadata_gives_the_config(case: Case, kind: str) -> None:
    g = load_model(gguf_path(case.family, kind))
    assert g.config.name == f"{case.family}-{kind}"
    ours, theirs = dataclasses.replace(g.config, name=case.hf.config.name), case.hf.config
    if getattr(theirs, "rope_scaling", None) is not None:
        # GGUF keeps llama3 scaling as its factors (rope_freqs): the fitted parameters give them
        from strata.passes.convert_module_to_op.attention import llama3_freq_factors

        def factors(c):
            return llama3_freq_factors(c.rope_theta, c.head_dim, dataclasses.asdict(c.rope_scaling))

        assert ours.rope_scaling is not None
        np.testing.assert_allclose(factors(ours), factors(theirs), rtol=1e-6)
        ours, theirs = (dataclasses.replace(c, rope_scaling=None) for c in (ours, theirs))
    if getattr(theirs, "mrope_section", ()):
        # llama.cpp gives M-RoPE's fourth stream position 0 for text (HF: the position)
        assert (ours.mrope_extra_stream, theirs.mrope_extra_stream) == ("zero", "position")
        ours = dataclasses.replace(ours, mrope_extra_stream="position")
    assert ours == theirs


def test_f32_tensors_are_the_checkpoints(case: Case) -> None:
    """Every param, with the converter's changes undone, is the checkpoint's: bit for bit, but
    for w = (1 + w) - 1 and A_log = log(exp(A_log)), within f32 rounding."""
    theirs = load_model(gguf_path(case.family, "f32")).open_weights()
    ours = case.hf.open_weights(quiet=True)
    for name in case.hf.params():
        a, b = theirs.get(name), ours.get(name)
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-7, err_msg=name)


def test_f32_generates_as_the_checkpoint(case: Case) -> None:
    store = load_model(gguf_path(case.family, "f32")).open_weights()
    ids, logits = generate(case.compiled.Model(store), PROMPT, STEPS)
    diff = float(np.abs(logits.astype(np.float64) - case.hf_logits).max())
    print(f"{case.family} f32: {STEPS} greedy ids equal: {ids == case.hf_ids}, max |logits diff| {diff:.2e}")
    assert ids == case.hf_ids
    assert diff <= 1e-4


def test_q8_0_tensors_are_the_checkpoints_rounded(case: Case) -> None:
    """Each Q8_0 tensor, read back, is the checkpoint's rounded to Q8_0 by the gguf package (the
    converter's quantizer): the reader adds no error of its own. (Rounding commutes with what
    the store undoes here: row permutations, and a column permutation within one 32-block.)"""
    store = load_model(gguf_path(case.family, "q8_0")).open_weights()
    assert check_rounded(store, case.hf.open_weights(quiet=True), case.hf.params()) >= 8


def check_rounded(store, ours, names) -> int:
    """Check each tensor of `store` against `ours` rounded to its stored block type; returns
    how many were block-quantized."""
    quantized = 0
    for name in names:
        types = {store.g.tensors[s].tensor_type for s in store.sources(name)}
        want = np.asarray(ours.get(name), dtype=np.float32)
        kind = types.pop() if len(types) == 1 else None
        if kind is not None and kind.name in ("Q8_0", "Q4_0"):
            want = gguf.quants.dequantize(gguf.quants.quantize(want, kind), kind).reshape(want.shape)
            np.testing.assert_array_equal(store.get(name), want, err_msg=name)
            quantized += 1
        else:
            np.testing.assert_allclose(store.get(name), want, rtol=0, atol=2e-7, err_msg=name)
    return quantized


def test_q8_0_top1_agrees(case: Case) -> None:
    store = load_model(gguf_path(case.family, "q8_0")).open_weights()
    instance = case.compiled.Model(store)
    forced, _ = generate(instance, PROMPT, STEPS, feed=case.hf_ids)
    free, _ = generate(case.compiled.Model(store), PROMPT, STEPS)
    agree = sum(a == b for a, b in zip(forced, case.hf_ids))
    same_prefix = next((i for i, (a, b) in enumerate(zip(free, case.hf_ids)) if a != b), STEPS)
    print(f"{case.family} q8_0: top-1 agrees on {agree}/{STEPS} steps teacher-forced; "
          f"free-running equal for {same_prefix}/{STEPS}")
    assert agree >= 30


@pytest.mark.parametrize("shape", [(32, 12), (32,)])
def test_rope_permutation_is_undone(shape) -> None:
    """llama.cpp's LlamaModel.permute (conversion/llama.py), as it permutes q/k weights and
    biases, is undone (the fixtures have no biases: this covers them)."""
    from strata.frontends.gguf import _unpermute_rope

    def permute(w, n_head):  # llama.cpp's, in numpy
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for heads in (1, 2, 4):
        np.testing.assert_array_equal(_unpermute_rope(permute(w, heads), heads), w)
        assert not np.array_equal(permute(w, heads), w)


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_block_formats_are_blueprint_precisions(tmp_path, kind: str) -> None:
    """The recipes q8_0 / q4_0 give the weights the formats int8/block32 / int4/block32 (ggml's
    Q8_0 / Q4_0, strata.ir.ggml_blocks): on a GGUF of that type they round nothing, every
    blueprint edge is the f32 recipe's exactly (the format describes the file's weights), while
    on the f32 checkpoint they do round."""
    from strata.ir.text import print_ir
    from strata.pipeline import blueprint_of
    from strata.verify.blueprint import node_errors

    fmt = {"q8_0": "#blueprint.format<int8, block = [32]>", "q4_0": "#blueprint.format<int4, block = [32]>"}[kind]
    families = [f for f in FAMILIES if gguf_path(f, kind).is_file()]
    assert families
    for family in families:
        model = load_model(gguf_path(family, kind))
        assert fmt in print_ir(blueprint_of(model, "decode", 1, kind)), family
        rows = node_errors(model, kind, PROMPT, model.open_weights())
        assert rows and max(r.max_abs for r in rows) == 0.0, family
    hf = load_model(hf_checkpoint("llama", tmp_path / "hf"))
    assert max(r.max_abs for r in node_errors(hf, kind, PROMPT, hf.open_weights(quiet=True))) > 1e-3


# ---------------------------------------------------------------------------------------------
# F16 and BF16


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_half_types(tmp_path, kind: str) -> None:
    """An F16 / BF16 file (llama.cpp's --outtype f16 / bf16) is a model of that type whose
    tensors are the checkpoint's rounded to the stored type, the 2-D ones read as views."""
    import ml_dtypes

    half = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[kind]
    model = load_model(gguf_path("llama", kind))
    assert model.config.dtype == {"f16": "float16", "bf16": "bfloat16"}[kind]
    hf = load_model(hf_checkpoint("llama", tmp_path / "hf")).open_weights(quiet=True)
    store = model.open_weights()
    views = 0
    for name in model.params():
        stored = model.gguf.tensors[store.stored_name(name)].tensor_type.name
        want = hf.get(name).astype(half if stored == kind.upper() else np.float32)
        got = store.get(name)
        views += got.dtype == half
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=name)
    assert views >= 10  # every weight matrix but the permuted attn_q / attn_k
    compiled = load_compiled(compile_model(model, "cpu", tmp_path / "out", {"ctx": CTX}))
    fx = FIXTURES["llama"]
    ids = generate(load_compiled(compile_model(load_model(tmp_path / "hf"), "cpu", tmp_path / "hf-out",
                                               {"ctx": CTX})).Model(hf), PROMPT, STEPS)[0]
    forced, _ = generate(compiled.Model(store), PROMPT, STEPS, feed=ids)
    agree = sum(a == b for a, b in zip(forced, ids))
    print(f"llama {kind}: top-1 agrees with the f32 checkpoint on {agree}/{STEPS} steps teacher-forced ({fx['seed']})")
    assert agree >= 30


# ---------------------------------------------------------------------------------------------
# Q4_0


def decode_q4_0(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 as ggml defines it: per 32 values, an f16 scale d and 16 bytes of 4-bit codes q (the
    low nibbles are values 0..15, the high ones 16..31); the value is (q - 8) * d."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(rows, cols // 32, 18)
    d = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # [rows, nb, 1]
    q = blocks[..., 2:]
    codes = np.concatenate([q & 0x0F, q >> 4], axis=-1).astype(np.float32)  # [rows, nb, 32]
    return ((codes - 8) * d).reshape(rows, cols)


def test_q4_0_blocks_are_decoded_as_the_format_says() -> None:
    q4 = GgufFile(gguf_path("llama", "q4_0"))
    f32 = GgufFile(gguf_path("llama", "f32"))
    checked = 0
    for name, t in q4.tensors.items():
        if t.tensor_type.name != "Q4_0":
            continue
        rows, cols = q4.shape(name)
        ours = q4.load(name)
        assert ours.dtype == np.float32 and ours.shape == (rows, cols)
        np.testing.assert_array_equal(ours, decode_q4_0(t.data, rows, cols), err_msg=name)
        # and it is the F32 tensor to within a step of its block's scale
        scale = np.abs(np.asarray(t.data, dtype=np.uint8).reshape(rows, cols // 32, 18)[..., :2].copy()
                       .view(np.float16).astype(np.float32))
        err = np.abs(ours - f32.load(name)).reshape(rows, cols // 32, 32)
        assert (err <= scale + 1e-7).all(), name
        checked += 1
    assert checked >= 10


def test_q4_0_runs(tmp_path) -> None:
    """llama-quantize's Q4_0 of the llama fixture: each tensor is the checkpoint's rounded by
    the gguf package's Q4_0 (or Q8_0, output.weight), and it runs; its top-1 agreement with the
    checkpoint is measured, not claimed (4-bit rounding of a random tiny model)."""
    model = load_model(gguf_path("llama", "q4_0"))
    assert model.config.dtype == "float32"
    hf = load_model(hf_checkpoint("llama", tmp_path / "hf"))
    compiled = load_compiled(compile_model(model, "cpu", tmp_path / "out", {"ctx": CTX}))
    want, _ = generate(compiled.Model(hf.open_weights(quiet=True)), PROMPT, STEPS)
    store = model.open_weights()
    assert check_rounded(store, hf.open_weights(quiet=True), hf.params()) >= 10
    forced, logits = generate(compiled.Model(store), PROMPT, STEPS, feed=want)
    assert np.isfinite(logits).all()
    print(f"llama q4_0: top-1 agrees on {sum(a == b for a, b in zip(forced, want))}/{STEPS} steps teacher-forced")


def test_q6_k_is_read(tmp_path) -> None:
    """Q6_K (llama-quantize's type for a Q4_0 file's output tensor) is read row by row in its
    order: random blocks (the gguf package has no Q6_K quantizer), each row's own scale d."""
    rows, cols = 3, 512
    Q6_K = gguf.GGMLQuantizationType.Q6_K
    block_size, type_size = gguf.GGML_QUANT_SIZES[Q6_K]
    raw = np.random.default_rng(0).integers(0, 256, (rows, cols // block_size, type_size), dtype=np.uint8)
    raw[..., -2:] = np.array([[i + 1] for i in range(rows)], dtype=np.float16).view(np.uint8)[:, None, :]
    raw = raw.reshape(rows, -1)
    writer = gguf.GGUFWriter(tmp_path / "q6.gguf", "llama")
    writer.add_tensor("output.weight", raw, raw_dtype=Q6_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    g = GgufFile(tmp_path / "q6.gguf")
    got = g.load("output.weight")
    assert got.shape == (rows, cols) and got.dtype == np.float32 and g.dtype_name("output.weight") == "f32"
    for i in range(rows):
        np.testing.assert_array_equal(got[i], gguf.quants.dequantize(raw[i:i + 1], Q6_K).reshape(-1))
    assert np.abs(got[2]).max() > np.abs(got[0]).max()


# ---------------------------------------------------------------------------------------------
# The CLI and bad input


def test_cli_runs_a_gguf(tmp_path) -> None:
    src = gguf_path("llama", "f32")
    model = load_model(hf_checkpoint("llama", tmp_path / "hf"))
    compiled = load_compiled(compile_model(model, "cpu", tmp_path / "out", {"ctx": CTX}))
    want, _ = generate(compiled.Model(model.open_weights(quiet=True)), PROMPT, 6)
    r = run_tool("run", str(src), "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "6",
                 "--ctx", str(CTX), "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "ids=" + ",".join(map(str, want))
    for args in (["inspect"], ["ir", "--level", "op", "--entry", "decode", "--ctx", "64"],
                 ["trace", "--entry", "prefill", "--tokens", "3", "--ctx", "64"]):
        r = run_tool(args[0], str(src), *args[1:])
        assert r.returncode == 0 and r.stdout and not r.stderr, (args, r.stderr)
    out = tmp_path / "compiled"
    r = run_tool("compile", str(gguf_path("qwen35", "q8_0")), "--ctx", "64", "-o", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["config"]["file"] == "qwen35-q8_0.gguf"


def rewrite(src: Path, dst: Path, arch: str | None = None, qtype=None, change=None, fields=None, add=None) -> Path:
    """`src` written again by the gguf package: under architecture `arch`, or with its 2-D
    weights in `qtype`, or with the tensors of `change` (name -> array) replaced, the metadata of
    `fields` (key -> (value, type[, sub_type])) set, the tensors of `add` added."""
    r = gguf.GGUFReader(src)
    old_arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch or old_arch)
    fields = dict(fields or {})
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        new_key = key.replace(f"{old_arch}.", f"{arch}.", 1) if arch else key
        if key in fields:
            value, *types = fields.pop(key)
            w.add_key_value(new_key, value, types[0], **({"sub_type": types[1]} if len(types) > 1 else {}))
        elif field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(new_key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(new_key, field.contents(), field.types[0])
    for t in r.tensors:
        data = np.array((change or {}).get(t.name, t.data))
        if qtype is not None and data.ndim == 2 and data.shape[-1] % 32 == 0:
            w.add_tensor(t.name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(t.name, data)
    for key, (value, *types) in fields.items():
        w.add_key_value(key, value, types[0], **({"sub_type": types[1]} if len(types) > 1 else {}))
    for name, data in (add or {}).items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def one_line_error(path: Path, *needles: str) -> None:
    with pytest.raises(GgufError) as e:
        load_model(path).open_weights()
    text = str(e.value)
    assert "\n" not in text and str(path) in text, text
    for needle in needles:
        assert needle in text, text
    r = run_tool("run", str(path), "--prompt-ids", "1", "--max-new-tokens", "1", "--ctx", "16",
                 "--cache-dir", str(path.parent / "cache"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"strata: error: {text}", r.stderr


@pytest.mark.parametrize("keep", [3, 100, 2000, -1000, -10])
def test_truncated_file(tmp_path, keep: int) -> None:
    """Cut in the magic, the metadata, the tensor infos, the data, the last tensor's last block."""
    raw = gguf_path("llama", "q8_0").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(raw[:keep])
    one_line_error(path, "truncated")


def test_unknown_architecture(tmp_path) -> None:
    one_line_error(rewrite(gguf_path("llama", "f32"), tmp_path / "x.gguf", arch="mamba"),
                   "unknown GGUF architecture 'mamba'")


def test_every_type_the_gguf_package_dequantizes_is_read(tmp_path) -> None:
    """Q5_0 (not a type Strata emulates at the blueprint level) is read as the gguf package
    dequantizes it, and the op level knows what llama.cpp multiplies: a q5_0 weight, Q8_0 rows."""
    q5 = gguf.GGMLQuantizationType.Q5_0
    path = rewrite(gguf_path("llama", "f32"), tmp_path / "q5.gguf", qtype=q5)
    model = load_model(path)
    store = model.open_weights()
    raw = {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}
    np.testing.assert_array_equal(store.get("blk.0.attn_v.weight"),
                                  gguf.quants.dequantize(raw["blk.0.attn_v.weight"], q5).reshape(16, 32))
    text = print_ir(lowered(model.module, "convert-module-to-op{entry=decode ctx=64}"))
    assert 'op.param "blk.0.attn_v.weight" {format = "q5_0", op.block = ' in text
    assert re.search(r'op.mul_mat %blk.0.attn_v.weight, %\S+ \{act = "q8_0"', text), text


def test_a_type_the_gguf_package_cannot_dequantize(tmp_path) -> None:
    """Q1_0 has a block size in the gguf package but no dequantizer: one line, naming it."""
    q1 = gguf.GGMLQuantizationType.Q1_0
    size = gguf.GGML_QUANT_SIZES[q1][1]
    r = gguf.GGUFReader(gguf_path("llama", "f32"))
    w = gguf.GGUFWriter(tmp_path / "q1b.gguf", r.fields["general.architecture"].contents())
    for key, field in r.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            sub = {"sub_type": field.types[-1]} if field.types[0] == gguf.GGUFValueType.ARRAY else {}
            w.add_key_value(key, field.contents(), field.types[0], **sub)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.add_tensor("extra.weight", np.zeros((4, size), np.uint8), raw_dtype=q1)  # 4 rows of one block
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    one_line_error(tmp_path / "q1b.gguf", "tensor 'extra.weight' has type Q1_0, which the gguf package cannot "
                                          "dequantize (strata reads F32, F16, BF16 and Q4_0,", "Q4_K")


def test_mtp_layers_are_not_the_language_model(tmp_path, capsys) -> None:
    """A hybrid converted with its multi-token-prediction layer: block_count counts it,
    nextn_predict_layers says how many there are; the model is the one without it."""
    src = gguf_path("qwen35", "f32")
    T = gguf.GGUFValueType
    path = rewrite(src, tmp_path / "mtp.gguf", fields={
        "qwen35.block_count": (3, T.UINT32), "qwen35.nextn_predict_layers": (1, T.UINT32),
        "qwen35.attention.recurrent_layers": ([True, False, False], T.ARRAY, T.BOOL)},
        add={"blk.2.nextn.eh_proj.weight": np.zeros((32, 64), np.float32),
             "blk.2.attn_norm.weight": np.ones(32, np.float32)})
    with_mtp, plain = load_model(path), load_model(src)
    assert dataclasses.replace(with_mtp.config, name=plain.config.name) == plain.config
    assert with_mtp.open_weights().unused == []


def test_rope_freqs_that_are_not_llama3(tmp_path) -> None:
    factors = np.linspace(1.0, 3.0, 16, dtype=np.float32) ** 2  # smooth all the way: no llama3 shape
    path = rewrite(gguf_path("llama3rope", "f32"), tmp_path / "r.gguf", change={"rope_freqs.weight": factors})
    one_line_error(path, "'rope_freqs.weight' cannot be read as llama3 RoPE scaling")


@pytest.mark.parametrize("between", [0, 1])
def test_rope_freqs_with_few_smoothed_frequencies(tmp_path, between: int) -> None:
    """A tiny head has one frequency between the unscaled and the fully scaled ones, or none:
    the parameters read give the stored factors back."""
    from strata.passes.convert_module_to_op.attention import llama3_freq_factors

    factors = np.array([1.0] * 8 + [2.5] * between + [8.0] * (8 - between), dtype=np.float32)
    path = rewrite(gguf_path("llama3rope", "f32"), tmp_path / "r.gguf", change={"rope_freqs.weight": factors})
    cfg = load_model(path).config
    rs = dataclasses.asdict(cfg.rope_scaling)
    assert np.allclose(llama3_freq_factors(cfg.rope_theta, cfg.head_dim, rs), factors, rtol=1e-5)


def test_qwen3moe_partial_rope_is_refused(tmp_path) -> None:
    """llama.cpp's qwen3moe asserts that RoPE turns the whole head."""
    path = rewrite(gguf_path("qwen3moe", "f32"), tmp_path / "p.gguf",
                   fields={"qwen3moe.rope.dimension_count": (8, gguf.GGUFValueType.UINT32)})
    one_line_error(path, "'qwen3moe.rope.dimension_count' is 8; partial RoPE")


def test_missing_tensor(tmp_path) -> None:
    """A file without a tensor the metadata implies names it."""
    r = gguf.GGUFReader(gguf_path("qwen3", "f32"))
    w = gguf.GGUFWriter(tmp_path / "m.gguf", "qwen3")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = {"sub_type": field.types[-1]} if field.types[0] == gguf.GGUFValueType.ARRAY else {}
        w.add_key_value(key, field.contents(), field.types[0], **sub)
    for t in r.tensors:
        if t.name != "blk.1.ffn_up.weight":
            w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    one_line_error(tmp_path / "m.gguf", "'blk.1.ffn_up.weight' is missing")


def test_fixture_data_is_small() -> None:
    total = sum(p.stat().st_size for p in DATA.iterdir())
    assert total < 5 * 2**20, total
