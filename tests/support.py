"""Helpers shared by the tests (imported as `support`; pytest puts tests/ on the path)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from strata.models.llama_config import LlamaConfig
from strata.ir.weights import WeightStore
from strata.models import build_module
from strata.models import save_random_checkpoint
from strata.models.qwen35 import Qwen35Config
from strata.pipeline import Model, entry_pipeline, load_model, run_pipeline
from strata.semantics.op_interp import find_function

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
REFS = ROOT.parent / "shared" / "refs"
EXAMPLES = ROOT / "examples"

#: Tiny configs, one per architecture of the llama family; tests vary them with `tiny(...)`.
TINY = {
    "llama": LlamaConfig(
        arch="LlamaForCausalLM", name="tiny-llama", vocab_size=48, hidden_size=32, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=8, intermediate_size=40, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=None, max_position_embeddings=128, tie_word_embeddings=False, attention_bias=False,
        o_bias=False, qk_norm=False, dtype="float32"),
}
TINY["qwen2"] = dataclasses.replace(TINY["llama"], arch="Qwen2ForCausalLM", name="tiny-qwen2", attention_bias=True,
                                    tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1e6)
TINY["qwen3"] = dataclasses.replace(TINY["llama"], arch="Qwen3ForCausalLM", name="tiny-qwen3", qk_norm=True,
                                    head_dim=16, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)
#: The hybrid family: 3 Gated DeltaNet layers and 1 gated-attention layer, routed + shared experts.
TINY["qwen3.5-moe"] = Qwen35Config(
    arch="Qwen3_5MoeForCausalLM", name="tiny-qwen35moe", vocab_size=48, hidden_size=32, num_layers=4,
    layer_types=("linear_attention",) * 3 + ("full_attention",), moe_layers=(True,) * 4, num_heads=4,
    num_kv_heads=2, head_dim=16, intermediate_size=0, rms_norm_eps=1e-6, rope_theta=1e4, rotary_dim=4,
    mrope_section=(), mrope_interleaved=False, max_position_embeddings=128, tie_word_embeddings=False,
    dtype="float32", lin_k_heads=2, lin_v_heads=4, lin_k_dim=8, lin_v_dim=8, conv_kernel=4, num_experts=6,
    top_k=2, moe_intermediate_size=16, shared_intermediate_size=16, norm_topk_prob=True)


#: Small configs of the hybrid/MoE families (HF parity, op-level numerics): the dense attention
#: layer is the 4th, as in Qwen3.5; Qwen3-Next has a dense FFN among its sparse ones.
_HYBRID = dict(vocab_size=128, hidden_size=64, num_layers=4,
               layer_types=("linear_attention",) * 3 + ("full_attention",), moe_layers=(False,) * 4,
               num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=96, rms_norm_eps=1e-6,
               rope_theta=10000.0, rotary_dim=8, mrope_section=(2, 1, 1), mrope_interleaved=True,
               max_position_embeddings=128, tie_word_embeddings=False, dtype="float32",
               lin_k_heads=2, lin_v_heads=4, lin_k_dim=16, lin_v_dim=16, conv_kernel=4)
_EXPERTS = dict(num_experts=8, top_k=2, moe_intermediate_size=32)
HYBRID_FAMILIES = {
    "qwen3_moe": Qwen35Config(
        arch="Qwen3MoeForCausalLM", name="small-qwen3-moe", vocab_size=128, hidden_size=64, num_layers=3,
        layer_types=("full_attention",) * 3, moe_layers=(True, False, True), num_heads=4, num_kv_heads=2,
        head_dim=16, intermediate_size=96, rms_norm_eps=1e-6, rope_theta=1e6, rotary_dim=16, mrope_section=(),
        mrope_interleaved=False, max_position_embeddings=128, tie_word_embeddings=False, dtype="float32",
        norm_topk_prob=False, **_EXPERTS),
    "qwen3_5": Qwen35Config(arch="Qwen3_5ForCausalLM", name="small-qwen3.5", **_HYBRID),
    "qwen3_5_moe": Qwen35Config(arch="Qwen3_5MoeForCausalLM", name="small-qwen3.5-moe",
                                **(_HYBRID | dict(moe_layers=(True,) * 4, intermediate_size=0)),
                                shared_intermediate_size=48, **_EXPERTS),
    # in_proj_qkvz / in_proj_ba grouped per key head, plain rotary, a dense layer among the sparse
    "qwen3_next": Qwen35Config(arch="Qwen3NextForCausalLM", name="small-qwen3-next",
                               **(_HYBRID | dict(moe_layers=(True, True, False, True), mrope_section=(),
                                                 mrope_interleaved=False)),
                               shared_intermediate_size=48, **_EXPERTS),
}


def greedy(prefill, decode, prompt, steps: int):
    """`steps` greedy steps: the chosen tokens and the logits that chose them ([steps, Vocab])."""
    import numpy as np

    logits = [prefill(prompt)]
    tokens = [int(np.argmax(logits[-1]))]
    for step in range(1, steps):
        logits.append(decode(tokens[-1], len(prompt) + step - 1))
        tokens.append(int(np.argmax(logits[-1])))
    return np.array(tokens), np.stack(logits)


def cpu_generate(module, weights=None, prompt=(), steps: int = 0, *, on_token=None, feed=None):
    """Greedy generation on a compiled CPU model (its module, or a `Model` instance) through the
    runtime's one loop, the request checked as `strata run` checks it: (ids, logits
    [steps, vocab]); with `feed`, teacher-forced (the fed ids are the next inputs)."""
    from strata.runtime.generate import generate
    from strata.runtime.request import check_request
    from strata.targets.cpu.program import CpuProgram

    program = CpuProgram(module.Model(weights) if hasattr(module, "Model") else module)
    ids = check_request(prompt, steps, program.vocab, program.n_ctx)
    out = generate(program, ids, steps, keep_logits=True, on_token=on_token, forced=feed)
    return out.ids, out.logits


def epu_interpret(model, out, prompt, steps: int):
    """What the EPU driver must compute, by the fixed interpreter through the runtime's loop:
    (ids, the logits as FixedPoint32 integers [steps, vocab], their frac)."""
    import numpy as np

    from strata.runtime.generate import generate
    from strata.targets.epu.program import EpuInterpreter

    program = EpuInterpreter(model, out)
    got = generate(program, list(prompt), steps, keep_logits=True)
    return got.ids, np.rint(got.logits * 2.0 ** program.frac).astype(np.int64), program.frac


def max_diff(a, b) -> float:
    import numpy as np

    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b).max())


def tiny(family: str = "llama", **changes) -> LlamaConfig:
    """A tiny config of `family`, with `changes` applied."""
    return dataclasses.replace(TINY[family], **changes)


def write_checkpoint(cfg, directory: Path, seed: int = 3, dtype: str = "float32", std: float = 0.12,
                     shards: int = 1) -> Path:
    """Random weights; matrices of std 0.12 give a tiny model logits of std ~1."""
    return save_random_checkpoint(cfg, directory, seed=seed, dtype=dtype, std=std, shards=shards)


def module_of(cfg) -> ModuleOp:
    module = build_module(cfg)
    module.verify()
    return module


def lower(cfg_or_module, entry: str = "prefill", **opts) -> ModuleOp:
    """The op level of one entry (`tokens`, `start`, `ctx`, `kv_pad`, `flash_attn` as the pass takes them)."""
    module = cfg_or_module.clone() if isinstance(cfg_or_module, ModuleOp) else module_of(cfg_or_module)
    return run_pipeline(module, entry_pipeline(entry, **opts))


def lower_fn(cfg_or_module, entry: str = "prefill", **opts) -> func.FuncOp:
    return find_function(lower(cfg_or_module, entry, **opts))


def open_store(directory: Path) -> WeightStore:
    """The weight store of a model directory, addressed by llama.cpp names."""
    return load_model(directory).open_weights(quiet=True)


def model_at(directory: Path) -> Model:
    return load_model(directory)


def run_tool(*args: str, tool: str = "strata.cli", **kw) -> subprocess.CompletedProcess:
    """`python -m strata.cli ARGS` (or strata.cli.opt), capturing text output."""
    return subprocess.run([sys.executable, "-m", tool, *args], capture_output=True, text=True, **kw)


def seed_file(number: str) -> Path:
    """`../shared/seeds/<number>_*.txt`; the calling test is skipped, naming it, when it is absent."""
    import pytest

    found = sorted(SEEDS.glob(f"{number}_*.txt")) if SEEDS.is_dir() else []
    if not found:
        pytest.skip(f"{SEEDS}/{number}_*.txt is not beside the checkout")
    return found[0]
