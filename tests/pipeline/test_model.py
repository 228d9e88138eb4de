"""Loading a model: a tied checkpoint that stores another lm_head is read untied, as transformers
reads it (its logits are transformers' own), with a warning; a tied copy equal to the embedding
keeps the tie."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from support import TINY, write_checkpoint

from strata.ir.weights import SafetensorsFile, write_safetensors
from strata.pipeline import entry_pipeline, load_model, lower
from strata.semantics.op_interp import alloc_state, find_function, run_function


def _with_head(directory, head):
    st = SafetensorsFile(directory / "model.safetensors")
    tensors = {n: np.array(st.array(n)) for n in st.entries}
    tensors["lm_head.weight"] = head(tensors["model.embed_tokens.weight"])
    write_safetensors(directory / "model.safetensors", tensors, {"format": "pt"})


def _logits(model, prompt):
    fn = find_function(lower(model, entry_pipeline("prefill", tokens=len(prompt), start=0, ctx=32)))
    return run_function(fn, model.open_weights(quiet=True), alloc_state(fn), np.asarray(prompt, np.int32), 0)[-1]


def test_a_stored_lm_head_that_differs_unties(tmp_path, capsys):
    d = write_checkpoint(TINY["qwen2"], tmp_path / "m")  # tie_word_embeddings: true
    rng = np.random.default_rng(0)
    _with_head(d, lambda e: (0.1 * rng.standard_normal(e.shape)).astype(np.float32))
    model = load_model(d)
    assert "stores another lm_head" in capsys.readouterr().err
    assert not model.config.tie_word_embeddings
    prompt = [3, 17, 5, 40]
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf(torch.tensor([prompt])).logits[0, -1].numpy()
    assert np.abs(_logits(model, prompt) - want).max() < 1e-4


def test_a_stored_copy_equal_to_the_embedding_keeps_the_tie(tmp_path, capsys):
    d = write_checkpoint(TINY["qwen2"], tmp_path / "m")
    _with_head(d, lambda e: e.copy())
    model = load_model(d)
    assert model.config.tie_word_embeddings and "lm_head" not in capsys.readouterr().err
