"""The serving engine: the scheduler stepped on a thread of its own, text in and out.

    engine = ServeEngine(program, tokenizer, page_size=16, num_pages=64, prefix_cache=True)
    engine.start()
    handle = engine.submit(prompt_ids, max_tokens=32, sampling=params, stop=["\\n\\n"], emit=events.append)
    # emit gets TextEvent pieces, then one DoneEvent (or one ErrorEvent), on the engine's thread
    engine.cancel(handle)                  # a client gone: its pages are freed at the next step
    engine.limits, engine.stats()          # what a request is checked against; the counters /metrics reads
    engine.stalled(60)                     # why the engine is stuck (a step running 60 s with work), or None
    engine.drain(timeout=5); engine.close()

The way down and up: `submit` queues a `Handle`; the engine's thread admits it to the scheduler
(`Scheduler.add`: ids only), runs one `Scheduler.step` (one call of the program, each token
chosen by the program's chooser), and only then runs the text layer over the step's outputs:
the one `TextEmitter` of `strata.runtime.text` (the reply's text exactly as `strata generate`
prints it), then the events to the handle. A stop string found in the text ends the sequence
in the scheduler after the step (`Scheduler.finish`), as vLLM detokenizes after its step.

A failed step fails the requests it ran (an `ErrorEvent`: the server answers 500) and the server
goes on; a request's own failure (its text, its choice) fails that request alone; the traceback
of either goes to the log, as a bug's should.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from strata.errors import StrataError, warn
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.scheduler import Scheduler, SchedulerError, Seq, SeqOutput, StepFailed


class ServeError(StrataError):
    """A serving setup that cannot run (flags, the program)."""


class QueueFull(ServeError):
    """More requests waiting than the engine takes."""


class Draining(ServeError):
    """The engine is shutting down: it takes no new requests."""


# -- the events a request's `emit` gets (on the engine's thread) ------------------------------


@dataclass(frozen=True)
class TextEvent:
    """Text that became whole, the ids it completes, and (when asked) their log-probabilities:
    (the token's, [(id, logprob) of the most likely]) per id."""

    text: str
    ids: list[int]
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)


@dataclass(frozen=True)
class DoneEvent:
    """The request ended: "stop", "length" or "cancelled"."""

    finish_reason: str


@dataclass(frozen=True)
class ErrorEvent:
    """The request failed in the engine (the server answers 500)."""

    message: str


Event = Union[TextEvent, DoneEvent, ErrorEvent]


@dataclass(frozen=True)
class RequestLimits:
    """What a request is checked against before it is queued: the tokenizer that encodes its
    text, the vocabulary, the context, and the tokens the KV pages hold."""

    tokenizer: Any
    vocab: int
    n_ctx: int
    kv_tokens: int


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's state and running totals (for /metrics)."""

    running: int
    waiting: int
    pages_used: int
    pages_free: int
    prefix_cache_hits: int
    preemptions: int
    #: A hybrid family's recurrent states kept at page ends: how many now, their bytes, restored so far.
    state_snapshots: int
    state_snapshot_bytes: int
    state_snapshots_restored: int
    steps: int
    computed_tokens: int


