"""A reply's text made from its ids one at a time: the one text layer of the generation loop
(`strata.runtime.engine.Engine`) and of the server (`strata.runtime.serve`).

    emitter = TextEmitter(tokenizer, prompt_ids, stop=["\\n\\n"], end_ids=end_of_generation_ids(tokenizer, vocab))
    for token in new_ids:
        piece = emitter.push(token)        # a Piece when text became whole (or a stop string was found)
        if piece is not None:
            show(piece.text, piece.ids)    # the ids it completes, since the last piece
        if emitter.stopped:                # emitter.matched: the stop string; nothing more is decoded
            break
    piece = emitter.finish()               # the rest, once the ids end

The text is the incremental detokenizer's over the new ids (special tokens skipped, the prompt
as its context), held back before a stop string, which it never contains; an end-of-generation
id is no text (the sequence ends on it). So a reply's text is the same whether `strata
generate` prints it or the server streams it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.runtime.text.stop import StopStrings


def end_of_generation_ids(tokenizer: Any, vocab: int) -> frozenset[int]:
    """The ids that end a reply: the tokenizer's end-of-generation ids the model's vocabulary has."""
    return frozenset(i for i in tokenizer.end_of_generation_ids if 0 <= i < vocab)


@dataclass(frozen=True)
class Piece:
    """Text that became whole, and the new ids since the last piece."""

    text: str
    ids: list[int] = field(default_factory=list)


class TextEmitter:
    """One reply's text, pushed one id at a time (see the module docstring)."""

    def __init__(self, tokenizer: Any, prompt: Sequence[int], stop: Iterable[str] = (),
                 end_ids: Iterable[int] = ()):
        self.end_ids = frozenset(end_ids)
        self._detok = tokenizer.detokenizer(skip_special=True, context=list(prompt))
        self._stops = StopStrings(stop)
        self._pending: list[int] = []

    @property
    def stopped(self) -> bool:
        """Whether a stop string was found (the reply ends at the id just pushed)."""
        return self._stops.stopped

    @property
    def matched(self) -> str | None:
        """The stop string found, if one was."""
        return self._stops.matched

    def push(self, token: int) -> Piece | None:
        self._pending.append(int(token))
        if token in self.end_ids:  # the reply ends on it; an end-of-turn token is not text
            return None
        shown = self._stops.push(self._detok.push(int(token)))
        if self._stops.stopped or shown:
            return self._piece(shown)
        return None

    def finish(self) -> Piece | None:
        """What is left once the ids end: the detokenizer's tail and the text held back for a
        stop string that did not come (or the tail's own stop string cut off)."""
        tail = ""
        if not self._stops.stopped:
            tail = self._stops.push(self._detok.flush())
            tail += self._stops.flush() if not self._stops.stopped else ""
        if tail or self._pending:
            return self._piece(tail)
        return None

    def _piece(self, text: str) -> Piece:
        ids, self._pending = self._pending, []
        return Piece(text, ids)
