"""Continuous batching over a paged program: every step is one `step_paged` call.

    scheduler = Scheduler(program, page_size=16, num_pages=256, max_num_seqs=8, max_batched_tokens=256)
    seq = scheduler.add(prompt_ids, max_tokens=64, sampling=params, stop_ids={2})
    while scheduler.has_work():
        step = scheduler.step()            # decode rows + prompt chunks, one call; tokens chosen
        for out in step.outputs:           # SeqOutput: seq, token, logits, finish_reason
            ...                            # the text layer runs after the step, never inside it
    scheduler.finish(seq, "stop", "\n\n") # a stop string the text layer found: its pages go back now
    scheduler.cancel(seq)                  # a client gone: its pages are freed at the next step

The scheduler knows ids, never text: a step plans, makes one call, chooses each finished
sequence's next token and reports what it did (`StepResult`); the caller (the serving engine)
then turns the new tokens into text and ends a sequence whose text reached a stop string. A
step whose call fails ends the sequences it planned (`StepFailed` names them); a choice that
fails ends its own sequence (its `SeqOutput.error`).

A step takes the running sequences' pending tokens first (a decode row's one token, or the next
chunk of a prompt still being prefilled), oldest first, then admits waiting requests in arrival
order (first come, first served: the first that does not fit stops admission) with chunks of
their prompts, until `max_batched_tokens` tokens are in the call. The decode rows ride in the
entry's step rows, the chunks in its packed tokens; a call needs at least one chunk token, so a
step of decode rows only runs one of them as a chunk of one token.

Pages are handed out as a sequence grows (`pages.PageAllocator`). When none is left for a
running sequence, the newest running sequence is preempted: its pages go back and it waits at
the head of the queue, to be recomputed (its prompt and the tokens it made so far) when pages
free up; what it already streamed stays streamed, and it draws on from where it was, so the
result is the same. A sequence's full pages are shared through the prefix cache by the hash of
their tokens, so a later request with the same prefix (a system prompt) starts after them.

A family with recurrent state (Gated DeltaNet: the program's `read_slot` is not empty) keeps
that state in the row's slot, which a page cannot restore. Its prefix cache also keeps the slot's
state at page ends (`snapshots.StateSnapshots`, `state_snapshots` of them, keyed by the page's
chain hash): a step whose prompt chunk ends a sequence's computed tokens exactly at the end of
a full page copies the slot out (not a decode step's: a long reply would push the system
prompts' states out of the store for pages no other request starts with). A later request
reuses its longest cached prefix whose last page has a state kept: that state is written into
its slot (`write_slot`), and it runs on from there; the cached pages after that one are let go
and recomputed. A hybrid's prompt chunks end at two page boundaries on purpose, so their states
exist: its last full page (the same prompt again, or the next turn of a chat, which starts with
it) and the end of the prefix the KV cache had but no state for (where a shared system prompt
ends: the second request with it keeps that state, the third on reuse it). Every page boundary
would do too, but costs a call per page.

A sequence with a constraint (`strata.runtime.constrain`: a JSON schema, a grammar) has a
matcher: its next token's mask is computed on the mask thread while the step's call runs, the
chooser's sampler applies it (greedy parameters: the argmax of the allowed tokens), the matcher
takes the chosen token, and the sequence ends ("stop", by "grammar") when its grammar is complete.

Each token is chosen by the program's own `Chooser` (`Program.chooser`, one per sequence), the
one its prefill and decode choose with: the argmax, or the program's compiled sampler keyed by
(seed, position) over the sequence's own token counts, so a request gives the same ids batched
or alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.runtime.program import Chooser, Program
from strata.runtime.request import ContextError, check_fits
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.pages import PageAllocator, page_key, prefix_keys, ROOT_KEY
from strata.runtime.serve.snapshots import StateSnapshots

ENTRY = "step_paged"


class SchedulerError(StrataError):
    """A program or a request the scheduler cannot run."""


@dataclass(eq=False)
class Seq:
    """A request's state in the scheduler."""

    id: int
    tokens: list[int]
    max_tokens: int
    #: None or greedy: the argmax; else resolved (with a seed).
    sampling: SamplingParams | None
    stop_ids: frozenset[int]
    chooser: Chooser
    outputs: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    #: The keys of its first len(keys) pages, registered in the prefix cache.
    keys: list[int] = field(default_factory=list)
    computed: int = 0
    row: int | None = None
    #: A hybrid's recurrent state to write into its slot when it gets one (its cached prefix's end).
    restore: dict | None = None
    #: A hybrid's chunks end here too: the end of a cached prefix that had no state kept (0: none).
    keep_state_at: int = 0
    #: None while it runs; "stop", "length", "cancelled" or "error" once it has ended.
    finish_reason: str | None = None
    stopped_by: int | str | None = None
    cancelled: bool = False
    preemptions: int = 0
    #: Its constraint's matcher (`strata.runtime.constrain.Matcher`), and the mask of its next
    #: token while it is computed beside a step (a future); None: unconstrained.
    matcher: Any = None
    mask: Any = None


