"""`strata perplexity`: a text's perplexity under a model, by llama.cpp's `llama-perplexity` method.

    result = perplexity("model.gguf", "wiki.test.raw", ctx=512, batch=4)
    result.ppl, result.error                      # "Final estimate: PPL = 5.7899 +/- 0.03200"

The method is llama-perplexity's, so that the two give the same number on the same GGUF:

* the whole text is tokenized once, as the model encodes text (a BOS in front where the vocabulary
  adds one), and cut into `len(ids) // ctx` chunks of `ctx` tokens (the tail is not scored);
* each chunk is run alone from position 0; where the vocabulary adds a BOS, the chunk's first
  token is replaced by the BOS (every chunk starts as a text does);
* the first half of a chunk is context only: the tokens at positions `ctx // 2 + 1 .. ctx - 1`
  are scored, each by the log-probability of the logits one position before it;
* PPL = exp(mean NLL) over every scored token, and its error is llama-perplexity's:
  sqrt((mean NLL^2 - mean NLL^2) / (count - 1)) * PPL.

Chunks run `batch` at a time through the `log_probs_packed` entry (one segment per chunk,
positions restarting at 0), which returns the targets' log-probabilities in f32 without the
[P, Vocab] logits. A text too short for two chunks is refused, as llama-perplexity refuses it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from strata.errors import StrataError, counter, say

#: llama-perplexity's default context (-c 512).
DEFAULT_CTX = 512
#: The shortest chunk with two scored tokens (the ± error needs count > 1).
MIN_CTX = 4
#: The entries the program is compiled with: the generation loop's and the scorer's.
ENTRIES = "prefill,decode,log_probs_packed"


class PerplexityError(StrataError):
    """A text, a context or a model that perplexity cannot be computed for."""


@dataclass
class PerplexityResult:
    ppl: float
    error: float
    #: The tokens scored, the chunks they came from and the chunk size.
    count: int
    chunks: int
    ctx: int
    #: After each chunk: the running (ppl, error).
    running: list[tuple[float, float]] = field(default_factory=list)


class NllSums:
    """llama-perplexity's accumulators: the sum of NLL and of NLL squared, in f64."""

    def __init__(self) -> None:
        self.nll = self.nll2 = 0.0
        self.count = 0

    def add(self, log_probs: np.ndarray) -> None:
        nll = -np.asarray(log_probs, np.float64)
        self.nll += float(nll.sum())
        self.nll2 += float((nll * nll).sum())
        self.count += int(nll.size)

    def estimate(self) -> tuple[float, float]:
        """(PPL, its ± error); the error is nan until two tokens are scored (or all NLLs are equal)."""
        mean = self.nll / self.count
        ppl = math.exp(mean)
        var = self.nll2 / self.count - mean * mean
        if self.count < 2 or not var > 0:
            return ppl, math.nan
        return ppl, math.sqrt(var / (self.count - 1)) * ppl


def scored_per_chunk(ctx: int) -> int:
    return ctx - ctx // 2 - 1


def check_ctx(ctx: int, limit: int, where: str = "--ctx") -> None:
    if ctx < MIN_CTX:
        raise PerplexityError(f"{where} {ctx} is too small: a chunk needs at least {MIN_CTX} tokens (half context, "
                              "half scored)")
    if ctx > limit:
        raise PerplexityError(f"{where} {ctx} is beyond the model's context of {limit} tokens "
                              "(max_position_embeddings)")


def chunk_ids(ids: Sequence[int], ctx: int, bos: int | None, source: str = "the text") -> np.ndarray:
    """The chunks [n, ctx] of `ids` (int64), each one's first token the BOS where `bos` is given."""
    if len(ids) < 2 * ctx:
        raise PerplexityError(f"{source} tokenizes to {len(ids)} token(s); perplexity with a context of {ctx} needs "
                              f"at least {2 * ctx} (two chunks): give a longer text or a smaller --ctx")
    n = len(ids) // ctx
    chunks = np.asarray(ids[:n * ctx], np.int64).reshape(n, ctx).copy()
    if bos is not None:
        chunks[:, 0] = bos
    return chunks


def packed_call(chunks: np.ndarray) -> dict[str, np.ndarray]:
    """log_probs_packed's arguments for a group of chunks: one segment each, positions from 0,
    each token's target the next token of its chunk (the last one's: itself, never scored)."""
    m, ctx = chunks.shape
    targets = np.concatenate((chunks[:, 1:], chunks[:, -1:]), axis=1)
    return {"tokens": chunks.reshape(-1).astype(np.int32), "positions": np.tile(np.arange(ctx, dtype=np.int32), m),
            "segments": np.repeat(np.arange(m, dtype=np.int32), ctx), "targets": targets.reshape(-1)}


