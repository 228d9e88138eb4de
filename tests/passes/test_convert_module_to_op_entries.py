"""The module level's entries, executed before and after convert-module-to-op, against HF transformers.

For every family (the llama family's three tiny configs, the hybrid and MoE families), each
entry runs on the module interpreter (each sequence alone in its row of the state) and on the
op interpreter (the lowered batched graph: one flat row of tokens, masks, cache cells, state
slots), on the same calls in the same order, and both must give what HF gives for each sequence
run alone, 1e-4 on logits:

* decode_rows, decode and prefill with Batch 2: each row equals its sequence alone at its
  position; prefill_slots: each prompt alone, whatever its length and slot;
* the packed entries: each segment alone; hidden_packed is HF's last hidden state,
  log_probs_packed and loss_packed the log-softmax and weighted cross-entropy of HF's logits;
* the paged entries with a shuffled block table equal the contiguous ones, and HF;
* forward and next_token without a cache; generate and generate_until against HF's greedy
  generate; sample against the runtime's loop sampling with the same key and temperature (on
  the op level's one-sequence prefill and decode), and at temperature 0 against generate.

The max differences are printed (`-s` shows them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from strata.errors import StrataError
from strata.models import build_module
from strata.runtime.generate import generate
from strata.runtime.sampling import SamplingParams
from strata.semantics.module_interp import ModuleRunner
from strata.semantics.op_interp import alloc_state, find_function, run_entry, run_function
from strata.semantics.programs import OpLevelProgram
from support import HYBRID_FAMILIES, TINY, lower, open_store, write_checkpoint

TOL = 1e-4
CTX = 16
PAGE = 4
FAMILIES = {**{k: TINY[k] for k in ("llama", "qwen2", "qwen3")}, **HYBRID_FAMILIES}
#: Three sequences of the tests (ids below every family's vocabulary of 48 or more).
A, B, C = [3, 17, 42, 9, 5, 30], [7, 2, 11], [40, 1, 22, 8]


@dataclasses.dataclass
class Family:
    name: str
    cfg: object
    store: object
    hf: object
    _cache: dict = dataclasses.field(default_factory=dict)

    def _run(self, seq: list[int]):
        key = tuple(seq)
        if key not in self._cache:
            ids = torch.tensor([seq], dtype=torch.int64)
            with torch.no_grad():
                logits = self.hf(ids).logits[0].numpy()
                hidden = self.hf.model(ids).last_hidden_state[0].numpy()  # after the final norm
            self._cache[key] = (logits, hidden)
        return self._cache[key]

    def logits(self, seq: list[int]) -> np.ndarray:
        """HF's logits of every position of `seq` run alone, [len, Vocab]."""
        return self._run(seq)[0]

    def hidden(self, seq: list[int]) -> np.ndarray:
        return self._run(seq)[1]


@pytest.fixture(scope="module", params=list(FAMILIES), ids=list(FAMILIES))
def fam(request, tmp_path_factory) -> Family:
    cfg = dataclasses.replace(FAMILIES[request.param], max_position_embeddings=64)
    d = write_checkpoint(cfg, tmp_path_factory.mktemp(request.param), seed=5)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    return Family(request.param, cfg, open_store(d), hf)


class Both:
    """One program state at both levels: the op interpreter on the lowered entries (one state
    for all of them) and the module interpreter; `call` runs an entry on each and returns both
    results."""

    def __init__(self, fam: Family, **generics: int):
        self.fam, self.generics = fam, generics
        self.fns: dict = {}
        self.state: dict = {}
        bind = {"Batch": generics.get("batch", 1), "MaxSeq": CTX, "PageSize": generics.get("page_size", 64)}
        self.module = ModuleRunner(build_module(fam.cfg).ops.first, fam.store, bind)

    def fn(self, entry: str, n_tokens: int = 0, **extra):
        key = (entry, n_tokens, tuple(sorted(extra.items())))
        if key not in self.fns:
            module = lower(self.fam.cfg, entry, ctx=CTX, tokens=n_tokens, **self.generics, **extra)
            for name, buf in alloc_state(module).items():
                self.state.setdefault(name, buf)
            self.fns[key] = find_function(module, entry)
        return self.fns[key]

    def call(self, entry: str, n_tokens: int = 0, steps: int = 16, **inputs):
        """`n_tokens`: the static S or P of the lowering (0: dynamic)."""
        loop = {"generate": "steps", "sample": "steps", "generate_until": "max_new"}.get(entry)
        extra = {loop: steps} if loop else {}
        op = run_entry(self.fn(entry, n_tokens, **extra), self.fam.store, self.state, inputs)
        mod = self.module.call(entry, inputs, steps=steps)
        return op, mod