@dataclass(frozen=True)
class SeqOutput:
    """What one step did to one sequence: the token it chose (None: none, the sequence ended
    without one: cancelled, or its choice failed), the logits [vocab] that chose it (the model's
    own, for log-probabilities), and why the sequence ended, if it did."""

    seq: Seq
    token: int | None
    logits: np.ndarray | None = None
    finish_reason: str | None = None
    #: The exception its choice raised (finish_reason "error").
    error: BaseException | None = None


@dataclass(frozen=True)
class StepResult:
    """One step: the tokens run through the model (0: nothing to do) and each sequence's output."""

    computed: int
    outputs: list[SeqOutput] = field(default_factory=list)


class StepFailed(Exception):
    """The step's call failed: the sequences it planned are ended ("error"), the others go on."""

    def __init__(self, seqs: list[Seq]):
        super().__init__(f"the step of {len(seqs)} sequence(s) failed")
        self.seqs = seqs


class Scheduler:
    def __init__(self, program: Program, *, page_size: int, num_pages: int, max_num_seqs: int | None = None,
                 max_batched_tokens: int = 256, prefix_cache: bool = True, state_snapshots: int = 64):
        if ENTRY not in program.entries:
            raise SchedulerError(f"the program has no {ENTRY} entry (compile it with --set entries=...,{ENTRY})")
        args = {name: shape for name, shape, _ in program.entries[ENTRY][0]}
        self.rows, pages_per_row = (int(d) for d in args["table"])
        if pages_per_row * page_size < program.n_ctx:
            raise SchedulerError(f"{ENTRY}'s table reaches {pages_per_row} pages of {page_size}, "
                                 f"less than the context of {program.n_ctx}")
        if max_num_seqs is not None and max_num_seqs > self.rows:
            raise SchedulerError(f"max_num_seqs {max_num_seqs} is more than the {self.rows} rows {ENTRY} was compiled for")
        if max_batched_tokens < 1:
            raise SchedulerError(f"max_batched_tokens must be at least 1, got {max_batched_tokens}")
        self.program, self.page_size, self.pages_per_row = program, page_size, pages_per_row
        self.max_num_seqs = max_num_seqs or self.rows
        self.max_batched_tokens = max_batched_tokens
        #: A family with recurrent state in the rows' slots: its states at page ends, kept for the prefix cache.
        read_slot = getattr(program, "read_slot", None)
        recurrent = read_slot is not None and bool(read_slot(0))
        prefix_cache = prefix_cache and not (recurrent and state_snapshots == 0)  # no state kept: no reuse
        self.snapshots = StateSnapshots(state_snapshots) if prefix_cache and recurrent else None
        self.pages = PageAllocator(num_pages, page_size, prefix_cache,
                                   on_evict=self.snapshots.drop if self.snapshots is not None else None)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self._free_rows = list(range(self.max_num_seqs - 1, -1, -1))
        self._ids = count()
        #: Totals over the scheduler's life (for /metrics): tokens computed and tokens made, steps, preemptions.
        self.computed_tokens = self.generated_tokens = self.steps = self.preemptions = 0

    # -- requests -------------------------------------------------------------------------------

    def add(self, prompt: Sequence[int], max_tokens: int, *, sampling: SamplingParams | None = None,
            stop_ids: Collection[int] = (), constraint: Any = None) -> Seq:
        """Queue a sequence: `prompt`'s ids, up to `max_tokens` new ones (refused, a SchedulerError,
        when they can never fit), drawn with `sampling` (None or greedy: the argmax), ending at
        any of `stop_ids`, its output held to `constraint` (`strata.runtime.constrain.Constraint`)."""
        prompt = [int(t) for t in prompt]
        self.check(len(prompt), max_tokens)
        if constraint is not None:  # even greedy parameters draw with the sampler: it applies the mask
            sampling = (sampling or SamplingParams()).resolved()
        else:
            sampling = None if sampling is None or sampling.greedy else sampling.resolved()
        seq = Seq(next(self._ids), prompt, int(max_tokens), sampling, frozenset(int(t) for t in stop_ids),
                  self.program.chooser(), matcher=constraint.matcher() if constraint is not None else None)
        if max_tokens <= 0:
            self._end(seq, "length")
        else:
            self.waiting.append(seq)
        return seq

    def check(self, prompt_len: int, max_tokens: int) -> None:
        """Refuse a request that can never run: empty, past the context, or more pages than there are."""
        if prompt_len < 1:
            raise SchedulerError("the prompt is empty")
        try:
            check_fits(prompt_len, max_tokens, self.program.n_ctx)
        except ContextError as e:
            raise SchedulerError(str(e)) from None
        need = prompt_len + max(max_tokens - 1, 0)  # the last new token needs no cache cell
        pages = -(-need // self.page_size)
        if pages > self.pages.num_pages:
            raise SchedulerError(f"the prompt ({prompt_len} tokens) plus {max_tokens} new tokens need {pages} "
                                 f"KV pages of {self.page_size}, more than the {self.pages.num_pages} there are")

    def abort_all(self) -> list[Seq]:
        """End every sequence now ("error"), its pages freed; the sequences ended."""
        seqs = list(self.running) + list(self.waiting)
        self.waiting.clear()
        for seq in seqs:
            self._end(seq, "error")
        return seqs

    def cancel(self, seq: Seq) -> None:
        """End `seq` at the next step (thread-safe: only a flag), its pages freed."""
        seq.cancelled = True

    def finish(self, seq: Seq, reason: str, by: int | str | None = None) -> None:
        """End `seq` now (between steps, on the scheduler's thread): a stop string found in its text."""
        if seq.finish_reason is None:
            if seq in self.waiting:
                self.waiting.remove(seq)
            self._end(seq, reason, by)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    # -- one step -------------------------------------------------------------------------------

    def step(self) -> StepResult:
        """Run one call of the entry over what fits, and choose the next token of each sequence
        whose tokens are all computed; what it did, sequence by sequence."""
        outputs = [SeqOutput(seq, None, None, "cancelled") for seq in self._drop_cancelled()]
        plan: list[tuple[Seq, int, int]] = []
        budget = self.max_batched_tokens
        preempted = False
        for seq in list(self.running):
            if budget == 0:
                break
            if seq.row is None:  # preempted by an older sequence of this step
                continue
            n = self._chunk(seq, budget)
            while not self._grow(seq, seq.computed + n):
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.row is not None:
                plan.append((seq, seq.computed, n))
                budget -= n
        while self.waiting and budget > 0 and self._free_rows and not preempted:
            seq = self.waiting[0]
            if seq.computed == 0:
                self._take_cached_prefix(seq)
            n = self._chunk(seq, budget)
            if not self._grow(seq, seq.computed + n):
                self._drop_pages(seq)  # FCFS: nothing behind it goes first
                break
            self.waiting.popleft()
            seq.row = self._free_rows.pop()
            if seq.restore is not None:  # its cached prefix's recurrent state, before the call reads it
                self.program.write_slot(seq.row, seq.restore)
                seq.restore = None
                self.snapshots.restored += 1
            self.running.append(seq)
            plan.append((seq, seq.computed, n))
            budget -= n
        if not plan:
            return StepResult(0, outputs)
        for seq, start, n in plan:  # the masks of the tokens this step chooses, made while it runs
            if seq.matcher is not None and seq.mask is None and start + n == len(seq.tokens):
                seq.mask = seq.matcher.next_mask_async()
        try:
            logits, step_rows = self._call(plan)
        except Exception as e:
            failed = [seq for seq, _, _ in plan]
            for seq in failed:
                self._end(seq, "error")
            raise StepFailed(failed) from e
        self.steps += 1
        for seq, start, n in plan:
            out = self._advance(seq, start + n, logits, seq.id in step_rows)
            if out is not None:
                outputs.append(out)
        return StepResult(sum(n for _, _, n in plan), outputs)

    def _call(self, plan: list[tuple[Seq, int, int]]) -> tuple[np.ndarray, set[int]]:
        """The entry's arguments for the plan, and its logits [2 * rows, vocab] (chunk rows first)
        with the ids of the sequences that rode in its step rows."""
        rows, ps = self.rows, self.page_size
        steps = [p for p in plan if p[2] == 1 and p[1] + 1 == len(p[0].tokens)]
        chunks = [p for p in plan if p not in steps]
        if not chunks:  # the entry takes at least one chunk token: a decode row goes as a chunk of one
            chunks, steps = steps[:1], steps[1:]
        table = np.full((rows, self.pages_per_row), -1, np.int32)
        for seq, _, _ in plan:
            table[seq.row, :len(seq.pages)] = seq.pages
        tokens, positions, row_of, slots = [], [], [], []
        last = np.full(rows, -1, np.int32)
        for seq, start, n in chunks:
            pos = np.arange(start, start + n)
            tokens += seq.tokens[start:start + n]
            positions.append(pos)
            row_of += [seq.row] * n
            slots.append(table[seq.row, pos // ps].astype(np.int64) * ps + pos % ps)
            if start + n == len(seq.tokens):
                last[seq.row] = len(tokens) - 1
        step_tokens = np.zeros((rows, 1), np.int32)
        step_positions = np.full(rows, -1, np.int32)
        for seq, start, _ in steps:
            step_tokens[seq.row, 0], step_positions[seq.row] = seq.tokens[start], start
        self.computed_tokens += len(tokens) + len(steps)
        (logits,) = self.program.call(
            ENTRY, tokens=np.asarray(tokens, np.int32), positions=np.concatenate(positions).astype(np.int32),
            rows=np.asarray(row_of, np.int32), slots=np.concatenate(slots).astype(np.int32), last=last,
            step_tokens=step_tokens, step_positions=step_positions, table=table)
        return logits, {seq.id for seq, _, _ in steps}

    def _advance(self, seq: Seq, computed: int, logits: np.ndarray, in_step_row: bool) -> SeqOutput | None:
        seq.computed = computed
        self._register_full_pages(seq)
        self._keep_state(seq)
        if computed < len(seq.tokens):
            return None  # a prompt chunk (or a recompute) not yet at its end
        row = logits[self.rows + seq.row if in_step_row else seq.row]
        try:
            token = self._choose(seq, row)
            complete = seq.matcher is not None and not seq.matcher.advance(token)
        except Exception as e:  # this sequence's choice: it alone ends
            self._end(seq, "error")
            return SeqOutput(seq, None, None, "error", e)
        seq.outputs.append(token)
        seq.tokens.append(token)
        self.generated_tokens += 1
        if token in seq.stop_ids:
            self._end(seq, "stop", token)
        elif complete:
            self._end(seq, "stop", "grammar")
        elif len(seq.outputs) >= seq.max_tokens:
            self._end(seq, "length")
        return SeqOutput(seq, token, row, seq.finish_reason)

    def _choose(self, seq: Seq, logits: np.ndarray) -> int:
        """The next token, as the program's prefill / decode step chooses it for one sequence:
        its chooser is fed what the program ran for it since the last choice."""
        if seq.outputs:  # the output just fed (a decode's token)
            fed, start, output = [seq.tokens[-1]], len(seq.tokens) - 1, True
        else:  # the prompt (a prefill's tokens)
            fed, start, output = seq.tokens, 0, False
        sampling = seq.sampling
        if seq.matcher is not None:
            mask, seq.mask = seq.mask, None
            sampling = sampling.with_mask(mask if mask is not None else seq.matcher.next_mask())
        return int(seq.chooser.choose(logits, fed, start, output, sampling).token)

    # -- pages ----------------------------------------------------------------------------------

    def _grow(self, seq: Seq, upto: int) -> bool:
        """Pages for positions < upto; False when the allocator ran out (the pages got so far stay)."""
        need = -(-upto // self.page_size)
        while len(seq.pages) < need:
            page = self.pages.allocate()
            if page is None:
                return False
            seq.pages.append(page)
        return True

    def _take_cached_prefix(self, seq: Seq) -> None:
        # The last token is always computed: its logits choose the next one.
        reach = (len(seq.tokens) - 1) // self.page_size
        seq.restore, seq.keep_state_at = None, 0
        if self.snapshots is not None:  # the longest cached prefix whose end has its recurrent state
            keys = self.pages.cached_pages(seq.tokens, reach)
            reach = len(keys)
            while reach and (state := self.snapshots.get(keys[reach - 1])) is None:
                reach -= 1
            if reach < len(keys):  # the KV cache knew more of it: keep the state at its end this time
                seq.keep_state_at = len(keys) * self.page_size
            if reach:
                seq.restore = state
        hits = self.pages.lookup(seq.tokens, reach)
        seq.pages, seq.keys = list(hits), prefix_keys(seq.tokens, self.page_size, len(hits))
        seq.computed = len(hits) * self.page_size

    def _chunk(self, seq: Seq, budget: int) -> int:
        """The tokens of `seq` to run in this step: what is left, up to `budget`; a hybrid's
        prompt chunk ends at its prompt's last full page or at `keep_state_at`, if it would pass one."""
        n = min(len(seq.tokens) - seq.computed, budget)
        if self.snapshots is None or n <= 1:
            return n
        last_page_end = (len(seq.tokens) - len(seq.outputs) - 1) // self.page_size * self.page_size
        ends = [b for b in (seq.keep_state_at, last_page_end) if seq.computed < b < seq.computed + n]
        return min(ends) - seq.computed if ends else n

    def _keep_state(self, seq: Seq) -> None:
        """A hybrid sequence whose computed prompt tokens end a full page: its slot's state is kept
        under that page's key."""
        full = seq.computed // self.page_size
        prompt = len(seq.tokens) - len(seq.outputs)
        if self.snapshots is None or seq.row is None or seq.computed % self.page_size or seq.computed > prompt:
            return
        key = seq.keys[full - 1] if full else None
        if key is not None and self.pages.is_cached(key) and key not in self.snapshots:
            self.snapshots.put(key, self.program.read_slot(seq.row))

    def _register_full_pages(self, seq: Seq) -> None:
        for j in range(len(seq.keys), seq.computed // self.page_size):
            parent = seq.keys[-1] if seq.keys else ROOT_KEY
            seq.keys.append(page_key(parent, seq.tokens[j * self.page_size:(j + 1) * self.page_size]))
            self.pages.register(seq.pages[j], seq.keys[-1])

    def _drop_pages(self, seq: Seq) -> None:
        for page in seq.pages:
            self.pages.release(page)
        seq.pages, seq.keys, seq.computed = [], [], 0

    def _preempt(self, seq: Seq) -> None:
        """Back to the head of the queue, its pages freed: recomputed when it is admitted again."""
        self._drop_pages(seq)
        self._leave_row(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _leave_row(self, seq: Seq) -> None:
        if seq.row is not None:
            self._free_rows.append(seq.row)
            seq.row = None
            self.running.remove(seq)

    def _drop_cancelled(self) -> list[Seq]:
        dropped = [s for s in self.running if s.cancelled] + [s for s in self.waiting if s.cancelled]
        for seq in dropped:
            if seq in self.waiting:
                self.waiting.remove(seq)
            self._end(seq, "cancelled")
        return dropped

    def _end(self, seq: Seq, reason: str, by: int | str | None = None) -> None:
        self._drop_pages(seq)
        self._leave_row(seq)
        seq.finish_reason, seq.stopped_by = reason, by
