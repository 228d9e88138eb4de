"""/v1/embeddings' vectors without a server: the `hidden_packed` entry compiled for the cpu target
as `strata serve` opens it, pooled (last token, mean) and L2-normalised, against HF transformers'
fp32 `last_hidden_state` (after the final norm) of each input run alone, on three families (the
llama family's llama and qwen3, and the hybrid Qwen3.5's Gated DeltaNet layers); inputs
packed into several calls; and every bad body one ApiError naming its field.

The max differences are printed (`-s` shows them)."""

from __future__ import annotations

import base64
import dataclasses

import numpy as np
import pytest
import torch
import transformers

from strata.runtime.commands.serve import open_embedder
from strata.runtime.opener import open_model
from strata.runtime.serve.batch_engine import RequestLimits
from strata.runtime.serve.embeddings import EmbeddingRequest, embeddings_reply, parse_embeddings
from strata.runtime.serve.requests import ApiError
from strata.runtime.text import load_tokenizer
from support import HYBRID_FAMILIES, TINY, write_checkpoint

CTX = 32
#: Normalised vectors: a max abs difference this small is relative to their length, 1.
TOL = 1e-5
#: Inputs of lengths 20, 15, 3, 30 and 1: more than one call of CTX tokens packs them.
INPUTS = [[(7 * i + 3 * n) % 48 for i in range(n)] for n in (20, 15, 3, 30, 1)]


def hf_pooled(hf, ids: list[int], pooling: str, normalize: bool = True) -> np.ndarray:
    with torch.no_grad():
        states = hf.model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    v = states[-1] if pooling == "last" else states.mean(axis=0)
    return v / np.linalg.norm(v) if normalize else v


FAMILIES = {"llama": TINY["llama"], "qwen3": TINY["qwen3"], "qwen3_5": HYBRID_FAMILIES["qwen3_5"]}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    cfg = dataclasses.replace(FAMILIES[request.param], max_position_embeddings=64)
    d = write_checkpoint(cfg, tmp_path_factory.mktemp(request.param), seed=11, std=0.3)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    opened = open_model(d, "cpu", {"ctx": CTX}, quiet=True)
    return request.param, opened, hf, tmp_path_factory.mktemp(f"{request.param}-embeddings")


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_vectors_are_hf_s_pooled_hidden_states(family, pooling):
    name, opened, hf, cache = family
    embedder = open_embedder(opened, opened.knobs, pooling, cache / pooling)
    assert not embedder.opened  # nothing compiled before the first embedding
    calls = []
    embedder._run = (lambda run: lambda seqs: calls.append(len(seqs)) or run(seqs))(embedder._run)
    got = embedder.embed(INPUTS)
    assert embedder.opened and got.shape == (len(INPUTS), FAMILIES[name].hidden_size) and got.dtype == np.float32
    assert sum(calls) == len(INPUTS) and len(calls) > 1  # packed into calls of at most CTX tokens
    want = np.stack([hf_pooled(hf, ids, pooling) for ids in INPUTS])
    diff = float(np.abs(got - want).max())
    print(f"[embeddings] {name:7s} {pooling:4s} normalised: max|diff| vs HF = {diff:.2e}")
    assert diff < TOL
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    raw = embedder.embed(INPUTS[:2], normalize=False)
    for v, ids in zip(raw, INPUTS[:2]):
        ref = hf_pooled(hf, ids, pooling, normalize=False)
        rel = float(np.linalg.norm(v - ref) / np.linalg.norm(ref))
        print(f"[embeddings] {name:7s} {pooling:4s} unnormalised: relative L2 diff vs HF = {rel:.2e}")
        assert rel < TOL
    embedder.close()


@pytest.fixture(scope="module")
def limits(serve_model):
    tok = load_tokenizer(serve_model)
    return RequestLimits(tok, tok.vocab_size, 16, 16)


def test_body_forms(limits):
    tok = limits.tokenizer
    one = parse_embeddings({"input": "Hello"}, limits, "m", 32)
    assert one == EmbeddingRequest([tok.encode("Hello")], "float", True)
    many = parse_embeddings({"input": ["Hello", "wörld"], "encoding_format": "base64", "dimensions": 32,
                             "model": "m", "user": "u", "add_special_tokens": False, "normalize": False},
                            limits, "m", 32)
    assert many == EmbeddingRequest([tok.encode("Hello", add_special=False), tok.encode("wörld", add_special=False)],
                                    "base64", False)
    assert parse_embeddings({"input": [5, 6.0, 7]}, limits, "m", 32).inputs == [[5, 6, 7]]
    assert parse_embeddings({"input": [[5], [6, 7]]}, limits, "m", 32).inputs == [[5], [6, 7]]
    vectors = np.array([[0.5, -0.25], [1.0, 3.0]], np.float32)
    reply = embeddings_reply(EmbeddingRequest([[1, 2], [3]], "base64", True), vectors, "m")
    assert reply["usage"] == {"prompt_tokens": 3, "total_tokens": 3} and reply["model"] == "m"
    assert [d["index"] for d in reply["data"]] == [0, 1] and reply["data"][0]["object"] == "embedding"
    decoded = np.frombuffer(base64.b64decode(reply["data"][1]["embedding"]), "<f4")
    assert decoded.tolist() == [1.0, 3.0]
    assert embeddings_reply(EmbeddingRequest([[1]], "float", True), vectors[:1], "m")["data"][0]["embedding"] == \
        [0.5, -0.25]


@pytest.mark.parametrize("body, message, param", [
    ({}, "'input' must be a string, a list of strings, a list of token ids or a list of lists of token ids", "input"),
    ({"input": []}, "'input' must be a string", "input"),
    ({"input": [[]]}, "'input' must be a string", "input"),
    ({"input": ["a", 3]}, "'input' must be a string", "input"),
    ({"input": [True]}, "'input' must be a string", "input"),
    ({"input": ["a"] * 2049}, "'input' holds 2049 inputs; at most 2048", "input"),
    ({"input": [1, 512]}, "'input[1]': token id 512 is outside the vocabulary [0, 512)", "input"),
    ({"input": [[1], [2, -3]]}, "'input[1][1]': token id -3 is outside the vocabulary", "input[1]"),
    ({"input": list(range(17))}, "'input' is 17 tokens, longer than the context of 16 tokens", "input"),
    ({"input": "a", "encoding_format": "int8"}, "'encoding_format' must be 'float' or 'base64', got 'int8'",
     "encoding_format"),
    ({"input": "a", "dimensions": 16}, "'dimensions' 16 is not supported: this model's embeddings have 32 "
     "dimensions", "dimensions"),
    ({"input": "a", "normalize": "no"}, "'normalize' must be a boolean, got 'no'", "normalize"),
    ({"input": "a", "model": "other"}, "the model 'other' does not exist; this server serves 'm'", "model"),
])
def test_bad_bodies_are_one_clear_error(limits, body, message, param):
    with pytest.raises(ApiError) as e:
        parse_embeddings(body, limits, "m", 32)
    assert message in e.value.message and e.value.param == param
    assert e.value.status == (404 if "model" in body else 400)
