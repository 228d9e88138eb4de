"""The cpu target's tensor-parallel module: torch only there, the rank's pieces bound, and a
process group required (the numerics across real ranks: tests/runtime/test_tp.py)."""

from __future__ import annotations

import pytest

from strata.pipeline import run_pipeline
from strata.artifacts.modules import import_generated
from strata.targets.cpu.emit import emit_cpu
from support import TINY, module_of

PIPE = "convert-module-to-op{entry=prefill,decode ctx=32}"


def _source(tp: int) -> str:
    shard = f"shard-tensor-parallel{{tp={tp}}}," if tp > 1 else ""
    return emit_cpu(run_pipeline(module_of(TINY["qwen3"]), shard + PIPE), "tiny")


def test_torch_only_when_sharded():
    one, two = _source(1), _source(2)
    assert "torch" not in one and "RANKS = 1" in one
    assert "import torch.distributed as dist" in two and "RANKS = 2" in two
    assert "def __init__(self, weights, group=None):" in two
    assert "_bind_piece(weights, 'blk.0.attn_output.weight', (32, 32), np.float32, (1, 2, ()), self.rank * 2 // RANKS)" in two
    assert two.count("all_reduce(") >= 1 + 2 * TINY["qwen3"].num_layers  # the def and one per sum
    assert _source(2) == two  # deterministic


def test_a_sharded_model_needs_its_group(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(_source(2))
    module = import_generated(path, what="a test model")
    with pytest.raises(ValueError, match="runs on 2 ranks: give Model a torch.distributed process group"):
        module.Model({})
