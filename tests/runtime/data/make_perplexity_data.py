"""Make tiny-llama-spm-f32.gguf and what llama-perplexity says about it (run by hand, never in tests).

    python tests/runtime/data/make_perplexity_data.py     # needs torch, transformers, sentencepiece, llama.cpp

1. The tiny random Llama of make_llamacpp_gguf.py (Llama 2's SentencePiece vocabulary of 32000
   pieces with their real scores) narrowed to hidden 8 so that its f32 GGUF stays small
   (the embedding is most of it), seed 0, HF's initialisation plus 0.5 * randn (large
   enough that the next-token distributions are far from uniform: the score depends on every token).
2. llama.cpp's converter, --outtype f32: tiny-llama-spm-f32.gguf.
3. llama-perplexity -m tiny-llama-spm-f32.gguf -f perplexity.txt -c 64 (one thread, so that its
   sums are in a fixed order): its printed output is kept as tiny-llama-spm-f32.perplexity.txt.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_llamacpp_gguf import LLAMA_CPP, VOCAB, write_sentencepiece_model  # noqa: E402

OUT = HERE / "tiny-llama-spm-f32.gguf"
TEXT = HERE / "perplexity.txt"
PPL = HERE / "tiny-llama-spm-f32.perplexity.txt"
CTX = 64


def write_checkpoint(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.5 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "tokenizer_class": "LlamaTokenizer"}), encoding="utf-8")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        write_checkpoint(hf)
        write_sentencepiece_model(VOCAB, hf / "tokenizer.model")
        subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(hf), "--outtype", "f32",
                        "--outfile", str(OUT)], check=True, capture_output=True)
    binary = LLAMA_CPP / "build" / "bin" / "llama-perplexity"
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    r = subprocess.run([str(binary), "-m", str(OUT), "-f", str(TEXT), "-c", str(CTX), "-t", "1", "-tb", "1"],
                       capture_output=True, text=True, check=True, env=env)
    # the running estimates go to stdout, the final one to stderr among the loading messages
    kept = [m.group(0) for m in re.finditer(r"(perplexity: calculating .*|Final estimate: .*)", r.stderr)]
    PPL.write_text(r.stdout + "\n".join(kept) + "\n", encoding="utf-8")
    print(OUT, OUT.stat().st_size, PPL)
    print(r.stdout)


if __name__ == "__main__":
    main()
