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
#: The entries the program is compiled with (in the module level's order): the generation loop's and the
#: scorer's; with a KL base, `forward` too (whole distributions).
ENTRIES = "decode,prefill,log_probs_packed"
KL_ENTRIES = "forward,decode,prefill,log_probs_packed"


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
    #: The chunks scored [chunks, ctx]; with a KL base saved: the distributions [chunks, scored, Vocab];
    #: judged against one: its `kl_divergence.KlStats`.
    chunk_tokens: np.ndarray | None = None
    log_probs: np.ndarray | None = None
    kl: Any = None


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


def forward_log_probs(program: Any, chunks: np.ndarray, batch: int,
                      on_chunk: Callable[[int, np.ndarray], None]) -> None:
    """Run the chunks `batch` at a time through `forward` (compiled for B = Batch = `batch`: a
    last group of fewer is padded with copies of its last chunk); `on_chunk(i, log_softmax)` with
    each chunk's scored positions' whole distributions [ctx - ctx//2 - 1, Vocab] (f32)."""
    from strata.runtime.kl_divergence import log_softmax

    n, ctx = chunks.shape
    first = ctx // 2
    for start in range(0, n, batch):
        group = chunks[start:start + batch]
        padded = np.concatenate((group, np.repeat(group[-1:], batch - len(group), axis=0)))
        (logits,) = program.call("forward", tokens=padded.astype(np.int32))
        for j in range(len(group)):
            on_chunk(start + j, log_softmax(np.asarray(logits)[j, first:ctx - 1]))


def format_estimate(ppl: float, error: float) -> str:
    return f"{ppl:.4f} +/- {error:.5f}"


def run_perplexity(program: Any, ids: Sequence[int], ctx: int, batch: int, bos: int | None, *,
                   out: TextIO | None = None, source: str = "the text", max_chunks: int | None = None,
                   keep_log_probs: bool = False, base: Any = None) -> PerplexityResult:
    """Perplexity of `ids` on an opened program with the `log_probs_packed` entry: each chunk's
    running estimate `[i]PPL +/- ERR` on `out` as it is scored, then the final one.
    `keep_log_probs`: through `forward` instead, every scored position's distribution kept in
    `result.log_probs` (a KL base); `base` (a `kl_divergence.KlBase` of these chunks): through
    `forward`, judged against it (`result.kl`, its report on `out`)."""
    from strata.runtime.kl_divergence import KlStats

    if batch < 1:
        raise PerplexityError(f"--batch {batch}: give at least 1 chunk per call")
    chunks = chunk_ids(ids, ctx, bos, source)[:max_chunks]
    if base is not None:
        chunks = chunks[:len(base.tokens)]
    n = len(chunks)
    sums = NllSums()
    result = PerplexityResult(math.nan, math.nan, 0, n, ctx)
    result.chunk_tokens = chunks
    kept: list[np.ndarray] = []
    kl = KlStats() if base is not None else None
    show = counter("scored", "chunks")
    t0 = time.perf_counter()
    first = ctx // 2

    def on_chunk(i: int, log_probs: np.ndarray) -> None:
        if log_probs.ndim == 2:  # whole distributions: the targets' log-probabilities out of them
            targets = chunks[i, first + 1:]
            if keep_log_probs:
                kept.append(log_probs)
            if kl is not None:
                kl.add(log_probs, base.log_probs[i], targets)
            log_probs = log_probs[np.arange(len(targets)), targets]
        sums.add(log_probs)
        result.running.append(sums.estimate())
        if out is not None:
            line = kl.chunk_line(i) if kl is not None else f"[{i + 1}]{format_estimate(*result.running[-1])}"
            print(line, file=out, flush=True)
        if show is not None:
            show(i + 1, n)

    say(f"perplexity over {n} chunks of {ctx} tokens ({scored_per_chunk(ctx)} scored each), {batch} per call")
    if keep_log_probs or kl is not None:
        forward_log_probs(program, chunks, batch, on_chunk)
    else:
        score_chunks(program, chunks, batch, on_chunk)
    took = time.perf_counter() - t0
    say(f"{n * ctx} tokens in {took:.2f} s ({n * ctx / max(took, 1e-9):.1f} tokens/s)")
    result.ppl, result.error = sums.estimate()
    result.count = sums.count
    result.log_probs = np.stack(kept) if keep_log_probs else None
    result.kl = kl
    if out is not None:
        if kl is not None:
            kl.report(out)
        print(f"Final estimate: PPL = {format_estimate(result.ppl, result.error)}", file=out, flush=True)
    return result


