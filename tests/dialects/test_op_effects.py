"""The op dialect's effects, and xDSL's generic `cse` and `dce` on real entries.

Every compute op is `Pure`; `op.state` reads memory (the buffer's current contents);
`op.set_rows` and `op.cpy` write it. Those traits are all xDSL's generic passes need to keep
the cache reads and writes: checked by executing each entry before and after the passes on
the same weights and tokens (DESIGN.md: "execution shows meaning").
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, f64
from xdsl.traits import MemoryEffectKind, Pure, get_effects, is_side_effect_free
from xdsl.transforms import get_all_passes
from xdsl.transforms.dead_code_elimination import would_be_trivially_dead

from strata.dialects import op as O
from strata.dialects import parse_ir, strata_context
from strata.semantics.op_interp import alloc_state, find_function, run_function
from support import TINY, lower, lower_fn, open_store

#: The ops with memory effects; every other op of the dialect is pure.
EFFECTFUL = {O.StateOp: {MemoryEffectKind.READ}, O.SetRowsOp: {MemoryEffectKind.WRITE},
             O.CpyOp: {MemoryEffectKind.WRITE},
             # The collectives read and write the group's buffers: never dropped, merged or reordered.
             **{c: {MemoryEffectKind.READ, MemoryEffectKind.WRITE} for c in O.COLLECTIVE_OPS},
             # The device loops' steps read and write the KV cache and the recurrent state.
             O.GenerateOp: {MemoryEffectKind.READ, MemoryEffectKind.WRITE},
             O.GenerateUntilOp: {MemoryEffectKind.READ, MemoryEffectKind.WRITE},
             O.GenerateSampledOp: {MemoryEffectKind.READ, MemoryEffectKind.WRITE}}
OPS = list(O.Op.operations)
PURE_OPS = [op for op in OPS if op not in EFFECTFUL]

CTX, KV_PAD = 32, 16
PROMPT = [3, 1, 4, 1, 5, 9, 2]


def _instance(cls):
    """An (unverified) instance: effects are traits of the class, read through an op."""
    return cls.create()


# ---------------------------------------------------------------------------------------------
# The declared effects


@pytest.mark.parametrize("cls", PURE_OPS, ids=lambda c: c.name)
def test_compute_ops_are_pure(cls):
    assert cls.has_trait(Pure)
    op = _instance(cls)
    assert get_effects(op) == set() and is_side_effect_free(op)
    assert would_be_trivially_dead(op)


def test_state_reads_memory():
    op = _instance(O.StateOp)
    assert not O.StateOp.has_trait(Pure)
    assert {e.kind for e in get_effects(op)} == {MemoryEffectKind.READ}
    assert not is_side_effect_free(op)
    assert would_be_trivially_dead(op)  # an unused read may go; it is never merged across a write


@pytest.mark.parametrize("cls", [O.SetRowsOp, O.CpyOp], ids=lambda c: c.name)
def test_writes_are_writes(cls):
    op = _instance(cls)
    assert not cls.has_trait(Pure)
    assert MemoryEffectKind.WRITE in {e.kind for e in get_effects(op)}
    assert not is_side_effect_free(op)
    assert not would_be_trivially_dead(op)  # dce keeps it, used or not


@pytest.mark.parametrize("cls", [*O.COLLECTIVE_OPS, O.GenerateOp, O.GenerateUntilOp, O.GenerateSampledOp],
                         ids=lambda c: c.name)
def test_collectives_and_loops_are_kept(cls):
    op = _instance(cls)
    assert not cls.has_trait(Pure) and not is_side_effect_free(op)
    assert not would_be_trivially_dead(op)  # every rank runs every collective, used or not


def test_every_op_is_classified():
    """A new op must say what it is: pure, or one of the listed effects."""
    assert len(OPS) >= 20
    for cls in OPS:
        effects = get_effects(_instance(cls))
        assert effects is not None, f"{cls.name} declares no memory effects (xDSL then assumes any)"
        assert {e.kind for e in effects} == EFFECTFUL.get(cls, set()), cls.name


# ---------------------------------------------------------------------------------------------
# cse and dce, by hand-written IR


STATE_IR = """\
func.func @f() -> tensor<4x8xf32> {
  %rows = op.input "kv_rows" : tensor<2xi64>
  %x = op.param "x" : tensor<2x8xf32>
  %a = op.state "cache" : tensor<4x8xf32>
  %b = op.state "cache" : tensor<4x8xf32>
  %w = op.set_rows %a, %x, %rows : tensor<4x8xf32>, tensor<2x8xf32>, tensor<2xi64> -> tensor<4x8xf32>
  %c = op.state "cache" : tensor<4x8xf32>
  %s = op.add %b, %c : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}
