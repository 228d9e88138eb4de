"""The OpenAI-compatible HTTP server over a `ServeEngine`: FastAPI on uvicorn, the `serve` extra
(pip install -e '.[serve]'), imported by nothing but `strata serve`.

    app = create_app(engine, model_name="tiny", api_key=None)
    serve_forever(app, engine, host="127.0.0.1", port=8000, shutdown_timeout=10)

Endpoints: GET /v1/models, POST /v1/completions and /v1/chat/completions (streamed as
server-sent events or not; `requests.py` reads their bodies), GET /health, GET /metrics
(Prometheus text), GET /openapi.json (the bodies' schemas: `openapi.py`); POST /tokenize,
/detokenize and /v1/embeddings (`text_routes.py`; embeddings when an `Embedder` is given). Errors are OpenAI's
shape, `{"error": {"message", "type", "param", "code"}}`.
SIGTERM stops admission (new requests: 503), lets the requests in flight finish for up to
`shutdown_timeout` seconds, cancels the rest, and exits 0.

What one client can do to the others is bounded (`HttpLimits`): a body larger than
`max_body_bytes` is answered 413 before it is read whole (its Content-Length, or the bytes
counted as a chunked body comes); a body still arriving after `read_timeout` seconds is answered
408, and a connection whose request head has not all come in that time is closed (a head
trickled a byte at a time); more than `max_headers` headers 431, a head larger than `max_header_bytes` is refused by
h11 itself (400); a stream whose client stopped reading is cancelled once it is
`max_pending_events` events behind, so its events never pile up. /health fails (503) while the
engine is stalled (`ServeEngine.stalled`: a step running longer than `stall_timeout` seconds
with work pending, or its thread gone). Besides Strata's own metrics, /metrics has the gauges
routers read (Gateway API Inference Extension, llm-d) under vLLM's names and `model_name` label.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from strata.errors import StrataError, say
from strata.runtime.serve.batch_engine import (
    DoneEvent,
    Draining,
    ErrorEvent,
    Event,
    Handle,
    Observer,
    QueueFull,
    ServeEngine,
    TextEvent,
)
from strata.runtime.serve.chat_output import ChatOutput
from strata.runtime.serve.openapi import chat_body, completion_body, json_body
from strata.runtime.serve.requests import ApiError, ApiRequest, parse_chat, parse_completion
from strata.runtime.serve.scheduler import SchedulerError
from strata.runtime.serve.text_routes import add_text_routes

#: Seconds a client is told to wait when the queue is full or the server is going away.
RETRY_AFTER = "1"


@dataclass(frozen=True)
class HttpLimits:
    """What one request may take of the server (see the module's doc)."""

    #: The largest request body, in bytes (a prompt of a long context is well under a MiB).
    max_body_bytes: int = 8 << 20
    #: Seconds a request's head, and then its body, may each take to arrive, all of it.
    read_timeout: float = 30.0
    #: The most header lines of a request, and the most bytes of its head (h11's limit).
    max_headers: int = 100
    max_header_bytes: int = 16 << 10
    #: The most events a streamed reply may fall behind before its request is cancelled.
    max_pending_events: int = 256
    #: Seconds a step may run, with work pending, before /health reports the engine stalled.
    stall_timeout: float = 60.0


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


#: The window of the tokens/s gauge, in seconds.
RATE_WINDOW = 10.0


class _EngineTotals:
    """The engine's own running totals as Prometheus counters, read at each scrape."""

    def __init__(self, engine: ServeEngine):
        self.engine = engine

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        s = self.engine.stats()
        for name, doc, value in (("strata_prefix_cache_hits", "KV pages found in the prefix cache",
                                  s.prefix_cache_hits),
                                 ("strata_prefix_state_restores", "Recurrent states restored from the prefix cache "
                                  "(a hybrid family's)", s.state_snapshots_restored),
                                 ("strata_preemptions", "Sequences preempted for pages (recomputed later)",
                                  s.preemptions),
                                 ("strata_steps", "Calls of the paged entry", s.steps),
                                 ("strata_computed_tokens", "Tokens run through the model (prompts, recomputes, "
                                  "decode rows)", s.computed_tokens)):
            yield CounterMetricFamily(name, doc, value=value)


class Metrics(Observer):
    """The server's Prometheus metrics, in a registry of its own."""

    def __init__(self, engine: ServeEngine, model_name: str = ""):
        self.registry = r = CollectorRegistry()

        def kv_usage() -> float:
            s = engine.stats()
            return s.pages_used / max(s.pages_used + s.pages_free, 1)

        # The gauges routers read (Gateway API Inference Extension, llm-d), under vLLM's names:
        # its KV-cache gauge is kv_cache_usage_perc now, gpu_cache_usage_perc before (a fraction, 1 = full).
        for name, doc, value in (("vllm:num_requests_running", "Requests being stepped",
                                  lambda: engine.stats().running),
                                 ("vllm:num_requests_waiting", "Requests waiting for a row or pages",
                                  lambda: engine.stats().waiting),
                                 ("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent", kv_usage),
                                 ("vllm:gpu_cache_usage_perc", "KV-cache usage; 1 means 100 percent (vLLM's "
                                  "former name)", kv_usage)):
            Gauge(name, doc, ["model_name"], registry=r).labels(model_name).set_function(value)
        Gauge("strata_requests_running", "Requests being stepped", registry=r).set_function(
            lambda: engine.stats().running)
        Gauge("strata_requests_waiting", "Requests waiting for a row or pages", registry=r).set_function(
            lambda: engine.stats().waiting)
        Gauge("strata_kv_pages_used", "KV pages held by a sequence", registry=r).set_function(
            lambda: engine.stats().pages_used)
        Gauge("strata_kv_pages_free", "KV pages a sequence could be given", registry=r).set_function(
            lambda: engine.stats().pages_free)
        Gauge("strata_prefix_state_snapshots", "Recurrent states kept at KV page ends (a hybrid family's prefix "
              "cache)", registry=r).set_function(lambda: engine.stats().state_snapshots)
        Gauge("strata_prefix_state_snapshot_bytes", "Bytes of the recurrent states kept at KV page ends",
              registry=r).set_function(lambda: engine.stats().state_snapshot_bytes)
        r.register(_EngineTotals(engine))
        self._recent: list[tuple[float, int]] = []  # (time, tokens made by then), the last RATE_WINDOW s
        Gauge("strata_generation_tokens_per_second", f"Tokens generated per second over the last {RATE_WINDOW:g} s",
              registry=r).set_function(self._rate)
        self.prompt_tokens = Counter("strata_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("strata_generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter("strata_requests_finished", "Requests finished", ["finish_reason"], registry=r)
        buckets = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
        self.ttft = Histogram("strata_time_to_first_token_seconds", "Time to first token", buckets=buckets, registry=r)
        self.itl = Histogram("strata_inter_token_latency_seconds", "Time between tokens", buckets=buckets, registry=r)

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)
        self._made()

    def inter_token(self, seconds: float) -> None:
        self.itl.observe(seconds)
        self._made()

    def _made(self) -> None:
        self.generation_tokens.inc()
        now = time.monotonic()
        total = (self._recent[-1][1] if self._recent else 0) + 1
        self._recent.append((now, total))
        while self._recent and self._recent[0][0] < now - RATE_WINDOW:
            self._recent.pop(0)

    def _rate(self) -> float:
        recent = list(self._recent)
        if len(recent) < 2:
            return 0.0
        now = time.monotonic()
        if recent[-1][0] < now - RATE_WINDOW:
            return 0.0
        return (recent[-1][1] - recent[0][1]) / RATE_WINDOW

    def finished(self, handle: Handle) -> None:
        self.prompt_tokens.inc(len(handle.prompt))
        self.requests.labels(handle.finish_reason or "error").inc()
        ttft = f"{handle.first_token_at - handle.arrived:.3f}s" if handle.first_token_at else "-"
        say(f"request {handle.request_id or hex(id(handle))}: {len(handle.prompt)} prompt + {handle.completion_tokens} completion tokens, "
            f"first token {ttft}, total {time.perf_counter() - handle.arrived:.3f}s, {handle.finish_reason}")


def create_app(engine: ServeEngine, model_name: str, api_key: str | None = None,
               limits: HttpLimits = HttpLimits(), embedder: Any = None) -> FastAPI:
    app = FastAPI(title="strata serve", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    metrics = Metrics(engine, model_name)
    engine.observer = metrics
    created = int(time.time())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500
                              else "server_error")

    @app.middleware("http")
    async def authorize(request: Request, call_next):
        if len(request.headers.raw) > limits.max_headers:
            return error_response(431, f"the request has {len(request.headers.raw)} header lines; at most "
                                  f"{limits.max_headers}", code="too_many_headers", headers={"Connection": "close"})
        if api_key is not None and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return error_response(401, "Incorrect API key provided (Authorization: Bearer KEY)",
                                      code="invalid_api_key")
        return await call_next(request)

    @app.get("/health")
    async def health():
        if engine.draining:
            return error_response(503, "the server is shutting down", "server_error", headers={"Retry-After": RETRY_AFTER})
        stalled = engine.stalled(limits.stall_timeout)
        if stalled is not None:
            return error_response(503, f"the engine is stalled: {stalled}", "server_error", code="engine_stalled")
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics_text():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "strata", "max_model_len": engine.limits.n_ctx}]}

    @app.post("/v1/completions", openapi_extra=json_body(
        completion_body(model_name, engine.limits.vocab, engine.limits.n_ctx)))
    async def completions(request: Request):
        return await _serve(request, chat=False)

    @app.post("/v1/chat/completions", openapi_extra=json_body(chat_body(model_name, engine.limits.n_ctx)))
    async def chat_completions(request: Request):
        return await _serve(request, chat=True)

    async def read_json(request: Request) -> Any:
        """The request's JSON body, or the error Response that answers it."""
        raw = await _read_body(request, limits)
        if isinstance(raw, Response):
            return raw
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return error_response(400, f"the request body is not valid JSON: {e}", code="invalid_json")

    add_text_routes(app, engine, model_name, embedder, read_json, error_response)

    async def _serve(request: Request, chat: bool):
        raw = await _read_body(request, limits)
        if isinstance(raw, Response):
            return raw
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return error_response(400, f"the request body is not valid JSON: {e}", code="invalid_json")
        try:
            parsed = (parse_chat if chat else parse_completion)(body, engine.limits, model_name)
        except ApiError as e:
            return error_response(e.status, e.message, param=e.param, code=e.code)
        except StrataError as e:  # a chat template or a text the tokenizer refuses
            return error_response(400, str(e))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        # a whole reply is read as it comes; a stream is read as fast as its client reads
        outbox = _Outbox(asyncio.get_running_loop(), engine, limits.max_pending_events if parsed.stream else None)
        handles = outbox.handles
        try:
            for i in range(parsed.n):
                handles.append(engine.submit(parsed.prompt, parsed.max_tokens, sampling=parsed.choice_sampling(i),
                                             stop=parsed.stop, emit=outbox.emit_for(i), logprobs=parsed.logprobs,
                                             constraint=parsed.constraint,
                                             request_id=rid if parsed.n == 1 else f"{rid}/{i}"))
        except QueueFull as e:
            _cancel(engine, handles)
            return error_response(429, f"{e}; retry later", "rate_limit_error", code="queue_full",
                                  headers={"Retry-After": RETRY_AFTER})
        except Draining as e:
            _cancel(engine, handles)
            return error_response(503, str(e), "server_error", code="shutting_down",
                                  headers={"Retry-After": RETRY_AFTER})
        except SchedulerError as e:
            return error_response(400, str(e), param="max_tokens", code="context_length_exceeded")
        reply = _Reply(rid, model_name, chat, parsed, handles, outbox.queue, engine.tokenizer)
        if parsed.stream:
            return StreamingResponse(reply.events(engine), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await reply.whole(engine, request)

    return app


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limits: HttpLimits) -> bytes | Response:
    """The request's body, or the error that answers it: 413 as soon as it is known to be too
    large (never read whole), 408 when it has not all come in `read_timeout` seconds. Either
    closes the connection, so the rest of the body is never read."""
    limit, close = limits.max_body_bytes, {"Connection": "close"}
    too_large = f"the request body is larger than {limit} bytes (--max-body-bytes)"
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        return error_response(413, too_large, code="body_too_large", headers=close)
    chunks: list[bytes] = []

    async def read() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.read_timeout)
    except _BodyTooLarge:
        return error_response(413, too_large, code="body_too_large", headers=close)
    except asyncio.TimeoutError:
        return error_response(408, f"the request body did not arrive within {limits.read_timeout:g} s",
                              code="body_timeout", headers=close)
    except ClientDisconnect:
        return Response(status_code=499)
    return b"".join(chunks)


