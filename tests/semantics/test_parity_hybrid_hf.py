"""Float parity with HF transformers for the hybrid and MoE families: the module interpreter
against `AutoModelForCausalLM` on random tiny checkpoints of each architecture.

The configs cover the families' knobs: Qwen3-MoE with a dense layer among the sparse ones
(`mlp_only_layers`) and `norm_topk_prob` false; Qwen3.5 (Gated DeltaNet 3 : 1 gated
attention, partial rotary, interleaved M-RoPE, dense FFN); Qwen3.5-MoE (routed + shared
experts, experts stored one by one); Qwen3-Next (in_proj grouped per key head, plain
rotary, a dense layer). The checkpoints are random with every weight HF initialises to a
constant perturbed by the random writer (the zero-centred norms, A_log and dt_bias), so that a formula that
dropped one of them would fail. Checked: forward logits of every prompt row, the prefill
logits, and 32 greedy decode steps carrying the conv, recurrent and KV state (tokens and
per-step logits against `generate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from strata.models import build_module
from strata.models.qwen35 import Qwen35Config
from strata.pipeline import compile_model, load_model
from strata.semantics.module_interp import ModuleRunner
from strata.semantics.op_interp import alloc_state, run_function
from strata.targets.cpu.program import load_compiled
from support import cpu_generate as generate
from support import HYBRID_FAMILIES, greedy, lower_fn, max_diff, open_store, write_checkpoint

TOL = 1e-4
NEW_TOKENS = 32
CTX = 64  # the op level and the CPU target: enough for the prompt and the 32 steps
PROMPT = np.array([3, 17, 42, 99, 5, 64, 11], dtype=np.int32)

CONFIGS = HYBRID_FAMILIES
# HF's init std 0.02 leaves a tiny model's logits nearly flat; std 0.12 gives varied greedy tokens.
WEIGHT_STD = 0.12


@dataclass
class Case:
    cfg: Qwen35Config
    dir: Path
    hf_prompt_logits: np.ndarray  # [S, Vocab]: HF forward on the prompt
    hf_tokens: np.ndarray  # [NEW_TOKENS]: greedy generate
    hf_step_logits: np.ndarray  # [NEW_TOKENS, Vocab]: the logits that chose each token



@pytest.fixture(scope="module", params=list(CONFIGS), ids=list(CONFIGS))
def case(request, tmp_path_factory) -> Case:
    cfg = CONFIGS[request.param]
    d = write_checkpoint(cfg, tmp_path_factory.mktemp(request.param), seed=7, std=WEIGHT_STD)
    torch.manual_seed(0)  # weights come from the file; this pins anything HF initializes itself
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    assert type(model).__name__ == cfg.arch
    ids = torch.from_numpy(PROMPT.astype(np.int64))[None]
    with torch.no_grad():
        prompt_logits = model(ids).logits[0].numpy()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=NEW_TOKENS, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0)
    tokens = out.sequences[0, len(PROMPT):].numpy()
    step_logits = torch.stack(out.logits).squeeze(1).numpy()
    assert tokens.shape == (NEW_TOKENS,) and step_logits.shape == (NEW_TOKENS, cfg.vocab_size)
    return Case(cfg, d, prompt_logits, tokens, step_logits)


def runner(case: Case) -> ModuleRunner:
    return ModuleRunner(build_module(case.cfg).ops.first, open_store(case.dir))



def report(what: str, case: Case, diff: float) -> None:
    print(f"[parity] {case.cfg.arch:22s} {what:28s} max|diff| = {diff:.3g}")
    assert diff < TOL, f"{what}: max abs diff {diff} against HF"


def test_generation_is_not_degenerate(case: Case) -> None:
    assert len(set(case.hf_tokens.tolist())) >= 3, case.hf_tokens
    assert case.hf_step_logits.std() > 0.3  # logits that actually discriminate


def test_module_forward_and_prefill(case: Case) -> None:
    r = runner(case)
    report("module forward (all rows)", case, max_diff(r.forward(PROMPT), case.hf_prompt_logits))
    report("module prefill", case, max_diff(r.prefill(PROMPT, 0), case.hf_prompt_logits[-1]))


def test_module_decode(case: Case) -> None:
    r = runner(case)
    logits = [r.prefill(PROMPT, 0)]
    tokens = [int(np.argmax(logits[-1]))]
    for step in range(1, NEW_TOKENS):
        logits.append(r.decode(tokens[-1], len(PROMPT) + step - 1))
        tokens.append(int(np.argmax(logits[-1])))
    np.testing.assert_array_equal(tokens, case.hf_tokens)
    report("module 32 greedy steps", case, max_diff(np.stack(logits), case.hf_step_logits))


def test_op_decode(case: Case) -> None:
    """The op level (llama.cpp's graph, GGUF-form weights by conversion) against HF directly."""
    store = open_store(case.dir)
    prefill = lower_fn(case.cfg, "prefill", tokens=len(PROMPT), start=0, ctx=CTX)
    decode = lower_fn(case.cfg, "decode", start=-1, ctx=CTX)
    state = alloc_state(decode)
    tokens, logits = greedy(lambda p: run_function(prefill, store, state, p, 0)[-1],
                            lambda tok, pos: run_function(decode, store, state, np.array([tok]), pos)[-1],
                            PROMPT, NEW_TOKENS)
    np.testing.assert_array_equal(tokens, case.hf_tokens)
    report("op 32 greedy steps", case, max_diff(logits, case.hf_step_logits))


def test_cpu_target_decode(case: Case, tmp_path: Path) -> None:
    """The generated numpy code against HF directly (the ids and logits `strata run` reports)."""
    model = load_model(case.dir)
    out = compile_model(model, "cpu", tmp_path / "cpu", {"ctx": CTX})
    tokens, logits = generate(load_compiled(out), model.open_weights(quiet=True), PROMPT.tolist(), NEW_TOKENS)
    np.testing.assert_array_equal(tokens, case.hf_tokens)
    report("cpu target 32 greedy steps", case, max_diff(logits, case.hf_step_logits))
