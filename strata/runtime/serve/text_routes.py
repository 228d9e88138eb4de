"""The server's routes besides generation: POST /tokenize and /detokenize (`tokenize_api.py`) and
POST /v1/embeddings (`embeddings.py`), added to the app by `create_app`.

    add_text_routes(app, engine, model_name, embedder, read_json, error_response)

`read_json(request)` is the server's body reader (its size and time limits), giving the parsed
body or the Response that answers it; `error_response` its OpenAI-shaped error. The tokenizer and
the embeddings run on worker threads, so the loop keeps serving while a long text is tokenized
(a body may hold 8 MiB of it) or a batch embedded. These paths are not under /v1, so `--api-key`
does not guard /tokenize and /detokenize, as vLLM's does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from strata.errors import StrataError, say
from strata.runtime.serve.embeddings import Embedder, embeddings_reply, parse_embeddings
from strata.runtime.serve.openapi import detokenize_body, embeddings_body, json_body, tokenize_body
from strata.runtime.serve.requests import ApiError
from strata.runtime.serve.tokenize_api import detokenize_reply, tokenize_reply


def add_text_routes(app: FastAPI, engine: Any, model_name: str, embedder: Embedder | None,
                    read_json: Callable[[Request], Awaitable[Any]], error_response: Callable[..., Response]) -> None:
    limits = engine.limits

    def refused(e: ApiError) -> Response:
        return error_response(e.status, e.message, param=e.param, code=e.code)

    async def answer(request: Request, reply: Callable[..., Any]):
        """`reply(body, limits, model_name)` on a worker thread (a long text does not block the loop)."""
        body = await read_json(request)
        if isinstance(body, Response):
            return body
        try:
            return await asyncio.to_thread(reply, body, limits, model_name)
        except ApiError as e:
            return refused(e)

    @app.post("/tokenize", openapi_extra=json_body(tokenize_body(model_name)))
    async def tokenize(request: Request):
        return await answer(request, tokenize_reply)

    @app.post("/detokenize", openapi_extra=json_body(detokenize_body(model_name, limits.tokenizer.vocab_size)))
    async def detokenize(request: Request):
        return await answer(request, detokenize_reply)

    if embedder is None:
        return

    @app.post("/v1/embeddings", openapi_extra=json_body(
        embeddings_body(model_name, limits.vocab, limits.n_ctx, embedder.hidden_size)))
    async def embeddings(request: Request):
        body = await read_json(request)
        if isinstance(body, Response):
            return body
        try:
            parsed = parse_embeddings(body, limits, model_name, embedder.hidden_size)
        except ApiError as e:
            return refused(e)
        if engine.draining:
            return error_response(503, "the server is shutting down", "server_error", code="shutting_down",
                                  headers={"Retry-After": "1"})
        first = not embedder.opened
        try:
            vectors = await asyncio.to_thread(embedder.embed, parsed.inputs, parsed.normalize)
        except StrataError as e:  # the entry's compile failed: the server goes on generating
            say(f"embeddings failed: {e}")
            return error_response(500, f"embeddings failed: {e}", "server_error")
        if first:
            say(f"opened the hidden_packed entry for /v1/embeddings ({embedder.pooling} pooling)")
        return embeddings_reply(parsed, vectors, model_name)
