"""`strata bench MODEL [-p 512] [-n 128] [-b 1,8,32] [-r 3] [-o md|json]`: prompt processing and
generation speed per batch size, as llama.cpp's `llama-bench` reports them.

    rows = bench("model.gguf", n_prompt=512, n_gen=128, batches=(1, 8, 32), repetitions=3)
    print(format_table(rows))            # | model | batch | test | t/s |   (pp512: 1234.56 ± 12.34)

A batch of B sequences of random tokens (seed 0) on the cpu target: `ppP` prefills P tokens of
each (one sequence: `prefill`; B > 1: `prefill_slots`, B slots at once), `tgN` then generates N
tokens of each, one step at a time (one sequence: `decode`; B > 1: `decode_rows`, every row at its
own position). Tokens/s count every sequence's tokens (B * P / seconds, B * N / seconds); each
test runs `repetitions` times after one untimed warm-up, and reports the mean and the sample
standard deviation of the per-repetition rates, with the rates themselves in the JSON
(`avg_ts`, `stddev_ts`, `samples_ts`, llama-bench's names). Speed is measured here and nowhere
asserted; the comparisons with llama.cpp are in bench/.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError, counter, say

#: The entries compiled for one sequence, and for a batch of them.
ONE_ENTRIES = "decode,prefill"
ROWS_ENTRIES = "decode,prefill,decode_rows,prefill_slots"


class BenchError(StrataError):
    """A benchmark that cannot be run as asked (a prompt and generation past the context, ...)."""


@dataclass
class BenchRow:
    model: str
    batch: int
    test: str
    n_prompt: int
    n_gen: int
    avg_ts: float
    stddev_ts: float
    samples_ts: list[float]


def parse_batches(text: str) -> tuple[int, ...]:
    """`1,8,32` as batch sizes (each at least 1, none twice)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < 1:
            raise BenchError(f"-b {text!r}: expected comma-separated batch sizes of at least 1, got {item!r}")
        if int(item) in out:
            raise BenchError(f"-b {text!r}: batch size {item} is given twice")
        out.append(int(item))
    return tuple(out)


class Runner:
    """One program compiled for B sequences, and its two tests."""

    def __init__(self, program: Any, batch: int, tokens: np.ndarray):
        self.program, self.batch, self.tokens = program, batch, tokens  # tokens [batch, n_prompt + n_gen]

    def prefill(self, n: int) -> None:
        t = self.tokens[:, :n].astype(np.int32)
        if self.batch == 1:
            self.program.call("prefill", tokens=t, pos=0)
        else:
            b = self.batch
            self.program.call("prefill_slots", tokens=t, slots=np.arange(b, dtype=np.int32),
                              lengths=np.full(b, n, np.int32))

    def decode(self, start: int, n: int) -> None:
        for i in range(start, start + n):
            t = self.tokens[:, i:i + 1].astype(np.int32)
            if self.batch == 1:
                self.program.call("decode", token=t, pos=i)
            else:
                self.program.call("decode_rows", tokens=t, positions=np.full(self.batch, i, np.int32))


def _timed(work: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    work(*args)
    return time.perf_counter() - t0


def _row(name: str, batch: int, test: str, n_prompt: int, n_gen: int, rates: list[float]) -> BenchRow:
    std = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return BenchRow(name, batch, test, n_prompt, n_gen, statistics.fmean(rates), std, rates)


def bench(model_path: str | Path, *, n_prompt: int = 512, n_gen: int = 128, batches: Sequence[int] = (1, 8, 32),
          repetitions: int = 3, knobs: dict[str, Any] | None = None,
          cache_dir: str | Path | None = None, allow_nonfinite: bool = False, target_name: str = "cpu",
          interpret: bool = False) -> list[BenchRow]:
    """The pp and tg rows of each batch size (see the module docstring), a program compiled per
    batch size (kept in CACHE/bench-bB with a `cache_dir`, else in MODEL/.strata-cache/cpu-bench-bB: a folder
    of its own beside the plain compile's cpu/)."""
    from strata.runtime.opener import open_model

    if n_prompt < 0 or n_gen < 0 or n_prompt + n_gen == 0:
        raise BenchError("give -p or -n at least 1 token (both 0: nothing to measure)")
    if repetitions < 1:
        raise BenchError(f"-r {repetitions}: give at least 1 repetition")

    def checked_knobs(model: Any) -> dict[str, Any]:
        limit = int(model.config.max_position_embeddings)
        if n_prompt + n_gen > limit:
            raise BenchError(f"-p {n_prompt} and -n {n_gen} make {n_prompt + n_gen} positions, beyond the model's "
                             f"context of {limit} tokens (max_position_embeddings)")
        return {**(knobs or {}), "ctx": n_prompt + n_gen}

    opened = open_model(model_path, target_name, checked_knobs, cache_dir=cache_dir, allow_nonfinite=allow_nonfinite,
                        interpret=interpret)
    root = opened.cache()
    vocab = opened.vocab
    rng = np.random.default_rng(0)
    tests = (n_prompt > 0) + (n_gen > 0)
    show = counter("ran", "repetitions")
    done, total = 0, len(batches) * tests * repetitions
    rows: list[BenchRow] = []
    name = Path(model_path).name
    for b in batches:
        k = {**(knobs or {}), "ctx": n_prompt + n_gen, "Batch": b,
             "entries": ONE_ENTRIES if b == 1 else ROWS_ENTRIES}
        own = root / f"bench-b{b}" if cache_dir is not None else root.with_name(f"{root.name}-bench-b{b}")
        program = opened.for_program(k, own).program()  # a program of its own per batch size
        try:
            runner = Runner(program, b, rng.integers(0, vocab, (b, n_prompt + n_gen)))
            if n_prompt:  # the warm-up: one untimed prefill and step
                runner.prefill(n_prompt)
            runner.decode(n_prompt, min(1, n_gen))
            for test, tokens in ((f"pp{n_prompt}", n_prompt), (f"tg{n_gen}", n_gen)):
                if not tokens:
                    continue
                rates = []
                for _ in range(repetitions):
                    if test.startswith("pp"):
                        took = _timed(runner.prefill, n_prompt)
                    else:
                        if n_prompt:
                            runner.prefill(n_prompt)  # the prompt's KV again, untimed: each step at its position
                        took = _timed(runner.decode, n_prompt, n_gen)
                    rates.append(b * tokens / max(took, 1e-9))
                    done += 1
                    if show is not None:
                        show(done, total)
                pp = test.startswith("pp")
                rows.append(_row(name, b, test, n_prompt if pp else 0, 0 if pp else n_gen, rates))
        finally:
            program.close()
    say(f"ran {len(rows)} tests of {repetitions} repetitions each")
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """llama-bench's markdown table: one line per batch size and test."""
    lines = ["| model | batch | test | t/s |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.model} | {r.batch} | {r.test} | {r.avg_ts:.2f} ± {r.stddev_ts:.2f} |")
    return "\n".join(lines)


def format_json(rows: Sequence[BenchRow]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2)
