"""convert-module-to-op on the hybrid and MoE families, executed: the op interpreter on the lowered
prefill and decode against the module interpreter (which equals HF, tests/semantics/
test_parity_hybrid_hf.py), for a prefill then 32 greedy decode steps carrying the conv,
recurrent and KV state; the CPU target's greedy ids; and config variants (sizes, layer patterns,
head ratios) that must lower, verify and run alike. The op level reads HF's weights through
its params' conversions (1 + w, -exp(A_log), ...), so this checks those too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from strata.models import build_module
from strata.models.qwen35 import Qwen35Config
from strata.semantics.module_interp import ModuleRunner
from strata.semantics.op_interp import alloc_state, run_function
from support import HYBRID_FAMILIES, lower_fn, open_store, write_checkpoint

TOL = 1e-4
STEPS = 32
CTX = 64
PROMPT = [3, 17, 42, 99, 5, 64, 11]

FAMILIES = {name: dataclasses.replace(cfg, name="op-" + cfg.name) for name, cfg in HYBRID_FAMILIES.items()}
# Every layer sparse, top-k renormalised: the other Qwen3-MoE graph (the variant below covers the first).
FAMILIES["qwen3_moe"] = dataclasses.replace(FAMILIES["qwen3_moe"], moe_layers=(True,) * 3, norm_topk_prob=True)

#: Other shapes of the families: they must lower (static, dynamic), verify and match the module level.
VARIANTS = {
    # HF's top-k weights unnormalised (llama.cpp's graph with its sum clamped to 1), a dense layer
    # (mlp_only_layers), tied embeddings, four of 16 experts
    "qwen3_moe-variant": dataclasses.replace(
        FAMILIES["qwen3_moe"], name="op-qwen3-moe-b", num_layers=4, layer_types=("full_attention",) * 4,
        moe_layers=(True, False, True, True), norm_topk_prob=False, tie_word_embeddings=True, num_experts=16,
        top_k=4, num_heads=8, num_kv_heads=8, head_dim=8, rotary_dim=8),
    # equal key and value heads, a 3-tap conv, attention first, tied embeddings, rms_norm_eps 1e-5
    "qwen3_5-variant": dataclasses.replace(
        FAMILIES["qwen3_5"], name="op-qwen3.5-b", num_layers=5, lin_k_heads=4, lin_v_heads=4, lin_k_dim=8,
        lin_v_dim=8, conv_kernel=3, layer_types=("full_attention", "linear_attention", "linear_attention",
                                                 "full_attention", "linear_attention"),
        moe_layers=(False,) * 5, tie_word_embeddings=True, rms_norm_eps=1e-5, num_heads=8, num_kv_heads=1,
        head_dim=16, rotary_dim=4, mrope_section=()),
    # three of six experts, a wider shared expert, 8 value heads on 2 key heads, 2 layers
    "qwen3_5_moe-variant": dataclasses.replace(
        FAMILIES["qwen3_5_moe"], name="op-qwen3.5-moe-b", num_layers=2, layer_types=("linear_attention",
                                                                                    "full_attention"),
        moe_layers=(True, True), num_experts=6, top_k=3, moe_intermediate_size=24, shared_intermediate_size=80,
        lin_v_heads=8, lin_k_dim=8, lin_v_dim=8, mrope_section=(1, 1, 2)),
    # as many key as value heads (no repeat), a narrow shared expert, a 2-tap conv, 3 layers
    "qwen3_next-variant": dataclasses.replace(
        FAMILIES["qwen3_next"], name="op-qwen3-next-b", num_layers=3, layer_types=("linear_attention",
                                                                                  "full_attention",
                                                                                  "linear_attention"),
        moe_layers=(True, True, True), lin_k_heads=4, lin_v_heads=4, shared_intermediate_size=16, conv_kernel=2),
    # 4 value heads per key head, top-3 of 5 experts, rotary over half the head
    "qwen3_next-wide": dataclasses.replace(
        FAMILIES["qwen3_next"], name="op-qwen3-next-c", lin_k_heads=1, lin_v_heads=4, num_experts=5, top_k=3,
        rotary_dim=16, tie_word_embeddings=True),
    # one expert per token (llama.cpp makes the sum of one slot contiguous)
    "qwen3_5_moe-top1": dataclasses.replace(FAMILIES["qwen3_5_moe"], name="op-qwen3.5-moe-c", top_k=1),
}



@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, cfg in {**FAMILIES, **VARIANTS}.items():
        d = write_checkpoint(cfg, tmp_path_factory.mktemp(name), seed=7, std=0.12)
        out[name] = d
    return out


def module_run(cfg: Qwen35Config, store, steps: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy ids and the logits that chose them, by the module interpreter."""
    r = ModuleRunner(build_module(cfg).ops.first, store)
    logits = [r.prefill(np.array(PROMPT), 0)]
    ids = [int(np.argmax(logits[-1]))]
    for i in range(steps - 1):
        logits.append(r.decode(ids[-1], len(PROMPT) + i))
        ids.append(int(np.argmax(logits[-1])))
    return ids, logits


