"""Writing fp8 block-quantized checkpoints (strata.quant.fp8_checkpoint, `strata quantize`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import HYBRID_FAMILIES, TINY, run_tool, write_checkpoint

from strata.ir.fp8 import FP8, dequantize_fp8_block, fp8_error, quantize_fp8_block
from strata.ir.weights import INDEX_FILE, WeightStore, write_safetensors
from strata.pipeline import entry_pipeline, load_model, run_pipeline
from strata.quant.fp8_checkpoint import QUANTIZATION_CONFIG, QuantizeError, error_table, fp8_targets, quantize_checkpoint as quantize_loaded
from strata.semantics.op_interp import alloc_state, find_function, run_function

PROMPT = np.array([1, 5, 9, 2, 7, 3], dtype=np.int32)
#: What fp8-bf16head keeps in its stored precision, by HF name: the embedding and head, norms,
#: the router, the shared expert's gate, the GDN's a/b projections, conv, A_log, dt_bias.
KEPT = re.compile(r"embed_tokens|lm_head|norm|mlp\.gate\.weight|shared_expert_gate|in_proj_[ab]\.|conv1d|A_log|dt_bias")


def quantize_checkpoint(model_dir, out, recipe="fp8-bf16head", progress=None):
    """The checkpoint at `model_dir` loaded, then written fp8 to `out` (None: measured only)."""
    from strata.pipeline import load_model

    return quantize_loaded(load_model(model_dir), out, recipe, progress)


def expected_targets(directory: Path) -> set[str]:
    """The recipe's fp8 weights, by hand: every 2-D tensor not in KEPT."""
    raw = WeightStore.open(directory)
    return {n for n in raw.names() if len(raw.info(n)[0]) == 2 and not KEPT.search(n)}


def qdq(w: np.ndarray) -> np.ndarray:
    return dequantize_fp8_block(*quantize_fp8_block(np.asarray(w, np.float32)))


def copy_with(src: Path, dst: Path, tensors: dict[str, np.ndarray]) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(src / "config.json", dst / "config.json")
    write_safetensors(dst / "model.safetensors", tensors, {"format": "pt"})
    return dst


def logits(directory: Path) -> np.ndarray:
    model = load_model(directory)
    fn = find_function(run_pipeline(model.module.clone(), entry_pipeline("prefill", tokens=len(PROMPT), ctx=32)))
    return run_function(fn, model.open_weights(quiet=True), alloc_state(fn), PROMPT, 0)


