"""The serving engine: the scheduler stepped on a thread of its own, text in and out.

    program, prefix_cache = open_serving(model, "cpu", {"ctx": 256}, kv_pages=64, max_num_seqs=8)
    engine = ServeEngine(program, tokenizer, page_size=16, num_pages=64, prefix_cache=prefix_cache)
    engine.start()
    handle = engine.submit(prompt_ids, max_tokens=32, sampling=params, stop=["\\n\\n"], emit=events.append)
    # emit gets ("text", text, ids, logprobs) pieces, then ("done", finish_reason) once, on the engine's thread
    engine.cancel(handle)                  # a client gone: its pages are freed at the next step
    engine.drain(timeout=5); engine.close()

Each reply's text is made as `Engine.stream` makes it (`strata.runtime.engine`): the incremental
detokenizer over the new ids, held back before a stop string, stopping at the tokenizer's
end-of-generation ids; so a request's text is the one `strata generate` prints for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strata.errors import StrataError, warn
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.scheduler import Scheduler, SchedulerError, Seq, SeqRequest

#: The page size unless --set PageSize says otherwise.
DEFAULT_PAGE_SIZE = 16


class ServeError(StrataError):
    """A serving setup that cannot run (flags, the program)."""


class QueueFull(ServeError):
    """More requests waiting than the engine takes."""


class Draining(ServeError):
    """The engine is shutting down: it takes no new requests."""


def is_recurrent(model: Any) -> bool:
    """Whether the model keeps per-sequence recurrent state (a hybrid family's Gated DeltaNet)."""
    return "linear_attention" in tuple(getattr(model.config, "layer_types", ()) or ())


def serving_knobs(model: Any, target_name: str, knobs: Mapping[str, Any] | None, *, kv_pages: int | None,
                  max_num_seqs: int) -> tuple[dict[str, Any], int, int]:
    """The knobs of a program that serves `max_num_seqs` rows over `kv_pages` pages through one
    `step_paged` entry, and (its page size, its pages). The KV cache holds Batch * ctx cells,
    so Batch is the rows of a full context those pages need; a family with recurrent state
    keeps a state slot per row, so it has at least as many."""
    from strata.runtime.engine import resolved_knobs

    if target_name != "cpu":  # the scheduler steps the module level's step_paged entry, which only the cpu target compiles
        raise ServeError(f"strata serve runs on --target cpu: the {target_name} target does not compile the "
                         "step_paged entry the scheduler batches with")
    k = resolved_knobs(model, target_name, knobs)
    ctx, page = int(k["ctx"]), int(k.get("PageSize") or DEFAULT_PAGE_SIZE)
    if ctx % page:
        raise ServeError(f"the context of {ctx} is not a whole number of KV pages of {page} (--set PageSize=...)")
    per_row = ctx // page
    kv_pages = kv_pages or max_num_seqs * per_row
    batch = -(-kv_pages // per_row)
    if is_recurrent(model):
        batch = max(batch, max_num_seqs)
    k.update(entries="step_paged", Batch=batch, Rows=max_num_seqs, PageSize=page, Pages=per_row)
    return k, page, kv_pages


@dataclass(eq=False)
class Handle:
    """One request in the engine: its events go to `emit`; `seq` once the scheduler has it."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams | None
    stop: tuple[str, ...]
    emit: Callable[[tuple], None]
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


class _Text:
    """A reply's text as `TextStream` makes it, pushed one token at a time."""

    def __init__(self, tokenizer: Any, handle: Handle, end_ids: frozenset[int]):
        from strata.runtime.text import StopStrings

        self.handle, self.end_ids = handle, end_ids
        self.detok = tokenizer.detokenizer(skip_special=True, context=handle.prompt)
        self.stops = StopStrings(handle.stop)
        self.pending: list[int] = []
        self.pending_logprobs: list[tuple[float, list[tuple[int, float]]]] = []

    def on_token(self, token: int, logits: np.ndarray | None = None) -> str | None:
        self.pending.append(token)
        if self.handle.logprobs is not None and logits is not None:
            self.pending_logprobs.append(token_logprobs(logits, token, self.handle.logprobs))
        if token in self.end_ids:  # the sequence ends on it; an end-of-turn token is not text
            return None
        shown = self.stops.push(self.detok.push(token))
        if self.stops.stopped:
            self._piece(shown)
            return self.stops.matched
        if shown:
            self._piece(shown)
        return None

    def finish(self) -> None:
        if not self.stops.stopped:
            tail = self.stops.push(self.detok.flush())
            tail += self.stops.flush() if not self.stops.stopped else ""
            if tail or self.pending:
                self._piece(tail)
        elif self.pending:
            self._piece("")

    def _piece(self, text: str) -> None:
        ids, self.pending = self.pending, []
        lps, self.pending_logprobs = self.pending_logprobs, []
        self.handle.emit(("text", text, ids, lps))


class ServeEngine:
    def __init__(self, program: Any, tokenizer: Any, *, page_size: int, num_pages: int, max_num_seqs: int | None = None,
                 max_batched_tokens: int = 256, prefix_cache: bool = True, max_waiting: int = 256,
                 observer: Observer | None = None):
        self.program, self.tokenizer = program, tokenizer
        self.scheduler = Scheduler(program, page_size=page_size, num_pages=num_pages, max_num_seqs=max_num_seqs,
                                   max_batched_tokens=max_batched_tokens, prefix_cache=prefix_cache)
        self.end_ids = frozenset(i for i in tokenizer.end_of_generation_ids if 0 <= i < program.vocab)
        self.max_waiting = max_waiting
        self.observer = observer or Observer()
        self.draining = False
        self._inbox: list[Handle] = []
        self._live: set[Handle] = set()
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="strata-serve-engine", daemon=True)

    # -- the caller's side (any thread) -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def check(self, prompt: Sequence[int], max_tokens: int) -> None:
        """Refuse a request that can never run here (SchedulerError, naming the limit)."""
        self.scheduler.check(len(prompt), max_tokens)

    def submit(self, prompt: Sequence[int], max_tokens: int, *, sampling: SamplingParams | None = None,
               stop: Iterable[str] = (), emit: Callable[[tuple], None], logprobs: int | None = None,
               request_id: str = "") -> Handle:
        from strata.runtime.text import StopStrings

        stop = tuple(stop)
        StopStrings(stop)  # a bad stop string is refused here, not on the engine's thread
        handle = Handle([int(t) for t in prompt], int(max_tokens), sampling, stop, emit, logprobs=logprobs,
                        request_id=request_id)
        self.check(handle.prompt, handle.max_tokens)
        with self._wake:
            if self.draining or self._closed:
                raise Draining("the server is shutting down; it takes no new requests")
            if len(self._inbox) + len(self.scheduler.waiting) >= self.max_waiting:
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
                    self._wake.wait()
                if self._closed:
                    return
                inbox, self._inbox = self._inbox, []
                for handle in inbox:
                    self._admit(handle)
            try:
                self.scheduler.step()
            except Exception as e:  # a failed step fails its requests, not the server
                warn(f"serve: a step failed ({type(e).__name__}: {e}); its requests are ended")
                self._fail_all(f"the step failed: {e}")

    def _admit(self, handle: Handle) -> None:
        text = _Text(self.tokenizer, handle, self.end_ids)

        def on_token(seq: Seq, token: int) -> str | None:
            now = time.perf_counter()
            if handle.first_token_at is None:
                handle.first_token_at = now
                self.observer.first_token(now - handle.arrived)
            else:
                self.observer.inter_token(now - handle.last_token_at)
            handle.last_token_at = now
            handle.completion_tokens += 1
            return text.on_token(token, seq.logits)

        def on_finish(seq: Seq) -> None:
            handle.finish_reason = seq.finish_reason
            if seq.finish_reason != "cancelled":
                text.finish()
            with self._wake:
                self._live.discard(handle)
            self.observer.finished(handle)
            handle.emit(("done", seq.finish_reason))

        try:
            handle.seq = self.scheduler.add(SeqRequest(handle.prompt, handle.max_tokens, handle.sampling,
                                                       self.end_ids, on_token, on_finish))
        except SchedulerError as e:  # checked at submit: only a race with a changed limit gets here
            self._live.discard(handle)
            handle.emit(("error", str(e)))
            return
        if handle.cancelled:
            self.scheduler.cancel(handle.seq)

    def _fail_all(self, why: str) -> None:
        with self._wake:
            handles = list(self._live)
            self._live.clear()
        self.scheduler.abort_all()
        for handle in handles:
            handle.emit(("error", why))
