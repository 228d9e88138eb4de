"""What a generation reports as it runs: the prefill's speed, a progress line on a terminal
(nothing when standard error is piped), the decode's speed and the total.

    clock = GenerationClock(len(prompt), n)
    out = generate(program, prompt, n, on_token=clock.on_token)
    clock.done(program.runtime)
"""

from __future__ import annotations

import sys
import time

from strata.errors import say


class GenerationClock:
    """`progress=False`: no progress line even on a terminal (the streamed text shows progress)."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, progress: bool = True):
        self.prompt_tokens, self.n = prompt_tokens, max_new_tokens
        self.tty = progress and sys.stderr.isatty()
        self.start = time.perf_counter()
        self.first: float | None = None
        self.made = 0

    def on_token(self, i: int, token: int) -> None:
        now = time.perf_counter()
        self.made = i + 1
        if i == 0:
            self.first = now
            took = now - self.start
            say(f"prefill: {self.prompt_tokens} tokens in {took:.3f} s "
                f"({self.prompt_tokens / max(took, 1e-9):.1f} tokens/s)")
        if self.tty:
            print(f"\rstrata: generated {i + 1}/{self.n} tokens", end="", file=sys.stderr, flush=True)

    def done(self, runtime: str = "") -> None:
        end = time.perf_counter()
        if self.tty and self.made:
            print(file=sys.stderr)
        if self.made > 1 and self.first is not None:
            dt = end - self.first
            say(f"decode: {self.made - 1} tokens in {dt:.3f} s ({(self.made - 1) / max(dt, 1e-9):.1f} tokens/s)")
        say(f"generated {self.made} tokens in {end - self.start:.3f} s" + (f" ({runtime})" if runtime else ""))
