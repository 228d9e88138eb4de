"""The Qwen3-MoE / Qwen3.5 / Qwen3.5-MoE / Qwen3-Next family: configs, the module level it
builds, the tensors it names, and the errors a bad config gets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from strata.dialects import parse_ir
from strata.dialects.instances import instantiate, model_params
from strata.frontends.hf_config import ConfigError
from strata.ir.text import print_ir
from strata.ir.weights import WeightError, write_safetensors
from strata.models import read_config
from strata.pipeline import load_model
from support import LLAMACPP, run_tool

TINY = ["qwen3-moe-tiny", "qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"]


@pytest.mark.parametrize("name", TINY)
def test_reference_checkpoints_map_every_tensor(name):
    """Every stored tensor of llama.cpp's reference checkpoints is a param, and back."""
    model = load_model(LLAMACPP / name)
    store = model.open_weights(quiet=True)
    assert store.unused == []
    stored = set(load_file(str(LLAMACPP / name / "model.safetensors")))
    used = {store.stored_name(n) for n in store.names()}
    assert len(store.names()) == len(model.params())
    assert used <= stored


@pytest.mark.parametrize("name", TINY)
def test_module_level_round_trips(name):
    module = load_model(LLAMACPP / name).module
    text = print_ir(module)
    assert print_ir(parse_ir(text)) == text


def test_layer_pattern_and_stacked_experts():
    model = load_model(LLAMACPP / "qwen3.5-moe-tiny")
    root = instantiate(model.model_op)
    layers = root.array("layers")
    assert [layer.child("attention").kind for layer in layers] == [
        "std.attn.gated_delta_net"] * 3 + ["std.attn.gated"]
    moe = layers[0].child("mlp")
    gate = moe.params["gate_exps"]
    assert (gate.ggml, gate.shape) == ("blk.0.ffn_gate_exps.weight", (8, 32, 64))
    assert gate.hf == "model.layers.0.mlp.experts.*.gate_proj.weight"
    store = model.open_weights(quiet=True)
    stored = load_file(str(LLAMACPP / "qwen3.5-moe-tiny" / "model.safetensors"))
    np.testing.assert_array_equal(store.get("blk.0.ffn_gate_exps.weight")[5],
                                  stored["model.layers.0.mlp.experts.5.gate_proj.weight"])
    names = set(model_params(model.model_op))
    assert {"blk.0.ssm_a", "blk.0.ssm_conv1d.weight", "blk.0.ssm_dt.bias", "blk.3.attn_q_norm.weight",
            "blk.0.ffn_gate_inp_shexp.weight", "blk.0.post_attention_norm.weight"} <= names


def test_merged_experts_are_read_too(tmp_path):
    """transformers 5 stores experts merged (gate_up_proj [E, 2I, H], down_proj [E, H, I])."""
    d = tmp_path / "m"
    shutil.copytree(LLAMACPP / "qwen3.5-moe-tiny", d)
    tensors = load_file(str(d / "model.safetensors"))
    for layer in range(4):
        p = f"model.layers.{layer}.mlp.experts"
        gate = np.stack([tensors.pop(f"{p}.{e}.gate_proj.weight") for e in range(8)])
        up = np.stack([tensors.pop(f"{p}.{e}.up_proj.weight") for e in range(8)])
        tensors[f"{p}.gate_up_proj"] = np.concatenate([gate, up], axis=1)
        tensors[f"{p}.down_proj"] = np.stack([tensors.pop(f"{p}.{e}.down_proj.weight") for e in range(8)])
    write_safetensors(d / "model.safetensors", tensors)
    merged, hub = load_model(d).open_weights(quiet=True), load_model(LLAMACPP / "qwen3.5-moe-tiny").open_weights(quiet=True)
    assert merged.unused == []
    for name in ("blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight", "blk.2.ffn_down_exps.weight"):
        np.testing.assert_array_equal(merged.get(name), hub.get(name))


def test_hub_conditional_generation_config(tmp_path):
    text = json.loads((LLAMACPP / "qwen3.5-moe-tiny" / "config.json").read_text())
    text.pop("architectures")
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": text, "vision_config": {"depth": 2}}))
    cfg = read_config(tmp_path)
    assert cfg.arch == "Qwen3_5MoeForCausalLM" and cfg.num_experts == 8 and cfg.norm_topk_prob


