"""Reading fp8 block-quantized checkpoints (DeepSeek-V3 / Qwen FP8 layout) through the pipeline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import run_tool, tiny, write_checkpoint

from strata.frontends.hf_config import ConfigError
from strata.ir.fp8 import FP8, dequantize_fp8_block, fp8_error, quantize_fp8_block
from strata.ir.weights import WeightError, WeightStore, write_safetensors
from strata.pipeline import entry_pipeline, load_model, run_pipeline
from strata.semantics.op_interp import alloc_state, find_function, run_function

QCONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
PROMPT = np.array([1, 5, 9, 2, 7, 3], dtype=np.int32)

#: hidden 160, intermediate 136, vocab 48: weights of 1x2, 2x1 and 2x2 blocks, all partial.
CFG = tiny(hidden_size=160, head_dim=40, intermediate_size=136)
#: support's std 0.12 is sized for hidden 32; scaled by sqrt(32/160) to keep the logits' std ~1
#: (at 0.12 each matmul amplifies by ~1.5 and the fp8 error with it: 13% rms of the logits).
STD = 0.054


def is_linear(name: str, a: np.ndarray) -> bool:
    return a.ndim == 2 and name.endswith(".weight") and "embed_tokens" not in name


def to_fp8(src: Path, dst: Path, qconfig=QCONFIG) -> dict[str, dict[str, float]]:
    """Copy the checkpoint in `src` to `dst` with every 2-D linear weight fp8 block-quantized;
    returns each quantized tensor's error report."""
    dst.mkdir(parents=True, exist_ok=True)
    store = WeightStore.open(src)
    tensors, errors = {}, {}
    for name in store.names():
        a = np.asarray(store.get(name))
        if is_linear(name, a):
            q, s = quantize_fp8_block(a)
            tensors[name], tensors[name + "_scale_inv"] = q, s
            errors[name] = fp8_error(a)
        else:
            tensors[name] = a
    write_safetensors(dst / "model.safetensors", tensors)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = qconfig
    (dst / "config.json").write_text(json.dumps(config))
    return errors


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    f32 = write_checkpoint(CFG, root / "f32", std=STD)
    errors = to_fp8(f32, root / "fp8")
    return f32, root / "fp8", errors


def logits(directory: Path) -> np.ndarray:
    model = load_model(directory)
    fn = find_function(run_pipeline(model.module.clone(), entry_pipeline("prefill", tokens=len(PROMPT), ctx=32)))
    return run_function(fn, model.open_weights(quiet=True), alloc_state(fn), PROMPT, 0)


def test_store_gives_dequantized_f32_and_uses_the_scales(checkpoints):
    f32, fp8, errors = checkpoints
    ref = load_model(f32).open_weights(quiet=True)
    model = load_model(fp8)
    store = model.open_weights(quiet=True)
    assert store.unused == []
    raw = WeightStore.open(fp8)
    quantized = 0
    for name in ref.names():
        stored = ref.stored_name(name)
        assert store.info(name) == ref.info(name)  # f32, the stored shape
        w = store.get(name)
        assert w.dtype == np.float32 and not w.flags.writeable
        if stored + "_scale_inv" in raw:
            quantized += 1
            assert raw.info(stored)[1] == "f8E4M3FN"
            np.testing.assert_array_equal(w, dequantize_fp8_block(raw.get(stored), raw.get(stored + "_scale_inv")))
            assert store.get(name) is w  # dequantized once, kept
            assert errors[stored]["max_rel"] <= 2.0 ** -4 * (1 + 1e-5)
        else:
            np.testing.assert_array_equal(w, ref.get(name))
    assert quantized == 2 * 7 + 1  # q k v o gate up down per layer, and lm_head
    assert max(e["rel_rmse"] for e in errors.values()) < 0.04


def test_op_interpreter_logits_close_to_f32(checkpoints):
    f32, fp8, _ = checkpoints
    a, b = logits(f32), logits(fp8)
    # Each quantized weight carries ~2.7% rms relative error (a 3-bit mantissa, RNE); about 7
    # matmuls lie on each path from the embedding to the logits (q/k/v, o, gate/up, down per
    # layer, the head) and independent errors add in quadrature: sqrt(7) * 2.7% ~ 7%. Measured:
    # rms |diff| 0.039 = 5.7% of the logits' std 0.69, max |diff| 0.077 = 11% of it; the bounds
    # leave ~2x room. Greedy choices agree at every position.
    d, spread = a - b, a.std()
    assert np.sqrt(np.mean(d ** 2)) < 0.10 * spread, (np.sqrt(np.mean(d ** 2)), spread)
    assert np.abs(d).max() < 0.25 * spread, (np.abs(d).max(), spread)
    np.testing.assert_array_equal(a.argmax(-1), b.argmax(-1))


