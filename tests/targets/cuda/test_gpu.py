"""The cuda target on a real GPU (each test skipped, naming it, without the GPUs it needs): the
generated kernels compiled by Triton for the device, decode captured as a CUDA graph, against
the cpu target. `bench/gpu_check.sh` runs this file first.

Every run is a `strata run` subprocess without TRITON_INTERPRET (tests/conftest.py puts this
process's Triton in its interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
pytest.importorskip("triton", reason="the GPU tests need triton")

from support import HYBRID_FAMILIES, ROOT, TINY, write_checkpoint  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no CUDA GPU")
#: A run compiles every kernel of the model with Triton for the device: bounded, not timed.
RUN_TIMEOUT_S = 600
PROMPT, STEPS = "3,1,4,1,5", 6
FAMILIES = {"dense": TINY["qwen3"], "moe": HYBRID_FAMILIES["qwen3_moe"]}
#: The cpu target's reference runs: its numpy kernels (no C++ library to build on a fresh machine).
CPU = ("--set", "kernels=numpy")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    return {k: write_checkpoint(c, root / k) for k, c in FAMILIES.items()}


def _run(model, out, *flags):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "strata.cli", "run", str(model), "--prompt-ids", PROMPT,
                        "--max-new-tokens", str(STEPS), "--ctx", "64", "--cache-dir", str(out.with_suffix(".cache")),
                        "--dump-logits", str(out), *flags], capture_output=True, text=True, env=env,
                       timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1], np.load(out), r.stderr


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_f32_recipe_gives_the_cpu_targets_ids(ckpts, tmp_path, kind):
    """f32 weights and edges, IEEE f32 dots: the cpu target's ids, logits within 1e-4 (relative)."""
    want_ids, want, _ = _run(ckpts[kind], tmp_path / "cpu.npy", *CPU)
    ids, got, err = _run(ckpts[kind], tmp_path / "cuda.npy", "--target", "cuda", "--recipe", "f32")
    assert "(cuda)" in err  # the GPU ran it, not the interpreter
    assert ids == want_ids
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_bf16_recipe_tracks_the_cpu_target(ckpts, tmp_path):
    """bf16 weights and activations (the default recipe) round at 2^-8: each step's logits keep
    the f32 logits' direction (the prompt's step takes the cpu target's token, later steps may
    part once a token differs)."""
    _, want, _ = _run(ckpts["dense"], tmp_path / "cpu.npy", *CPU)
    _, got, _ = _run(ckpts["dense"], tmp_path / "bf16.npy", "--target", "cuda")
    first = float(np.dot(got[0], want[0]) / (np.linalg.norm(got[0]) * np.linalg.norm(want[0])))
    assert np.isfinite(got).all() and first > 0.99


@pytest.mark.skipif(GPUS < 2, reason="fewer than 2 CUDA GPUs (NCCL's ranks each take one)")
def test_tp2_on_nccl_gives_tp1s_ids(ckpts, tmp_path):
    ids1, logits1, _ = _run(ckpts["dense"], tmp_path / "tp1.npy", "--target", "cuda", "--recipe", "f32")
    ids2, logits2, err = _run(ckpts["dense"], tmp_path / "tp2.npy", "--target", "cuda", "--recipe", "f32", "--tp", "2")
    assert "(cuda, 2 ranks)" in err and ids2 == ids1
    assert float(np.abs(logits2 - logits1).max()) <= 1e-4 * max(1.0, float(np.abs(logits1).max()))
