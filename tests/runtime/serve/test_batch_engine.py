"""The serving engine in one process: a step whose call fails ends the requests it ran with an
error event (the server's 500) and the traceback in the log, and the engine goes on serving;
events are typed; the text is `Engine.stream`'s."""

from __future__ import annotations

import threading

import pytest

from strata.runtime.engine import Engine
from strata.runtime.opener import open_model, open_program
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.batch_engine import DoneEvent, ErrorEvent, ServeEngine, TextEvent
from strata.runtime.commands.serve import serving_knobs

CTX, PAGE, ROWS = 64, 16, 2


@pytest.fixture(scope="module")
def opened(serve_model):
    opened = open_model(serve_model, "cpu", {"ctx": CTX, "PageSize": PAGE}, cache_dir=serve_model / "engine-serve",
                        quiet=True)
    page, pages = serving_knobs(opened.model, opened.knobs, kv_pages=None, max_num_seqs=ROWS)
    return opened, page, pages


class _FailingOnce:
    """The program, but its `fail_at`-th call raises (a bug inside a step)."""

    def __init__(self, program, fail_at: int):
        self.program, self.fail_at, self.calls = program, fail_at, 0
        for name in ("entries", "vocab", "n_ctx", "runtime", "name"):
            setattr(self, name, getattr(program, name))

    def chooser(self):
        return self.program.chooser()

    def call(self, entry, **inputs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ZeroDivisionError("a bug in the step")
        return self.program.call(entry, **inputs)


def _request(engine: ServeEngine, prompt, n: int):
    events, done = [], threading.Event()

    def emit(event):
        events.append(event)
        if not isinstance(event, TextEvent):
            done.set()

    engine.submit(prompt, n, sampling=SamplingParams(), emit=emit)
    return events, done


def test_a_failed_step_fails_its_requests_and_the_engine_goes_on(opened, capfd):
    opened, page, pages = opened
    program = opened.program()
    engine = ServeEngine(_FailingOnce(program, 2), opened.tokenizer(), page_size=page, num_pages=pages,
                         max_num_seqs=ROWS)
    engine.start()
    try:
        failed, failed_done = _request(engine, [5, 6, 7], 6)
        assert failed_done.wait(60)
        assert isinstance(failed[-1], ErrorEvent) and "ZeroDivisionError: a bug in the step" in failed[-1].message
        later, later_done = _request(engine, [5, 6, 7], 6)
        assert later_done.wait(60)
        assert later[-1] == DoneEvent("length")
        alone = Engine(open_program(opened.model, "cpu", {"ctx": CTX}, cache_dir=opened.model.root / "engine-alone",
                                    quiet=True), opened.tokenizer())
        want = alone.stream([5, 6, 7], SamplingParams(), 6)
        assert "".join(e.text for e in later if isinstance(e, TextEvent)) == "".join(c.text for c in want)
        assert engine.in_flight == 0 and engine.stats().pages_used == 0
    finally:
        engine.close()
    log = capfd.readouterr().err
    assert "serve: a step failed" in log and "Traceback (most recent call last)" in log and "ZeroDivisionError" in log