@pytest.fixture(scope="module", params=["qwen3_5_moe", "qwen3"])
def quantized(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    cfg = HYBRID_FAMILIES["qwen3_5_moe"] if request.param == "qwen3_5_moe" else TINY["qwen3"]
    # The dense one in bf16: what is not quantized keeps its stored dtype.
    src = write_checkpoint(cfg, root / "src", dtype="bfloat16" if request.param == "qwen3" else "float32")
    (src / "tokenizer.json").write_text('{"tiny": true}')
    (src / ".strata-cache").mkdir()
    rows = quantize_checkpoint(src, root / "fp8", "fp8-bf16head")
    return src, root / "fp8", rows


def test_targets_are_the_weights_the_recipe_makes_fp8(quantized):
    src, _, _ = quantized
    model = load_model(src)
    targets = fp8_targets(model)
    assert set(targets) == expected_targets(src) and len(targets) == len(set(targets))
    if model.config.arch.startswith("Qwen3_5"):
        kept = ["model.layers.0.mlp.gate.weight", "model.layers.0.mlp.shared_expert_gate.weight",
                "model.layers.0.linear_attn.in_proj_a.weight", "model.layers.0.linear_attn.in_proj_b.weight",
                "lm_head.weight", "model.embed_tokens.weight"]
        assert "model.layers.0.mlp.experts.7.down_proj.weight" in targets
    else:  # tied: the embedding is the head, read in bf16
        kept = ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight"]
        assert "model.layers.1.self_attn.q_proj.weight" in targets
    assert set(kept) <= set(WeightStore.open(src).names()) and not set(kept) & set(targets)
    assert fp8_targets(model, "bf16") == [] and fp8_targets(model, "f32") == []


def test_the_written_checkpoint_stores_fp8_blocks_and_the_rest_unchanged(quantized):
    src, out, _ = quantized
    a, b = WeightStore.open(src), WeightStore.open(out)
    targets = expected_targets(src)
    assert set(b.names()) == set(a.names()) | {t + "_scale_inv" for t in targets}
    for name in a.names():
        w = a.get(name)
        if name in targets:
            q, s = quantize_fp8_block(w)
            assert b.get(name).dtype == FP8 and b.info(name + "_scale_inv") == (s.shape, "f32")
            np.testing.assert_array_equal(b.get(name).view(np.uint8), q.view(np.uint8))
            np.testing.assert_array_equal(b.get(name + "_scale_inv"), s)
        else:
            assert b.info(name) == a.info(name)
            np.testing.assert_array_equal(b.get(name), w)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == QUANTIZATION_CONFIG
    assert config | {"quantization_config": None} == json.loads((src / "config.json").read_text()) | {
        "quantization_config": None}
    assert (out / "tokenizer.json").read_text() == '{"tiny": true}' and not (out / ".strata-cache").exists()


def test_read_back_gives_the_dequantized_weights_bit_for_bit(quantized):
    src, out, _ = quantized
    ref = load_model(src).open_weights(quiet=True)
    model = load_model(out)
    assert model.fp8_block == (128, 128)
    store = model.open_weights(quiet=True)
    assert store.unused == []
    targets, hit = expected_targets(src), 0
    for name in ref.names():
        w = ref.get(name)
        stored = ref.stored_name(name)
        if stored in targets:
            hit += 1
            want = np.stack([qdq(m) for m in w]) if w.ndim == 3 else qdq(w)
        else:
            want = w
        np.testing.assert_array_equal(store.get(name), want)
    assert hit > 0


def test_error_rows_agree_with_fp8_error(quantized):
    src, _, rows = quantized
    raw = WeightStore.open(src)
    assert [r.name for r in rows] == sorted(expected_targets(src))
    for r in rows:
        w = raw.get(r.name)
        assert r.shape == w.shape
        e = fp8_error(w)
        assert {k: getattr(r, k) for k in e} == e
    table = error_table(rows).splitlines()
    assert len(table) == len(rows) + 2 and table[-1].startswith(f"total: {len(rows)} tensors")
    assert len({len(line) for line in table[1:]}) <= 2  # aligned (the total's name may be longer)
    worst = max(r.rel_rmse for r in rows)
    assert 0.01 < worst < 0.04  # a 3-bit mantissa: ~2.7% rms


def test_op_level_on_the_quantized_checkpoint_equals_the_original_with_dequantized_targets(quantized, tmp_path):
    """The op level in f32 on the written checkpoint gives the logits of the original with each
    fp8 target replaced by dequantize(quantize(w)), bit for bit. (The blueprint interpreter's
    fp8-bf16head emulation also rounds activations to bf16 and quantizes merged projections as one
    matrix, so it is no bit-exact reference for a checkpoint.)"""
    src, out, _ = quantized
    raw = WeightStore.open(src)
    targets = expected_targets(src)
    ref = copy_with(src, tmp_path / "ref", {n: qdq(raw.get(n)) if n in targets else np.asarray(raw.get(n))
                                            for n in raw.names()})
    got, want, plain = logits(out), logits(ref), logits(src)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, plain)  # the targets were quantized


# ---------------------------------------------------------------------------------------------
# Stored forms


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return write_checkpoint(HYBRID_FAMILIES["qwen3_5_moe"], root / "src")


def test_merged_experts_are_written_one_by_one(moe, tmp_path):
    """Experts stored stacked and merged (`experts.gate_up_proj` [E, 2I, H]) are written per
    expert, as Qwen's FP8 checkpoints store them, and read back as the per-expert quantization."""
    raw = WeightStore.open(moe)
    tensors = {n: np.asarray(raw.get(n)) for n in raw.names() if ".experts." not in n}
    cfg = HYBRID_FAMILIES["qwen3_5_moe"]
    for layer in range(cfg.num_layers):
        p = f"model.layers.{layer}.mlp.experts"
        e = range(cfg.num_experts)
        tensors[f"{p}.gate_up_proj"] = np.stack([np.concatenate([raw.get(f"{p}.{i}.gate_proj.weight"),
                                                                 raw.get(f"{p}.{i}.up_proj.weight")]) for i in e])
        tensors[f"{p}.down_proj"] = np.stack([raw.get(f"{p}.{i}.down_proj.weight") for i in e])
    merged = copy_with(moe, tmp_path / "merged", tensors)
    assert "model.layers.0.mlp.experts.gate_up_proj" in fp8_targets(load_model(merged))
    rows = quantize_checkpoint(merged, tmp_path / "out")
    per_expert = quantize_checkpoint(moe, tmp_path / "out_ref")
    assert rows == per_expert
    out = WeightStore.open(tmp_path / "out")
    assert not any(n.endswith(("gate_up_proj", "experts.down_proj")) for n in out.names())
    assert out.get("model.layers.3.mlp.experts.5.up_proj.weight").dtype == FP8
    a, b = load_model(tmp_path / "out").open_weights(), load_model(tmp_path / "out_ref").open_weights()
    assert a.unused == [] and a.names() == b.names()
    for name in b.names():
        np.testing.assert_array_equal(a.get(name), b.get(name))


