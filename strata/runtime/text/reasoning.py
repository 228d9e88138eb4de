"""A reply's reasoning (the text between a template's think markers) split from its answer.

    markers = think_markers(template.source)                 # ThinkMarkers('<think>', '</think>') or None
    split = ReasoningSplitter(markers, thinking=opens_thinking(prompt_text, markers))
    for text in streamed_texts:
        reasoning, content = split.feed(text)
    reasoning, content = split.finish()

The markers come from the template's text: a tag `<X>` whose name has `think` or `reason` in it,
written with its closing `</X>` (Qwen3's `<think>`...`</think>`). A reply thinks when it starts
with the open marker (after whitespace), or when the prompt already ends inside one (a template
that writes `<think>\\n` in its generation prompt); it thinks until the close marker, or to its end
when cut off. Whitespace at both ends of the reasoning and at the start of the answer after it is
dropped. A marker split across pieces is held back until it is whole or cannot be one, so the
streamed pieces join to what `split_reasoning(text)` gives for the whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from strata.runtime.text.tool_calls import marker_prefix_length


@dataclass(frozen=True)
class ThinkMarkers:
    start: str
    end: str


_TAG = re.compile(r"<(\w*(?:think|reason)\w*)>", re.IGNORECASE)


@lru_cache(maxsize=32)  # read once per template, not per request
def think_markers(template_source: str) -> ThinkMarkers | None:
    """The template's think markers, or None when it has none."""
    for m in _TAG.finditer(template_source):
        end = f"</{m.group(1)}>"
        if end in template_source:
            return ThinkMarkers(m.group(0), end)
    return None


def opens_thinking(prompt_text: str, markers: ThinkMarkers) -> bool:
    """Whether the rendered prompt ends inside an open think block (the reply starts thinking)."""
    start = prompt_text.rfind(markers.start)
    if start < 0:
        return False
    after = prompt_text[start + len(markers.start):]
    return markers.end not in after and not after.strip()


class ReasoningSplitter:
    """(reasoning, content) out of a reply streamed in pieces of text."""

    def __init__(self, markers: ThinkMarkers, *, thinking: bool = False) -> None:
        self.markers = markers
        self._state = "thinking" if thinking else "before"
        self._pending = ""
        self._fresh = True  # at the start of the reasoning, or of the answer after it: whitespace dropped
        self.reasoned = False

    def feed(self, text: str) -> tuple[str, str]:
        self._pending += text
        return self._step(final=False)

    def finish(self) -> tuple[str, str]:
        return self._step(final=True)

    def _step(self, final: bool) -> tuple[str, str]:
        reasoning = content = ""
        while True:
            if self._state == "before":
                head = self._pending.lstrip()
                if head.startswith(self.markers.start):
                    self._pending = head[len(self.markers.start):]
                    self._state, self._fresh = "thinking", True
                    continue
                if not final and (not head or self.markers.start.startswith(head)):
                    return reasoning, content
                self._state = "answer"
                self._fresh = False
            if self._state == "thinking":
                self.reasoned = True
                if self._fresh:
                    self._pending = self._pending.lstrip()
                    if not self._pending:
                        return reasoning, content
                    self._fresh = False
                at = self._pending.find(self.markers.end)
                if at >= 0:
                    reasoning += self._pending[:at].rstrip()
                    self._pending = self._pending[at + len(self.markers.end):]
                    self._state, self._fresh = "answer", True
                    continue
                if final:
                    reasoning += self._pending.rstrip()
                    self._pending = ""
                    return reasoning, content
                keep = marker_prefix_length(self._pending, self.markers.end)
                body = self._pending[:len(self._pending) - keep]
                held = len(body) - len(body.rstrip())  # whitespace before the close marker is dropped
                reasoning += body[:len(body) - held]
                self._pending = self._pending[len(body) - held:]
                return reasoning, content
            # the answer
            if self._fresh:
                self._pending = self._pending.lstrip()
                if not self._pending:
                    return reasoning, content
                self._fresh = False
            content += self._pending
            self._pending = ""
            return reasoning, content


def split_reasoning(text: str, markers: ThinkMarkers, *, thinking: bool = False) -> tuple[str | None, str]:
    """(reasoning or None when the reply did not think, content) of a whole reply."""
    split = ReasoningSplitter(markers, thinking=thinking)
    r1, c1 = split.feed(text)
    r2, c2 = split.finish()
    return (r1 + r2 if split.reasoned else None), c1 + c2
