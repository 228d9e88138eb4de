"""Streaming detokenization: the text of generated ids as they come, each character once it is whole.

    detok = tok.detokenizer(skip_special=True)
    for token_id in generated_ids:                 # one at a time, as the model makes them
        print(detok.push(token_id), end="", flush=True)
    print(detok.flush())                           # what an unfinished character left

A character can span tokens: byte-level BPE splits an emoji's or a CJK character's UTF-8 bytes
over tokens, SentencePiece spells unknown characters as `<0xNN>` byte pieces. The text of the
last tokens then ends in U+FFFD until the rest arrives; nothing is emitted until it does.

How: the text is the difference between two decodes of a short window of ids, the window ending
at the last emitted id and the window ending now (vLLM's and TGI's scheme). The window starts
where the previous emission ended, so a decoder's context (SentencePiece drops one leading space,
in every decode) is the same in both and the pieces join to the one-shot decode:

    "".join(pushes) + flush() == tok.decode(ids, skip_special=...)
    # with `context` (say the prompt's ids): tok.decode(context + ids)[len(tok.decode(context)):]

That holds for every id sequence whose bytes are valid UTF-8; where the model emits invalid byte
sequences, the U+FFFD marks can group differently than in a one-shot decode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """The text of a stream of ids, piece by piece (see the module docstring).

    `tokenizer`: a `strata.runtime.text.Tokenizer` (its `decode`).
    `context`: ids the stream continues (the prompt's), whose text is not emitted but conditions it:
    after "Once upon a" a SentencePiece "▁time" streams as " time", where alone it decodes as "time".
    """

    def __init__(self, tokenizer: Any, *, skip_special: bool = False, context: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._ids: list[int] = [int(i) for i in context]
        self._start = 0  # the window: ids[_start:] now, ids[_start:_read] at the last emission
        self._read = len(self._ids)
        self._read_text = self._decode(self._start, self._read)
        self._context = len(self._ids)
        #: Every id pushed (not the context).
        self.ids: list[int] = []

    def _decode(self, start: int, end: int) -> str:
        if start == end:
            return ""
        return self.tokenizer.decode(self._ids[start:end], skip_special=self.skip_special)

    def push(self, ids: int | Iterable[int]) -> str:
        """Add one id (or several; numpy integers too); the text that is now complete."""
        new = [int(ids)] if isinstance(ids, Integral) else [int(i) for i in ids]
        self._ids += new
        self.ids += new
        text = self._decode(self._start, len(self._ids))
        if len(text) <= len(self._read_text) or text.endswith(_INCOMPLETE):
            return ""
        return self._advance(text)

    def flush(self) -> str:
        """Whatever is left, complete or not (U+FFFD for an unfinished character): the stream's end."""
        text = self._decode(self._start, len(self._ids))
        if len(text) <= len(self._read_text):
            return ""
        return self._advance(text)

    def _advance(self, text: str) -> str:
        out = text[len(self._read_text):]
        self._start, self._read = self._read, len(self._ids)
        self._read_text = self._decode(self._start, self._read)
        return out
