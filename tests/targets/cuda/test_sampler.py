"""The CUDA target's sampler, placed by the `sample` knob (kbp-graph/v1's placement): on the device
(the sampling kernel on the logits the step left there) or on the host (the numpy sampler that
model.py then carries); both draw the cpu target's ids for a seed, in Triton's interpreter."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="the CUDA target tests need triton (the `test` extra)")

from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.runtime.opener import open_program  # noqa: E402
from strata.runtime.generate import generate  # noqa: E402
from strata.runtime.sampling import SamplingParams  # noqa: E402
from strata.targets.cuda.program import load  # noqa: E402
from support import TINY, write_checkpoint  # noqa: E402

PROMPT = [3, 17, 5]
PARAMS = SamplingParams(temperature=0.9, top_p=0.9, repetition_penalty=1.2, seed=77)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("cuda_sampler") / "tiny", std=0.5))


@pytest.mark.parametrize("where", ["device", "host"])
def test_the_placement_decides_where_the_sampler_runs(model, tmp_path, where):
    out = compile_model(model, "cuda", tmp_path / where, {"ctx": 32, "recipe": "f32", "sample": where})
    source, kernels = (out / "model.py").read_text(), (out / "kernels.py").read_text()
    assert f"# sample_{where}: sampler.sample" in source
    assert ("K.launch_sample(" in source) == (where == "device") and ("def sample_kernel(" in kernels) == (where == "device")
    assert ("def philox_4x32(" in source) == (where == "host")  # the numpy sampler's own source
    cuda = load(out, model.open_weights(quiet=True), interpret=True)
    want = generate(open_program(model, "cpu", {"ctx": 32}), PROMPT, 4, sampling=PARAMS).ids
    assert generate(cuda, PROMPT, 4, sampling=PARAMS).ids == want
