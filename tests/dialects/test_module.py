"""The module level: the llama family's builder, instantiation, tensor names, text round trip."""

from __future__ import annotations

import json

import pytest

from strata.dialects import parse_ir
from strata.dialects.instances import instantiate, model_params
from strata.dialects.module import ModelOp
from strata.exporters.listing import model_listing
from strata.models import read_config as load_hf_config
from strata.ir.text import print_ir
from strata.models.llama import build_llama

CONFIGS = {
    "llama3": {
        "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 80,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32},
        "rope_theta": 500000.0,
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 64, "tie_word_embeddings": True,
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 48,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
    },
}


def _model(tmp_path, key):
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS[key]))
    module = build_llama(load_hf_config(tmp_path))
    module.verify()
    return module, next(o for o in module.ops if isinstance(o, ModelOp))


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_params_match_transformers_state_dict(tmp_path, key):
    """The params read off the blocks are, name for name and shape for shape, HF's."""
    import torch
    import transformers

    _, model = _model(tmp_path, key)
    hf_cfg = transformers.AutoConfig.for_model(**load_hf_config(tmp_path).to_hf_dict())
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    hf_shapes = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    if load_hf_config(tmp_path).tie_word_embeddings:
        hf_shapes.pop("lm_head.weight", None)  # tied: the same tensor as model.embed_tokens.weight
    assert {t.hf: t.shape for t in model_params(model).values()} == hf_shapes


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_module_text_round_trips(tmp_path, key):
    module, _ = _model(tmp_path, key)
    text = print_ir(module)
    assert print_ir(parse_ir(text)) == text


def test_knobs_are_visible(tmp_path):
    _, qwen2 = _model(tmp_path, "qwen2")
    root = instantiate(qwen2)
    attn = root.array("layers")[0].child("attention")
    assert "bias" in attn.child("q_proj").params and "bias" not in attn.child("o_proj").params
    assert not attn.has("q_norm")
    lm_head = root.child("lm_head").params["weight"]
    assert lm_head.ggml == "token_embd.weight" and lm_head.tied_from == "lm_head.weight"
    names = set(model_params(qwen2))
    assert "blk.0.attn_q.bias" in names and "output.weight" not in names and "blk.0.attn_output.bias" not in names


def test_head_dim_and_rope_scaling(tmp_path):
    _, llama = _model(tmp_path, "llama3")
    root = instantiate(llama)
    attn = root.array("layers")[0].child("attention")
    assert attn.dim("HeadDim") == 16 and root.dim("H") == 48
    assert attn.float_attr("rope_theta") == 500000.0
    assert attn.attr("rope_scaling").data["factor"].value.data == 8.0
    shapes = {name: t.shape for name, t in model_params(llama).items()}
    assert shapes["blk.0.attn_q.weight"] == (64, 48) and shapes["blk.0.attn_output.weight"] == (48, 64)


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_tensor_names_come_from_the_ir(tmp_path, key):
    """Every param's llama.cpp and HF names are joined from the segments on the subs."""
    _, model = _model(tmp_path, key)
    params = model_params(model)
    t = params["blk.1.attn_k.weight"]
    assert (t.path, t.hf) == ("layers.1.attention.k_proj.weight", "model.layers.1.self_attn.k_proj.weight")
    assert params["blk.0.ffn_norm.weight"].hf == "model.layers.0.post_attention_layernorm.weight"
    assert params["token_embd.weight"].hf == "model.embed_tokens.weight"
    assert params["output_norm.weight"].hf == "model.norm.weight"


def test_listing_is_shaped_like_the_module_level_listing_of_llama3_8b(tmp_path):
    module, _ = _model(tmp_path, "qwen3")
    text = model_listing(module)
    for header in ("Entries", "Generics", "Blocks", "Params", "State"):
        assert f"\n{header}\n" in text
    assert "decode\tdecode(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" in text
    assert "  sub q_norm: RmsNorm<HeadDim, T>" in text
    assert "  param bias: Tensor[Out; T]?" in text
    assert "layers.1.attention.cache_v\tTensor[1, 1, 64, 16; f32]" in text


def test_verifier_rejects_unknown_names(tmp_path):
    module, model = _model(tmp_path, "qwen3")
    text = print_ir(module).replace('"Tensor[Out, In; T]"', '"Tensor[Out, Inn; T]"')
    with pytest.raises(Exception, match="unknown name 'Inn'"):
        parse_ir(text)


def test_docstring_examples_parse():
    """The IR examples in the dialect's docstrings are real IR."""
    import strata.dialects.module as mod

    for doc in (mod.__doc__, mod.ModelOp.__doc__):
        text = "\n".join(line for line in doc.splitlines() if line.startswith("    "))
        parse_ir(text)
