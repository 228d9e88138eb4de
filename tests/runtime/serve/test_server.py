"""`strata serve` on a tiny model, through the official `openai` client and raw HTTP: its text is
`strata generate`'s for the same request and seed, concurrent streams each get what they get
alone (pages back to 0 after), and every fault is an OpenAI-shaped error, never a crash."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx2
import pytest

from serve_support import API_KEY, CTX, running_server
from strata.pipeline import load_model
from strata.runtime.engine import Engine
from strata.runtime.opener import model_tokenizer, open_program
from strata.runtime.sampling import SamplingParams
from support import run_tool

openai = pytest.importorskip("openai")

SYSTEM = "Be terse: one short line."
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(serve_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server")
    # 4-cell pages and fewer pages than 8 full rows: the shared system prompt hits the prefix
    # cache, and a busy moment preempts.
    with running_server(serve_model, tmp, "--api-key", API_KEY, "--max-num-seqs", "8", "--kv-pages", "48",
                        "--max-num-batched-tokens", "48", "--set", "PageSize=4") as s:
        yield s


@pytest.fixture(scope="module")
def alone(serve_model, tmp_path_factory):
    """The runtime's text API over the one loop: each request run by itself."""
    model = load_model(serve_model)
    program = open_program(model, "cpu", {"ctx": CTX}, cache_dir=tmp_path_factory.mktemp("alone"), quiet=True)
    return Engine(program, model_tokenizer(model))


def _client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def _metrics(server) -> dict[str, float]:
    text = httpx2.get(server.url + "/metrics", timeout=10).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def _idle(server) -> dict[str, float]:
    """The metrics once nothing runs (a cancelled request leaves at the engine's next step)."""
    deadline = time.monotonic() + 10
    while True:
        m = _metrics(server)
        if (m["strata_requests_running"] == 0 and m["strata_requests_waiting"] == 0) or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


def _text(alone, prompt, params, n, stop=()):
    stream = alone.generate(prompt, params, max_new_tokens=n, stop=stop)
    for _ in stream:
        pass
    return stream.text, stream.generation


