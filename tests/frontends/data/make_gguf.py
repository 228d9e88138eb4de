"""Regenerate the tiny GGUF fixtures of tests/frontends/test_gguf.py with llama.cpp's own converter.

For each family: a tiny random HF checkpoint (strata's `save_random_checkpoint`, seeded, f32),
the byte-level tokenizer of ../shared/tools/llamacpp-oracle/tok.py (258 tokens, so vocab_size
is 272), then llama.cpp's `convert_hf_to_gguf.py` (through the oracle's convert.py, which skips
the tokenizer-hash check) with `--outtype f32` and `--outtype q8_0` (llama also f16 and bf16).
What is committed: the .gguf files and fixtures.json (each family's HF config.json, seed, std,
prompt and steps); the test rebuilds the HF checkpoint from those (the random writer's bytes
depend only on config, seed and std).

Each family's seed is the first from its start whose model is a fair test of top-1 agreement
(`pick_seed`: no near ties). Qwen3-MoE is all sparse with renormalised top-k weights, as
llama.cpp's qwen3moe converter and graph require (GGUF keeps neither `mlp_only_layers` nor
`norm_topk_prob`).

Q4_0 (`<family>-q4_0.gguf`, llama only) is the F32 file through llama.cpp's `llama-quantize
F32 OUT Q4_0` when `$LLAMA_CPP/build/bin/llama-quantize` is built (the committed file; it keeps
output.weight in Q8_0, its rows being too short for Q6_K), else the F32 file rewritten with the
`gguf` package's writer, its 2-D weights quantized by `gguf.quants.quantize` (whose Q4_0 blocks
are byte for byte llama-quantize's, as measured on this fixture).

The exact commands (not run in CI; llama.cpp's source is the vendored copy in the
`llama-cpp-python==0.3.36` sdist, unpacked outside the repo):

    pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d /tmp/llcpp-sdist
    mkdir -p /tmp/llcpp && tar xzf /tmp/llcpp-sdist/llama_cpp_python-0.3.36.tar.gz -C /tmp/llcpp
    pip install gguf sentencepiece tokenizers transformers torch   # the converter's imports
    LLAMA_CPP=/tmp/llcpp/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        PYTHONPATH=.:tests python tests/frontends/data/make_gguf.py [FAMILY ...]

    # optional, ~10 min on 2 cores: llama-quantize for the Q4_0 file
    cmake -S $LLAMA_CPP -B $LLAMA_CPP/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF
    cmake --build $LLAMA_CPP/build -j2 --target llama-quantize

which, per family, runs
    python ../shared/tools/llamacpp-oracle/tok.py HF_DIR
    python ../shared/tools/llamacpp-oracle/convert.py HF_DIR --outtype f32 --outfile DATA/FAMILY-f32.gguf
    python ../shared/tools/llamacpp-oracle/convert.py HF_DIR --outtype q8_0 --outfile DATA/FAMILY-q8_0.gguf
(with --no-mtp for the hybrids: their checkpoints have no multi-token-prediction layers).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from strata.models.llama_config import LlamaConfig, RopeScaling
from strata.models import save_random_checkpoint
from strata.models.qwen35 import Qwen35Config

DATA = Path(__file__).resolve().parent
ORACLE = DATA.parents[3] / "shared" / "tools" / "llamacpp-oracle"
STD = 0.12  # tests/support.py write_checkpoint's: logits of std ~1, varied greedy tokens
#: A tied model at 0.12 repeats its last token (the logits are mostly E x); 0.25 varies them.
STD_TIED = 0.25

_LLAMA = LlamaConfig(arch="LlamaForCausalLM", name="llama", vocab_size=272, hidden_size=32, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=64, rms_norm_eps=1e-5,
                     rope_theta=10000.0, rope_scaling=None, max_position_embeddings=128,
                     tie_word_embeddings=False, attention_bias=False, o_bias=False, qk_norm=False, dtype="float32")
_HYBRID = dict(vocab_size=272, hidden_size=32, num_layers=2, layer_types=("linear_attention", "full_attention"),
               moe_layers=(False, False), num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=64,
               rms_norm_eps=1e-6, rope_theta=10000.0, rotary_dim=4, mrope_section=(1, 1, 0),
               mrope_interleaved=True, max_position_embeddings=128, tie_word_embeddings=False, dtype="float32",
               lin_k_heads=2, lin_v_heads=4, lin_k_dim=8, lin_v_dim=8, conv_kernel=4)
_EXPERTS = dict(num_experts=4, top_k=2, moe_intermediate_size=32)

#: The prompt ("hello" in tok.py's vocabulary, then two ids) and the greedy steps the tests take.
PROMPT = [256, 257, 78, 3, 100]
STEPS = 32
MIN_DISTINCT, MIN_MARGIN = 8, 0.03

#: family -> (config, the first seed tried: see pick_seed)
FIXTURES = {
    "llama": (_LLAMA, 11),
    # Llama 3's RoPE scaling: 16 rotated pairs, 3 of them between the unscaled and the scaled
    "llama3rope": (dataclasses.replace(_LLAMA, name="llama3rope", num_heads=2, num_kv_heads=1, head_dim=32,
                                       rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64)), 18),
    "qwen2": (dataclasses.replace(_LLAMA, arch="Qwen2ForCausalLM", name="qwen2", attention_bias=True,
                                  tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1e6), 12),
    "qwen3": (dataclasses.replace(_LLAMA, arch="Qwen3ForCausalLM", name="qwen3", qk_norm=True, head_dim=16,
                                  rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True), 13),
    "qwen3moe": (Qwen35Config(arch="Qwen3MoeForCausalLM", name="qwen3moe", vocab_size=272, hidden_size=32,
                              num_layers=2, layer_types=("full_attention",) * 2, moe_layers=(True, True),
                              num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=0, rms_norm_eps=1e-6,
                              rope_theta=1e6, rotary_dim=16, mrope_section=(), mrope_interleaved=False,
                              max_position_embeddings=128, tie_word_embeddings=False, dtype="float32",
                              norm_topk_prob=True, **_EXPERTS), 14),
    "qwen35": (Qwen35Config(arch="Qwen3_5ForCausalLM", name="qwen35", **_HYBRID), 15),
    "qwen35moe": (Qwen35Config(arch="Qwen3_5MoeForCausalLM", name="qwen35moe",
                               **(_HYBRID | dict(moe_layers=(True, True), intermediate_size=0)),
                               shared_intermediate_size=32, **_EXPERTS), 16),
    "qwen3next": (Qwen35Config(arch="Qwen3NextForCausalLM", name="qwen3next",
                               **(_HYBRID | dict(moe_layers=(True, True), intermediate_size=0, mrope_section=(),
                                                 mrope_interleaved=False)),
                               shared_intermediate_size=32, **_EXPERTS), 17),
}
OUTTYPES = ("f32", "q8_0")
#: More of llama.cpp's output types, for one family (the reader's F16 and BF16 paths).
MORE_OUTTYPES = {"llama": ("f16", "bf16")}
#: The hybrids' converter counts multi-token-prediction layers; these checkpoints have none.
NO_MTP = ("qwen35", "qwen35moe", "qwen3next")
Q4_0_FAMILIES = ("llama",)


def run(*cmd: str, env: dict | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def pick_seed(cfg, start: int, std: float, work: Path) -> int:
    """The first seed from `start` whose model is a fair test of top-1 agreement: its greedy run
    on PROMPT has at least MIN_DISTINCT ids in STEPS steps (not stuck on a token) and no step
    whose top-1 leads the runner-up by less than MIN_MARGIN. A random tiny model has near ties
    (its logits' std is ~0.7 over 272 ids) that any 8-bit rounding flips; trained models lead by
    far more. The HF run is strata's CPU target on the checkpoint (the tests check it against
    transformers elsewhere)."""
    from strata.pipeline import compile_model, load_model
    from strata.targets.cpu.program import load_compiled
    from support import cpu_generate as generate

    hf = work / "pick"
    compiled = None
    for seed in range(start, start + 200):
        save_random_checkpoint(cfg, hf, seed=seed, std=std)
        model = load_model(hf)
        if compiled is None:
            compiled = load_compiled(compile_model(model, "cpu", work / "pick-out", {"ctx": 64}))
        ids, logits = generate(compiled, model.open_weights(quiet=True), PROMPT, STEPS)
        top2 = np.sort(logits, axis=1)[:, -2:]
        if len(set(ids)) >= MIN_DISTINCT and float((top2[:, 1] - top2[:, 0]).min()) >= MIN_MARGIN:
            return seed
    raise SystemExit(f"no seed in [{start}, {start + 200}) gives a fair model for {cfg.arch}")


def make(family: str, work: Path) -> dict:
    cfg, start = FIXTURES[family]
    std = STD_TIED if cfg.tie_word_embeddings else STD
    seed = pick_seed(cfg, start, std, work)
    hf = work / family
    save_random_checkpoint(cfg, hf, seed=seed, std=std)
    run(sys.executable, str(ORACLE / "tok.py"), str(hf))
    env = dict(os.environ)
    for outtype in OUTTYPES + MORE_OUTTYPES.get(family, ()):
        run(sys.executable, str(ORACLE / "convert.py"), str(hf), "--outtype", outtype,
            "--outfile", str(DATA / f"{family}-{outtype}.gguf"), *(["--no-mtp"] if family in NO_MTP else []), env=env)
    if family in Q4_0_FAMILIES:
        quantize = Path(os.environ.get("LLAMA_CPP", "/nonexistent")) / "build" / "bin" / "llama-quantize"
        if quantize.is_file():
            run(str(quantize), str(DATA / f"{family}-f32.gguf"), str(DATA / f"{family}-q4_0.gguf"), "Q4_0")
        else:
            requantize(DATA / f"{family}-f32.gguf", DATA / f"{family}-q4_0.gguf")
    return {"seed": seed, "std": std, "prompt": PROMPT, "steps": STEPS,
            "config": json.loads((hf / "config.json").read_text())}


def requantize(src: Path, dst: Path) -> None:
    """`src` (an F32 GGUF) with its 2-D weights whose rows split into 32-blocks as Q4_0."""
    import gguf

    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            w.add_uint32(key, int(gguf.LlamaFileType.MOSTLY_Q4_0))
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, value, vtype)
    for t in r.tensors:
        data = np.array(t.data)
        if data.ndim == 2 and data.shape[-1] % 32 == 0 and t.tensor_type == gguf.GGMLQuantizationType.F32:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q4_0)
            w.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
        else:
            w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"+ requantized {src.name} -> {dst.name} (Q4_0)", flush=True)


def main(argv: list[str]) -> int:
    families = argv or list(FIXTURES)
    index_path = DATA / "fixtures.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            index[family] = make(family, Path(tmp))
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
