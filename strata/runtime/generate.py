"""The generation loop, written once for every program (`strata.runtime.program`).

    out = generate(program, prompt, 16, keep_logits=True)
    out.ids, out.logits, out.finish_reason      # new ids; [len(ids), vocab] rows; "length" | "stop"

    loop = GenerationLoop(program, prompt, 64, sampling=SamplingParams(temperature=0.8, seed=1),
                          stop_ids=tokenizer.end_of_generation_ids)
    for token in loop:                          # one id at a time, as the program chooses it
        if text_says_stop(token):
            loop.stop("a stop string")          # ends the loop here: nothing more is decoded
    loop.result                                 # the Generation

The prompt is prefilled at position 0; each step's chosen token (the program's argmax, or with
`sampling` the draw of its compiled sampler) is appended and fed back at the next position,
until `max_new_tokens` are made, a stop id is chosen (it is kept, as the last id), or the
caller stops the loop (a stop string found in the text so far: `stop`). Row i of the logits
chose new token i. `forced` feeds given tokens instead of the chosen ones (teacher forcing:
each step's choice is still recorded), for scoring a program against another's tokens.

`constraint` (`strata.runtime.constrain.Constraint`: a JSON schema, grammar or regex) restricts
each step's choice: the step's sampler takes the grammar's token mask (greedy parameters take
the argmax of the allowed tokens), the matcher advances with the chosen token, and the loop
stops ("stop") when the grammar is complete. The next mask is computed on the mask thread while
the model's step runs (the sampler waits for it only when the logits are there).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from typing import TYPE_CHECKING

from strata.runtime.program import Program
from strata.runtime.sampling import SamplingParams

if TYPE_CHECKING:
    from strata.runtime.constrain import Constraint


@dataclass
class Generation:
    prompt: list[int]
    ids: list[int]
    #: [len(ids), vocab]: the logits that chose each new id (None unless kept).
    logits: np.ndarray | None
    #: "length" (max_new_tokens made) or "stop" (a stop id was chosen, or the caller stopped it).
    finish_reason: str
    #: What stopped it: the stop id chosen, or what the caller said (a stop string), or "grammar"
    #: (a constraint's grammar completed); None: the length.
    stopped_by: int | str | None = None


class GenerationLoop:
    """The loop as an iterator of the new ids (see the module docstring). `sampling`: the
    parameters the program's sampler draws with, a seed picked at random when they have none
    (`sampling_used` says which); None or temperature 0 without penalties: greedy."""

    def __init__(self, program: Program, prompt: Sequence[int], max_new_tokens: int, *,
                 sampling: SamplingParams | None = None, stop_ids: Collection[int] = (), keep_logits: bool = False,
                 forced: Sequence[int] | None = None, constraint: Constraint | None = None):
        self.program = program
        self.prompt = [int(t) for t in prompt]
        self.max_new_tokens = max_new_tokens
        #: The parameters used (with the seed chosen when none was given), or None for greedy.
        self.sampling_used = None if sampling is None or sampling.greedy else sampling.resolved()
        #: One matcher of `constraint` for this sequence (None: unconstrained).
        self.matcher = constraint.matcher() if constraint is not None else None
        # a constrained step draws with the sampler (its mask), greedy parameters included
        self._step_params = self.sampling_used or (SamplingParams().resolved() if constraint is not None else None)
        self.stop_ids = frozenset(int(t) for t in stop_ids)
        self.keep_logits, self.forced = keep_logits, forced
        self.ids: list[int] = []
        self._rows: list[np.ndarray] = []
        self.finish_reason = "length"
        self.stopped_by: int | str | None = None
        self._stopped = False

    def stop(self, why: str) -> None:
        """End the loop after the id just given (`why`: what stopped it, a stop string)."""
        self._stopped, self.finish_reason, self.stopped_by = True, "stop", why

    def __iter__(self) -> Iterator[int]:
        if self.max_new_tokens <= 0:
            return
        n = len(self.prompt)
        step = self.program.prefill(self.prompt, 0, self._params()) if self._step_params is not None else \
            self.program.prefill(self.prompt, 0)
        for i in range(self.max_new_tokens):
            token = step.token
            self.ids.append(token)
            if self.keep_logits:
                self._rows.append(np.asarray(step.logits))
            complete = self.matcher is not None and not self.matcher.advance(token)
            yield token
            if self._stopped:
                return
            if token in self.stop_ids:
                self.finish_reason, self.stopped_by = "stop", token
                return
            if complete:
                self.finish_reason, self.stopped_by = "stop", "grammar"
                return
            if i + 1 < self.max_new_tokens:
                fed = int(self.forced[i]) if self.forced is not None else token
                step = self.program.decode(fed, n + i, self._params()) if self._step_params is not None else \
                    self.program.decode(fed, n + i)

    def _params(self) -> SamplingParams:
        """This step's sampling parameters: with a constraint, its next mask (being computed while
        the step runs)."""
        if self.matcher is None:
            return self._step_params
        return self._step_params.with_mask(self.matcher.next_mask_async())

    @property
    def result(self) -> Generation:
        logits = None
        if self.keep_logits:
            logits = np.stack(self._rows) if self._rows else np.zeros((0, self.program.vocab), np.float32)
        return Generation(self.prompt, list(self.ids), logits, self.finish_reason, self.stopped_by)


def generate(program: Program, prompt: Sequence[int], max_new_tokens: int, *, stop_ids: Collection[int] = (),
             keep_logits: bool = False, forced: Sequence[int] | None = None,
             on_token: Callable[[int, int], None] | None = None, sampling: SamplingParams | None = None,
             constraint: Constraint | None = None) -> Generation:
    """Generate up to `max_new_tokens` after `prompt` (checked by the caller: see
    `strata.runtime.request.check_request`); `on_token(i, id)` is called as new token i is chosen."""
    loop = GenerationLoop(program, prompt, max_new_tokens, sampling=sampling, stop_ids=stop_ids,
                          keep_logits=keep_logits, forced=forced, constraint=constraint)
    for i, token in enumerate(loop):
        if on_token is not None:
            on_token(i, token)
    return loop.result