@dataclass(eq=False)
class Handle:
    """One request in the engine: its events go to `emit`; `seq` once the scheduler has it."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams | None
    stop: tuple[str, ...]
    emit: Callable[[Event], None]
    arrived: float = field(default_factory=time.perf_counter)
    seq: Seq | None = None
    cancelled: bool = False
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    completion_tokens: int = 0
    #: None: no log-probabilities; k >= 0: each token's, with the k most likely beside it.
    logprobs: int | None = None
    #: The request's id in the API (for the log line).
    request_id: str = ""
    #: Its text layer, once admitted (the engine's thread only).
    text: Any = None
    #: Its output constraint, compiled for the tokenizer (`strata.runtime.constrain.Constraint`).
    constraint: Any = None
    pending_logprobs: list = field(default_factory=list)


def token_logprobs(logits: np.ndarray, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of `token` under the model's distribution (a log-softmax of its
    logits, in float64, before any sampling parameter) and the `top` most likely (id, logprob)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max()
    lp = z - np.log(np.exp(z).sum())
    best = np.argsort(-lp, kind="stable")[:top] if top else []
    return float(lp[token]), [(int(i), float(lp[i])) for i in best]


class Observer:
    """What the engine tells a watcher (the server's metrics); every method is called on the engine's thread."""

    def first_token(self, seconds: float) -> None: ...

    def inter_token(self, seconds: float) -> None: ...

    def finished(self, handle: Handle) -> None: ...


class ServeEngine:
    def __init__(self, program: Any, tokenizer: Any, *, page_size: int, num_pages: int, max_num_seqs: int | None = None,
                 max_batched_tokens: int = 256, prefix_cache: bool = True, state_snapshots: int = 64,
                 max_waiting: int = 256, observer: Observer | None = None):
        from strata.runtime.text import end_of_generation_ids

        self.program, self.tokenizer = program, tokenizer
        self.scheduler = Scheduler(program, page_size=page_size, num_pages=num_pages, max_num_seqs=max_num_seqs,
                                   max_batched_tokens=max_batched_tokens, prefix_cache=prefix_cache,
                                   state_snapshots=state_snapshots)
        self.end_ids = end_of_generation_ids(tokenizer, program.vocab)
        self.limits = RequestLimits(tokenizer, program.vocab, program.n_ctx, num_pages * page_size)
        self.max_waiting = max_waiting
        self.observer = observer or Observer()
        self.draining = False
        self._inbox: list[Handle] = []
        self._live: set[Handle] = set()
        self._by_seq: dict[int, Handle] = {}
        self._wake = threading.Condition()
        self._closed = False
        #: When the engine's thread last made progress (began or ended a step) while it had work;
        #: None while it waits for work.
        self._progress_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="strata-serve-engine", daemon=True)

    # -- the caller's side (any thread) -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def describe(self) -> str:
        s = self.scheduler
        return (f"{s.max_num_seqs} rows, {s.pages.num_pages} KV pages of {s.page_size}, context {self.program.n_ctx}, "
                f"up to {s.max_batched_tokens} tokens a step")

    def stats(self) -> EngineStats:
        s = self.scheduler
        with self._wake:
            inbox = len(self._inbox)
        snaps = s.snapshots
        return EngineStats(s.num_running, s.num_waiting + inbox, s.pages.used, s.pages.free, s.pages.hits,
                           s.preemptions, steps=s.steps, computed_tokens=s.computed_tokens,
                           state_snapshots=len(snaps) if snaps is not None else 0,
                           state_snapshot_bytes=snaps.nbytes if snaps is not None else 0,
                           state_snapshots_restored=snaps.restored if snaps is not None else 0)

    def submit(self, prompt: Sequence[int], max_tokens: int, *, sampling: SamplingParams | None = None,
               stop: Iterable[str] = (), emit: Callable[[Event], None], logprobs: int | None = None,
               request_id: str = "", constraint: Any = None) -> Handle:
        from strata.runtime.text import StopStrings

        stop = tuple(stop)
        StopStrings(stop)  # a bad stop string is refused here, not on the engine's thread
        handle = Handle([int(t) for t in prompt], int(max_tokens), sampling, stop, emit, logprobs=logprobs,
                        request_id=request_id)
        if constraint is not None:  # `constraint`: a ConstraintSpec, compiled here (ConstraintError if bad)
            from strata.runtime.constrain import Constraint

            handle.constraint = Constraint(constraint, self.tokenizer, self.program.vocab)
        self.scheduler.check(len(handle.prompt), handle.max_tokens)  # one that can never run: SchedulerError
        with self._wake:
            if self.draining or self._closed:
                raise Draining("the server is shutting down; it takes no new requests")
            if len(self._inbox) + self.scheduler.num_waiting >= self.max_waiting:
                raise QueueFull(f"{self.max_waiting} requests are already waiting")
            self._inbox.append(handle)
            self._live.add(handle)
            self._wake.notify()
        return handle

    def cancel(self, handle: Handle) -> None:
        with self._wake:
            handle.cancelled = True
            if handle.seq is not None:
                self.scheduler.cancel(handle.seq)
            self._wake.notify()

    def stalled(self, bound: float) -> str | None:
        """Why the engine is not serving (its thread gone, or no progress for `bound` seconds
        while it has work: a step stuck), or None."""
        if self._thread.ident is not None and not self._thread.is_alive() and not self._closed:
            return "its thread has stopped"
        since = self._progress_at
        if since is not None and time.monotonic() - since > bound:
            return f"no step has ended for {time.monotonic() - since:.1f} s with requests in flight"
        return None

    @property
    def in_flight(self) -> int:
        with self._wake:
            return len(self._live)

    def drain(self, timeout: float) -> bool:
        """Stop admission, wait up to `timeout` s for the requests in flight, cancel the rest;
        True when all finished by themselves."""
        with self._wake:
            self.draining = True
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        finished = not self.in_flight
        with self._wake:
            for handle in list(self._live):
                handle.cancelled = True
                if handle.seq is not None:
                    self.scheduler.cancel(handle.seq)
            self._wake.notify()
        deadline = time.monotonic() + 5
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        return finished

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    # -- the engine's thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._inbox and not self.scheduler.has_work():
                    self._progress_at = None
                    self._wake.wait()
                if self._closed:
                    return
                self._progress_at = time.monotonic()
                inbox, self._inbox = self._inbox, []
                for handle in inbox:  # under the lock: a cancel sees its seq, or the admission sees the cancel
                    self._admit(handle)
            try:
                result = self.scheduler.step()
            except StepFailed as e:  # the call failed: the requests it ran fail, the others go on
                self._log_bug("a step failed", e.__cause__ or e)
                for seq in e.seqs:
                    self._fail(self._by_seq.get(seq.id), f"the step failed: {_brief(e.__cause__ or e)}")
                continue
            except Exception as e:  # the scheduler itself: nothing tells which requests, so all end
                self._log_bug("the scheduler failed", e)
                for seq in self.scheduler.abort_all():
                    self._fail(self._by_seq.get(seq.id), f"the step failed: {_brief(e)}")
                continue
            self._progress_at = time.monotonic()
            for out in result.outputs:  # the text layer, after the step
                handle = self._by_seq.get(out.seq.id)
                if handle is None:
                    continue
                try:
                    self._deliver(handle, out)
                except Exception as e:  # this request's text: it alone fails
                    self._log_bug(f"request {handle.request_id or hex(id(handle))} failed", e)
                    self.scheduler.finish(out.seq, "error")
                    self._fail(handle, f"the request failed: {_brief(e)}")

    def _admit(self, handle: Handle) -> None:
        from strata.runtime.text import TextEmitter

        try:
            handle.text = TextEmitter(self.tokenizer, handle.prompt, handle.stop, self.end_ids)
            handle.seq = self.scheduler.add(handle.prompt, handle.max_tokens, sampling=handle.sampling,
                                            stop_ids=self.end_ids, constraint=handle.constraint)
        except SchedulerError as e:  # checked at submit: only a race with a changed limit gets here
            self._fail(handle, str(e))
            return
        self._by_seq[handle.seq.id] = handle
        if handle.seq.finish_reason is not None:  # max_tokens 0: ended as it came
            self._finish(handle, handle.seq.finish_reason)
        elif handle.cancelled:
            self.scheduler.cancel(handle.seq)

    def _deliver(self, handle: Handle, out: SeqOutput) -> None:
        """One step's output of a request through its text layer, as events."""
        if out.error is not None:
            self._log_bug(f"request {handle.request_id or hex(id(handle))}: choosing its token failed", out.error)
            self._fail(handle, f"the request failed: {_brief(out.error)}")
            return
        if out.token is not None:
            now = time.perf_counter()
            if handle.first_token_at is None:
                handle.first_token_at = now
                self.observer.first_token(now - handle.arrived)
            else:
                self.observer.inter_token(now - handle.last_token_at)
            handle.last_token_at = now
            handle.completion_tokens += 1
            if handle.logprobs is not None and out.logits is not None:
                handle.pending_logprobs.append(token_logprobs(out.logits, out.token, handle.logprobs))
            piece = handle.text.push(out.token)
            if piece is not None:
                self._piece(handle, piece)
            if handle.text.stopped and out.finish_reason is None:
                self.scheduler.finish(out.seq, "stop", handle.text.matched)
                self._finish(handle, "stop")
                return
        if out.finish_reason is not None:
            if out.finish_reason != "cancelled" and not handle.text.stopped:
                piece = handle.text.finish()
                if piece is not None:
                    self._piece(handle, piece)
            self._finish(handle, "stop" if handle.text.stopped else out.finish_reason)

    def _piece(self, handle: Handle, piece: Any) -> None:
        lps, handle.pending_logprobs = handle.pending_logprobs[:len(piece.ids)], handle.pending_logprobs[len(piece.ids):]
        handle.emit(TextEvent(piece.text, piece.ids, lps))

    def _finish(self, handle: Handle, reason: str) -> None:
        handle.finish_reason = reason
        self._forget(handle)
        self.observer.finished(handle)
        handle.emit(DoneEvent(reason))

    def _fail(self, handle: Handle | None, message: str) -> None:
        if handle is None or handle.finish_reason is not None:
            return
        handle.finish_reason = "error"
        self._forget(handle)
        self.observer.finished(handle)
        handle.emit(ErrorEvent(message))

    def _forget(self, handle: Handle) -> None:
        with self._wake:  # re-entrant: _admit holds it already
            self._live.discard(handle)
        if handle.seq is not None:
            self._by_seq.pop(handle.seq.id, None)

    @staticmethod
    def _log_bug(what: str, e: BaseException) -> None:
        """A failure inside the engine is a bug: its traceback goes to the log."""
        trace = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
        warn(f"serve: {what} ({_brief(e)}); traceback:\n{trace}")


def _brief(e: BaseException | None) -> str:
    return f"{type(e).__name__}: {e}" if e is not None else "unknown"