def check(fam: Family, what: str, results, want) -> None:
    """Both levels' result against the HF-derived `want`."""
    for level, got in zip(("module", "op"), results[::-1]):
        got = np.asarray(got, dtype=np.float64)
        assert got.shape == np.shape(want), (what, level, got.shape, np.shape(want))
        diff = float(np.abs(got - want).max())
        print(f"[entries] {fam.name:12s} {level:6s} {what:34s} max|diff| vs HF = {diff:.2e}")
        assert diff < TOL, f"{level} {what}: max abs diff {diff} against HF"


def test_rows_and_slots(fam: Family) -> None:
    """prefill_slots puts prompts of different lengths into chosen slots; decode_rows steps each
    row at its own position; decode and prefill with Batch 2 run every row at one position."""
    p = Both(fam, batch=2)
    got = p.call("prefill_slots", n_tokens=4, tokens=[A[:4], B + [0]], slots=[1, 0], lengths=[4, 3])
    check(fam, "prefill_slots", got, np.stack([fam.logits(A[:4])[-1], fam.logits(B)[-1]]))
    got = p.call("decode_rows", tokens=[[C[0]], [A[4]]], positions=[3, 4])
    check(fam, "decode_rows", got, np.stack([fam.logits(B + C[:1])[-1], fam.logits(A[:5])[-1]]))
    got = p.call("decode_rows", tokens=[[C[1]], [A[5]]], positions=[4, 5])
    check(fam, "decode_rows (again)", got, np.stack([fam.logits(B + C[:2])[-1], fam.logits(A)[-1]]))
    got = p.call("prefill", tokens=[C[:3], B], pos=0)
    check(fam, "prefill (Batch 2)", got, np.stack([fam.logits(C[:3])[-1], fam.logits(B)[-1]]))
    got = p.call("decode", token=[[C[3]], [A[0]]], pos=3)
    check(fam, "decode (Batch 2)", got, np.stack([fam.logits(C)[-1], fam.logits(B + A[:1])[-1]]))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64) - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def test_packed_scores(fam: Family) -> None:
    """Three segments in one row: hidden states, targets' log-probabilities, the weighted loss."""
    p = Both(fam)
    tokens = A + B + C
    positions = [*range(len(A)), *range(len(B)), *range(len(C))]
    segments = [0] * len(A) + [1] * len(B) + [4] * len(C)
    targets = [(t * 5 + 1) % 48 for t in tokens]
    weights = [1, 1, 0.5, 1, 1, 0, 2, 2, 0, 1, 1, 1, 0]
    got = p.call("hidden_packed", tokens=tokens, positions=positions, segments=segments)
    check(fam, "hidden_packed", got, np.concatenate([fam.hidden(A), fam.hidden(B), fam.hidden(C)]))
    lp = np.concatenate([_log_softmax(fam.logits(s)) for s in (A, B, C)])[np.arange(len(tokens)), targets]
    got = p.call("log_probs_packed", tokens=tokens, positions=positions, segments=segments, targets=targets)
    check(fam, "log_probs_packed", got, lp)
    w = np.asarray(weights, dtype=np.float64)
    got = p.call("loss_packed", tokens=tokens, positions=positions, segments=segments, targets=targets,
                 weights=weights)
    check(fam, "loss_packed", got, -(lp * w).sum() / w.sum())


