"""The generation loop, written once for every program (`strata.runtime.program`).

    out = generate(program, prompt, 16, keep_logits=True)
    out.ids, out.logits, out.finish_reason      # new ids; [len(ids), vocab] rows; "length" | "stop"

The prompt is prefilled at position 0; each step's chosen token is appended and fed back at
the next position until `max_new_tokens` are made or a stop id is chosen (it is kept, as the
last id). Row i of the logits chose new token i. `forced` feeds given tokens instead of the
chosen ones (teacher forcing: each step's choice is still recorded), for scoring a program
against another's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from strata.runtime.program import Program


@dataclass
class Generation:
    prompt: list[int]
    ids: list[int]
    #: [len(ids), vocab]: the logits that chose each new id (None unless kept).
    logits: np.ndarray | None
    #: "length" (max_new_tokens made) or "stop" (a stop id was chosen).
    finish_reason: str


def generate(program: Program, prompt: Sequence[int], max_new_tokens: int, *, stop_ids: Collection[int] = (),
             keep_logits: bool = False, forced: Sequence[int] | None = None,
             on_token: Callable[[int, int], None] | None = None) -> Generation:
    """Generate up to `max_new_tokens` after `prompt` (checked by the caller: see
    `strata.runtime.request.check_request`); `on_token(i, id)` is called as new token i is chosen."""
    prompt = [int(t) for t in prompt]
    ids: list[int] = []
    rows: list[np.ndarray] = []
    reason = "length"
    if max_new_tokens > 0:
        step = program.prefill(prompt, 0)
        for i in range(max_new_tokens):
            token = step.token
            ids.append(token)
            if keep_logits:
                rows.append(np.asarray(step.logits))
            if on_token is not None:
                on_token(i, token)
            if token in stop_ids:
                reason = "stop"
                break
            if i + 1 < max_new_tokens:
                fed = forced[i] if forced is not None else token
                step = program.decode(int(fed), len(prompt) + i)
    logits = None
    if keep_logits:
        logits = np.stack(rows) if rows else np.zeros((0, program.vocab), np.float32)
    return Generation(prompt, ids, logits, reason)
