"""The sampling parameters of a request: what the program's compiled sampler draws with.

    params = SamplingParams(temperature=0.8, top_p=0.95, seed=7)
    step = program.decode(token, pos, params)      # .token: drawn by the program's @sample_logits
    SamplingParams()                                # temperature 0: greedy, the program's argmax

The semantics are `strata.semantics.sampling`'s (penalties, temperature, top-k, top-p, min-p,
then one Philox 4x32-10 draw keyed by (key, step, row)); the key is (seed, 0) and the step the
position the drawn token takes, so a seed gives the same tokens on every program, run after run.
Without a seed, `resolved()` picks one at random (once per request).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from strata.errors import StrataError


class SamplingError(StrataError):
    """A sampling parameter outside its range."""


@dataclass(frozen=True)
class SamplingParams:
    #: 0: greedy (the argmax; the filters below do nothing). > 0: logits / temperature.
    temperature: float = 0.0
    #: Keep the k most likely tokens (ties at the k-th kept); <= 0: all.
    top_k: int = 0
    #: Keep the smallest set of most likely tokens whose mass reaches top_p; 1: all.
    top_p: float = 1.0
    #: Drop tokens less likely than min_p times the most likely one; 0: none.
    min_p: float = 0.0
    #: HF's repetition penalty on tokens of the prompt and the output (1: none).
    repetition_penalty: float = 1.0
    #: OpenAI's presence penalty (subtracted once from every token of the output; 0: none).
    presence_penalty: float = 0.0
    #: OpenAI's frequency penalty (subtracted per occurrence in the output; 0: none).
    frequency_penalty: float = 0.0
    #: The random seed (any integer; its low 64 bits are the Philox key); None: a random one.
    seed: int | None = None
    #: One step's token mask (a grammar's allowed tokens: int32 [1, ceil(vocab/32)], bit j of word
    #: w allowing token 32 * w + j), set per step by the loop that runs a constraint (`with_mask`);
    #: None: every token. It makes even greedy parameters draw with the sampler (argmax of the allowed).
    token_mask: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        checks = (("temperature", self.temperature >= 0 and math.isfinite(self.temperature), ">= 0"),
                  ("top_p", 0 <= self.top_p <= 1, "in [0, 1]"), ("min_p", 0 <= self.min_p <= 1, "in [0, 1]"),
                  ("repetition_penalty", self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty),
                   "> 0"),
                  ("presence_penalty", math.isfinite(self.presence_penalty), "finite"),
                  ("frequency_penalty", math.isfinite(self.frequency_penalty), "finite"))
        for name, ok, what in checks:
            if not ok:
                raise SamplingError(f"sampling: {name} must be {what}, got {getattr(self, name)}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
            raise SamplingError(f"sampling: top_k must be an integer, got {self.top_k!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise SamplingError(f"sampling: seed must be an integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        """Whether these parameters choose the argmax (temperature 0 and no penalties)."""
        return self.temperature == 0 and self.repetition_penalty == 1 and self.presence_penalty == 0 \
            and self.frequency_penalty == 0

    @property
    def key(self) -> tuple[int, int]:
        """The sampler's key (the module level's `key: Tensor[2; i64]`): the seed's low 64 bits as an int64, and 0."""
        if self.seed is None:
            raise SamplingError("sampling: no seed (call resolved() first)")
        low = self.seed & (2**64 - 1)
        return (low - 2**64 if low >= 2**63 else low, 0)

    def with_mask(self, mask: Any) -> SamplingParams:
        """These parameters for one step whose allowed tokens are the bitmask `mask`."""
        return replace(self, token_mask=mask)

    def resolved(self) -> SamplingParams:
        """These parameters with a seed: their own, or a random one."""
        return self if self.seed is not None else replace(self, seed=secrets.randbits(63))
