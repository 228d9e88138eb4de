"""Seed 003's entries on the cpu target: every entry compiled into one module (a method each, taking
the entry's arguments by name), run by the program's `call` on one state, equals the op
interpreter on the stage's own op-level IR (the same kernels: bit for bit), and HF for the
logits (a llama and a hybrid family)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from strata.dialects import read_ir
from strata.pipeline import compile_model, load_model
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
    assert set(program.entries) >= {e for e, _ in CALLS} and "sample" not in program.entries
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
