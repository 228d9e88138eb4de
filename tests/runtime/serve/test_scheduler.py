"""The scheduler: a mix of requests (greedy and seeded sampling with penalties, some sharing a
prefix) batched into step_paged calls gives each the ids the runtime's one loop gives it alone,
through preemption and the prefix cache, and every page goes back."""

from __future__ import annotations

import numpy as np
import pytest

from strata.pipeline import load_model
from strata.runtime.opener import open_program
from strata.runtime.generate import generate
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.pages import PageAllocator, prefix_keys
from strata.runtime.serve.scheduler import Scheduler, SchedulerError
from support import tiny, write_checkpoint

CTX, PAGE, ROWS = 32, 4, 4
SHARED = [5, 6, 7, 8, 9, 10, 11, 12, 13]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    d = write_checkpoint(tiny("llama"), tmp_path_factory.mktemp("sched") / "tiny", std=0.5)
    model = load_model(d)
    serving = open_program(model, "cpu", {"ctx": CTX, "entries": "step_paged", "Batch": 3, "Rows": ROWS,
                                          "PageSize": PAGE}, cache_dir=d / "serve", quiet=True)
    alone = open_program(model, "cpu", {"ctx": CTX}, cache_dir=d / "alone", quiet=True)
    return serving, alone


def _requests(n: int):
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        prompt = (SHARED if i % 2 else []) + [int(t) for t in rng.integers(0, 48, int(rng.integers(1, 9)))]
        sampling = SamplingParams(temperature=0.9, top_k=10, presence_penalty=0.5, seed=i) if i % 3 == 0 else None
        out.append((prompt, int(rng.integers(1, 12)), sampling))
    return out


@pytest.mark.parametrize("num_pages,budget", [(24, 10), (7, 16), (7, 3)])
def test_batched_is_alone(programs, num_pages, budget):
    serving, alone = programs
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=num_pages, max_num_seqs=ROWS, max_batched_tokens=budget)
    requests = _requests(12)
    streamed: dict[int, list[int]] = {}
    seqs = [scheduler.add(p, n, sampling=s, stop_ids={3}) for p, n, s in requests]
    while scheduler.has_work():
        step = scheduler.step()
        assert step.computed <= budget
        for out in step.outputs:  # each new token reported once, by the step that chose it
            streamed.setdefault(out.seq.id, []).append(out.token)
    for (prompt, n, sampling), seq in zip(requests, seqs):
        want = generate(alone, prompt, n, sampling=sampling, stop_ids={3})
        assert seq.outputs == want.ids and streamed.get(seq.id, []) == want.ids
        assert seq.finish_reason == want.finish_reason
    assert scheduler.pages.used == 0 and not scheduler.running and not scheduler.waiting
    assert scheduler.pages.hits > 0  # the shared prefix was found
    if num_pages == 7:
        assert scheduler.preemptions > 0  # too few pages for all: the newest were recomputed


def test_stop_cancel_and_zero(programs):
    serving, alone = programs
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=16, max_num_seqs=ROWS, max_batched_tokens=8)
    ended = []
    stopped = scheduler.add([1, 2, 3], 10)
    gone = scheduler.add(SHARED, 10)
    zero = scheduler.add([1], 0)
    assert zero.finish_reason == "length" and zero.outputs == []
    scheduler.step()
    scheduler.cancel(gone)
    while scheduler.has_work():
        for out in scheduler.step().outputs:
            if out.seq is stopped and len(stopped.outputs) == 2:  # the text layer found a stop string: after the step
                scheduler.finish(stopped, "stop", "two")
                ended.append(stopped)
            elif out.finish_reason is not None:
                ended.append(out.seq)
    assert stopped.outputs == generate(alone, [1, 2, 3], 2).ids and (stopped.finish_reason, stopped.stopped_by) == ("stop", "two")
    assert gone.finish_reason == "cancelled" and ended == [gone, stopped]  # each ended once
    assert scheduler.pages.used == 0


class _FailingCall:
    """A program whose step_paged call raises on the `fail_at`-th call (a bug in a step)."""

    def __init__(self, program, fail_at: int):
        self.program, self.fail_at, self.calls = program, fail_at, 0
        self.entries, self.vocab, self.n_ctx, self.runtime = program.entries, program.vocab, program.n_ctx, "test"

    def chooser(self):
        return self.program.chooser()

    def call(self, entry, **inputs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ZeroDivisionError("a bug in the step")
        return self.program.call(entry, **inputs)


def test_a_failed_step_ends_its_sequences_and_the_rest_go_on(programs):
    from strata.runtime.serve.scheduler import StepFailed

    serving, alone = programs
    scheduler = Scheduler(_FailingCall(serving, 2), page_size=PAGE, num_pages=16, max_num_seqs=1,
                          max_batched_tokens=8)
    first = scheduler.add([1, 2, 3], 4)
    later = scheduler.add([4, 5], 3)  # waits for the one row
    scheduler.step()
    with pytest.raises(StepFailed) as failed:
        scheduler.step()
    assert failed.value.seqs == [first] and first.finish_reason == "error"
    assert isinstance(failed.value.__cause__, ZeroDivisionError)
    while scheduler.has_work():
        scheduler.step()
    assert later.outputs == generate(alone, [4, 5], 3).ids and later.finish_reason == "length"
    assert scheduler.pages.used == 0


def test_refuses_what_cannot_fit(programs):
    serving, _ = programs
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=4, max_num_seqs=ROWS, max_batched_tokens=8)
    with pytest.raises(SchedulerError, match="context of 32"):
        scheduler.add([1] * 30, 4)
    with pytest.raises(SchedulerError, match="more than the 4 there are"):
        scheduler.add([1] * 10, 10)
    with pytest.raises(SchedulerError, match="rows"):
        Scheduler(serving, page_size=PAGE, num_pages=4, max_num_seqs=ROWS + 1)