"""


def _apply(module: ModuleOp, *names: str) -> ModuleOp:
    passes = get_all_passes()
    for name in names:
        passes[name]()().apply(strata_context(), module)  # name -> factory -> pass class
    module.verify()
    return module


def _ops(module: ModuleOp, cls) -> list:
    return [op for op in module.walk() if isinstance(op, cls)]


def test_cse_merges_reads_only_where_no_write_intervenes():
    module = _apply(parse_ir(STATE_IR), "cse")
    states = _ops(module, O.StateOp)
    assert len(states) == 2  # %a and %b merged; %c reads after the write and stays
    add = _ops(module, O.AddOp)[0]
    assert add.lhs.owner is states[0] and add.rhs.owner is states[1]


def test_dce_keeps_an_unused_write_and_drops_an_unused_pure_op():
    module = parse_ir(STATE_IR)
    fn = find_function(module)
    add = _ops(module, O.AddOp)[0]
    dead = O.ScaleOp.create(operands=[add.result], result_types=[add.result.type],
                            attributes={"scale": FloatAttr(2.0, f64)})
    fn.body.block.insert_op_before(dead, fn.body.block.last_op)
    _apply(module, "dce")
    assert _ops(module, O.ScaleOp) == []
    assert len(_ops(module, O.SetRowsOp)) == 1
    assert _ops(module, O.SetRowsOp)[0].result.first_use is None


# ---------------------------------------------------------------------------------------------
# cse and dce on lowered entries, executed before and after


def _lowered(family: str, entry: str, flash: bool) -> ModuleOp:
    if entry == "prefill":
        return lower(TINY[family], "prefill", tokens=len(PROMPT), start=0, ctx=CTX, kv_pad=KV_PAD, flash_attn=flash)
    return lower(TINY[family], "decode", start=len(PROMPT), ctx=CTX, kv_pad=KV_PAD, flash_attn=flash)


def _count(module: ModuleOp) -> Counter:
    out = Counter()
    for op in module.walk():
        key = op.name
        if isinstance(op, O.InputOp):
            key += f" {op.kind.data}"
        elif isinstance(op, O.ParamOp):
            key += f" {op.tensor_name.data}"
        elif isinstance(op, O.StateOp):
            key += f" {op.state_name.data}"
        out[key] += 1
    return out


#: The tiny models whose graph is llama's (one KV write per layer and kind).
DENSE = sorted(k for k, cfg in TINY.items() if cfg.arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"))
HYBRID = sorted(set(TINY) - set(DENSE))


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "unfused"])
@pytest.mark.parametrize("entry", ["prefill", "decode"])
@pytest.mark.parametrize("family", DENSE)
def test_cse_dce_keep_the_meaning_of_an_entry(tiny_checkpoints, family, entry, flash):
    cfg = TINY[family]
    before = _lowered(family, entry, flash)
    after = _apply(before.clone(), "cse", "dce")
    fn0, fn1 = find_function(before), find_function(after)

    # The passes did what they should: one kv_rows input for every cache write, one op.param
    # for a tied embedding; every write kept though nothing uses its result; no state read lost.
    n0, n1 = _count(before), _count(after)
    writes = 2 * cfg.num_layers
    assert n0["op.input kv_rows"] == writes and n1["op.input kv_rows"] == 1
    set_rows = _ops(before, O.SetRowsOp)
    assert len(set_rows) == writes and all(op.result.first_use is None for op in set_rows)
    assert n1["op.set_rows"] == writes
    assert {k: v for k, v in n1.items() if k.startswith("op.state")} == \
           {k: v for k, v in n0.items() if k.startswith("op.state")}
    if cfg.tie_word_embeddings:
        assert n0["op.param token_embd.weight"] == 2 and n1["op.param token_embd.weight"] == 1
    assert sum(n1.values()) < sum(n0.values())

    # Executed on the same weights and tokens, with the same starting state: identical results.
    store = open_store(tiny_checkpoints[family])
    if entry == "prefill":
        tokens, start = PROMPT, 0
        state0, state1 = alloc_state(fn0), alloc_state(fn1)
    else:
        prefill = lower_fn(cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX, kv_pad=KV_PAD, flash_attn=flash)
        filled = alloc_state(prefill)
        first = run_function(prefill, store, filled, PROMPT, 0)
        tokens, start = [int(first[-1].argmax())], len(PROMPT)
        state0, state1 = copy.deepcopy(filled), copy.deepcopy(filled)
    initial = copy.deepcopy(state0)
    out0 = run_function(fn0, store, state0, tokens, start)
    out1 = run_function(fn1, store, state1, tokens, start)

    assert out0.dtype == out1.dtype and out0.shape == out1.shape == (1, cfg.vocab_size)
    assert np.isfinite(out0).all()
    np.testing.assert_array_equal(out1, out0)
    assert sorted(state0) == sorted(state1) == sorted(initial) and len(state0) == writes
    for name in state0:
        np.testing.assert_array_equal(state1[name], state0[name], err_msg=name)
        # the call wrote its rows, both times
        rows = slice(start, start + len(tokens))
        assert not np.array_equal(state0[name][rows], initial[name][rows]), name
        np.testing.assert_array_equal(state0[name][start + len(tokens):], initial[name][start + len(tokens):])


def test_cse_of_both_entries_in_one_module(tiny_checkpoints):
    """The CPU target's pipeline lowers both entries into one module: cse works per function."""
    from strata.pipeline import run_pipeline
    from support import module_of

    cfg = TINY["qwen3"]
    spec = f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={CTX} kv_pad={KV_PAD} flash_attn=true}}"
    module = run_pipeline(module_of(cfg), spec)
    after = _apply(module.clone(), "cse", "dce")
    fns = {f.sym_name.data: f for f in _ops(after, func.FuncOp)}
    assert sorted(fns) == ["decode", "prefill"]
    for f in fns.values():  # each function keeps its own leaves
        assert sum(isinstance(op, O.InputOp) and op.kind.data == "kv_rows" for op in f.walk()) == 1
        assert sum(isinstance(op, O.SetRowsOp) for op in f.walk()) == 2 * cfg.num_layers

    store = open_store(tiny_checkpoints["qwen3"])
    results = []
    for m in (module, after):
        pre, dec = find_function(m, "prefill"), find_function(m, "decode")
        state = alloc_state(pre)
        logits = [run_function(pre, store, state, PROMPT, 0)]
        token = int(logits[-1][-1].argmax())
        for i in range(3):
            logits.append(run_function(dec, store, state, [token], len(PROMPT) + i))
            token = int(logits[-1][-1].argmax())
        results.append((logits, state))
    (l0, s0), (l1, s1) = results
    for a, b in zip(l0, l1):
        np.testing.assert_array_equal(b, a)
    for name in s0:
        np.testing.assert_array_equal(s1[name], s0[name])