def op_run(cfg: Qwen35Config, store, ids: list[int], *, dynamic: bool = False,
           state: dict | None = None) -> list[np.ndarray]:
    """The op level's logits for the prompt, then for decoding `ids` (teacher-forced)."""
    pre = lower_fn(cfg, "prefill", tokens=0 if dynamic else len(PROMPT), start=-1 if dynamic else 0, ctx=CTX)
    dec = lower_fn(cfg, "decode", start=-1, ctx=CTX)
    state = alloc_state(pre) if state is None else state
    logits = [run_function(pre, store, state, np.array(PROMPT), 0)[-1]]
    for i, token in enumerate(ids[:-1]):
        logits.append(run_function(dec, store, state, [token], len(PROMPT) + i)[-1])
    return logits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_interpreter_matches_the_module_level(family, checkpoints):
    cfg, store = FAMILIES[family], open_store(checkpoints[family])
    ids, want = module_run(cfg, store, STEPS)
    assert len(set(ids)) >= 3  # a generation that exercises the state
    got = op_run(cfg, store, ids)
    diffs = [float(np.abs(a - b).max()) for a, b in zip(got, want)]
    print(f"[op vs module] {cfg.arch:22s} prefill {diffs[0]:.3g}  decode (32 steps) {max(diffs[1:]):.3g}")
    assert max(diffs) < TOL, diffs
    assert [int(np.argmax(x)) for x in got] == ids


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_lower_and_run_like_the_module_level(variant, checkpoints):
    cfg, store = VARIANTS[variant], open_store(checkpoints[variant])
    ids, want = module_run(cfg, store, 6)
    for dynamic in (False, True):
        got = op_run(cfg, store, ids, dynamic=dynamic)
        assert max(float(np.abs(a - b).max()) for a, b in zip(got, want)) < TOL


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_new_sequence_at_position_0_starts_from_zero_state(family, checkpoints):
    """A prefill at position 0 after another sequence reads its recurrent state zeroed, as a
    fresh model's (the module level does the same); the KV cache needs no clearing."""
    cfg, store = FAMILIES[family], open_store(checkpoints[family])
    ids, want = module_run(cfg, store, 3)
    pre = lower_fn(cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX)
    state = alloc_state(pre)
    run_function(pre, store, state, np.array(PROMPT[::-1]), 0)  # another sequence first
    got = op_run(cfg, store, ids, state=state)
    assert max(float(np.abs(a - b).max()) for a, b in zip(got, want)) < TOL


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cpu_target_generates_the_same_ids(family, checkpoints, tmp_path):
    from strata.pipeline import compile_model, load_model
    from strata.targets.cpu.program import load_compiled
    from support import cpu_generate as generate

    cfg = FAMILIES[family]
    model = load_model(checkpoints[family])
    store = model.open_weights(quiet=True)
    compile_model(model, "cpu", tmp_path / "build", {"ctx": CTX}, store=store)
    ids, logits = generate(load_compiled(tmp_path / "build"), store, PROMPT, STEPS)
    want_ids, want = module_run(cfg, store, STEPS)
    assert ids == want_ids
    assert float(np.abs(np.array(want) - logits).max()) < TOL


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_chunked_prefill_continues_the_state(family, checkpoints):
    """A prompt prefilled in two calls (the second from position 4, a dynamic-length entry)
    leaves the state and gives the logits of one prefill: the conv window, the recurrent
    state and the KV cache carry over."""
    cfg, store = FAMILIES[family], open_store(checkpoints[family])
    whole = lower_fn(cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX)
    chunk = lower_fn(cfg, "prefill", tokens=0, start=-1, ctx=CTX)
    one, two = alloc_state(whole), alloc_state(whole)
    want = run_function(whole, store, one, np.array(PROMPT), 0)
    run_function(chunk, store, two, np.array(PROMPT[:4]), 0)
    got = run_function(chunk, store, two, np.array(PROMPT[4:]), 4)
    np.testing.assert_allclose(got, want, atol=TOL)
    for name in one:
        np.testing.assert_allclose(two[name], one[name], atol=TOL, err_msg=name)
