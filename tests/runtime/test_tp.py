"""Tensor parallelism in real processes: `strata run --tp 2` on the cpu target (gloo, two
processes on this machine) gives tp=1's greedy ids and logits (1e-5) for a dense, a MoE and a
hybrid model, and with `--ep 2` (whole experts per rank) for the MoE and the hybrid MoE; and
each rank holds only its pieces of the weights, measured in its own memory."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strata.dialects import op as O
from strata.pipeline import load_model, run_pipeline
from strata.runtime.tp import launch
from support import HYBRID_FAMILIES, TINY, run_tool, write_checkpoint

#: Each run imports strata and torch in every rank on a shared machine: bounded, not timed.
RUN_TIMEOUT_S = 600
PROMPT, STEPS = "3,7,1,5", 6
FAMILIES = {"dense": TINY["qwen3"], "moe": HYBRID_FAMILIES["qwen3_moe"], "hybrid": HYBRID_FAMILIES["qwen3_next"]}


def _run(model, out, *extra):
    r = run_tool("run", str(model), "--prompt-ids", PROMPT, "--max-new-tokens", str(STEPS), "--ctx", "32",
                 "--dump-logits", str(out), *extra, timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], np.load(out)


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_run_tp2_gives_tp1s_ids(tmp_path, kind):
    model = write_checkpoint(FAMILIES[kind], tmp_path / "m")
    ids1, logits1 = _run(model, tmp_path / "tp1.npy")
    ids2, logits2 = _run(model, tmp_path / "tp2.npy", "--tp", "2")
    assert ids1.startswith("ids=") and ids2 == ids1
    assert np.abs(logits1).max() > 0.1
    assert float(np.abs(logits2 - logits1).max()) <= 1e-5


@pytest.mark.parametrize("kind", ["moe", "hybrid"])
def test_run_tp2_ep2_gives_tp1s_ids(tmp_path, kind):
    model = write_checkpoint(FAMILIES[kind], tmp_path / "m")
    ids1, logits1 = _run(model, tmp_path / "tp1.npy")
    ids2, logits2 = _run(model, tmp_path / "ep2.npy", "--tp", "2", "--ep", "2")
    assert ids1.startswith("ids=") and ids2 == ids1
    assert float(np.abs(logits2 - logits1).max()) <= 1e-5
    # the program that ran holds whole experts per rank
    assert "mul_mat_id_sharded(" in (model / ".strata-cache" / "cpu-tp2-ep2" / "model.py").read_text()


def test_rank_0_samples_as_one_process_does(tmp_path):
    model = write_checkpoint(FAMILIES["dense"], tmp_path / "m")
    flags = ("--temperature", "1.5", "--top-k", "30", "--repeat-penalty", "1.2", "--seed", "5")
    ids1, _ = _run(model, tmp_path / "tp1.npy", *flags)
    ids2, _ = _run(model, tmp_path / "tp2.npy", "--tp", "2", *flags)
    assert ids2 == ids1 and ids1 != _run(model, tmp_path / "greedy.npy")[0]


def test_tp_refuses_what_it_does_not_run(tmp_path):
    model = write_checkpoint(TINY["llama"], tmp_path / "m")
    r = run_tool("run", str(model), "--prompt-ids", "1,2", "--tp", "2", "--via", "onnxruntime", timeout=RUN_TIMEOUT_S)
    assert r.returncode == 1 and "--tp" in r.stderr and "Traceback" not in r.stderr
    r = run_tool("run", str(model), "--prompt-ids", "1,2", "--tp", "3", timeout=RUN_TIMEOUT_S)
    assert r.returncode == 1 and "is not divisible by 3" in r.stderr and "Traceback" not in r.stderr
    r = run_tool("run", str(model), "--prompt-ids", "1,2", "--tp", "2", "--ep", "3", timeout=RUN_TIMEOUT_S)
    assert r.returncode == 1 and "--ep is 1 or the ranks of --tp (2), got 3" in r.stderr and "Traceback" not in r.stderr


def test_each_rank_holds_its_pieces(tmp_path):
    """Resident weight bytes per rank (the checkpoint's mapped pages it touched, plus the pieces it
    copied) are the sharded tensors' 1/N plus the replicated ones, within 10%: after a prefill, which
    reads every weight."""
    # Big enough (54 MB) that the pages the kernel maps around a small replicated tensor (a norm
    # weight read in place: large folios) are a few percent of a rank's pieces.
    cfg = dataclasses.replace(TINY["llama"], vocab_size=4096, hidden_size=512, num_heads=8, num_kv_heads=4,
                              head_dim=64, intermediate_size=1536, num_layers=3)
    path = write_checkpoint(cfg, tmp_path / "m")
    model = load_model(path)
    store = model.open_weights()
    sharded = run_pipeline(model.module.clone(), "shard-tensor-parallel{tp=2},convert-module-to-op{entry=decode ctx=32}")
    params = {op.tensor_name.data: op for op in sharded.walk() if isinstance(op, O.ParamOp)}

    def whole_bytes(name):
        shape, _ = store.info(name)
        return int(np.prod(shape)) * 4

    split = sum(whole_bytes(n) for n, op in params.items() if op.piece is not None)
    replicated = sum(whole_bytes(n) for n, op in params.items() if op.piece is None)
    assert split > 20 * replicated  # the measure is about the pieces
    expected = split / 2 + replicated
    program = launch(path, 2, "cpu", {"ctx": 32}, timeout_s=RUN_TIMEOUT_S)
    try:
        program.prefill([1, 2, 3], 0)
        measured = program.resident_weight_bytes()
    finally:
        program.close()
    assert len(measured) == 2
    for rank_bytes in measured:
        assert abs(rank_bytes - expected) <= 0.1 * expected, (measured, expected, split + replicated)
