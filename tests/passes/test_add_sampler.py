"""add-sampler, executed before and after: the entries compute what they computed, and the new
@sample_logits draws the numpy sampler's ids from their logits."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

from strata.dialects.op import SAMPLER
from strata.passes.add_sampler import AddSamplerError
from strata.passes.pipelines import run_pipeline
from strata.semantics import sampling as S
from strata.semantics.op_interp import alloc_state, find_function, run_function
from support import TINY, lower, open_store, write_checkpoint

PROMPT = np.asarray([3, 17, 5, 40], np.int32)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return open_store(write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("sampler") / "tiny"))


def _logits(module, store):
    pre, dec = find_function(module, "prefill"), find_function(module, "decode")
    state = alloc_state(dec)
    a = run_function(pre, store, state, PROMPT, 0)
    b = run_function(dec, store, state, np.asarray([7], np.int32), len(PROMPT))
    return a, b


def test_the_entries_compute_the_same_and_the_sampler_draws_from_their_logits(store):
    before = lower(TINY["llama"], "prefill,decode", ctx=32)
    after = run_pipeline(before.clone(), "add-sampler")
    assert [f.sym_name.data for f in after.ops if isinstance(f, func.FuncOp)] == ["prefill", "decode", SAMPLER]
    for x, y in zip(_logits(before, store), _logits(after, store)):
        np.testing.assert_array_equal(x, y)
    logits = _logits(after, store)[1][-1:]
    sampler = find_function(after, SAMPLER)
    counts = np.zeros((1, 48), np.int32)
    counts[0, PROMPT] = 1
    for step in range(6):
        args = [logits, np.asarray([5, 6], np.int64), np.asarray([step], np.int32), *(np.asarray([v], dt) for v, dt in (
            (0.9, np.float32), (8, np.int32), (0.95, np.float32), (0.01, np.float32), (1.3, np.float32),
            (0.0, np.float32), (0.1, np.float32))), counts, counts, np.full((1, 2), -1, np.int32)]
        want = S.sample(logits, [5, 6], step, 0.9, 8, 0.95, 0.01, 1.3, 0.0, 0.1, counts, counts)
        assert np.array_equal(run_function(sampler, {}, {}, [], 0, args=args), want)
        # a mask allowing the tokens 32..47 only: the draw is among them, the reference's
        args[-1] = np.asarray([[0, 0xFFFF]], np.int32)
        masked = run_function(sampler, {}, {}, [], 0, args=args)
        assert 32 <= masked[0] < 48
        assert np.array_equal(masked, S.sample(logits, [5, 6], step, 0.9, 8, 0.95, 0.01, 1.3, 0.0, 0.1, counts, counts,
                                               mask=args[-1]))


def test_rows():
    module = run_pipeline(lower(TINY["llama"], "decode", ctx=32), "add-sampler{rows=3}")
    assert find_function(module, SAMPLER).function_type.outputs.data[0].get_shape() == (3,)


def test_entries_of_different_vocabularies_are_refused():
    a = lower(TINY["llama"], "decode", ctx=32)
    b = lower(TINY["qwen3"].__class__(**{**TINY["llama"].__dict__, "vocab_size": 64}), "prefill", ctx=32)
    a.body.block.add_op(find_function(b).clone())
    with pytest.raises(AddSamplerError, match="different vocabularies"):
        run_pipeline(a, "add-sampler")
