"""Regenerate the llama.cpp reference logs of tests/verify/test_llamacpp_refs.py (never run in CI).

For each model of SPECS: a tiny random HF checkpoint written by transformers itself
(../shared/tools/llamacpp-oracle/mk_tiny.py: transformers' init plus 0.15 randn, seed 0), the
oracle's byte-level tokenizer (tok.py: "hello" is 256, 257, 78), llama.cpp's own
convert_hf_to_gguf.py (through the oracle's convert.py, which skips the tokenizer-hash check)
with --outtype f32 (--no-mtp for Qwen3.5), then llama-eval-callback on two prompts, context
256, one thread:

    prefill.callback.log   PREFILL ("hello world": 9 tokens at positions 0-8)
    decode.callback.log    DECODE ("h": one token at position 0, the shape of a decode step)

What is kept, per model directory: config.json and model.safetensors (the HF directory as
transformers wrote it, without the tokenizer, which verify does not read), model.gguf and the
two logs. For the GGUF fixtures of tests/frontends/data named in FIXTURES, the DECODE log only
(`fixtures/<name>.decode.callback.log`): the one-token graph of llama.cpp's other llama-style
builders.

One more conversion checks a claim of strata/verify/llamacpp_fields.py about the converter:
llama-tiny's checkpoint (which stores lm_head.weight) with `tie_word_embeddings: true`
converts to llama-tiny's tensors, its lm_head.weight as output.weight.

Usage (the oracle built by ../shared/tools/llamacpp-oracle/build.sh):

    LLAMA_CPP=~/.cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        PY=/path/to/python-with-torch-and-transformers python tests/verify/data/make_refs.py [NAME ...]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent
ORACLE = DATA.parents[3] / "shared" / "tools" / "llamacpp-oracle"
_VENDORED = ".cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp"  # where build.sh puts it
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / _VENDORED))
PY = os.environ.get("PY", sys.executable)
PREFILL, DECODE = "hello world", "h"
KEPT = ("config.json", "model.safetensors")

_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 272, "hidden_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "intermediate_size": 64, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
          "tie_word_embeddings": False}

#: name -> the config fields mk_tiny.py makes the checkpoint from.
SPECS: dict[str, dict] = {
    # Plain RoPE, grouped-query attention (4 query heads on 2 KV heads).
    "llama-tiny": {**_LLAMA, "rope_theta": 10000.0},
    # Llama 3's RoPE scaling at theta 5e5: of the 4 rotated pairs (wavelengths 6.3, 167, 4443 and
    # 1.2e5 positions) the first keeps its frequency, the second is between the thresholds
    # (256/4 = 64 and 256/1 = 256: smoothed), the last two are divided by the factor 8.
    "llama3-tiny": {**_LLAMA, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 256}},
    # HF weighs the experts by their plain softmax probabilities; llama.cpp's qwen3moe graph
    # renormalises the top-k weights whatever the config says.
    "qwen3moe-nonorm-tiny": {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 272,
                             "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64,
                             "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                             "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
                             "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                             "tie_word_embeddings": False},
    # Interleaved M-RoPE sections [2, 0, 2] send rotary pair 1 of 4 to the fourth stream, which
    # llama.cpp sets to position 0 for text (the pair is not turned); HF turns every pair by the
    # token's position.
    "qwen35-mrope-tiny": {"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "vocab_size": 272,
                          "hidden_size": 32, "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
                          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 64,
                          "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                          "linear_num_key_heads": 2, "linear_num_value_heads": 4, "max_position_embeddings": 512,
                          "rms_norm_eps": 1e-6,
                          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                              "mrope_section": [2, 0, 2], "mrope_interleaved": True}},
}


#: GGUF fixtures of tests/frontends/data whose one-token log is kept.
FIXTURES = ("qwen2", "qwen3")


def run(*cmd: str, out: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    env = {**os.environ, "LLAMA_CPP": str(LLAMA_CPP)}
    with open(out, "w") if out else open(os.devnull, "w") as sink:
        subprocess.run(cmd, check=True, env=env, stdout=sink, stderr=subprocess.STDOUT if out else sink)


def convert(spec: dict, work: Path, gguf: Path) -> Path:
    """The HF checkpoint of `spec` under `work` (with its tokenizer), converted to `gguf`."""
    work.mkdir(parents=True)
    (work / "spec.json").write_text(json.dumps(spec))
    hf = work / "hf"
    run(PY, str(ORACLE / "mk_tiny.py"), str(work / "spec.json"), str(hf))
    run(PY, str(ORACLE / "tok.py"), str(hf))
    hybrid = spec["architectures"][0].startswith("Qwen3_5")  # no multi-token-prediction layers here
    run(PY, str(ORACLE / "convert.py"), str(hf), "--outtype", "f32", "--outfile", str(gguf), *(["--no-mtp"] if hybrid else []))
    return hf


def callback(gguf: Path, prompt: str, log: Path) -> None:
    run(str(LLAMA_CPP / "build" / "bin" / "llama-eval-callback"), "-m", str(gguf), "-p", prompt, "-n", "1",
        "-c", "256", "-t", "1", out=log)


def gguf_tensors(path: Path) -> dict:
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    import gguf
    import numpy as np

    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


def make(name: str, work: Path) -> None:
    out = DATA / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    hf = convert(SPECS[name], work / name, out / "model.gguf")
    for file in KEPT:
        shutil.copy(hf / file, out / file)
    callback(out / "model.gguf", PREFILL, out / "prefill.callback.log")
    callback(out / "model.gguf", DECODE, out / "decode.callback.log")
    if name == "llama-tiny":
        check_tied_converts_the_same(hf, out / "model.gguf", work / "tied")


def check_tied_converts_the_same(hf: Path, gguf: Path, work: Path) -> None:
    """llama-tiny's checkpoint (which stores lm_head.weight) with `tie_word_embeddings: true`
    converts to the tensors of llama-tiny's own GGUF."""
    shutil.copytree(hf, work)
    config = json.loads((work / "config.json").read_text())
    (work / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}, indent=2))
    run(PY, str(ORACLE / "convert.py"), str(work), "--outtype", "f32", "--outfile", str(work / "tied.gguf"))
    ours, tied = gguf_tensors(gguf), gguf_tensors(work / "tied.gguf")
    if "output.weight" not in tied or ours.keys() != tied.keys() or any((ours[k] != tied[k]).any() for k in ours):
        raise SystemExit("tie_word_embeddings: true converts to other tensors than llama-tiny's")
    print("+ tie_word_embeddings: true converts to llama-tiny's tensors (output.weight = lm_head.weight)", flush=True)


def main(argv: list[str]) -> int:
    names = argv or [*SPECS, *FIXTURES]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name in FIXTURES:
                (DATA / "fixtures").mkdir(exist_ok=True)
                gguf = DATA.parents[1] / "frontends" / "data" / f"{name}-f32.gguf"
                callback(gguf, DECODE, DATA / "fixtures" / f"{name}.decode.callback.log")
            else:
                make(name, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
