"""`strata serve` on a tiny hybrid (Qwen3.5-MoE: Gated DeltaNet layers and a gated-attention
one) through the official `openai` client: chats sharing a long system prompt reuse its KV
pages and its recurrent state, and each reply is the one the request gets alone."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest

from serve_support import API_KEY, CTX, running_server
from strata.models.default_vocab import DATA_DIR, FILES, VOCAB_SIZE
from strata.pipeline import load_model
from strata.runtime.engine import Engine
from strata.runtime.opener import model_tokenizer, open_program
from strata.runtime.sampling import SamplingParams
from support import TINY, tiny, write_checkpoint

openai = pytest.importorskip("openai")

SYSTEM = ("You are a careful assistant. Answer in one short line, plainly, without lists, and say so "
          "when you do not know.")
QUESTIONS = ["Say hi", "What is two plus two?", "Name a colour", "Why is the sky blue?", "Count to three",
             "Tell me a word"]


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    d = write_checkpoint(tiny("qwen3.5-moe", vocab_size=VOCAB_SIZE), tmp_path_factory.mktemp("hybrid") / "tiny",
                         std=0.5)
    assert TINY["qwen3.5-moe"].max_position_embeddings >= CTX
    for name in FILES:
        shutil.copyfile(DATA_DIR / name, d / name)
    return d


def _metrics(server) -> dict[str, float]:
    text = httpx2.get(server.url + "/metrics", timeout=10).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_shared_system_prompt_reuses_the_hybrids_state(hybrid_model, tmp_path):
    model = load_model(hybrid_model)
    alone = Engine(open_program(model, "cpu", {"ctx": CTX}, cache_dir=tmp_path / "alone", quiet=True),
                   model_tokenizer(model))

    def want(messages, params):
        stream = alone.generate(messages, params, max_new_tokens=8)
        for _ in stream:
            pass
        return stream.text

    requests = []
    for i, question in enumerate(QUESTIONS):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        sampled = dict(temperature=0.8, top_p=0.95, seed=i) if i % 2 else dict(temperature=0)
        requests.append((messages, sampled, want(messages, SamplingParams(**sampled))))

    with running_server(hybrid_model, tmp_path, "--api-key", API_KEY, "--max-num-seqs", "4", "--set", "PageSize=4",
                        "--max-num-batched-tokens", "32", "--prefix-state-snapshots", "16") as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)

        def ask(request):
            messages, sampled, _ = request
            reply = client.chat.completions.create(model=hybrid_model.name, messages=messages, max_tokens=8,
                                                   **sampled)
            return reply.choices[0].message.content

        # two alone first (the second keeps the state where the shared prompt ends), then the rest at once
        got = [ask(r) for r in requests[:2]]
        with ThreadPoolExecutor(4) as pool:
            got += list(pool.map(ask, requests[2:]))
        assert got == [text for _, _, text in requests]
        m = _metrics(server)
        assert "prefix caching is off" not in server.stderr()
    assert m["strata_prefix_state_restores_total"] >= len(QUESTIONS) - 2
    assert m["strata_prefix_cache_hits_total"] > 0 and m["strata_prefix_state_snapshots"] > 0
    assert 0 < m["strata_prefix_state_snapshot_bytes"] and m["strata_kv_pages_used"] == 0