def test_page_allocator_shares_and_evicts():
    pages = PageAllocator(3, 2)
    assert pages.lookup([1, 2, 3, 4], 2) == [] and pages.used == 0
    p, q = pages.allocate(), pages.allocate()
    keys = prefix_keys([1, 2, 3, 4], 2, 2)
    pages.register(p, keys[0]), pages.register(q, keys[1])
    assert pages.lookup([1, 2, 3, 4, 5], 2) == [p, q] and pages.used == 2
    assert pages.lookup([1, 2, 9, 9], 2) == [p]  # only the first page is the same prefix
    for page in (p, q, p, q, p):  # each holder lets go: two sequences and the writer
        pages.release(page)
    with pytest.raises(RuntimeError, match="released more often"):
        pages.release(q)
    assert pages.used == 0 and pages.free == 3
    got = [pages.allocate() for _ in range(3)]  # the fresh page first, then the cached ones (evicted)
    assert None not in got and pages.allocate() is None
    assert pages.lookup([1, 2, 3, 4], 2) == []  # evicted


def test_hybrid_family_batched_is_alone(tmp_path):
    """Gated DeltaNet layers keep their state in the row's slot: chunked prompts and decode rows
    of several sequences in one call still give each its own ids; no prefix cache."""
    from strata.runtime.opener import resolved_knobs
    from strata.runtime.commands.serve import is_recurrent, serving_knobs
    from support import TINY

    model = load_model(write_checkpoint(TINY["qwen3.5-moe"], tmp_path / "hybrid", std=0.5))
    assert is_recurrent(model)
    knobs = resolved_knobs(model, "cpu", {"ctx": CTX, "PageSize": PAGE})
    page, pages = serving_knobs(model, knobs, kv_pages=12, max_num_seqs=ROWS)
    assert knobs["Batch"] >= ROWS  # a state slot per row
    serving = open_program(model, "cpu", knobs, cache_dir=tmp_path / "serve", quiet=True)
    alone = open_program(model, "cpu", {"ctx": CTX}, cache_dir=tmp_path / "alone", quiet=True)
    scheduler = Scheduler(serving, page_size=page, num_pages=pages, max_num_seqs=ROWS, max_batched_tokens=5,
                          prefix_cache=False)
    requests = _requests(8)
    seqs = [scheduler.add(p, n, sampling=s) for p, n, s in requests]
    while scheduler.has_work():
        scheduler.step()
    for (prompt, n, sampling), seq in zip(requests, seqs):
        assert seq.outputs == generate(alone, prompt, n, sampling=sampling).ids
    assert scheduler.pages.used == 0 and scheduler.pages.hits == 0


class _EvenTokens:
    """A constraint of the matcher protocol (`strata.runtime.constrain`) for the tiny vocabulary:
    even ids only, and the grammar completes after `length` tokens."""

    def __init__(self, vocab: int, length: int):
        self.vocab, self.length = vocab, length

    def matcher(self):
        return _EvenMatcher(self)


class _EvenMatcher:
    def __init__(self, constraint: _EvenTokens):
        self.constraint, self.taken = constraint, []

    def next_mask(self) -> np.ndarray:
        allowed = np.zeros(-(-self.constraint.vocab // 32) * 32, bool)
        allowed[0:self.constraint.vocab:2] = True
        return np.packbits(allowed, bitorder="little").view("<i4")[None]

    def next_mask_async(self):
        from concurrent.futures import Future

        done = Future()
        done.set_result(self.next_mask())
        return done

    def advance(self, token: int) -> bool:
        assert token % 2 == 0, token
        self.taken.append(token)
        return len(self.taken) < self.constraint.length


def test_constrained_batched_is_alone(programs):
    """Constrained sequences (greedy and sampled) among unconstrained ones: each token is an
    allowed one, each ends ("stop", by "grammar") when its grammar completes, and its ids are
    the one loop's with the same constraint alone."""
    serving, alone = programs
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=24, max_num_seqs=ROWS, max_batched_tokens=10)
    requests = [(p, n, s, _EvenTokens(serving.vocab, 3 + i % 3) if i % 2 == 0 else None)
                for i, (p, n, s) in enumerate(_requests(8))]
    requests = [(p, max(n, 6), s, c) for p, n, s, c in requests]
    seqs = [scheduler.add(p, n, sampling=s, constraint=c) for p, n, s, c in requests]
    while scheduler.has_work():
        scheduler.step()
    for (prompt, n, sampling, constraint), seq in zip(requests, seqs):
        want = generate(alone, prompt, n, sampling=sampling, constraint=constraint)
        assert seq.outputs == want.ids
        if constraint is not None:
            assert all(t % 2 == 0 for t in seq.outputs) and len(seq.outputs) == constraint.length
            assert (seq.finish_reason, seq.stopped_by) == ("stop", "grammar") == (want.finish_reason, want.stopped_by)
    assert any(any(t % 2 for t in seq.outputs) for seq, r in zip(seqs, requests) if r[3] is None)  # it decides
