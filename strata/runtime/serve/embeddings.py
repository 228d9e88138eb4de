"""POST /v1/embeddings: OpenAI's embeddings from the program's `hidden_packed` entry.

    embedder = Embedder(lambda: opened_for_hidden_packed.program(), hidden_size=576, pooling="mean")
    request = parse_embeddings(body, engine.limits, "m", embedder.hidden_size)
    vectors = embedder.embed(request.inputs, normalize=request.normalize)   # [inputs, hidden] f32
    embeddings_reply(request, vectors, "m")

`hidden_packed` returns every token's hidden state after the final norm (HF's
`last_hidden_state`); an input's embedding is its last token's (`last`, the default, as a
decoder's embedding models pool) or the mean of all its tokens' (`mean`), then L2-normalised (vLLM's
`normalize: false` leaves it as pooled). The pooling is the server's (`strata serve --pooling`,
llama-server's flag; neither llama-server nor vLLM takes it per request).

The entry is a program of its own, compiled (or its cache reused) the first time an embedding is
asked for, so a server that never embeds never compiles it; it shares the weights' store with the
serving program. Inputs are packed into calls of up to `tokens_per_call` tokens, one segment
each, and run one call at a time, on the caller's thread (the server's worker threads), beside
the engine's steps.

The body is OpenAI's: `input` a string, a list of strings, a list of token ids or a list of such
lists (at most `MAX_INPUTS`, each at most the context); `encoding_format` "float" or "base64"
(little-endian f32, as OpenAI's); `dimensions` only the model's own hidden size (no truncation);
vLLM's `add_special_tokens` (default true: a text is encoded as the model encodes text) and
`normalize`. usage.prompt_tokens counts every input's tokens.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.runtime.serve.requests import ApiError
from strata.runtime.serve.tokenize_api import check_model, flag, token_ids

#: How an input's token states become one vector.
POOLINGS = ("last", "mean")
#: The most inputs of one request (OpenAI's limit).
MAX_INPUTS = 2048
ENCODINGS = ("float", "base64")


class Embedder:
    """The `hidden_packed` program, opened by `open_program` the first time it is used, and the pooling."""

    def __init__(self, open_program: Callable[[], Any], *, hidden_size: int, n_ctx: int, pooling: str = "last",
                 tokens_per_call: int | None = None):
        if pooling not in POOLINGS:
            raise StrataError(f"--pooling {pooling}: choose one of {', '.join(POOLINGS)}")
        self.hidden_size, self.n_ctx, self.pooling = hidden_size, n_ctx, pooling
        self.tokens_per_call = tokens_per_call or n_ctx
        self._open = open_program
        self._program: Any = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> bool:
        return self._program is not None

    def embed(self, inputs: Sequence[Sequence[int]], normalize: bool = True) -> np.ndarray:
        """The pooled (and normalised) hidden states of each input, [len(inputs), hidden] f32."""
        out = np.empty((len(inputs), self.hidden_size), np.float32)
        with self._lock:
            if self._program is None:
                self._program = self._open()
            for group in self._groups(inputs):
                states = self._run([inputs[i] for i in group])
                for i, h in zip(group, states):
                    out[i] = pool(h, self.pooling, normalize)
        return out

    def _groups(self, inputs: Sequence[Sequence[int]]) -> list[list[int]]:
        """The inputs' indices, packed in order into calls of at most `tokens_per_call` tokens."""
        groups: list[list[int]] = []
        size = 0
        for i, ids in enumerate(inputs):
            if not groups or size + len(ids) > self.tokens_per_call:
                groups.append([])
                size = 0
            groups[-1].append(i)
            size += len(ids)
        return groups

    def _run(self, seqs: list[Sequence[int]]) -> list[np.ndarray]:
        """Each sequence's hidden states [len, hidden], from one call: one segment per sequence."""
        tokens = np.concatenate([np.asarray(s, np.int32) for s in seqs])
        positions = np.concatenate([np.arange(len(s), dtype=np.int32) for s in seqs])
        segments = np.concatenate([np.full(len(s), k, np.int32) for k, s in enumerate(seqs)])
        (hidden,) = self._program.call("hidden_packed", tokens=tokens, positions=positions, segments=segments)
        hidden = np.asarray(hidden)
        ends = np.cumsum([len(s) for s in seqs])
        return np.split(hidden, ends[:-1])

    def close(self) -> None:
        with self._lock:
            if self._program is not None and hasattr(self._program, "close"):
                self._program.close()
            self._program = None


