"""`strata serve`'s /v1/embeddings (through the official `openai` client, against HF transformers'
pooled hidden states), /tokenize and /detokenize over HTTP: the entry is compiled only when the
first embedding is asked for, a bad body is one 400 and the server goes on serving."""

from __future__ import annotations

import httpx2
import numpy as np
import pytest

from serve_support import API_KEY, running_server
from strata.runtime.text import load_tokenizer

openai = pytest.importorskip("openai")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TEXTS = ["Once upon a time", "The quick brown fox jumps over the lazy dog.", "wörld"]


@pytest.fixture(scope="module")
def server(serve_model, tmp_path_factory):
    with running_server(serve_model, tmp_path_factory.mktemp("text-routes"), "--api-key", API_KEY,
                        "--pooling", "mean", "--max-num-seqs", "2") as s:
        yield s


def _hf_mean(serve_model, ids_list):
    hf = transformers.AutoModelForCausalLM.from_pretrained(serve_model, dtype=torch.float32).eval()
    out = []
    for ids in ids_list:
        with torch.no_grad():
            states = hf.model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
        v = states.mean(axis=0)
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def test_openai_client_embeddings_are_hf_s(server, serve_model):
    assert "-embeddings" not in server.stderr()  # nothing compiled for embeddings at start
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    tok = load_tokenizer(serve_model)
    ids = [tok.encode(t) for t in TEXTS]
    want = _hf_mean(serve_model, ids + [[5, 6, 7]])
    got = client.embeddings.create(model=serve_model.name, input=TEXTS)  # the client asks for base64
    assert "-embeddings" in server.stderr()
    vectors = np.array([d.embedding for d in sorted(got.data, key=lambda d: d.index)])
    diff = float(np.abs(vectors - want[:3]).max())
    print(f"[embeddings] server mean pooling: max|diff| vs HF = {diff:.2e}")
    assert diff < 1e-5
    assert got.usage.prompt_tokens == sum(len(i) for i in ids) and got.model == serve_model.name
    # the same request as floats: the same f32 values (base64 is their little-endian bytes)
    floats = client.embeddings.create(model=serve_model.name, input=TEXTS, encoding_format="float")
    assert np.array([d.embedding for d in floats.data], np.float32).tolist() == np.float32(vectors).tolist()
    by_ids = client.embeddings.create(model=serve_model.name, input=[5, 6, 7])
    assert float(np.abs(np.array(by_ids.data[0].embedding) - want[3]).max()) < 1e-5
    with pytest.raises(openai.BadRequestError, match="'dimensions' 8 is not supported"):
        client.embeddings.create(model=serve_model.name, input="x", dimensions=8)
    assert httpx2.post(server.url + "/v1/embeddings", json={"input": "x"}, timeout=10).status_code == 401


def test_tokenize_and_detokenize_over_http(server, serve_model):
    tok = load_tokenizer(serve_model)
    url = server.url
    r = httpx2.post(url + "/tokenize", json={"content": "Hello world", "with_pieces": True}, timeout=10)
    assert r.status_code == 200
    ids = tok.encode("Hello world", add_special=False)
    assert r.json() == {"tokens": [{"id": i, "piece": tok.decode([i])} for i in ids]}
    r = httpx2.post(url + "/tokenize", json={"model": serve_model.name, "prompt": "Hello world"}, timeout=10)
    assert r.json() == {"count": len(tok.encode("Hello world")), "max_model_len": 128,
                        "tokens": tok.encode("Hello world"), "token_strs": None}
    r = httpx2.post(url + "/detokenize", json={"tokens": ids}, timeout=10)
    assert r.json() == {"content": "Hello world", "prompt": "Hello world"}
    for path, body, status, message in [
            ("/detokenize", {"tokens": [1, 100000]}, 400, "'tokens[1]': token id 100000 is outside the vocabulary"),
            ("/tokenize", {"content": ["a"]}, 400, "'content' must be a string"),
            ("/tokenize", {"prompt": "a", "model": "gpt-4"}, 404, "the model 'gpt-4' does not exist"),
            ("/v1/embeddings", {"input": [[1, 2], "x", None]}, 400, "'input' must be a string")]:
        r = httpx2.post(url + path, json=body, headers=AUTH, timeout=10)
        assert r.status_code == status and message in r.json()["error"]["message"], (path, body, r.text)
    r = httpx2.post(url + "/tokenize", content=b"{not json", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    # the server goes on: generation and the tokenizer still answer
    done = httpx2.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "temperature": 0},
                       headers=AUTH, timeout=60)
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 3
    assert httpx2.post(url + "/detokenize", json={"tokens": ids}, timeout=10).status_code == 200
    assert server.proc.poll() is None and "Traceback" not in server.stderr()