def test_packed_rows(fam: Family) -> None:
    """prefill_packed: two prompts packed into one call, each into its row; step_packed: the next
    chunk of one row and a decode step of the other in one call; then decode_rows goes on."""
    p = Both(fam, batch=2)
    got = p.call("prefill_packed", tokens=A[:4] + B, rows=[1] * 4 + [0] * 3, positions=[0, 1, 2, 3, 0, 1, 2],
                 segments=[0] * 4 + [1] * 3, last=[6, 3])
    check(fam, "prefill_packed", got, np.stack([fam.logits(B)[-1], fam.logits(A[:4])[-1]]))
    got = p.call("step_packed", tokens=A[4:], rows=[1, 1], positions=[4, 5], segments=[0, 0], last=[-1, 1],
                 step_tokens=[[C[0]], [0]], step_positions=[3, -1])
    zero = np.zeros(fam.cfg.vocab_size)
    check(fam, "step_packed", got, np.stack([zero, fam.logits(A)[-1], fam.logits(B + C[:1])[-1], zero]))
    got = p.call("decode_rows", tokens=[[C[1]], [C[2]]], positions=[4, 6])
    check(fam, "decode_rows after step_packed", got, np.stack([fam.logits(B + C[:2])[-1], fam.logits(A + C[2:3])[-1]]))


def _paged_run(fam: Family, tables: list[list[int]]):
    """prefill_paged (A and B), decode_paged, step_paged through `tables` [2 rows, 4 pages]."""
    p = Both(fam, batch=2, page_size=PAGE)

    def cell(r, pos):
        return tables[r][pos // PAGE] * PAGE + pos % PAGE

    rows, positions = [0] * 5 + [1] * 3, [*range(5), *range(3)]
    out = [p.call("prefill_paged", tokens=A[:5] + B, positions=positions, rows=rows,
                  slots=[cell(r, q) for r, q in zip(rows, positions)], last=[4, 7], table=tables)]
    out.append(p.call("decode_paged", tokens=[[A[5]], [C[0]]], positions=[5, 3], table=tables))
    out.append(p.call("step_paged", tokens=C[1:3], positions=[4, 5], rows=[1, 1], slots=[cell(1, 4), cell(1, 5)],
                      last=[-1, 1], step_tokens=[[C[3]], [0]], step_positions=[6, -1], table=tables))
    return out


def test_paged(fam: Family) -> None:
    """A paged cache through a shuffled block table gives what the contiguous table (row r's
    pages r*4.., the contiguous cache's cells) gives, and HF."""
    contiguous = _paged_run(fam, [[0, 1, 2, 3], [4, 5, 6, 7]])
    shuffled = _paged_run(fam, [[6, 1, -1, -1], [3, 7, 0, -1]])
    for (op_c, mod_c), (op_s, mod_s) in zip(contiguous, shuffled):
        np.testing.assert_allclose(op_s, op_c, atol=1e-5)
        np.testing.assert_allclose(mod_s, mod_c, atol=1e-5)
    zero = np.zeros(fam.cfg.vocab_size)
    want = [np.stack([fam.logits(A[:5])[-1], fam.logits(B)[-1]]),
            np.stack([fam.logits(A)[-1], fam.logits(B + C[:1])[-1]]),
            np.stack([zero, fam.logits(B + C[:3])[-1], fam.logits(A + C[3:])[-1], zero])]
    for name, got, w in zip(("prefill_paged", "decode_paged", "step_paged"), shuffled, want):
        check(fam, name + " (shuffled table)", got, w)


def test_whole_sequences(fam: Family) -> None:
    """forward (B rows of S, no cache) and next_token (a dynamic S)."""
    p = Both(fam, batch=2)
    got = p.call("forward", n_tokens=3, tokens=[A[:3], B])
    check(fam, "forward", got, np.stack([fam.logits(A[:3]), fam.logits(B)]))
    q = Both(fam)
    got = q.call("next_token", tokens=[C])
    check(fam, "next_token", got, fam.logits(C)[-1:])


def test_loops(fam: Family) -> None:
    """generate and generate_until after a prefill: HF's greedy tokens."""
    ids = torch.tensor([A], dtype=torch.int64)
    with torch.no_grad():
        hf = fam.hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=5,
                             pad_token_id=0)[0, len(A):].numpy()
    for entry in ("generate", "generate_until"):
        p = Both(fam)
        prefill = p.fn("prefill", 0)
        first = int(np.argmax(run_function(prefill, fam.store, p.state, np.array(A), 0)[-1]))
        p.module.prefill(A, 0)
        assert first == hf[0]
        inputs = {"token": [[first]], "pos": len(A)}
        if entry == "generate":
            op, mod = p.call("generate", steps=4, **inputs)
            np.testing.assert_array_equal(op, [hf[1:]])
        else:
            eos = int(hf[3])
            (op, n), (mod, n_mod) = p.call("generate_until", steps=4, eos=eos, **inputs)
            stop = list(hf[1:]).index(eos) + 1
            assert int(n) == int(n_mod) == stop
            np.testing.assert_array_equal(op[0, :stop], hf[1:1 + stop])
            assert (op[0, stop:] == eos).all()
        np.testing.assert_array_equal(op, mod)