def pool(states: np.ndarray, pooling: str, normalize: bool = True) -> np.ndarray:
    """One vector of a sequence's hidden states [len, hidden] (in f64, then L2-normalised)."""
    states = np.asarray(states, np.float64)
    v = states[-1] if pooling == "last" else states.mean(axis=0)
    if normalize:
        norm = float(np.linalg.norm(v))
        v = v / max(norm, 1e-12)  # a zero vector stays zero (as torch's F.normalize keeps it)
    return v


@dataclass(frozen=True)
class EmbeddingRequest:
    inputs: list[list[int]]
    encoding_format: str
    normalize: bool

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for ids in self.inputs)


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_ids(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(
        not isinstance(t, bool) and (isinstance(t, int) or (isinstance(t, float) and t.is_integer())) for t in v)


def parse_embeddings(body: Any, limits: Any, model_name: str, hidden_size: int) -> EmbeddingRequest:
    """The body of POST /v1/embeddings, read and checked (see the module's doc); `limits`:
    the engine's (`batch_engine.RequestLimits`: the tokenizer, vocabulary and context)."""
    from strata.runtime.text import check_utf8

    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    check_model(body, model_name)
    raw = body.get("input")
    if isinstance(raw, str) or _is_ids(raw):
        items = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(x, str) or _is_ids(x) for x in raw):
        items = raw
    else:
        raise ApiError("'input' must be a string, a list of strings, a list of token ids or a list of lists of "
                       f"token ids, none empty; got {_shown(raw)}", "input")
    if len(items) > MAX_INPUTS:
        raise ApiError(f"'input' holds {len(items)} inputs; at most {MAX_INPUTS}", "input")
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ENCODINGS:
        raise ApiError(f"'encoding_format' must be 'float' or 'base64', got {_shown(encoding)}", "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and dimensions != hidden_size:
        raise ApiError(f"'dimensions' {_shown(dimensions)} is not supported: this model's embeddings have "
                       f"{hidden_size} dimensions, and they are not cut shorter", "dimensions")
    add_special = flag(body, "add_special_tokens", True)
    normalize = flag(body, "normalize", True)
    inputs = []
    for i, item in enumerate(items):
        field = "input" if len(items) == 1 and item is raw else f"input[{i}]"
        if isinstance(item, str):
            try:
                ids = limits.tokenizer.encode(check_utf8(item, f"'{field}'"), add_special=add_special)
            except StrataError as e:
                raise ApiError(str(e), "input") from None
            if not ids:
                raise ApiError(f"'{field}' encodes to no tokens", "input")
        else:
            ids = token_ids(item, limits.vocab, field)
        if len(ids) > limits.n_ctx:
            raise ApiError(f"'{field}' is {len(ids)} tokens, longer than the context of {limits.n_ctx} tokens (this "
                           "server's maximum context length)", "input", code="context_length_exceeded")
        inputs.append(ids)
    return EmbeddingRequest(inputs, encoding, normalize)


def embeddings_reply(request: EmbeddingRequest, vectors: np.ndarray, model_name: str) -> dict[str, Any]:
    """OpenAI's embeddings list: each vector as floats or as base64 of its little-endian f32."""
    data = []
    for i, v in enumerate(np.asarray(vectors, np.float32)):
        if request.encoding_format == "base64":
            embedding: Any = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
        else:
            embedding = v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    usage: Mapping[str, int] = {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens}
    return {"object": "list", "data": data, "model": model_name, "usage": dict(usage)}
