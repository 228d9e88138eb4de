"""Tensor parallelism on the cuda target: `strata run --target cuda --interpret --set tp=2` (two
processes on this machine meeting on gloo, the kernels in Triton's interpreter, the f32 recipe)
gives tp=1's greedy ids and logits (1e-5) for a dense llama, a MoE with each expert split over
the ranks and with whole experts per rank (ep=2), and a hybrid (Gated DeltaNet and attention,
experts); the printed rank program carries the
collectives and the pieces' table, deterministically, and compiles for sm_90a ahead of time; the
backend is NCCL on GPUs, gloo in the interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("triton", reason="the CUDA target tests need triton (the `test` extra)")
torch = pytest.importorskip("torch", reason="the CUDA target tests need torch (the `test` extra)")

from support import EXAMPLES, HYBRID_FAMILIES, ROOT, TINY, run_tool, write_checkpoint  # noqa: E402
from strata.ir.split import split_piece as reference_piece  # noqa: E402
from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.runtime.tp import backend_of  # noqa: E402
from strata.targets import target  # noqa: E402
from strata.targets.cuda.program import CudaProgramError, load  # noqa: E402
from strata.targets.cuda.rank_runtime import split_piece  # noqa: E402

#: Each run starts two processes that import strata, torch and triton on a shared machine: bounded, not timed.
RUN_TIMEOUT_S = 600
PROMPT, STEPS = "3,7,1,5", 5
FAMILIES = {"dense": TINY["llama"], "moe": HYBRID_FAMILIES["qwen3_moe"], "hybrid": HYBRID_FAMILIES["qwen3_next"]}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_tp")
    return {k: write_checkpoint(c, root / k) for k, c in FAMILIES.items()}


def _run(model, out, *extra):
    r = run_tool("run", str(model), "--target", "cuda", "--interpret", "--prompt-ids", PROMPT, "--max-new-tokens",
                 str(STEPS), "--ctx", "32", "--cache-dir", str(out.with_suffix(".cache")), "--dump-logits", str(out),
                 *extra, timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], np.load(out), r.stderr


@pytest.mark.parametrize("kind,flags", [("dense", ()), ("moe", ()), ("moe", ("--set", "ep=2")), ("hybrid", ())],
                         ids=["dense", "moe", "moe-ep2", "hybrid"])
def test_tp2_gives_tp1s_ids_and_logits(ckpts, tmp_path, kind, flags):
    ids1, logits1, _ = _run(ckpts[kind], tmp_path / "tp1.npy")
    ids2, logits2, err = _run(ckpts[kind], tmp_path / "tp2.npy", "--set", "tp=2", *flags)
    assert "(Triton interpreter, 2 ranks)" in err
    assert ids1.startswith("ids=") and ids2 == ids1
    assert np.abs(logits1).max() > 0.1
    assert float(np.abs(logits2 - logits1).max()) <= 1e-5
    rank_program = (tmp_path / "tp2.cache" / "model.py").read_text()
    assert "class Model(RankRuntime):" in rank_program and "self.all_reduce(" in rank_program
    assert ("self.expert_slots(" in rank_program) == bool(flags)


def test_rank_program_is_printed_deterministically(ckpts, tmp_path):
    model = load_model(ckpts["dense"])
    outs = [compile_model(model, "cuda", tmp_path / f"o{i}", {"ctx": 32, "recipe": "f32", "tp": 2}) for i in range(2)]
    texts = [(o / "model.py").read_bytes() for o in outs]
    assert texts[0] == texts[1]
    text = texts[0].decode()
    # the vocabulary-split embedding and logits, the row- and column-split projections
    assert "self.embed_rows(" in text and "self.all_gather(" in text
    assert "'blk.0.attn_output.weight': (1, 2)," in text and "'blk.0.attn_q.weight': (0, 2)," in text
    assert "RANKS = 2" in text and "import torch.distributed as dist" in text
    plain = compile_model(model, "cuda", tmp_path / "tp1", {"ctx": 32, "recipe": "f32"})
    assert "RankRuntime" not in (plain / "model.py").read_text()


def test_a_rank_program_needs_its_group(ckpts, tmp_path):
    model = load_model(ckpts["dense"])
    out = compile_model(model, "cuda", tmp_path / "o", {"ctx": 32, "recipe": "f32", "tp": 2})
    with pytest.raises(CudaProgramError, match="runs on 2 ranks: give Model a torch.distributed process group"):
        load(out, model.open_weights(quiet=True), interpret=True)


def test_backend_is_nccl_on_gpus_and_gloo_in_the_interpreter():
    cuda = target("cuda")
    assert cuda.ranks == "nccl"
    assert backend_of(cuda) == "nccl" and backend_of(cuda, interpret=True) == "gloo"
    assert backend_of(target("cpu")) == "gloo"


@pytest.mark.parametrize("axis,pieces,parts,shape", [(0, 2, (), (6, 4)), (1, 2, (), (3, 8)), (0, 2, (1, 2), (6, 5))])
def test_split_piece_is_the_weight_stores(axis, pieces, parts, shape):
    w = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for index in range(pieces):
        want = reference_piece(w, axis, pieces, parts, index)
        assert np.array_equal(split_piece(w, axis, pieces, parts, index), want)
        assert np.array_equal(split_piece(torch.from_numpy(w), axis, pieces, parts, index).numpy(), want)


def test_aot_of_one_rank_of_qwen3_8b(tmp_path):
    """Every kernel launch of one rank of Qwen3-8B on 2 ranks (bf16; config only) compiles for
    sm_90a within the H200's limits: the rank program is recorded with a stand-in group, its
    collectives launching no kernel of kernels.py."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "strata.cli", "compile", str(EXAMPLES / "qwen3-8b"), "--target", "cuda",
                           "--set", "tp=2", "--aot", "sm_90a", "-o", str(tmp_path / "o")], capture_output=True,
                          text=True, env=env, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "aot" / "report.json").read_text())
    assert len(report) >= 10 and all(r["ok"] and r["target"] == "sm_90a" for r in report)
    assert {"gemv_kernel", "gemm_kernel", "attention_kernel", "embed_kernel"} <= {r["kernel"] for r in report}
    assert "class Model(RankRuntime):" in (tmp_path / "o" / "model.py").read_text()