def _prompt_state(fam: Family) -> Both:
    """A program state after A's prefill at both levels."""
    p = Both(fam)
    run_function(p.fn("prefill", 0), fam.store, p.state, np.array(A), 0)
    p.module.prefill(A, 0)
    return p


def test_sample_loop(fam: Family) -> None:
    """sample after a prefill draws what the runtime's loop draws with the same seed (key (seed,
    0)) and temperature, on the op level's prefill and decode: the first id by the loop's
    prefill, the next four by the entry fed that id; both levels agree; temperature 0 is
    generate's greedy ids."""
    program = OpLevelProgram(find_function(lower(fam.cfg, "prefill", ctx=CTX, tokens=0), "prefill"),
                             find_function(lower(fam.cfg, "decode", ctx=CTX, tokens=0), "decode"), fam.store)
    sampling = SamplingParams(temperature=0.9, seed=7)
    want = generate(program, A, 5, sampling=sampling).ids
    greedy = generate(program, A, 5).ids
    assert want != greedy  # the draws are not the argmax: the comparison below tells them apart
    p = _prompt_state(fam)
    op, mod = p.call("sample", steps=4, token=[[want[0]]], pos=len(A), key=list(sampling.key), temperature=0.9)
    print(f"[entries] {fam.name:12s} sample ids {op[0].tolist()} runtime {want[1:]} greedy {greedy[1:]}")
    np.testing.assert_array_equal(op, [want[1:]])
    np.testing.assert_array_equal(op, mod)
    cold, hot = _prompt_state(fam), _prompt_state(fam)
    inputs = {"token": [[greedy[0]]], "pos": len(A)}
    op, mod = cold.call("sample", steps=4, key=[7, 0], temperature=0.0, **inputs)
    np.testing.assert_array_equal(op, [greedy[1:]])
    np.testing.assert_array_equal(op, mod)
    np.testing.assert_array_equal(hot.call("generate", steps=4, **inputs)[0], op)


def test_sample_refuses_bad_arguments(fam: Family) -> None:
    """A key that is not two int64 and a negative temperature: one-line errors naming them."""
    p = Both(fam)
    fn = p.fn("sample", 0, steps=2)
    for bad, what in (({"key": [1, 2, 3], "temperature": 0.5}, "argument 'key' must have shape \\[2\\], got \\[3\\]"),
                      ({"key": [1, 2], "temperature": -0.5}, "argument 'temperature' must be >= 0, got -0.5")):
        with pytest.raises(StrataError, match=f"^sample: {what}$"):
            run_entry(fn, fam.store, p.state, {"token": [[3]], "pos": 2, **bad})
