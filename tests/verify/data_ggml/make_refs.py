"""Regenerate the block-quantized GGUFs of tests/verify/test_llamacpp_quantized.py and the
quantizer fixture of tests/ir/test_ggml_kquants.py, with llama.cpp's own tools (never run in CI).

For each model of SPECS: a tiny random HF checkpoint written by transformers itself
(../shared/tools/llamacpp-oracle/mk_tiny.py: transformers' init plus 0.15 randn, seed 0; every
matrix's rows a multiple of 256 values, as the K-quants need), the oracle's byte-level
tokenizer, llama.cpp's convert_hf_to_gguf.py with --outtype f32 (--no-mtp for Qwen3.5), then
llama-quantize to each type of QUANTS, then llama-eval-callback on the prompts (context 256,
one thread):

    <name>-<type>.gguf                 what llama-quantize wrote (its own mix of types: Q4_K_M
                                       keeps attn_v and ffn_down of some layers and the output
                                       in Q6_K, Q3_K_M mixes Q3_K, Q4_K, Q5_K and Q6_K, ...)
    <name>-<type>.prefill.callback.log "hello world": 9 tokens at positions 0-8
    <name>-<type>.decode.callback.log  "h": one token (for the types of DECODE)

llama-eval-callback runs with --no-repack: ggml-cpu's own vec_dot kernels, which quantize each
activation row to the weight type's vec_dot_type (the numerics strata emulates). This build's
other CPU paths for these types (the AMX and repacked buffers of -march=native on this
machine's Xeon) fault here with an illegal instruction.

The quantizer fixture (tests/ir/data/ggml_kquants.gguf): the first 32 rows of llama's
blk.0.attn_q.weight (256 values each: one super-block), the first 16 rows replaced by
designed blocks (zero, constant, all positive, all negative, tiny, outliers), quantized by
`llama-quantize --pure` to Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0: tensor `src` (f32) and one
tensor per type holding llama-quantize's blocks of those rows.

Usage (the oracle built by ../shared/tools/llamacpp-oracle/build.sh):

    LLAMA_CPP=~/.cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        PY=/path/to/python-with-torch-and-transformers python tests/verify/data_ggml/make_refs.py [NAME ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent
FIXTURE = DATA.parents[1] / "ir" / "data" / "ggml_kquants.gguf"
ORACLE = DATA.parents[3] / "shared" / "tools" / "llamacpp-oracle"
_VENDORED = ".cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp"  # where build.sh puts it
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / _VENDORED))
PY = os.environ.get("PY", sys.executable)
PROMPTS = {"prefill": "hello world", "decode": "h"}

_ATTN = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 512,
         "tie_word_embeddings": False}
#: name -> the config fields mk_tiny.py makes the checkpoint from.
SPECS: dict[str, dict] = {
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 272, "hidden_size": 256,
              "num_hidden_layers": 2, "intermediate_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, **_ATTN},
    "qwen3": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 272, "hidden_size": 256,
              "num_hidden_layers": 1, "intermediate_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, **_ATTN},
    # 4 experts of 256, 2 per token: the expert choices of K-quant experts.
    "qwen3moe": {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 272,
                 "hidden_size": 256, "num_hidden_layers": 1, "intermediate_size": 256, "moe_intermediate_size": 256,
                 "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1,
                 "mlp_only_layers": [], "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, **_ATTN},
    # 8 value heads of 64 on 2 key heads (llama.cpp takes the key and value head dims equal):
    # ssm_out's 512 input columns are two Q8_K blocks,
    # which the GGUF's tiled value heads fill otherwise than HF's grouped ones.
    "qwen35": {"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "vocab_size": 272,
               "hidden_size": 256, "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128, "intermediate_size": 256,
               "linear_conv_kernel_dim": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
               "linear_num_key_heads": 2, "linear_num_value_heads": 8, "max_position_embeddings": 512,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
               "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                   "mrope_section": [4, 6, 6], "mrope_interleaved": True}},
    # tests/data/llamacpp/qwen3.5-moe-tiny's spec: 8 experts, 2 per token, a shared expert,
    # 3 Gated DeltaNet layers and a gated attention layer; value heads of 16 (half a Q8_0 block).
    "qwen35moe": json.loads((ORACLE / "specs" / "qwen3.5-moe-tiny.json").read_text()) if ORACLE.is_dir() else {},
}
#: name -> the llama-quantize types its GGUFs are made in.
QUANTS = {"llama": ("Q4_K_M",), "qwen3": ("Q5_K_M",), "qwen3moe": ("Q3_K_M",), "qwen35": ("IQ4_XS",),
          "qwen35moe": ("Q8_0", "Q4_0")}
#: (name, type) whose one-token log is kept too.
DECODE = {("llama", "Q4_K_M"), ("qwen35moe", "Q8_0")}
#: The types of the quantizer fixture.
FIXTURE_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0")


def run(*cmd: str, out: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    env = {**os.environ, "LLAMA_CPP": str(LLAMA_CPP)}
    with open(out, "w") if out else open(os.devnull, "w") as sink:
        subprocess.run(cmd, check=True, env=env, stdout=sink, stderr=subprocess.STDOUT if out else sink)


def tool(name: str) -> str:
    return str(LLAMA_CPP / "build" / "bin" / name)


def convert(name: str, work: Path) -> Path:
    """The f32 GGUF of SPECS[name], converted by llama.cpp from a checkpoint transformers wrote."""
    work.mkdir(parents=True)
    (work / "spec.json").write_text(json.dumps(SPECS[name]))
    hf = work / "hf"
    run(PY, str(ORACLE / "mk_tiny.py"), str(work / "spec.json"), str(hf))
    run(PY, str(ORACLE / "tok.py"), str(hf))
    f32 = work / "f32.gguf"
    hybrid = SPECS[name]["architectures"][0].startswith("Qwen3_5")
    run(PY, str(ORACLE / "convert.py"), str(hf), "--outtype", "f32", "--outfile", str(f32), *(["--no-mtp"] if hybrid else []))
    return f32


def make(name: str, work: Path) -> None:
    f32 = convert(name, work / name)
    for qtype in QUANTS[name]:
        out = DATA / f"{name}-{qtype.lower()}.gguf"
        run(tool("llama-quantize"), str(f32), str(out), qtype)
        for entry, prompt in PROMPTS.items():
            if entry == "prefill" or (name, qtype) in DECODE:
                run(tool("llama-eval-callback"), "-m", str(out), "-p", prompt, "-n", "1", "-c", "256", "-t", "1",
                    "--no-repack", out=DATA / f"{name}-{qtype.lower()}.{entry}.callback.log")
    if name == "llama":
        make_fixture(f32, work / "fixture")


def designed_rows(rows):
    """The quantizer fixture's rows: the checkpoint's, the first 16 replaced by edge cases."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = np.array(rows[:32], dtype=np.float32)
    n = out.shape[1]
    out[0] = 0                                           # an all-zero super-block
    out[1] = 0.25                                        # constant: max == min
    out[2] = np.abs(out[2]) + 0.5                        # all positive: the min clamps to 0
    out[3] = -np.abs(out[3]) - 0.5                       # all negative
    out[4] *= 1e-12                                      # tiny: the f16 scales underflow
    out[5, rng.integers(0, n, 3)] = [40.0, -55.0, 70.0]  # outliers
    out[6, :32] = 0                                      # one all-zero block of 32
    out[7, ::2] = 0                                      # every other value 0
    out[8] = np.round(out[8] * 8) / 8                    # values on a grid
    out[9] *= 1e3
    out[10:16] *= rng.uniform(0.01, 20.0, (6, 1)).astype(np.float32)
    return out