def test_openai_client_gets_strata_generates_text(server, serve_model, alone, tmp_path):
    client = _client(server)
    (model,) = client.models.list().data
    assert model.id == serve_model.name
    sampled = dict(temperature=0.8, top_p=0.95, seed=7)
    got = client.completions.create(model=model.id, prompt="Once upon a time", max_tokens=12, **sampled)
    gen = run_tool("generate", str(serve_model), "--prompt", "Once upon a time", "--max-new-tokens", "12",
                   "--temperature", "0.8", "--top-p", "0.95", "--seed", "7", "--ctx", str(CTX),
                   "--cache-dir", str(tmp_path / "cache"))
    assert gen.returncode == 0, gen.stderr
    text = got.choices[0].text
    assert gen.stdout == text + ("" if text.endswith("\n") else "\n") and text
    assert got.usage.prompt_tokens == len(alone.encode("Once upon a time")) and got.usage.completion_tokens == 12
    assert got.choices[0].finish_reason == "length"

    chunks = list(client.completions.create(model=model.id, prompt="Once upon a time", max_tokens=12, stream=True,
                                            stream_options={"include_usage": True}, **sampled))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == 12 and [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi"}]
    want, _ = _text(alone, messages, SamplingParams(), 10)
    reply = client.chat.completions.create(model=model.id, messages=messages, max_completion_tokens=10, temperature=0)
    assert reply.choices[0].message.content == want and reply.choices[0].message.role == "assistant"
    streamed = client.chat.completions.create(model=model.id, messages=messages, max_tokens=10, temperature=0,
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want

    # n choices: choice i draws with seed + i; a stop string cuts the text before it
    two = client.completions.create(model=model.id, prompt="The", max_tokens=8, n=2, temperature=1.0, seed=3,
                                    presence_penalty=0.5, frequency_penalty=0.2,
                                    extra_body={"top_k": 20, "min_p": 0.01})  # vLLM's fields, beside OpenAI's
    for i, choice in enumerate(sorted(two.choices, key=lambda c: c.index)):
        params = SamplingParams(temperature=1.0, seed=3 + i, presence_penalty=0.5, frequency_penalty=0.2, top_k=20,
                                min_p=0.01)
        assert choice.text == _text(alone, "The", params, 8)[0]
    full, _ = _text(alone, "Once upon a time", SamplingParams(), 16)
    stop = full[3:5]
    cut = client.completions.create(model=model.id, prompt="Once upon a time", max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].text == _text(alone, "Once upon a time", SamplingParams(), 16, stop=[stop])[0]
    assert cut.choices[0].finish_reason == "stop" and stop not in cut.choices[0].text


def test_concurrent_streams_each_get_their_own_reply(server, alone):
    client = _client(server)
    requests = []
    for i in range(48):
        n = 1 + (i * 7) % 16
        if i % 3 == 2:
            requests.append(("completion", f"Story {i}: once upon a time there was" + " a" * (i % 5), n))
        else:
            messages = [{"role": "user", "content": f"Question {i}?" + " Why" * (i % 4)}]
            requests.append(("chat", [{"role": "system", "content": SYSTEM}] * (i % 2 == 0) + messages, n))
    got: dict[int, str] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(ids):
        try:
            for i in ids:
                kind, prompt, n = requests[i]
                if kind == "chat":
                    out = client.chat.completions.create(model="tiny", messages=prompt, max_tokens=n, temperature=0,
                                                         stream=True)
                    text = "".join(c.choices[0].delta.content or "" for c in out if c.choices)
                else:
                    out = client.completions.create(model="tiny", prompt=prompt, max_tokens=n, temperature=0,
                                                    stream=True)
                    text = "".join(c.choices[0].text for c in out if c.choices)
                with lock:
                    got[i] = text
        except BaseException as e:  # reported below, with the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(range(k, len(requests), 16),)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    for i, (_, prompt, n) in enumerate(requests):
        assert got[i] == _text(alone, prompt, SamplingParams(), n)[0], i
    m = _idle(server)
    assert m["strata_kv_pages_used"] == 0 and m["strata_kv_pages_free"] == 48
    assert m["strata_prefix_cache_hits_total"] > 0  # the shared system prompt's pages were reused
    assert m["strata_time_to_first_token_seconds_count"] >= 48


def _post(server, path, body, headers=AUTH, raw=None):
    return httpx2.post(server.url + path, content=raw if raw is not None else json.dumps(body),
                      headers={"Content-Type": "application/json", **headers}, timeout=30)


def _error(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def test_faults_are_errors_and_leak_nothing(server):
    _error(_post(server, "/v1/completions", None, raw=b'{"prompt": "Hi", '), 400)
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": "many"}), 400)["param"] == "max_tokens"
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi", "temperature": [1]}), 400)["param"] == "temperature"
    assert _error(_post(server, "/v1/chat/completions", {"messages": "Hi"}), 400)["param"] == "messages"
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi", "stop": 3}), 400)["param"] == "stop"
    long = _error(_post(server, "/v1/completions", {"prompt": "word " * 200}), 400)
    assert f"context of {CTX} tokens" in long["message"]
    huge = _error(_post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 10**9}), 400)
    assert f"context of {CTX}" in huge["message"] and huge["param"] == "max_tokens"
    zero = _post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 0})
    assert zero.status_code == 200 and zero.json()["choices"][0]["text"] == ""
    assert zero.json()["usage"]["completion_tokens"] == 0
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi", "logprobs": 50}), 400)["param"] == "logprobs"
    assert _error(_post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                         "top_logprobs": 2}), 400)["param"] == "top_logprobs"
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi", "echo": True}), 400)["param"] == "echo"
    assert _error(_post(server, "/v1/completions", {"prompt": "Hi"}, headers={"Authorization": "Bearer nope"}),
                  401)["code"] == "invalid_api_key"
    _error(_post(server, "/v1/completions", {"prompt": "Hi"}, headers={}), 401)
    _error(httpx2.get(server.url + "/v1/nothing", headers=AUTH), 404)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()

    # a client gone mid-stream: its request is cancelled, stops early and its pages are freed
    # (uncancelled, the 120 tokens take about 0.15 s here; the cancel comes after one or two)
    before, longest = _metrics(server), 120
    with httpx2.Client(timeout=30) as c:
        with c.stream("POST", server.url + "/v1/completions", headers=AUTH,
                      json={"prompt": "Once upon a time", "max_tokens": longest, "temperature": 0, "stream": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
    m = _idle(server)
    assert m["strata_requests_running"] == 0 and m["strata_kv_pages_used"] == 0
    cancelled = 'strata_requests_finished_total{finish_reason="cancelled"}'
    assert m.get(cancelled, 0) - before.get(cancelled, 0) == 1, server.stderr()
    made = m["strata_generation_tokens_total"] - before["strata_generation_tokens_total"]
    assert made < longest, server.stderr()
    assert httpx2.get(server.url + "/health").json() == {"status": "ok"}
    assert "request " in server.stderr() and "Traceback" not in server.stderr()


def test_queue_full_then_sigterm_drains_and_exits_0(serve_model, tmp_path):
    with running_server(serve_model, tmp_path, "--max-num-seqs", "1", "--max-waiting", "1",
                        "--shutdown-timeout", "20") as s:
        body = {"prompt": "Once upon a time", "max_tokens": 50, "temperature": 0}
        results: list[httpx2.Response] = []
        threads = [threading.Thread(target=lambda: results.append(_post(s, "/v1/completions", body, headers={})))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        codes = sorted(r.status_code for r in results)
        assert codes[0] == 200 and codes[-1] == 429, codes
        assert all(r.headers.get("retry-after") for r in results if r.status_code == 429)

        with httpx2.Client(timeout=30) as c:
            # a long reply: it is still being made when the signal comes
            with c.stream("POST", s.url + "/v1/completions", json={**body, "max_tokens": 120, "stream": True}) as r:
                lines = r.iter_lines()
                first = next(lines)
                s.proc.send_signal(signal.SIGTERM)
                while httpx2.get(s.url + "/health", timeout=5).status_code == 200:  # until it is draining
                    time.sleep(0.01)
                late = _post(s, "/v1/completions", body, headers={})
                assert late.status_code == 503 and late.headers.get("retry-after"), late.text
                rest = [line for line in (first, *lines) if line]
        events = [json.loads(line[6:]) for line in rest if line.startswith("data: {")]
        assert rest[-1] == "data: [DONE]" and events[-1]["choices"][0]["finish_reason"] == "length"
        assert s.proc.wait(timeout=30) == 0, s.stderr()
        assert "Traceback" not in s.stderr()


def test_logprobs_are_the_log_probs_entrys(server, serve_model, alone, tmp_path):
    """The log-probabilities of the tokens served are what the program's log_probs_packed entry
    computes for the same sequence; the top ones are sorted and hold the greedy choice first."""
    import numpy as np

    client = _client(server)
    got = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=3)
    _, generation = _text(alone, "Once upon a time", SamplingParams(), 6)
    seq = generation.prompt + generation.ids
    program = open_program(load_model(serve_model), "cpu", {"ctx": CTX, "entries": "log_probs_packed"},
                           cache_dir=tmp_path / "lp", quiet=True)
    n = len(seq) - 1
    (want,) = program.call("log_probs_packed", tokens=seq[:-1], positions=list(range(n)), segments=[0] * n,
                           targets=seq[1:])
    lp = got.choices[0].logprobs
    np.testing.assert_allclose(lp.token_logprobs, want[len(generation.prompt) - 1:], atol=1e-4)
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        # keyed by text, as OpenAI's legacy format is: byte pieces that decode alike share a key
        assert 1 <= len(top) <= 3 and max(top.values()) <= chosen + 1e-9  # greedy: the chosen is the likeliest
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                          temperature=0, logprobs=True, top_logprobs=2, stream=True)
    entries = [e for c in chat if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert 1 <= len(entries) <= 4
    for e in entries:
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == 2 and tops == sorted(tops, reverse=True) and abs(tops[0] - e.logprob) < 1e-9
