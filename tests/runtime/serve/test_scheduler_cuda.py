"""The scheduler over the cuda target's `step_paged` (Triton's interpreter, f32) on a hybrid at
odd sizes: a request that shares a cached prefix restarts from the slot state the prefix cache
kept (`read_slot` / `write_slot` of the cuda program), and every request gets the ids the cpu
target's program gives under the same scheduler."""

from __future__ import annotations

import pytest

from strata.pipeline import load_model
from strata.runtime.opener import open_program
from strata.runtime.serve.scheduler import Scheduler
from support import tiny, write_checkpoint

pytest.importorskip("triton", reason="the cuda target needs triton (the `test` extra)")

#: Qwen3.5-MoE cut small: a Gated DeltaNet layer, then gated attention; heads of 12, 6 experts.
HYBRID = tiny("qwen3.5-moe", name="odd-hybrid", vocab_size=150, hidden_size=48, num_layers=2,
              layer_types=("linear_attention", "full_attention"), moe_layers=(True, True), num_heads=6,
              num_kv_heads=2, head_dim=12, rotary_dim=4, mrope_section=(1, 1, 0), mrope_interleaved=True,
              lin_k_heads=2, lin_v_heads=6, lin_k_dim=12, lin_v_dim=12, num_experts=6, top_k=3,
              moe_intermediate_size=20, shared_intermediate_size=20)


def _ids(program) -> list:
    restored = []
    write_slot = program.write_slot
    program.write_slot = lambda slot, state: (restored.append(slot), write_slot(slot, state))
    s = Scheduler(program, page_size=4, num_pages=16, max_num_seqs=2, max_batched_tokens=8, state_snapshots=8)
    first = s.add([5, 9, 1, 2, 7, 3, 3, 8, 1], 3)
    while s.has_work():
        s.step()
    again = s.add([5, 9, 1, 2, 7, 3, 3, 8, 2], 3)  # its first two pages are cached, with their state
    other = s.add([4, 4, 2], 3)
    while s.has_work():
        s.step()
    assert s.pages.hits > 0 and restored  # the cached prefix's state was written into a slot
    return [first.outputs, again.outputs, other.outputs]


def test_a_hybrid_scheduled_on_cuda_is_the_cpu_targets(tmp_path):
    model = load_model(write_checkpoint(HYBRID, tmp_path / "ckpt"))
    knobs = {"ctx": 32, "entries": "step_paged", "Batch": 2, "Rows": 2, "PageSize": 4, "Pages": 8}
    cuda = open_program(model, "cuda", {**knobs, "recipe": "f32"}, cache_dir=tmp_path / "cuda", interpret=True,
                        quiet=True)
    cpu = open_program(model, "cpu", {**knobs, "kernels": "numpy"}, cache_dir=tmp_path / "cpu", quiet=True)
    assert _ids(cuda) == _ids(cpu)
