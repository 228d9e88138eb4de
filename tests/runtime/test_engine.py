"""`strata run` through the runtime's one loop, for every target and runtime: the float ones
(cpu, onnxruntime, cuda in Triton's interpreter) give the same greedy ids for the same model,
the EPU driver stepped by the loop gives its interpreter's, and the request is checked the same
way for all of them before anything is compiled."""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest
from support import TINY, run_tool, write_checkpoint

PROMPT = "3,17,5,40"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("engine") / "tiny")


def ids_of(stdout: str) -> list[int]:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("ids="), stdout
    return [int(t) for t in last[4:].split(",")]


def _run(model, tmp_path, *flags):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cache = [] if "--via" in flags else ["--cache-dir", str(tmp_path / "cache")]  # --via compiles nothing
    r = run_tool("run", str(model), "--prompt-ids", PROMPT, "--max-new-tokens", "5", "--ctx", "32", *cache,
                 "--dump-logits", str(tmp_path / "l.npy"), *flags)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return ids_of(r.stdout), np.load(tmp_path / "l.npy")


def test_every_float_runtime_gives_the_same_ids(model, tmp_path):
    cpu_ids, cpu = _run(model, tmp_path / "cpu")
    assert len(set(cpu_ids)) > 1  # a model that says something
    ort_ids, ort = _run(model, tmp_path / "ort", "--via", "onnxruntime")
    assert ort_ids == cpu_ids and np.abs(ort - cpu).max() < 1e-4
    if importlib.util.find_spec("triton") is None:
        pytest.skip("no triton: the cuda target's interpreter run needs it")
    cuda_ids, cuda = _run(model, tmp_path / "cuda", "--target", "cuda", "--interpret")
    assert cuda_ids == cpu_ids and np.abs(cuda - cpu).max() < 1e-4


def test_the_epu_driver_under_the_loop_is_its_interpreter(model, tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    from strata.pipeline import load_model
    from support import epu_interpret

    ids, logits = _run(model, tmp_path, "--target", "epu", "--set", "calib_prompts=4", "--set", "calib_len=8")
    want_ids, want, frac = epu_interpret(load_model(model), tmp_path / "cache", [int(t) for t in PROMPT.split(",")], 5)
    assert ids == want_ids
    # the dumped logits are the driver's integers times 2**-frac, as float32
    np.testing.assert_array_equal(logits, (want * 2.0 ** -frac).astype(np.float32))


@pytest.mark.parametrize("flags, message", [
    ((), "prompt token id 48 is outside the vocabulary [0, 48)"),
    (("--via", "onnxruntime"), "prompt token id 48 is outside the vocabulary [0, 48)"),
    (("--target", "cuda", "--interpret"), "prompt token id 48 is outside the vocabulary [0, 48)"),
    (("--target", "epu"), "prompt token id 48 is outside the vocabulary [0, 48)"),
])
def test_a_bad_request_is_refused_before_any_compile(model, tmp_path, flags, message):
    cache = [] if "--via" in flags else ["--cache-dir", str(tmp_path / "c")]  # --via compiles nothing
    r = run_tool("run", str(model), "--prompt-ids", "1,48", *cache, *flags, cwd=tmp_path)
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == [] and not (model / ".strata-cache").exists()
