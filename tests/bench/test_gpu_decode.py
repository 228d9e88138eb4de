"""bench/gpu_decode.py without a GPU: its refusal, its arguments, and the mapping of the HF
models' tensors (built on the meta device from the examples' configs) to strata's params."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gpu_decode  # noqa: E402


def test_refuses_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the bench would run")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_decode.py")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["gpu_decode: needs a CUDA GPU (an H200); torch.cuda.is_available() "
                                                "is false"]


def test_arguments():
    args = gpu_decode.parse([])
    assert args.models == ["qwen3-8b", "qwen3.6-35b-a3b"] and (args.prompt, args.new) == (512, 128)
    args = gpu_decode.parse(["--models", "qwen3.6-35b-a3b", "--layers", "2", "--no-compile", "--new", "8"])
    assert args.models == ["qwen3.6-35b-a3b"] and args.layers == 2 and args.no_compile and args.new == 8
    for bad in (["--models", "gpt-5"], ["--new", "1"], ["--prompt", "0"], ["--layers", "0"], ["--models", ","]):
        with pytest.raises(SystemExit) as e:
            gpu_decode.parse(bad)
        assert e.value.code == 2


@pytest.mark.parametrize("name", sorted(gpu_decode.MODELS))
def test_hf_tensors_map_to_every_param(tmp_path, name):
    """transformers' model of each config (cut to 4 layers, on the meta device) holds every
    param strata's compiled model reads, with its shape (experts split or stacked)."""
    pytest.importorskip("transformers")
    from strata.pipeline import load_model

    d = gpu_decode.config_dir(name, 4, tmp_path)
    hf = gpu_decode.hf_model(d, device="meta")
    model = load_model(d)
    weights = gpu_decode.strata_weights(model, dict(hf.state_dict()))
    assert set(weights) == set(model.params())
    assert all(tuple(w.shape) == tuple(model.params()[n].shape) for n, w in weights.items())
