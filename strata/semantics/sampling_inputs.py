"""What a program hands its compiled sampler (`@sample_logits`, `op.sample`) at each step: the
key, the step, the per-row parameters, the token counts of the sequence it has been fed, and the
token mask (the tokens a grammar allows at this step; all ones without one).

    tokens = SequenceTokens(vocab)
    tokens.feed([1, 2, 3], start=0, output=False)     # a prefill: prompt tokens
    if needs_sampler(params):                          # else the program's argmax (greedy)
        args = sampler_arguments(params, position=3, counts=tokens.counts())
        ids = run_sampler(logits_row[None], *args)     # the target's compiled @sample_logits
    tokens.feed([ids[0]], start=3, output=True)       # a decode feeds the chosen token back

`params` is any object with the fields of the runtime's `SamplingParams` (temperature, top_k,
top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, and `key`, two int64),
and optionally `token_mask`: this step's bitmask [1, ceil(vocab/32)] int32 (None: every token).
The draw's step is the position the chosen token will take, so a seeded sequence draws the same
tokens whatever the program and however it is stepped. The counts are of the tokens fed at the
positions before it: by a prefill (the prompt's, for the repetition penalty) and by a decode
(the output's, for all three penalties), as vLLM counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class Sampling(Protocol):
    """The sampling parameters a program reads (the runtime's `SamplingParams`)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float

    @property
    def key(self) -> tuple[int, int]: ...


def token_mask_of(params: Sampling | None):
    """The step's token mask that `params` carry (`token_mask`), or None. A mask still being
    computed (a future, its `result()` the mask: a grammar's mask made while the model's step
    ran) is waited for here, when the sampler needs it."""
    mask = getattr(params, "token_mask", None)
    return mask.result() if hasattr(mask, "result") else mask


def has_penalties(params: Sampling) -> bool:
    return params.repetition_penalty != 1.0 or params.presence_penalty != 0.0 or params.frequency_penalty != 0.0


def needs_sampler(params: Sampling | None) -> bool:
    """Whether `params` choose other than the logits' argmax: the program's greedy choice (its
    argmax, on the device for cuda) is exactly the sampler's at temperature 0 without penalties
    or a token mask."""
    return params is not None and (params.temperature != 0.0 or has_penalties(params)
                                   or token_mask_of(params) is not None)


class SequenceTokens:
    """The tokens fed to a program's one sequence, by position, and their counts (prompt or output)."""

    def __init__(self, vocab: int):
        self.vocab = vocab
        self.ids: list[int] = []
        self.output: list[bool] = []
        self._prompt = np.zeros((1, vocab), np.int32)
        self._out = np.zeros((1, vocab), np.int32)

    def feed(self, tokens: Sequence[int] | np.ndarray, start: int, output: bool) -> None:
        """Tokens fed at positions start.. (by a decode: `output`). A feed below the sequence's
        end (start 0 begins a new sequence) forgets the positions from `start` on."""
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if start < len(self.ids):
            del self.ids[start:], self.output[start:]
            self._recount()
        elif start > len(self.ids):  # positions never fed (a caller's own prefix): nothing to count
            self.ids += [-1] * (start - len(self.ids))
            self.output += [False] * (start - len(self.output))
        self.ids += tokens
        self.output += [output] * len(tokens)
        counts = self._out if output else self._prompt
        np.add.at(counts[0], [t for t in tokens if 0 <= t < self.vocab], 1)

    def _recount(self) -> None:
        ids = np.asarray(self.ids, np.int64)
        out = np.asarray(self.output, bool)
        valid = (ids >= 0) & (ids < self.vocab)
        self._prompt[0] = np.bincount(ids[valid & ~out], minlength=self.vocab)
        self._out[0] = np.bincount(ids[valid & out], minlength=self.vocab)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(prompt counts, output counts), int32 [1, vocab] each (the program's own arrays)."""
        return self._prompt, self._out


def sampler_arguments(params: Sampling, position: int, counts: tuple[Any, Any]) -> list[Any]:
    """The arguments of `@sample_logits` after the logits, for one row: key [2] i64, step [1]
    i32 (`position`), each parameter [1], the two counts, then the token mask [1, ceil(vocab/32)]
    (the one `params` carry, else all ones: every token allowed)."""
    key = np.asarray(params.key, dtype=np.int64).reshape(2)
    if not 0 <= position < 2**31:
        raise ValueError(f"a sampling step is a position below 2**31, not {position}")
    floats = [np.asarray([v], np.float32) for v in (params.top_p, params.min_p, params.repetition_penalty,
                                                    params.presence_penalty, params.frequency_penalty)]
    return [key, np.asarray([position], np.int32), np.asarray([params.temperature], np.float32),
            np.asarray([params.top_k], np.int32), *floats, counts[0], counts[1], _row_mask(params, counts[0].shape[-1])]


def _row_mask(params: Sampling, vocab: int) -> np.ndarray:
    words = (vocab + 31) // 32
    mask = token_mask_of(params)
    if mask is None:
        return np.full((1, words), -1, np.int32)
    mask = np.asarray(mask)
    if mask.dtype != np.int32 or mask.reshape(-1).shape != (words,):
        raise ValueError(f"a token mask is int32 [1, {words}] for a vocabulary of {vocab}, not {mask.dtype} "
                         f"{list(mask.shape)}")
    return mask.reshape(1, words)