def test_run_function_observes_every_op_in_order(tiny_checkpoints):
    """`observe` sees each op with its result right after it runs, the returned value last."""
    cfg = TINY["qwen3"]
    fn = lower_fn(cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX, kv_pad=KV_PAD)
    seen: list = []
    logits = run_function(fn, open_store(tiny_checkpoints["qwen3"]), alloc_state(fn), PROMPT, 0,
                          observe=lambda op, value: seen.append((op, value)))
    body = [op for op in fn.body.block.ops if not isinstance(op, func.ReturnOp)]
    assert [op for op, _ in seen] == body
    assert all(tuple(v.shape) == tuple(d if d >= 0 else len(PROMPT) for d in op.results[0].type.get_shape())
               for op, v in seen)
    assert seen[-1][1] is logits


@pytest.mark.parametrize("entry", ["prefill", "decode"])
@pytest.mark.parametrize("family", HYBRID)
def test_cse_dce_keep_the_meaning_of_a_hybrid_entry(tiny_checkpoints, family, entry):
    """The hybrid graph reads and writes conv, recurrent and KV state through views, GET_ROWS and
    CPY: after cse and dce every write is still there and logits and every state are the same."""
    cfg = TINY[family]
    before = _lowered(family, entry, True)
    after = _apply(before.clone(), "cse", "dce")
    fn0, fn1 = find_function(before), find_function(after)
    writes = lambda m: [op.name for op in m.walk() if isinstance(op, (O.SetRowsOp, O.CpyOp))]  # noqa: E731
    assert writes(after) == writes(before) and len(writes(before)) > 2 * cfg.num_layers
    assert sum(_count(after).values()) < sum(_count(before).values())
    store = open_store(tiny_checkpoints[family])
    if entry == "prefill":
        tokens, start, state0 = PROMPT, 0, alloc_state(fn0)
    else:
        prefill = lower_fn(cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX, kv_pad=KV_PAD)
        state0 = alloc_state(prefill)
        first = run_function(prefill, store, state0, PROMPT, 0)
        tokens, start = [int(first[-1].argmax())], len(PROMPT)
    state1 = copy.deepcopy(state0)
    out0 = run_function(fn0, store, state0, tokens, start)
    out1 = run_function(fn1, store, state1, tokens, start)
    assert np.isfinite(out0).all()
    np.testing.assert_array_equal(out1, out0)
    assert sorted(state0) == sorted(state1)
    for name in state0:
        np.testing.assert_array_equal(state1[name], state0[name], err_msg=name)