def perplexity(model_path: str | Path, text_path: str | Path, *, ctx: int | None = None, batch: int = 4,
               knobs: dict[str, Any] | None = None, cache_dir: str | Path | None = None,
               out: TextIO | None = sys.stdout, max_chunks: int | None = None,
               kl_base: str | Path | None = None, kl_divergence: bool = False,
               allow_nonfinite: bool = False, target_name: str = "cpu", interpret: bool = False) -> PerplexityResult:
    """`strata perplexity`: the perplexity of the text file `text_path` under `model_path` on
    the cpu target (see the module docstring); the estimates are printed on `out`.
    `kl_base`: save the scored distributions there (`strata.runtime.kl_divergence`), or with
    `kl_divergence` judge this model against the ones saved there."""
    from strata.artifacts.files import check_output_path
    from strata.runtime import kl_divergence as kld
    from strata.runtime.opener import open_model
    from strata.runtime.commands.tokenize import read_text_file

    if kl_divergence and kl_base is None:
        raise PerplexityError("--kl-divergence compares with a saved base: give --kl-divergence-base FILE")
    base = kld.read_base(kl_base) if kl_divergence else None
    if kl_base is not None and base is None:
        check_output_path(kl_base)  # before the work, not after it
    if not Path(text_path).is_file():
        raise PerplexityError(f"{text_path}: no such file")
    text = read_text_file(text_path)
    if not text.strip():
        raise PerplexityError(f"{text_path}: the text is empty; perplexity needs at least two chunks of --ctx tokens")
    if base is not None:
        if ctx is not None and ctx != base.ctx:
            raise PerplexityError(f"--ctx {ctx}: the base {kl_base} was saved with chunks of {base.ctx} tokens")
        ctx = base.ctx

    def program_knobs(model: Any) -> dict[str, Any]:
        """The chunk length (checked against the model's positions) and the entries that score it."""
        limit = int(model.config.max_position_embeddings)
        chunk = ctx if ctx is not None else min(DEFAULT_CTX, limit)
        check_ctx(chunk, limit)
        return {**(knobs or {}), "ctx": chunk, "entries": KL_ENTRIES if kl_base is not None else ENTRIES}

    opened = open_model(model_path, target_name, program_knobs, cache_dir=cache_dir, allow_nonfinite=allow_nonfinite,
                        interpret=interpret)
    model, ctx = opened.model, opened.knobs["ctx"]
    tokenizer = opened.tokenizer()
    ids = tokenizer.encode(text)
    bos = tokenizer.bos_id if tokenizer.adds_bos else None
    chunks = chunk_ids(ids, ctx, bos, str(text_path))[:max_chunks]  # refuse a short text before compiling
    if base is not None:
        kld.check_base(base, kl_base, kld.model_shape(model.config), chunks[:len(base.tokens)])
    if kl_base is not None:
        # The distributions are scored a batch of chunks per call: no more rows than chunks.
        batch = min(batch, len(chunks))
        opened.knobs["Batch"] = batch
    program = opened.program()
    try:
        result = run_perplexity(program, ids, ctx, batch, bos, out=out, source=str(text_path), max_chunks=max_chunks,
                                keep_log_probs=kl_base is not None and base is None, base=base)
    finally:
        program.close()
    if result.log_probs is not None:
        kld.save_base(kl_base, result.chunk_tokens, result.log_probs, kld.model_shape(model.config))
        say(f"saved the log-probs of {result.count} scored tokens to {kl_base}")
    return result