def test_strata_run_on_an_fp8_checkpoint(checkpoints, tmp_path):
    f32, fp8, _ = checkpoints
    out = {}
    for label, d in (("f32", f32), ("fp8", fp8)):
        r = run_tool("run", str(d), "--prompt-ids", "1,5,9,2", "--max-new-tokens", "3", "--cache-dir",
                     str(tmp_path / label), "--dump-logits", str(tmp_path / f"{label}.npy"))
        assert r.returncode == 0, r.stderr
        assert "not used" not in r.stderr
        out[label] = np.load(tmp_path / f"{label}.npy")
    assert np.abs(out["f32"][0] - out["fp8"][0]).max() < 0.25 * out["f32"][0].std()


def _broken(checkpoints, tmp_path, edit=None, qconfig=QCONFIG) -> Path:
    _, fp8, _ = checkpoints
    d = tmp_path / "broken"
    shutil.copytree(fp8, d)
    if edit is not None:
        store = WeightStore.open(d)
        tensors = {n: np.array(store.get(n)) for n in store.names()}
        edit(tensors)
        write_safetensors(d / "model.safetensors", tensors)
    config = json.loads((d / "config.json").read_text())
    config["quantization_config"] = qconfig
    (d / "config.json").write_text(json.dumps(config))
    return d


Q = "model.layers.0.self_attn.q_proj.weight"


def test_missing_scale(checkpoints, tmp_path):
    d = _broken(checkpoints, tmp_path, lambda t: t.pop(Q + "_scale_inv"))
    with pytest.raises(WeightError, match=rf"fp8 tensor '{Q}' has no scale '{Q}_scale_inv'") as e:
        load_model(d).open_weights()
    assert "\n" not in str(e.value)


def test_wrong_scale_shape(checkpoints, tmp_path):
    d = _broken(checkpoints, tmp_path, lambda t: t.update({Q + "_scale_inv": np.ones((1, 1), np.float32)}))
    with pytest.raises(WeightError, match=rf"'{Q}_scale_inv' has shape \[1, 1\], expected \[2, 2\]"):
        load_model(d).open_weights()


def test_wrong_scale_dtype(checkpoints, tmp_path):
    d = _broken(checkpoints, tmp_path, lambda t: t.update({Q + "_scale_inv": np.ones((2, 2), np.int32)}))
    with pytest.raises(WeightError, match=rf"'{Q}_scale_inv' has dtype i32, expected f32"):
        load_model(d).open_weights()


@pytest.mark.parametrize("field, value, match", [
    ("fmt", "e5m2", r"quantization_config\.fmt' is 'e5m2'"),
    ("weight_block_size", [64, 64], r"quantization_config\.weight_block_size' is \[64, 64\]"),
    ("weight_block_size", [128, 128.0], r"weight_block_size' is \[128, 128\.0\]"),
    ("quant_method", "gptq", r"quantization_config\.quant_method' is 'gptq'"),
])
def test_bad_quantization_config(checkpoints, tmp_path, field, value, match):
    d = _broken(checkpoints, tmp_path, qconfig=QCONFIG | {field: value})
    with pytest.raises(ConfigError, match=match) as e:
        load_model(d).open_weights()
    assert "\n" not in str(e.value)


def test_fp8_tensors_without_quantization_config_are_refused_as_before(checkpoints, tmp_path):
    _, fp8, _ = checkpoints
    d = tmp_path / "noconfig"
    shutil.copytree(fp8, d)
    config = json.loads((d / "config.json").read_text())
    del config["quantization_config"]
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightError, match="has dtype f8E4M3FN, expected a float type"):
        load_model(d).open_weights(quiet=True)


def test_the_quantized_checkpoint_stores_e4m3(checkpoints):
    _, fp8, _ = checkpoints
    raw = WeightStore.open(fp8)
    assert raw.get(Q).dtype == FP8 and raw.info(Q + "_scale_inv") == ((2, 2), "f32")


def test_fp8_pieces_of_stacked_and_merged_tensors(tmp_path):
    """Experts stored one by one, and a merged gate_up, each fp8: assembled from the dequantized."""
    from strata.ir.weights import Composite

    rng = np.random.default_rng(5)
    experts = [rng.standard_normal((130, 20)).astype(np.float32) for _ in range(3)]
    merged = rng.standard_normal((20, 260)).astype(np.float32)
    tensors = {}
    for i, e in enumerate(experts):
        tensors[f"e.{i}.w"], tensors[f"e.{i}.w_scale_inv"] = quantize_fp8_block(e)
    tensors["gu.w"], tensors["gu.w_scale_inv"] = quantize_fp8_block(merged)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    comps = {"stacked": Composite(stack=("e.0.w", "e.1.w", "e.2.w")),
             "up": Composite(merged="gu.w", part=1, parts=2, axis=1)}
    store = WeightStore.open(tmp_path, {}, composites=comps, fp8_block=(128, 128))
    assert store.unused == []
    assert store.info("stacked") == ((3, 130, 20), "f32") and store.info("up") == ((20, 130), "f32")
    want = np.stack([dequantize_fp8_block(tensors[f"e.{i}.w"], tensors[f"e.{i}.w_scale_inv"]) for i in range(3)])
    np.testing.assert_array_equal(store.get("stacked"), want)
    np.testing.assert_array_equal(store.get("up"),
                                  dequantize_fp8_block(tensors["gu.w"], tensors["gu.w_scale_inv"])[:, 130:])
