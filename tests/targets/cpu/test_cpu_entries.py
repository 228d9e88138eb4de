"""The module level's entries on the cpu target: every entry compiled into one module (a method each, taking
the entry's arguments by name), run by the program's `call` on one state, equals the op
interpreter on the stage's own op-level IR (the same kernels: bit for bit), and HF for the
logits (a llama and a hybrid family); `sample` draws what the runtime's loop draws with the same
seed and temperature on the default program (prefill and decode with the sampler), and at
temperature 0 what `generate` chooses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from strata.dialects import read_ir
from strata.pipeline import compile_model, load_model
from strata.runtime.generate import generate
from strata.runtime.sampling import SamplingParams
from strata.semantics.op_interp import alloc_state, find_function, run_entry
from strata.targets.cpu.program import load
from support import HYBRID_FAMILIES, TINY, open_store, write_checkpoint

CTX = 16
KNOBS = {"ctx": CTX, "entries": "all", "Batch": 2, "PageSize": 4, "Steps": 3, "MaxNew": 3}
A, B = [3, 17, 42, 9, 5], [7, 2, 11]
TABLE = [[6, 1, -1, -1], [3, 7, 0, -1]]
CALLS = [
    ("prefill_slots", {"tokens": [A[:3], B], "slots": [1, 0], "lengths": [3, 3]}),
    ("decode_rows", {"tokens": [[A[3]], [A[4]]], "positions": [3, 3]}),
    ("step_packed", {"tokens": A[:2], "rows": [0, 0], "positions": [0, 1], "segments": [0, 0], "last": [1, -1],
                     "step_tokens": [[0], [9]], "step_positions": [-1, 4]}),
    ("prefill_paged", {"tokens": A + B, "positions": [0, 1, 2, 3, 4, 0, 1, 2], "rows": [0] * 5 + [1] * 3,
                       "slots": [24, 25, 26, 27, 4, 12, 13, 14], "last": [4, 7], "table": TABLE}),
    ("decode_paged", {"tokens": [[1], [2]], "positions": [5, 3], "table": TABLE}),
    ("log_probs_packed", {"tokens": A + B, "positions": [0, 1, 2, 3, 4, 0, 1, 2], "segments": [0] * 5 + [1] * 3,
                          "targets": [1, 2, 3, 4, 5, 6, 7, 8]}),
    ("loss_packed", {"tokens": A, "positions": [0, 1, 2, 3, 4], "segments": [0] * 5, "targets": [1, 2, 3, 4, 5],
                     "weights": [1, 0, 1, 1, 2]}),
    ("forward", {"tokens": [A[:3], B]}),
    ("generate_until", {"token": [[4], [8]], "pos": 6, "eos": 3}),
    ("sample", {"token": [[4], [8]], "pos": 6, "key": [11, 3], "temperature": 0.8}),
]


@pytest.fixture(scope="module", params=["llama", "qwen3_5"])
def compiled(request, tmp_path_factory):
    cfg = TINY.get(request.param) or HYBRID_FAMILIES[request.param]
    d = write_checkpoint(cfg, tmp_path_factory.mktemp(request.param) / "model", seed=4)
    out = compile_model(load_model(d), "cpu", tmp_path_factory.mktemp("out") / "cpu", KNOBS)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    return d, out, hf


def test_the_generated_methods_are_the_op_level(compiled) -> None:
    d, out, _ = compiled
    store = open_store(d)
    program = load(out, store)
    assert set(program.entries) >= {e for e, _ in CALLS}
    module = read_ir(Path(out) / "op.mlir")
    state = alloc_state(module)
    for entry, inputs in CALLS:
        got = program.call(entry, **inputs)
        want = run_entry(find_function(module, entry), store, state, inputs)
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want), entry
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=entry)


def test_the_generated_methods_are_hf(compiled) -> None:
    d, out, hf = compiled
    program = load(out, open_store(d))

    def logits(seq):
        with torch.no_grad():
            return hf(torch.tensor([seq])).logits[0].numpy()

    (got,) = program.call("prefill_slots", **CALLS[0][1])
    np.testing.assert_allclose(got, np.stack([logits(A[:3])[-1], logits(B)[-1]]), atol=1e-4)
    (got,) = program.call("decode_rows", **CALLS[1][1])  # row 0 is slot 0 (B), row 1 slot 1 (A[:3])
    np.testing.assert_allclose(got, np.stack([logits(B + A[3:4])[-1], logits(A[:3] + A[4:5])[-1]]), atol=1e-4)
    (got,) = program.call("prefill_paged", **CALLS[3][1])
    np.testing.assert_allclose(got, np.stack([logits(A)[-1], logits(B)[-1]]), atol=1e-4)
    (lp,) = program.call("log_probs_packed", **CALLS[5][1])
    z = np.concatenate([logits(A), logits(B)]).astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    z -= np.log(np.exp(z).sum(-1, keepdims=True))
    np.testing.assert_allclose(lp, z[np.arange(8), CALLS[5][1]["targets"]], atol=1e-4)


def test_sample_draws_the_runtime_loops_ids(compiled, tmp_path) -> None:
    """Row 0 of `sample` after a prefill of the prompt, fed the loop's first id, is the rest of
    the ids the runtime's loop samples (row 0 is the one-sequence loop's row: the same Philox
    counters), on a program of the default entries; at temperature 0 it is generate's ids."""
    d, out, _ = compiled
    store = open_store(d)
    runtime = load(compile_model(load_model(d), "cpu", tmp_path / "default", {"ctx": CTX}), store)
    sampling = SamplingParams(temperature=0.8, seed=11)
    want = generate(runtime, A, KNOBS["Steps"] + 1, sampling=sampling).ids
    greedy = generate(runtime, A, KNOBS["Steps"] + 1).ids
    assert want != greedy  # the draws are not the argmax: the comparison tells them apart
    program = load(out, store)
    program.call("prefill", tokens=[A, A], pos=0)
    (ids,) = program.call("sample", token=[[want[0]], [want[0]]], pos=len(A), key=list(sampling.key), temperature=0.8)
    assert ids.shape == (2, KNOBS["Steps"]) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[0], want[1:])
    runs = []
    for entry, extra in (("sample", {"key": [5, 9], "temperature": 0.0}), ("generate", {})):
        program = load(out, store)
        program.call("prefill", tokens=[A[:3], B], pos=0)
        runs.append(program.call(entry, token=[[4], [8]], pos=3, **extra)[0])
    np.testing.assert_array_equal(runs[0], runs[1])


@pytest.mark.parametrize("bad, message", [
    ({"key": [1, 2, 3], "temperature": 0.5}, "sample: argument 'key' must have shape [2], got [3]"),
    ({"key": [1.5, 2], "temperature": 0.5}, "sample: argument 'key' must hold integers, got floats"),
    ({"key": [1, 2], "temperature": -0.5}, "sample: argument 'temperature' must be >= 0, got -0.5"),
])
def test_sample_refuses_bad_arguments(compiled, bad, message) -> None:
    d, out, _ = compiled
    program = load(out, open_store(d))
    with pytest.raises(ValueError) as e:
        program.call("sample", token=[[4], [8]], pos=3, **bad)
    assert str(e.value) == message
