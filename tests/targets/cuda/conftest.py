"""Tiny models at sizes that are not powers of two, for the CUDA kernels' odd-size sweep
(test_odd_sizes.py, test_odd_models.py).

Each size of the sweep appears in at least one model:

    head dims      12 (attention and Gated DeltaNet: odd_qwen35_moe, odd_llama),
                   80 (attention: odd_qwen3_next), 96 (attention: odd_qwen3; Gated DeltaNet:
                   odd_qwen3_next); 80 in the Gated DeltaNet kernels by the direct tests
    hidden         48 (odd_qwen35_moe, odd_llama), 80 (odd_qwen3_next, odd_qwen3)
    experts        6, 3 per token (odd_qwen35_moe); 60, 4 per token (odd_qwen3_next)
    vocab          150 (all)
    intermediate   20 (expert and shared expert: odd_qwen35_moe; dense: odd_qwen3_next,
                   odd_qwen3), 96 (expert and shared expert: odd_qwen3_next; dense: odd_llama)

Query heads per KV head are 3 (odd_qwen35_moe, odd_qwen3) or 2; value heads per key head 3
(odd_qwen35_moe). The hybrids have two layers (a Gated DeltaNet one, then gated attention), the
dense models two attention layers: the fewest that hold every group of their family.
"""

from __future__ import annotations

import dataclasses

import pytest

from support import HYBRID_FAMILIES, tiny, write_checkpoint

_TWO_LAYERS = dict(num_layers=2, layer_types=("linear_attention", "full_attention"))

ODD_CONFIGS = {
    "odd_qwen35_moe": tiny(
        "qwen3.5-moe", name="odd-qwen35-moe", vocab_size=150, hidden_size=48, **_TWO_LAYERS, moe_layers=(True, True),
        num_heads=6, num_kv_heads=2, head_dim=12, rotary_dim=4, mrope_section=(1, 1, 0), mrope_interleaved=True,
        lin_k_heads=2, lin_v_heads=6, lin_k_dim=12, lin_v_dim=12, num_experts=6, top_k=3, moe_intermediate_size=20,
        shared_intermediate_size=20),
    "odd_qwen3_next": dataclasses.replace(
        HYBRID_FAMILIES["qwen3_next"], name="odd-qwen3-next", vocab_size=150, hidden_size=80, **_TWO_LAYERS,
        moe_layers=(True, False), num_heads=2, num_kv_heads=1, head_dim=80, rotary_dim=20, intermediate_size=20,
        lin_k_heads=1, lin_v_heads=2, lin_k_dim=96, lin_v_dim=96, num_experts=60, top_k=4, moe_intermediate_size=96,
        shared_intermediate_size=96),
    "odd_qwen3": tiny("qwen3", name="odd-qwen3", vocab_size=150, hidden_size=80, num_heads=3, num_kv_heads=1,
                      head_dim=96, intermediate_size=20),
    "odd_llama": tiny("llama", name="odd-llama", vocab_size=150, hidden_size=48, num_heads=4, num_kv_heads=2,
                      head_dim=12, intermediate_size=96),
}


@pytest.fixture(scope="session")
def odd_configs() -> dict:
    return ODD_CONFIGS


@pytest.fixture(scope="session")
def odd_checkpoints(tmp_path_factory) -> dict:
    """A random f32 checkpoint of each odd-size model (std 0.12: logits of std ~1)."""
    root = tmp_path_factory.mktemp("odd_sizes")
    return {name: write_checkpoint(cfg, root / name) for name, cfg in ODD_CONFIGS.items()}
