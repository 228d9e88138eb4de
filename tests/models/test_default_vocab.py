"""The default model's vocabulary: the shipped files are what `default_vocab.build` makes, the
vocabulary fills the model's embedding exactly, and its chat template and end ids work."""

from __future__ import annotations

from strata.models.default import DEFAULT_CONFIG
from strata.models.default_vocab import DATA_DIR, FILES, VOCAB_SIZE, build
from strata.runtime.text import load_tokenizer


def test_the_shipped_files_are_what_the_builder_makes(tmp_path):
    out = build(tmp_path)
    for name in FILES:
        assert (out / name).read_bytes() == (DATA_DIR / name).read_bytes(), name


def test_the_vocabulary_is_the_models():
    tok = load_tokenizer(DATA_DIR)
    assert tok.vocab_size == VOCAB_SIZE == DEFAULT_CONFIG.vocab_size
    assert tok.end_of_generation_ids == {tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")}
    text = "Once upon a time there was a little town by the sea."
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) < len(text) / 2  # mostly words, not bytes
    assert tok.decode(tok.encode("naïve 日本 🙂")) == "naïve 日本 🙂"  # any text: bytes underneath
    rendered = tok.render_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.encode_chat([{"role": "user", "content": "Hi"}])[0] == tok.token_to_id("<|im_start|>")