def test_shards_are_mirrored_with_each_scale_beside_its_weight(tmp_path):
    src = write_checkpoint(TINY["qwen3"], tmp_path / "src", shards=3)
    single = write_checkpoint(TINY["qwen3"], tmp_path / "single")
    quantize_checkpoint(src, tmp_path / "out")
    quantize_checkpoint(single, tmp_path / "out1")
    index = json.loads((tmp_path / "out" / INDEX_FILE).read_text())["weight_map"]
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.safetensors"))
    assert shards == sorted(p.name for p in src.glob("*.safetensors")) and set(index.values()) == set(shards)
    scales = [n for n in index if n.endswith("_scale_inv")]
    assert scales and all(index[s] == index[s.removesuffix("_scale_inv")] for s in scales)
    a, b = load_model(tmp_path / "out").open_weights(), load_model(tmp_path / "out1").open_weights()
    for name in b.names():
        np.testing.assert_array_equal(a.get(name), b.get(name))


def test_refusals(moe, tmp_path):
    out = tmp_path / "out"
    quantize_checkpoint(moe, out)
    with pytest.raises(QuantizeError, match="fp8-quantized already"):
        quantize_checkpoint(out, tmp_path / "again")
    with pytest.raises(QuantizeError, match="outside the model directory"):
        quantize_checkpoint(moe, moe / "fp8")
    quantize_checkpoint(moe, out)  # a previous output is replaced
    assert quantize_checkpoint(moe, None) == quantize_checkpoint(moe, out)


# ---------------------------------------------------------------------------------------------
# The command line


def test_cli_writes_and_prints_the_table(moe, tmp_path):
    r = run_tool("quantize", str(moe), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    n = len(expected_targets(moe))
    assert lines[0].split() == ["tensor", "shape", "max_abs", "rmse", "rel_rmse", "max_rel", "zero_frac"]
    assert len(lines) == n + 2 and lines[-1].startswith(f"total: {n} tensors")
    assert "\r" not in r.stderr  # no progress when stderr is not a terminal
    assert load_model(tmp_path / "out").fp8_block == (128, 128)
    again = run_tool("quantize", str(moe), "--report-only")
    assert again.returncode == 0 and again.stdout == r.stdout


def test_cli_report_only_writes_nothing(moe, tmp_path):
    r = run_tool("quantize", str(moe), "--report-only", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == [] and r.stdout.startswith("tensor")
    r = run_tool("quantize", str(moe), "--report-only", "-o", str(tmp_path / "out"))  # an -o it would ignore
    assert r.returncode == 1 and "-o does not apply with --report-only" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case, match", [
    ("recipe", "unknown recipe 'nope'"),
    ("model", "no such file"),
    ("existing", "refusing to overwrite it"),
    ("no-output", "give -o OUT"),
])
def test_cli_errors_are_one_line(moe, tmp_path, case, match):
    out = tmp_path / "out"
    args = [str(moe), "-o", str(out)]
    if case == "recipe":
        args += ["--recipe", "nope"]
    elif case == "model":
        args[0] = str(tmp_path / "missing")
    elif case == "existing":
        out.mkdir()
        (out / "mine.txt").write_text("keep")
    else:
        args = [str(moe)]
    r = run_tool("quantize", *args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("strata: error: ") and match in r.stderr, r.stderr
    if case == "existing":
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
    else:
        assert not out.exists()


def test_cli_usage_errors_exit_2(tmp_path):
    r = run_tool("quantize", "--recipe", "fp8-bf16head")
    assert r.returncode == 2 and "MODEL" in r.stderr
