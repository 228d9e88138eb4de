"""`strata serve` at scale on a tiny model: 64 concurrent streaming clients send 256 greedy
requests (completions and chats of mixed lengths, a third sharing a system prompt) through fewer
KV pages than they would all hold (so some are preempted and recomputed); each gets the text it
gets alone, and the pages are all back at the end."""

from __future__ import annotations

import asyncio
import json
import time

import httpx2
import pytest

from serve_support import CTX, running_server
from strata.pipeline import load_model
from strata.runtime.engine import Engine
from strata.runtime.opener import model_tokenizer, open_program
from strata.runtime.sampling import SamplingParams

pytest.importorskip("fastapi")

CLIENTS, REQUESTS, DISTINCT, PAGES = 64, 256, 64, 96
SYSTEM = "You are a terse assistant; answer in one short line."


def _distinct_requests() -> list[tuple[str, object, int]]:
    """(kind, prompt, max_tokens): mixed prompt lengths and outputs of 1 to 12 tokens."""
    out = []
    for i in range(DISTINCT):
        n = 1 + (i * 5) % 12
        if i % 3 == 0:
            question = {"role": "user", "content": f"Item {i}?" + " and" * (i % 7)}
            out.append(("chat", [{"role": "system", "content": SYSTEM}, question], n))
        elif i % 3 == 1:
            out.append(("chat", [{"role": "user", "content": f"Tell me about {i}" + " more" * (i % 5)}], n))
        else:
            out.append(("completion", f"Story {i}: once upon a time" + " there was" * (i % 6), n))
    return out


async def _stream(client: httpx2.AsyncClient, kind: str, prompt, n: int) -> str:
    path, body = (("/v1/chat/completions", {"messages": prompt}) if kind == "chat"
                  else ("/v1/completions", {"prompt": prompt}))
    text = []
    async with client.stream("POST", path, json={**body, "max_tokens": n, "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            for choice in event["choices"]:
                text.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(text)


def test_64_streaming_clients_256_requests_each_get_their_own_text(serve_model, tmp_path):
    distinct = _distinct_requests()
    model = load_model(serve_model)
    alone = Engine(open_program(model, "cpu", {"ctx": CTX}, cache_dir=tmp_path / "alone", quiet=True),
                   model_tokenizer(model))
    want = []
    for _, prompt, n in distinct:
        stream = alone.generate(prompt, SamplingParams(), max_new_tokens=n)
        for _ in stream:
            pass
        want.append(stream.text)
    order = [(i * 37) % DISTINCT for i in range(REQUESTS)]  # each distinct request 4 times, interleaved

    with running_server(serve_model, tmp_path, "--max-num-seqs", "16", "--kv-pages", str(PAGES),
                        "--max-num-batched-tokens", "64", "--max-waiting", str(REQUESTS),
                        "--set", "PageSize=4") as server:
        async def run_all():
            limits = httpx2.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
            async with httpx2.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:
                return await asyncio.gather(*(_stream(client, *distinct[k]) for k in order))

        started = time.monotonic()
        got = asyncio.run(asyncio.wait_for(run_all(), 240))
        took = time.monotonic() - started
        for i, k in enumerate(order):
            assert got[i] == want[k], (i, distinct[k])
        metrics = {}
        for _ in range(200):  # a finished stream's pages go back at the engine's next step
            text = httpx2.get(server.url + "/metrics", timeout=10).text
            metrics = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                       if line and not line.startswith("#")}
            if metrics["strata_kv_pages_used"] == 0 and metrics["strata_requests_running"] == 0:
                break
            time.sleep(0.05)
        assert metrics["strata_kv_pages_used"] == 0 and metrics["strata_kv_pages_free"] == PAGES
        assert metrics["strata_requests_running"] == 0 and metrics["strata_requests_waiting"] == 0
        assert metrics["strata_prefix_cache_hits_total"] > 0
        print(f"{REQUESTS} requests from {CLIENTS} clients in {took:.1f} s; "
              f"{metrics['strata_preemptions_total']:.0f} preemptions, "
              f"{metrics['strata_prefix_cache_hits_total']:.0f} prefix-cache page hits")
