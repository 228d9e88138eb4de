"""The reference vocabularies of ../shared/refs/tokenizers: every `.inp` case gives the `.out` ids.

The `.inp`/`.out` pairs are llama.cpp's own tokenizer tests (made with the models' HF tokenizers,
asserted by llama.cpp's test-tokenizer-0: no BOS, special tokens not parsed). `llama-spm` and
`qwen2` are read from their GGUF vocabularies, `qwen2` also from its HF directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.runtime.text import load_tokenizer
from strata.runtime.text.gguf_header import read_gguf_metadata

ROOT = Path(__file__).resolve().parents[3]
REFS = ROOT.parent / "shared" / "refs" / "tokenizers"

pytestmark = pytest.mark.skipif(not REFS.is_dir(), reason="no ../shared/refs/tokenizers beside the checkout")

SOURCES = {
    "llama-spm.gguf": ("gguf/ggml-vocab-llama-spm.gguf", "gguf/ggml-vocab-llama-spm.gguf"),
    "qwen2.gguf": ("gguf/ggml-vocab-qwen2.gguf", "gguf/ggml-vocab-qwen2.gguf"),
    "qwen2-hf": ("hf/qwen2", "gguf/ggml-vocab-qwen2.gguf"),
}


def reference_cases(stem: str) -> list[tuple[str, list[int]]]:
    inp = (REFS / f"{stem}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    out = [[int(i) for i in line.split()] for line in (REFS / f"{stem}.out").read_text(encoding="utf-8").split("\n")]
    assert len(inp) == len(out)
    return list(zip(inp, out))


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(REFS / path) for name, (path, _) in SOURCES.items()}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_case_gives_the_reference_ids(tokenizers, name):
    tok = tokenizers[name]
    cases = reference_cases(SOURCES[name][1])
    assert len(cases) >= 47
    wrong = [(text, tok.encode(text, add_special=False, parse_special=False), ids) for text, ids in cases
             if tok.encode(text, add_special=False, parse_special=False) != ids]
    assert not wrong, f"{len(wrong)} of {len(cases)} cases differ; the first: {wrong[0]!r}"


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_encode_then_decode_round_trips(tokenizers, name):
    # Every reference case is lossless for these vocabularies (byte-level BPE by construction;
    # SentencePiece through its byte pieces and the one dummy-prefix space it drops again).
    tok = tokenizers[name]
    for text, ids in reference_cases(SOURCES[name][1]):
        assert tok.decode(ids) == text
        assert tok.decode(tok.encode(text), skip_special=True) == text


def test_sentencepiece_adds_the_bos_the_file_asks_for(tokenizers):
    tok = tokenizers["llama-spm.gguf"]
    meta = read_gguf_metadata(REFS / SOURCES["llama-spm.gguf"][0])
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert tok.bos_id == meta["tokenizer.ggml.bos_token_id"]
    assert tok.eos_id == meta["tokenizer.ggml.eos_token_id"]
    body = tok.encode("Hello world", add_special=False)
    assert tok.encode("Hello world") == [tok.bos_id] + body
    assert tok.adds_bos
    assert tok.special_tokens["bos_token"] == meta["tokenizer.ggml.tokens"][tok.bos_id]
    assert tok.vocab_size == len(meta["tokenizer.ggml.tokens"])
    # A special token in the text: matched when parsed, spelt out otherwise; the text after it
    # gets its own dummy-prefix space, as after the BOS (llama.cpp's rule).
    eos = tok.special_tokens["eos_token"]
    assert tok.encode(f"Hi{eos}Hi", add_special=False) == (tok.encode("Hi", add_special=False) + [tok.eos_id]
                                                             + tok.encode("Hi", add_special=False))
    assert tok.eos_id not in tok.encode(f"Hi{eos}Hi", add_special=False, parse_special=False)
    assert tok.end_of_generation_ids == {tok.eos_id}


def test_qwen2_gguf_and_hf_directory_agree(tokenizers):
    gguf_tok, hf_tok = tokenizers["qwen2.gguf"], tokenizers["qwen2-hf"]
    meta = read_gguf_metadata(REFS / SOURCES["qwen2.gguf"][0])
    assert gguf_tok.vocab_size == hf_tok.vocab_size == len(meta["tokenizer.ggml.tokens"])
    assert gguf_tok.eos_id == hf_tok.eos_id == meta["tokenizer.ggml.eos_token_id"]
    im_start, im_end = gguf_tok.token_to_id("<|im_start|>"), gguf_tok.token_to_id("<|im_end|>")
    texts = ["<|im_start|>user\nWhat is 2+2? ✅<|im_end|>\n<|im_start|>assistant\n",
             "<tool_call>{\"a\": 1}</tool_call> 12345 東京 café\r\n\t x",
             "<|endoftext|><|endoftext|>  trailing   "]
    for text in texts:
        for parse_special in (True, False):
            ids = gguf_tok.encode(text, parse_special=parse_special)
            assert ids == hf_tok.encode(text, parse_special=parse_special)
            assert gguf_tok.decode(ids) == hf_tok.decode(ids) == text
    assert gguf_tok.encode(texts[0])[0] == im_start
    assert im_start not in gguf_tok.encode(texts[0], parse_special=False)
    # No BOS for this vocabulary: the file has no add_bos_token and qwen2's default is off.
    assert "tokenizer.ggml.add_bos_token" not in meta
    assert gguf_tok.encode(texts[1]) == gguf_tok.encode(texts[1], add_special=False)
    assert not gguf_tok.adds_bos and not hf_tok.adds_bos
    # The GGUF ends generation where llama.cpp does (the eos id, and <|im_end|> by its text);
    # the HF directory has no config.json or generation_config.json: its eos token only.
    assert {gguf_tok.eos_id, im_end} <= gguf_tok.end_of_generation_ids
    assert hf_tok.end_of_generation_ids == {hf_tok.eos_id}
    assert gguf_tok.special_tokens["eos_token"] == hf_tok.special_tokens["eos_token"] == "<|endoftext|>"