def make_fixture(f32: Path, work: Path) -> None:
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    import gguf
    import numpy as np

    work.mkdir(parents=True)
    target = "blk.0.attn_q.weight"
    src = gguf.GGUFReader(f32)
    w = gguf.GGUFWriter(work / "designed.gguf", src.fields["general.architecture"].contents())
    for key, field in src.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            sub = {"sub_type": field.types[-1]} if field.types[0] == gguf.GGUFValueType.ARRAY else {}
            w.add_key_value(key, field.contents(), field.types[0], **sub)
    rows = None
    for t in src.tensors:
        data = np.array(t.data)
        if t.name == target:
            rows = designed_rows(data)
            data[:32] = rows
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = gguf.GGUFWriter(FIXTURE, "fixture")
    out.add_tensor("src", rows)
    for qtype in FIXTURE_TYPES:
        q = work / f"{qtype}.gguf"
        run(tool("llama-quantize"), "--pure", str(work / "designed.gguf"), str(q), qtype)
        t = next(t for t in gguf.GGUFReader(q).tensors if t.name == target)
        out.add_tensor(qtype, np.array(t.data)[:32], raw_dtype=t.tensor_type)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name in argv or list(SPECS):
            for old in DATA.glob(f"{name}-*"):
                old.unlink()
            make(name, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