class _Outbox:
    """A request's events, from the engine's thread to its reply on the server's loop, as
    (choice, event). With a `bound`, a reply that falls more than `bound` events behind (a client
    that stopped reading) has its request cancelled and gets an error in place of the rest: the
    engine never waits for a reader, and a stalled one holds no more than `bound` events."""

    def __init__(self, loop: asyncio.AbstractEventLoop, engine: ServeEngine, bound: int | None):
        self.loop, self.engine, self.bound = loop, engine, bound
        self.queue: asyncio.Queue = asyncio.Queue()
        self.handles: list[Handle] = []
        self.overflowed = False

    def emit_for(self, choice: int):
        def emit(event: Event) -> None:
            try:
                self.loop.call_soon_threadsafe(self._put, choice, event)
            except RuntimeError:  # the server's loop has closed: nobody is listening
                pass
        return emit

    def _put(self, choice: int, event: Event) -> None:
        if self.overflowed:
            return
        if self.bound is not None and self.queue.qsize() >= self.bound:
            self.overflowed = True
            _cancel(self.engine, self.handles)
            say(f"a client fell {self.bound} events behind its stream: its request was cancelled")
            event = ErrorEvent(f"the client fell more than {self.bound} events behind the stream; the request "
                               "was cancelled")
        self.queue.put_nowait((choice, event))


