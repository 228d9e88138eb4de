"""Requests generated from the server's own OpenAPI document by Schemathesis (property-based:
bodies that follow the schema and bodies that break it) to both generating endpoints: none is
answered 5xx, the server never goes down, and every page is back at the end.

STRATA_SCHEMA_EXAMPLES sets how many requests are sent in all (default 200; 1000 for the full run);
as many again go to /tokenize, /detokenize and /v1/embeddings, on a server of their own."""

from __future__ import annotations

import os
import time

import httpx2
import pytest

from serve_support import API_KEY, running_server

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

EXAMPLES = int(os.environ.get("STRATA_SCHEMA_EXAMPLES", "200"))


def test_generated_requests_never_get_a_server_error(serve_model, tmp_path):
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode

    with running_server(serve_model, tmp_path, "--api-key", API_KEY, "--max-num-seqs", "4") as server:
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        sent: list[tuple[str, int]] = []
        operations = [("/v1/completions", mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
        operations += [("/v1/chat/completions", mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
        headers = {"Authorization": f"Bearer {API_KEY}"}
        for path, mode in operations:
            operation = schema[path]["POST"]

            @settings(max_examples=EXAMPLES // len(operations), deadline=None, database=None, derandomize=True,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case):
                started = time.monotonic()
                response = case.call(base_url=server.url, headers=headers, timeout=60)
                sent.append((path, response.status_code))
                if response.status_code >= 500:
                    pytest.fail(f"{path} answered {response.status_code}: {response.text[:300]}\n"
                                f"the body: {case.body!r:.300}\nthe server's log ends:\n{server.stderr()[-1500:]}")
                assert time.monotonic() - started < 60

            check()
        assert server.proc.poll() is None
        assert httpx2.get(server.url + "/health", timeout=10).status_code == 200
        m = {}
        for _ in range(200):
            text = httpx2.get(server.url + "/metrics", timeout=10).text
            m = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                 if line and not line.startswith("#")}
            if m["strata_kv_pages_used"] == 0:
                break
            time.sleep(0.05)
        assert m["strata_kv_pages_used"] == 0
        assert "Traceback" not in server.stderr()
        ok = sum(1 for _, code in sent if code == 200)
        print(f"schemathesis: {len(sent)} requests, {ok} answered 200, "
              f"{len(sent) - ok} refused 4xx ({sorted({c for _, c in sent if c != 200})})")
        assert len(sent) >= EXAMPLES * 0.9 and ok > 0


def test_generated_tokenizer_and_embedding_requests_never_get_a_server_error(serve_model, tmp_path):
    """/tokenize, /detokenize and /v1/embeddings (whose first request compiles its entry)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode

    with running_server(serve_model, tmp_path, "--api-key", API_KEY, "--max-num-seqs", "2") as server:
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        sent: list[tuple[str, int]] = []
        operations = [(path, mode) for path in ("/tokenize", "/detokenize", "/v1/embeddings")
                      for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
        headers = {"Authorization": f"Bearer {API_KEY}"}
        for path, mode in operations:
            operation = schema[path]["POST"]

            @settings(max_examples=EXAMPLES // len(operations), deadline=None, database=None, derandomize=True,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case):
                response = case.call(base_url=server.url, headers=headers, timeout=60)
                sent.append((path, response.status_code))
                if response.status_code >= 500:
                    pytest.fail(f"{path} answered {response.status_code}: {response.text[:300]}\n"
                                f"the body: {case.body!r:.300}\nthe server's log ends:\n{server.stderr()[-1500:]}")

            check()
        assert server.proc.poll() is None
        assert httpx2.get(server.url + "/health", timeout=10).status_code == 200
        assert "Traceback" not in server.stderr()
        ok = {path: sum(1 for p, code in sent if p == path and code == 200) for path, _ in operations}
        print(f"schemathesis: {len(sent)} requests, answered 200 per path {ok}, the others "
              f"{sorted({c for _, c in sent if c != 200})}")
        assert len(sent) >= EXAMPLES * 0.9 and all(ok.values())
