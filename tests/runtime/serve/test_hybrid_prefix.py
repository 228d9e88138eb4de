"""The hybrid families' prefix cache: Qwen3.5, Qwen3.5-MoE and Qwen3-Next keep conv and Gated
DeltaNet state per sequence slot, saved at KV page ends and restored for a request that shares
the prefix. Requests sharing a long system prompt get exactly the ids they get with the prefix
cache off (and alone, through the runtime's one loop), greedy and sampled, through page and
state evictions; a wrong state restored is caught."""

from __future__ import annotations

import numpy as np
import pytest

from strata.pipeline import load_model
from strata.runtime.commands.serve import serving_knobs
from strata.runtime.generate import generate
from strata.runtime.opener import open_program, resolved_knobs
from strata.runtime.sampling import SamplingParams
from strata.runtime.serve.pages import PageAllocator, prefix_keys
from strata.runtime.serve.scheduler import Scheduler
from strata.runtime.serve.snapshots import StateSnapshots
from support import HYBRID_FAMILIES, TINY, write_checkpoint

CTX, PAGE, ROWS = 64, 4, 4
#: 5 full pages and 2 tokens: the system prompt every request starts with.
SYSTEM = [(7 * i + 3) % 40 + 2 for i in range(22)]
FAMILIES = {"qwen3.5": HYBRID_FAMILIES["qwen3_5"], "qwen3.5-moe": TINY["qwen3.5-moe"],
            "qwen3-next": HYBRID_FAMILIES["qwen3_next"]}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def programs(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    model = load_model(write_checkpoint(FAMILIES[request.param], tmp / "model", std=0.5))
    knobs = resolved_knobs(model, "cpu", {"ctx": CTX, "PageSize": PAGE})
    serving_knobs(model, knobs, kv_pages=4 * CTX // PAGE, max_num_seqs=ROWS)
    serving = open_program(model, "cpu", knobs, cache_dir=tmp / "serve", quiet=True)
    alone = open_program(model, "cpu", {"ctx": CTX}, cache_dir=tmp / "alone", quiet=True)
    return serving, alone


def _requests(n: int, vocab: int):
    """Waves of 3: the system prompt and a question of 1..9 ids; every other one sampled."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        prompt = SYSTEM + [int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 10)))]
        sampling = SamplingParams(temperature=0.9, top_k=12, presence_penalty=0.4, seed=i) if i % 2 else None
        out.append((prompt, int(rng.integers(4, 10)), sampling))
    return out


def _serve(scheduler: Scheduler, requests, wave: int = 3) -> list[list[int]]:
    """Each wave's requests added together and run to the end, then the next wave's."""
    outputs = []
    for at in range(0, len(requests), wave):
        seqs = [scheduler.add(p, n, sampling=s) for p, n, s in requests[at:at + wave]]
        while scheduler.has_work():
            scheduler.step()
        outputs += [seq.outputs for seq in seqs]
    assert scheduler.pages.used == 0 and not scheduler.running
    return outputs


@pytest.mark.parametrize("num_pages,snapshots,budget", [(64, 64, 32), (14, 3, 7)])
def test_prefix_cache_on_gives_the_ids_of_off(programs, num_pages, snapshots, budget):
    serving, alone = programs
    requests = _requests(9, serving.vocab)
    cached = Scheduler(serving, page_size=PAGE, num_pages=num_pages, max_num_seqs=ROWS, max_batched_tokens=budget,
                       state_snapshots=snapshots)
    uncached = Scheduler(serving, page_size=PAGE, num_pages=num_pages, max_num_seqs=ROWS, max_batched_tokens=budget,
                         prefix_cache=False)
    got = _serve(cached, requests)
    assert got == _serve(uncached, requests)
    for (prompt, n, sampling), ids in zip(requests, got):
        assert ids == generate(alone, prompt, n, sampling=sampling).ids
    snaps = cached.snapshots
    assert snaps is not None and uncached.snapshots is None
    assert snaps.restored > 0 and cached.pages.hits > 0  # later waves started after the system prompt
    assert cached.computed_tokens < uncached.computed_tokens
    assert len(snaps) <= snapshots
    if num_pages == 14:  # pressure: pages and states evicted, sequences preempted, still the same ids
        assert snaps.evicted > 0 and cached.preemptions > 0


def test_a_missing_state_falls_back_to_the_longest_prefix_with_one(programs):
    serving, alone = programs
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=64, max_num_seqs=ROWS, max_batched_tokens=64)
    first = SYSTEM[:12] + [1]       # its last full page ends at 12: the state there is kept
    second = SYSTEM[:16] + [2]      # the cache has 4 pages of it, a state at 3 only; the state at 16 is kept
    third = SYSTEM[:20] + [3]       # 4 pages and their state hit; the state at 16 dropped: back to 12
    for prompt in (first, second):
        _serve(scheduler, [(prompt, 3, None)])
    keys = prefix_keys(SYSTEM, PAGE, 5)
    assert keys[2] in scheduler.snapshots and keys[3] in scheduler.snapshots
    assert scheduler.snapshots.restored == 1
    scheduler.snapshots.drop(keys[3])
    before = scheduler.computed_tokens
    (ids,) = _serve(scheduler, [(third, 4, None)])
    assert ids == generate(alone, third, 4).ids
    assert scheduler.computed_tokens - before == len(third) - 12 + 3  # from the state at 12, then 3 decode steps
    assert scheduler.snapshots.restored == 2


class _WrongState:
    """The serving program, but the state restored into a slot is another one: what the
    equality checks must catch."""

    def __init__(self, program):
        self.program = program
        self.entries, self.vocab, self.n_ctx, self.runtime = program.entries, program.vocab, program.n_ctx, "test"

    def chooser(self):
        return self.program.chooser()

    def call(self, entry, **inputs):
        return self.program.call(entry, **inputs)

    def read_slot(self, slot):
        return self.program.read_slot(slot)

    def write_slot(self, slot, state):
        self.program.write_slot(slot, {name: np.flip(a) for name, a in state.items()})


def test_a_wrong_state_restored_changes_the_ids(programs):
    serving, alone = programs
    requests = _requests(9, serving.vocab)
    scheduler = Scheduler(_WrongState(serving), page_size=PAGE, num_pages=64, max_num_seqs=ROWS,
                          max_batched_tokens=32)
    got = _serve(scheduler, requests)
    assert scheduler.snapshots.restored > 0
    assert got != [generate(alone, p, n, sampling=s).ids for p, n, s in requests]


def test_state_snapshots_go_with_their_pages():
    snaps = StateSnapshots(capacity=2)
    pages = PageAllocator(2, 2, on_evict=snaps.drop)
    keys = prefix_keys([1, 2, 3, 4], 2, 2)
    for key in keys:
        page = pages.allocate()
        pages.register(page, key)
        snaps.put(key, {"s": np.full(3, key % 7, np.float32)})
        pages.release(page)
    assert len(snaps) == 2 and snaps.nbytes == 24 and snaps.taken == 2
    assert snaps.get(keys[0]) is not None  # now the most recently used
    snaps.put(99, {"s": np.zeros(3, np.float32)})  # a third: the least recently used goes
    assert keys[1] not in snaps and keys[0] in snaps and snaps.evicted == 1
    pages.allocate()  # a fresh page evicts the first cached one: its state goes with it
    assert keys[0] not in snaps
    with pytest.raises(ValueError, match="at least 0"):
        StateSnapshots(-1)
    none = StateSnapshots(0)
    none.put(1, {"s": np.zeros(1)})
    assert len(none) == 0


def test_read_and_write_one_slot(programs, tmp_path):
    serving, _ = programs
    state = serving.read_slot(ROWS - 1)
    assert state and all(a.ndim == 1 and a.dtype == np.float32 for a in state.values())
    changed = {name: np.arange(a.size, dtype=np.float32) for name, a in state.items()}
    serving.write_slot(1, changed)
    got = serving.read_slot(1)
    assert all(np.array_equal(got[name], changed[name]) for name in changed)
    got[next(iter(got))][:] = -1  # a copy: the slot keeps its state
    assert all(np.array_equal(a, changed[name]) for name, a in serving.read_slot(1).items())
    name = next(iter(state))
    with pytest.raises(ValueError, match="slot states"):
        serving.write_slot(1, {name: state[name]})
    with pytest.raises(ValueError, match=f"state '{name}' has shape"):
        serving.write_slot(1, {**state, name: state[name][:-1]})
    with pytest.raises(ValueError, match=f"slot {ROWS + 3} is not one of the"):
        serving.read_slot(ROWS + 3)
    serving.reset()


def test_an_attention_only_program_keeps_no_slot_state(tmp_path):
    from support import tiny

    model = load_model(write_checkpoint(tiny("llama"), tmp_path / "llama", std=0.5))
    program = open_program(model, "cpu", {"ctx": 32, "entries": "step_paged", "Batch": 2, "Rows": 2, "PageSize": 4},
                           cache_dir=tmp_path / "serve", quiet=True)
    assert program.read_slot(0) == {} and program.model.SLOT_STATES == ()
    program.write_slot(0, {})
    scheduler = Scheduler(program, page_size=4, num_pages=16, max_num_seqs=2)
    assert scheduler.snapshots is None and scheduler.pages.prefix_cache


def test_no_state_kept_means_no_prefix_reuse(programs):
    serving, alone = programs
    requests = _requests(4, serving.vocab)
    scheduler = Scheduler(serving, page_size=PAGE, num_pages=64, max_num_seqs=ROWS, state_snapshots=0)
    assert scheduler.snapshots is None and not scheduler.pages.prefix_cache
    assert _serve(scheduler, requests, wave=1) == [generate(alone, p, n, sampling=s).ids for p, n, s in requests]
    assert scheduler.pages.hits == 0
