"""Regenerate the module-level test inputs of this folder (not run by lit).

    .venv/bin/python tests/lit/passes/Inputs/generate.py
"""

from pathlib import Path

from strata.models.llama_config import LlamaConfig, RopeScaling
from strata.ir.text import print_ir
from strata.models import build_module

HERE = Path(__file__).resolve().parent


def config(arch: str, name: str, **kw) -> LlamaConfig:
    base = dict(
        arch=arch, name=name, vocab_size=32, hidden_size=16, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=4, intermediate_size=40, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
        max_position_embeddings=64, tie_word_embeddings=False, attention_bias=False, o_bias=False,
        qk_norm=False, dtype="float32",
    )
    base.update(kw)
    return LlamaConfig(**base)


MODELS = {
    "llama2l.mlir": config("LlamaForCausalLM", "llama2l"),
    "llama3_2l.mlir": config("LlamaForCausalLM", "llama3_2l", rope_theta=500000.0, max_position_embeddings=128,
                             rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 32)),
    "qwen2_2l.mlir": config("Qwen2ForCausalLM", "qwen2_2l", attention_bias=True, rms_norm_eps=1e-6,
                            rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3_2l.mlir": config("Qwen3ForCausalLM", "qwen3_2l", qk_norm=True, rms_norm_eps=1e-6,
                            rope_theta=1000000.0, tie_word_embeddings=True),
}

#: Hybrid models, from llama.cpp's reference checkpoints (tests/data/llamacpp).
REFS = {"qwen35moe_4l.mlir": HERE.parents[2] / "data" / "llamacpp" / "qwen3.5-moe-tiny"}

#: SmoothQuant's input for the smoothquant pass's tests: the `linears` section of `strata
#: calibrate` on seeded random weights of these models (2 random prompts of 4 tokens).
RANGES = {"llama2l.ranges.json": "llama2l.mlir", "qwen2_2l.ranges.json": "qwen2_2l.mlir"}


def linear_ranges(cfg: LlamaConfig) -> str:
    import json
    import tempfile

    from strata.models import save_random_checkpoint
    from strata.pipeline import load_model
    from strata.quant.calibrate import calibrate, random_prompts

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(save_random_checkpoint(cfg, Path(tmp) / "m", seed=0, std=0.12))
        ranges = calibrate(model, random_prompts(2, 4, cfg.vocab_size, seed=0))
    linears = {k: {"rows": v["rows"], "absmax": [round(x, 5) for x in v["absmax"]]} for k, v in ranges["linears"].items()}
    return json.dumps({"format": ranges["format"], "model": cfg.name, "linears": linears}, indent=1) + "\n"


if __name__ == "__main__":
    from strata.pipeline import load_model

    for file, cfg in MODELS.items():
        (HERE / file).write_text(print_ir(build_module(cfg)))
        print(HERE / file)
    for file, source in RANGES.items():
        (HERE / file).write_text(linear_ranges(MODELS[source]))
        print(HERE / file)
    for file, ref in REFS.items():
        (HERE / file).write_text(print_ir(load_model(ref).module))
        print(HERE / file)
