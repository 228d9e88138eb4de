"""Make tiny-llama-spm.gguf and what llama-tokenize says about it (run by hand, never in tests).

    python tests/runtime/data/make_llamacpp_gguf.py      # needs torch, transformers, sentencepiece, llama.cpp

1. Llama 2's SentencePiece vocabulary (32000 pieces, byte fallback; ../shared/refs/tokenizers/
   gguf/ggml-vocab-llama-spm.gguf, from llama.cpp's test suite) written back as the
   `tokenizer.model` that HF checkpoints ship (a SentencePiece ModelProto: each piece's text,
   score and type, as the GGUF lists them), so that llama.cpp's converter reads real scores.
2. A tiny random Llama beside it (vocabulary 32000, hidden 16, one layer, tied embeddings;
   weights: HF's initialisation plus 0.15 * randn, seed 0, as the oracle tool's mk_tiny.py).
3. llama.cpp's own converter, convert_hf_to_gguf.py --outtype f16: tiny-llama-spm.gguf (1.8 MB,
   the vocabulary is most of it).
4. llama-tokenize --ids --no-escape on that file for every prompt below (each written to a file
   first, read with -f: byte for byte) -> tiny-llama-spm.tokenize.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
VOCAB = ROOT.parent / "shared" / "refs" / "tokenizers" / "gguf" / "ggml-vocab-llama-spm.gguf"
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", Path.home() / ".cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp"))
OUT = HERE / "tiny-llama-spm.gguf"
IDS = HERE / "tiny-llama-spm.tokenize.json"

#: llama.cpp's own test strings for this vocabulary, and prompts a user would type.
PROMPTS = [
    "Once upon a time", "Hello world", " Hello world", "Hello\nworld\n", "  two leading spaces",
    "The quick brown fox jumps over the lazy dog.", "naïve café, Ünïcödé ½", "日本語のテキスト", "🦙 llamas 🚀!",
    "tabs\tand\r\nnewlines", "<s> is the BOS written as text", "1234567890 3.14159 -42", "",
]


def write_sentencepiece_model(vocab: Path, out: Path) -> None:
    from sentencepiece import sentencepiece_model_pb2 as pb

    sys.path.insert(0, str(ROOT))
    from strata.runtime.text.gguf_header import read_gguf_metadata

    meta = read_gguf_metadata(vocab)
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(meta["tokenizer.ggml.tokens"])
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 0, 1, 2, -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    for text, score, kind in zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"],
                                 meta["tokenizer.ggml.token_type"]):
        piece = m.pieces.add()
        piece.piece, piece.score, piece.type = text, float(score), int(kind)  # GGUF's types are SentencePiece's
    out.write_bytes(m.SerializeToString())


def write_checkpoint(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.15 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "tokenizer_class": "LlamaTokenizer"}), encoding="utf-8")


def llama_tokenize(gguf: Path, text: str) -> list[int]:
    binary = LLAMA_CPP / "build" / "bin" / "llama-tokenize"
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as fh:
        fh.write(text.encode("utf-8"))
    try:
        env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
        r = subprocess.run([str(binary), "-m", str(gguf), "-f", fh.name, "--ids", "--no-escape", "--log-disable"],
                           capture_output=True, text=True, check=True, env=env)
    finally:
        os.unlink(fh.name)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    cases = VOCAB.with_name(VOCAB.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        write_checkpoint(hf)
        write_sentencepiece_model(VOCAB, hf / "tokenizer.model")
        subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(hf), "--outtype", "f16",
                        "--outfile", str(OUT)], check=True, capture_output=True)
    prompts = PROMPTS + [c for c in cases if c not in PROMPTS]
    IDS.write_text(json.dumps([{"prompt": p, "ids": llama_tokenize(OUT, p)} for p in prompts], ensure_ascii=False,
                              indent=1) + "\n", encoding="utf-8")
    print(OUT, OUT.stat().st_size, IDS, len(prompts))


if __name__ == "__main__":
    main()