def test_layer_patterns_follow_the_config(tmp_path):
    base = json.loads((LLAMACPP / "qwen3-next-tiny" / "config.json").read_text())
    base.pop("layer_types")
    (tmp_path / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 8, "full_attention_interval": 4,
                                                      "mlp_only_layers": [1], "decoder_sparse_step": 2}))
    cfg = read_config(tmp_path)
    assert cfg.layer_types == ("linear_attention",) * 3 + ("full_attention",) + ("linear_attention",) * 3 + (
        "full_attention",)
    assert cfg.moe_layers == (False, False, False, True, False, True, False, True)
    kinds = [(layer.child("attention").kind, layer.child("mlp").kind)
             for layer in instantiate(load_model(tmp_path).model_op).array("layers")]
    assert kinds[1] == ("std.attn.gated_delta_net", "std.nn.mlp")
    assert kinds[3] == ("std.attn.gated", "std.moe.sparse")


@pytest.mark.parametrize("ref, change, message", [
    ("qwen3.5-tiny", {"linear_num_value_heads": 3}, "field 'linear_num_value_heads' (3) must be a multiple of "
                                                    "'linear_num_key_heads' (2)"),
    ("qwen3.5-tiny", {"layer_types": ["linear_attention", "sliding_attention", "linear_attention", "full_attention"]},
     "field 'layer_types' entry 1 is 'sliding_attention'"),
    ("qwen3.5-tiny", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.3}},
     "field 'rope_parameters.partial_rotary_factor' is 0.3, which gives 32 x 0.3 = 9 rotary dims"),
    ("qwen3.5-moe-tiny", {"num_experts_per_tok": 9}, "field 'num_experts_per_tok' (9) exceeds 'num_experts' (8)"),
    ("qwen3-moe-tiny", {"num_experts_per_tok": 9}, "field 'num_experts_per_tok' (9) exceeds 'num_local_experts' (8)"),
])
def test_bad_configs_name_the_field(tmp_path, ref, change, message):
    cfg = json.loads((LLAMACPP / ref / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_config(tmp_path)
    r = run_tool("inspect", str(tmp_path))
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr


def test_missing_expert_weights_are_named(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(LLAMACPP / "qwen3-moe-tiny", d)
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.1.mlp.experts.6.up_proj.weight"]
    write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(WeightError, match=r"tensor 'blk.1.ffn_up_exps.weight' \(HF "
                                          r"'model.layers.1.mlp.experts.0.up_proj.weight' ... one per index"):
        load_model(d).open_weights(quiet=True)
    before = sorted(p.name for p in d.iterdir())
    r = run_tool("run", str(d), "--prompt-ids", "1,2")
    assert r.returncode == 1 and "blk.1.ffn_up_exps.weight" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in d.iterdir()) == before  # nothing written, nothing lost


@pytest.mark.parametrize("name", TINY)
def test_strata_run_dumps_logits(name, tmp_path):
    """`strata run` on each family: ids on the last stdout line, the logits that chose them saved."""
    dump = tmp_path / "logits.npy"
    r = run_tool("run", str(LLAMACPP / name), "--prompt-ids", "256,257,78", "--max-new-tokens", "6",
                 "--dump-logits", str(dump), "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    ids = [int(t) for t in r.stdout.strip().splitlines()[-1].removeprefix("ids=").split(",")]
    logits = np.load(dump)
    assert logits.shape == (6, 320) and ids == [int(row.argmax()) for row in logits]


def test_vision_tower_and_mtp_weights_are_ignored(tmp_path, capsys):
    """The hub's Qwen3.5/3.6-MoE checkpoints carry model.visual.* and mtp.*: read past quietly;
    anything else unknown is still reported."""
    d = tmp_path / "m"
    shutil.copytree(LLAMACPP / "qwen3.5-moe-tiny", d)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.visual.blocks.0.attn.qkv.weight"] = np.zeros((6, 2), np.float32)
    tensors["mtp.fc.weight"] = np.zeros((2, 2), np.float32)
    tensors["model.other.weight"] = np.zeros(2, np.float32)
    write_safetensors(d / "model.safetensors", tensors)
    assert load_model(d).open_weights(quiet=True).unused == ["model.other.weight"]
