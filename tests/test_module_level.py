"""The module level: builders for the llama family, instantiation, text round trip."""

from __future__ import annotations

import json

import pytest

from strata.frontends.hf_config import load_hf_config
from strata.frontends.listing import model_listing
from strata.ir.instances import instantiate
from strata.dialects import parse_ir
from strata.ir.text import print_ir
from strata.ir.weights import hf_to_ggml_name
from strata.models.llama import build_llama, ggml_name, llama_hparams, model_params
from strata.dialects.module import ModelOp

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
    hf_shapes = {hf_to_ggml_name(k): tuple(v.shape) for k, v in hf.state_dict().items() if hf_to_ggml_name(k)}
    if load_hf_config(tmp_path).tie_word_embeddings:
        hf_shapes.pop("output.weight", None)  # tied: the same tensor as token_embd.weight
    assert {name: shape for name, (shape, _) in model_params(model).items()} == hf_shapes


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_module_text_round_trips(tmp_path, key):
    module, _ = _model(tmp_path, key)
    text = print_ir(module)
    assert print_ir(parse_ir(text)) == text


def test_knobs_are_visible(tmp_path):
    _, qwen2 = _model(tmp_path, "qwen2")
    hp = llama_hparams(qwen2)
    assert hp.qkv_bias and not hp.o_bias and hp.tied and not hp.qk_norm
    names = {ggml_name(i.path) for i in instantiate(qwen2) if i.kind == "param"}
    assert "blk.0.attn_q.bias" in names and "output.weight" not in names and "blk.0.attn_output.bias" not in names


def test_head_dim_and_rope_scaling(tmp_path):
    _, llama = _model(tmp_path, "llama3")
    hp = llama_hparams(llama)
    assert hp.head_dim == 16 and hp.hidden == 48
    assert hp.rope_scaling["factor"] == 8.0 and hp.rope_theta == 500000.0
    shapes = {ggml_name(i.path): i.shape for i in instantiate(llama) if i.kind == "param"}
    assert shapes["blk.0.attn_q.weight"] == (64, 48) and shapes["blk.0.attn_output.weight"] == (48, 64)


def test_listing_is_shaped_like_seed_003(tmp_path):
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
