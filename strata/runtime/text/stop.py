"""User stop strings, found in streamed text: what may be shown now, and whether to stop.

    stops = StopStrings(["\\nUser:", "###"])
    for piece in detokenized_pieces:
        print(stops.push(piece), end="")    # holds back a tail that may begin a stop string
        if stops.stopped:                   # stops.matched is the stop string found
            break
    else:
        print(stops.flush(), end="")        # generation ended without one: show what was held

The shown text never contains a stop string: it ends just before the one that is complete first,
that is the one that ends earliest in the text (of two that end together, the longer), however
the stream is cut into pieces: generation stops at the token that completes it. A tail that could
still grow into a stop string is held back until it does, or cannot.
"""

from __future__ import annotations

from collections.abc import Iterable

from strata.runtime.text.errors import TextInputError


class StopStrings:
    """A stream filter for stop strings (see the module docstring)."""

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(stops)
        for s in self.stops:
            if not isinstance(s, str) or not s:
                raise TextInputError(f"a stop string must be non-empty text, got {s!r}")
        self._longest = max((len(s) for s in self.stops), default=0)
        self._held = ""
        #: The stop string found, once one is.
        self.matched: str | None = None

    @property
    def stopped(self) -> bool:
        """Whether a stop string has been found (push returns nothing from then on)."""
        return self.matched is not None

    def push(self, text: str) -> str:
        """The text that can be shown now, of what was held back and `text`."""
        if self.stopped:
            return ""
        buf = self._held + text
        found = [(at + len(s), at, i) for i, s in enumerate(self.stops) if (at := buf.find(s)) >= 0]
        if found:
            _, at, i = min(found)
            self.matched = self.stops[i]
            self._held = ""
            return buf[:at]
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep]

    def flush(self) -> str:
        """What is held back (the stream ended without a stop string)."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out

    def _partial_tail(self, buf: str) -> int:
        # The longest tail of buf that is a proper prefix of a stop string (shorter than the longest).
        for k in range(min(len(buf), self._longest - 1), 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return k
        return 0
