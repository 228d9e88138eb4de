"""The server's defences that need the engine in this process: a client that stops reading a
stream is cancelled once it is behind by the bound (the engine never waits for it, the others go
on), a stuck step makes /health fail, a failed step is a 500 and the next request is served."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx2
import pytest

from strata.runtime.commands.serve import serving_knobs
from strata.runtime.engine import Engine
from strata.runtime.opener import open_model, open_program
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.batch_engine import Observer, ServeEngine

pytest.importorskip("fastapi")
from strata.runtime.serve.server import HttpLimits, create_app  # noqa: E402

CTX, PAGE, ROWS = 64, 16, 2


@pytest.fixture(scope="module")
def opened(serve_model):
    opened = open_model(serve_model, "cpu", {"ctx": CTX, "PageSize": PAGE}, cache_dir=serve_model / "engine-serve",
                        quiet=True)
    page, pages = serving_knobs(opened.model, opened.knobs, kv_pages=None, max_num_seqs=ROWS)
    return opened, page, pages


class _Finished(Observer):
    def __init__(self):
        self.handles = []

    def finished(self, handle) -> None:
        self.handles.append(handle)


class _Wrapped:
    """The program, with a hook before each call (`before(n)`, n counting from 1)."""

    def __init__(self, program, before):
        self.program, self.before, self.calls = program, before, 0
        for name in ("entries", "vocab", "n_ctx", "runtime", "name"):
            setattr(self, name, getattr(program, name))

    def chooser(self):
        return self.program.chooser()

    def call(self, entry, **inputs):
        self.calls += 1
        self.before(self.calls)
        return self.program.call(entry, **inputs)


def _engine(opened, before=lambda n: None) -> ServeEngine:
    opened, page, pages = opened
    return ServeEngine(_Wrapped(opened.program(), before), opened.tokenizer(), page_size=page, num_pages=pages,
                       max_num_seqs=ROWS)


def _scope(path: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}


async def _call(app, body: dict, stall_after_first: bool = False):
    """One POST /v1/completions straight through ASGI: (status, the body bytes sent). With
    `stall_after_first`, the client stops reading after the first piece: its send never returns."""
    sent: list[dict] = []
    request_read = False
    never = asyncio.Event()

    async def receive():
        nonlocal request_read
        if not request_read:
            request_read = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await never.wait()  # the client neither sends more nor goes away

    async def send(message):
        sent.append(message)
        if stall_after_first and message["type"] == "http.response.body" and message.get("body"):
            await never.wait()

    task = asyncio.create_task(app(_scope("/v1/completions"), receive, send))
    return task, sent


def _body_of(sent: list[dict]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_client_that_stops_reading_is_cancelled_and_the_others_go_on(opened):
    engine = _engine(opened)
    bound, longest = 4, 56
    app = create_app(engine, "tiny", limits=HttpLimits(max_pending_events=bound))
    finished = engine.observer = _Finished()
    engine.start()
    greedy = {"prompt": [5, 6, 7], "max_tokens": longest, "temperature": 0}

    async def scenario():
        stalled, stalled_sent = await _call(app, {**greedy, "stream": True}, stall_after_first=True)
        other, other_sent = await _call(app, {**greedy, "prompt": [9, 8, 7, 6]})
        await asyncio.wait_for(other, 60)
        for _ in range(600):  # the stalled one: cancelled by the bound, its client still connected
            if len(finished.handles) == 2:
                break
            await asyncio.sleep(0.05)
        assert not stalled.done()
        stalled.cancel()
        return stalled_sent, other_sent

    try:
        stalled_sent, other_sent = asyncio.run(scenario())
        reasons = {tuple(h.prompt): (h.finish_reason, h.completion_tokens) for h in finished.handles}
        reason, made = reasons[(5, 6, 7)]
        assert reason == "cancelled" and made < longest, reasons
        assert engine.in_flight == 0 and engine.stats().pages_used == 0
        assert stalled_sent[0]["status"] == 200
        other = json.loads(_body_of(other_sent))
        model = opened[0].model
        alone = Engine(open_program(model, "cpu", {"ctx": CTX}, cache_dir=model.root / "engine-alone", quiet=True),
                       opened[0].tokenizer())
        want = "".join(c.text for c in alone.stream([9, 8, 7, 6], SamplingParams(), longest))
        assert other["choices"][0]["text"] == want
    finally:
        engine.close()


def test_a_stuck_step_makes_health_fail(opened):
    entered, release = threading.Event(), threading.Event()

    def before(n):
        if n == 1:
            entered.set()
            release.wait(30)

    engine = _engine(opened, before)
    app = create_app(engine, "tiny", limits=HttpLimits(stall_timeout=0.3))
    engine.start()

    async def health():
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://test") as c:
            return await c.get("/health")

    try:
        assert asyncio.run(health()).status_code == 200
        done = threading.Event()
        engine.submit([5, 6, 7], 4, emit=lambda e: done.set() if not hasattr(e, "text") else None)
        assert entered.wait(30)
        assert asyncio.run(health()).status_code == 200  # a step may run a while
        threading.Event().wait(0.6)
        stuck = asyncio.run(health())
        assert stuck.status_code == 503 and stuck.json()["error"]["code"] == "engine_stalled", stuck.text
        release.set()
        assert done.wait(60)
        assert asyncio.run(health()).status_code == 200
    finally:
        release.set()
        engine.close()


def test_a_failed_step_is_a_500_and_the_next_request_is_served(opened):
    def before(n):
        if n == 1:
            raise ZeroDivisionError("a bug in the step")

    engine = _engine(opened, before)
    app = create_app(engine, "tiny")
    engine.start()

    async def post():
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://test") as c:
            return await c.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0},
                                timeout=60)

    try:
        failed = asyncio.run(post())
        assert failed.status_code == 500 and "ZeroDivisionError" in failed.json()["error"]["message"]
        later = asyncio.run(post())
        assert later.status_code == 200 and later.json()["usage"]["completion_tokens"] == 4
    finally:
        engine.close()