def _cancel(engine: ServeEngine, handles: list[Handle]) -> None:
    for h in handles:
        engine.cancel(h)


FINISH = {"stop": "stop", "length": "length", "cancelled": "abort"}


class _Reply:
    """One request's answer, whole or as server-sent events, from its one queue of (choice, event)."""

    def __init__(self, rid: str, model: str, chat: bool, parsed: ApiRequest, handles: list[Handle],
                 queue: asyncio.Queue, tokenizer: Any):
        self.rid, self.model, self.chat, self.parsed, self.tokenizer = rid, model, chat, parsed, tokenizer
        self.handles, self.queue = handles, queue
        self.created = int(time.time())
        self.object = ("chat.completion" if chat else "text_completion")

    def usage(self) -> dict[str, int]:
        completion = sum(h.completion_tokens for h in self.handles)
        prompt = len(self.parsed.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def whole(self, engine: ServeEngine, request: Request):
        n = self.parsed.n
        texts = [""] * n
        reasons: list[str | None] = [None] * n
        pieces: list[list[tuple[list[int], list]]] = [[] for _ in range(n)]
        try:
            while None in reasons:
                try:
                    i, event = await asyncio.wait_for(self.queue.get(), 0.5)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    continue
                if isinstance(event, TextEvent):
                    texts[i] += event.text
                    pieces[i].append((event.ids, event.logprobs))
                elif isinstance(event, DoneEvent):
                    reasons[i] = FINISH.get(event.finish_reason, event.finish_reason)
                else:
                    return error_response(500, event.message, "server_error")
        finally:
            _cancel(engine, [h for h in self.handles if h.finish_reason is None])
        choices = []
        for i, (text, reason) in enumerate(zip(texts, reasons)):
            ids = [t for p, _ in pieces[i] for t in p]
            lps = [x for _, lp in pieces[i] for x in lp]
            logprobs = self._logprobs(ids, lps, 0)
            if self.chat:
                message, reason = self._message(text, reason)
                choices.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": reason})
            else:
                choices.append({"index": i, "text": text, "logprobs": logprobs, "finish_reason": reason})
        return {"id": self.rid, "object": self.object, "created": self.created, "model": self.model,
                "choices": choices, "usage": self.usage()}

    def _message(self, text: str, reason: str | None) -> tuple[dict[str, Any], str | None]:
        """The assistant message of a whole reply and its finish reason (read for reasoning and tool calls)."""
        if self.parsed.chat_plan is None:
            return {"role": "assistant", "content": text}, reason
        out = ChatOutput(self.parsed.chat_plan)
        out.feed(text)
        out.finish()
        return out.message(), out.finish_reason(reason)

    def _chat_deltas(self, i: int, outputs: list[ChatOutput | None], text: str | None) -> list[dict[str, Any]]:
        """The deltas of choice i for the next piece of its text (None: its end)."""
        out = outputs[i]
        if out is None:
            return [{"content": text}] if text else []
        return out.feed(text) if text is not None else out.finish()

    def _chunk(self, choices: list[dict], usage: dict | None = None) -> str:
        body: dict[str, Any] = {"id": self.rid, "object": self.object + (".chunk" if self.chat else ""),
                                "created": self.created, "model": self.model, "choices": choices}
        if self.parsed.include_usage:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    def _logprobs(self, ids: list[int], lps: list, offset: int) -> dict | None:
        """OpenAI's logprobs object of these tokens (`offset`: where their text starts in the reply)."""
        if self.parsed.logprobs is None:
            return None
        text = [self.tokenizer.decode([t]) for t in ids]
        if self.chat:
            def entry(t: str, lp: float) -> dict:
                return {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
            return {"content": [{**entry(s, lp), "top_logprobs": [entry(self.tokenizer.decode([j]), v) for j, v in top]}
                                for s, (lp, top) in zip(text, lps)]}
        offsets = list(np.cumsum([offset] + [len(s) for s in text])[:-1].tolist()) if text else []
        return {"tokens": text, "token_logprobs": [lp for lp, _ in lps], "text_offset": offsets,
                "top_logprobs": [{self.tokenizer.decode([j]): v for j, v in top} for _, top in lps]}

    def _choice(self, i: int, text: str | None, reason: str | None, first: bool = False,
                logprobs: dict | None = None) -> dict:
        if not self.chat:
            return {"index": i, "text": text or "", "logprobs": logprobs, "finish_reason": reason}
        delta: dict[str, str] = {"role": "assistant", "content": ""} if first else {}
        if text:
            delta["content"] = text
        return {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": reason}

    async def events(self, engine: ServeEngine):
        n = self.parsed.n
        open_choices = n
        try:
            if self.chat:
                for i in range(n):
                    yield self._chunk([self._choice(i, None, None, first=True)])
            offsets = [0] * n
            plan = self.parsed.chat_plan if self.chat else None
            outputs = [ChatOutput(plan) if plan is not None else None for _ in range(n)]
            while open_choices:
                i, event = await self.queue.get()
                if isinstance(event, TextEvent) and not self.chat:
                    if event.text or (event.ids and self.parsed.logprobs is not None):
                        logprobs = self._logprobs(event.ids, event.logprobs, offsets[i])
                        offsets[i] += len(event.text)
                        yield self._chunk([self._choice(i, event.text, None, logprobs=logprobs)])
                elif isinstance(event, TextEvent):
                    deltas = self._chat_deltas(i, outputs, event.text)
                    if event.ids and self.parsed.logprobs is not None:
                        logprobs = self._logprobs(event.ids, event.logprobs, offsets[i])
                        deltas = [{**(deltas[0] if deltas else {}), "logprobs": logprobs}] + deltas[1:]
                    for delta in deltas:
                        logprobs = delta.pop("logprobs", None)
                        yield self._chunk([{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": None}])
                elif isinstance(event, DoneEvent):
                    open_choices -= 1
                    for delta in self._chat_deltas(i, outputs, None) if self.chat else ():
                        yield self._chunk([{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}])
                    reason = FINISH.get(event.finish_reason, event.finish_reason)
                    if outputs[i] is not None:
                        reason = outputs[i].finish_reason(reason)
                    yield self._chunk([self._choice(i, None, reason)])
                else:
                    payload = {"error": {"message": event.message, "type": "server_error", "param": None,
                                         "code": None}}
                    yield f"data: {json.dumps(payload)}\n\n"
                    return
            if self.parsed.include_usage:
                yield self._chunk([], self.usage())
            yield "data: [DONE]\n\n"
        finally:  # the client went away (or the reply ended): nothing of it keeps running
            _cancel(engine, [h for h in self.handles if h.finish_reason is None])


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, but SIGTERM first drains the engine (admission stopped, the requests in
    flight finished or, after the timeout, cancelled), then exits 0; a second signal exits now."""

    def __init__(self, config: uvicorn.Config, engine: ServeEngine, shutdown_timeout: float):
        super().__init__(config)
        self.engine, self.shutdown_timeout = engine, shutdown_timeout
        self._drain: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._drain is not None or sig not in (signal.SIGTERM, signal.SIGINT):
            self.should_exit = True
            if self._drain is not None:
                self.force_exit = True
            return
        say(f"shutting down: no new requests; waiting up to {self.shutdown_timeout:g} s for "
            f"{self.engine.in_flight} in flight")

        def drain() -> None:
            finished = self.engine.drain(self.shutdown_timeout)
            if not finished:
                say("shutdown timeout: the requests still in flight were cancelled")
            self.should_exit = True

        self._drain = threading.Thread(target=drain, name="strata-serve-drain", daemon=True)
        self._drain.start()


def _h11_with_head_timeout(timeout: float) -> type:
    """uvicorn's h11 protocol, but a connection whose request head has not all come `timeout`
    seconds after it began (the connection, or the head's first bytes on a kept-alive one) is
    closed: a head trickled a byte at a time holds no connection for long."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadTimeoutH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            waiting_for_head = self.conn.their_state is h11.IDLE
            if waiting_for_head and self._head_timer is None:
                self._head_timer = self.loop.call_later(timeout, self._head_timed_out)
            elif not waiting_for_head and self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutH11


def serve_forever(app: FastAPI, engine: ServeEngine, *, host: str, port: int, shutdown_timeout: float,
                  limits: HttpLimits = HttpLimits()) -> None:
    """Run the server until SIGTERM / SIGINT (then drain, see `_DrainingServer`)."""
    # h11 (not httptools, whose head has no size limit) with its head limit set here, not left to a default
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            http=_h11_with_head_timeout(limits.read_timeout),
                            h11_max_incomplete_event_size=limits.max_header_bytes,
                            timeout_graceful_shutdown=max(shutdown_timeout, 1.0) + 5)
    server = _DrainingServer(config, engine, shutdown_timeout)
    engine.start()
    try:
        server.run()
    finally:
        engine.close()