def score_chunks(program: Any, chunks: np.ndarray, batch: int,
                 on_chunk: Callable[[int, np.ndarray], None]) -> None:
    """Run the chunks `batch` at a time; `on_chunk(i, log_probs)` with each chunk's scored
    tokens' log-probabilities, in order."""
    n, ctx = chunks.shape
    first = ctx // 2
    for start in range(0, n, batch):
        group = chunks[start:start + batch]
        (lp,) = program.call("log_probs_packed", **packed_call(group))
        lp = np.asarray(lp, np.float32).reshape(len(group), ctx)
        for j in range(len(group)):
            on_chunk(start + j, lp[j, first:ctx - 1])


def format_estimate(ppl: float, error: float) -> str:
    return f"{ppl:.4f} +/- {error:.5f}"


def run_perplexity(program: Any, ids: Sequence[int], ctx: int, batch: int, bos: int | None, *,
                   out: TextIO | None = None, source: str = "the text") -> PerplexityResult:
    """Perplexity of `ids` on an opened program with the `log_probs_packed` entry: each chunk's
    running estimate `[i]PPL +/- ERR` on `out` as it is scored, then the final one."""
    if batch < 1:
        raise PerplexityError(f"--batch {batch}: give at least 1 chunk per call")
    chunks = chunk_ids(ids, ctx, bos, source)
    n = len(chunks)
    sums = NllSums()
    result = PerplexityResult(math.nan, math.nan, 0, n, ctx)
    show = counter("scored", "chunks")
    t0 = time.perf_counter()

    def on_chunk(i: int, log_probs: np.ndarray) -> None:
        sums.add(log_probs)
        result.running.append(sums.estimate())
        if out is not None:
            print(f"[{i + 1}]{format_estimate(*result.running[-1])}", file=out, flush=True)
        if show is not None:
            show(i + 1, n)

    say(f"perplexity over {n} chunks of {ctx} tokens ({scored_per_chunk(ctx)} scored each), {batch} per call")
    score_chunks(program, chunks, batch, on_chunk)
    took = time.perf_counter() - t0
    say(f"{n * ctx} tokens in {took:.2f} s ({n * ctx / max(took, 1e-9):.1f} tokens/s)")
    result.ppl, result.error = sums.estimate()
    result.count = sums.count
    if out is not None:
        print(f"Final estimate: PPL = {format_estimate(result.ppl, result.error)}", file=out, flush=True)
    return result


def perplexity(model_path: str | Path, text_path: str | Path, *, ctx: int | None = None, batch: int = 4,
               knobs: dict[str, Any] | None = None, cache_dir: str | Path | None = None,
               out: TextIO | None = sys.stdout) -> PerplexityResult:
    """`strata perplexity`: the perplexity of the text file `text_path` under `model_path` on
    the cpu target (see the module docstring); the estimates are printed on `out`."""
    from strata.pipeline import load_model
    from strata.runtime.engine import check_tokenizer_fits, model_tokenizer, open_program
    from strata.runtime.tokens import read_text_file

    if not Path(text_path).is_file():
        raise PerplexityError(f"{text_path}: no such file")
    text = read_text_file(text_path)
    if not text.strip():
        raise PerplexityError(f"{text_path}: the text is empty; perplexity needs at least two chunks of --ctx tokens")
    model = load_model(model_path)
    limit = int(model.config.max_position_embeddings)
    ctx = ctx if ctx is not None else min(DEFAULT_CTX, limit)
    check_ctx(ctx, limit)
    tokenizer = model_tokenizer(model)
    check_tokenizer_fits(tokenizer, int(model.config.vocab_size))
    ids = tokenizer.encode(text)
    bos = tokenizer.bos_id if tokenizer.adds_bos else None
    chunk_ids(ids, ctx, bos, str(text_path))  # refuse a short text before compiling
    knobs = {**(knobs or {}), "ctx": ctx, "entries": ENTRIES}
    program = open_program(model, "cpu", knobs, cache_dir=cache_dir)
    try:
        return run_perplexity(program, ids, ctx, batch, bos, out=out, source=str(text_path))
    finally:
        program.close()
