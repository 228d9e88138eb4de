"""GGUF vocabularies built into tokenizers: llama.cpp's rules, read off small vocabulary-only files.

Each file is written here with the gguf package's writer (no tensors), so each rule is seen
alone: which regexes `tokenizer.ggml.pre` selects, SentencePiece's score order and byte fallback,
the BOS/EOS flags, llama.cpp's end-of-generation tokens, named chat templates, and the errors.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from strata.runtime.text import ChatTemplateError, TokenizerError, load_tokenizer

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "frontends" / "data"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


def write_vocab(path: Path, tokens: list[str], *, model: str = "gpt2", pre: str | None = None,
                types: list[int] | None = None, scores: list[float] | None = None,
                merges: list[str] | None = None, ids: dict[str, int] | None = None,
                flags: dict[str, bool] | None = None, chat_template=None) -> Path:
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for name, value in (ids or {}).items():
        getattr(w, f"add_{name}_token_id")(value)
    for name, value in (flags or {}).items():
        getattr(w, f"add_{name}")(value)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def byte_level(extra: list[str], merges: list[str], specials: list[str] = (), **kw):
    """A byte-level vocabulary: the 256 byte symbols, then `extra` normal tokens, then `specials`."""
    from tokenizers import pre_tokenizers

    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + extra + list(specials)
    types = [NORMAL] * (len(tokens) - len(specials)) + [CONTROL] * len(specials)
    return dict(tokens=tokens, types=types, merges=merges, **kw)


DIGITS = byte_level(["12", "123", "1234", "ab"], ["1 2", "12 3", "123 4"])


@pytest.mark.parametrize("pre, pieces", [
    ("qwen2", ["1", "2", "3", "4"]),      # \p{N}: one digit a piece
    ("llama-bpe", ["123", "4"]),          # \p{N}{1,3}
    ("gpt-2", ["1234"]),                  # ' ?\p{N}+'
])
def test_the_pre_tokenizer_name_selects_llamacpps_regexes(tmp_path, pre, pieces):
    tok = load_tokenizer(write_vocab(tmp_path / "v.gguf", pre=pre, **DIGITS))
    assert [tok.id_to_token(i) for i in tok.encode("1234", add_special=False)] == pieces


def test_ignore_merges_takes_a_word_that_is_a_token_whole(tmp_path):
    # "ab" is a token but no merge makes it: Llama 3's pre-tokenizer (ignore_merges) still takes
    # it whole, Qwen2's does not.
    llama3 = load_tokenizer(write_vocab(tmp_path / "l.gguf", pre="llama-bpe", **DIGITS))
    qwen2 = load_tokenizer(write_vocab(tmp_path / "q.gguf", pre="qwen2", **DIGITS))
    assert [llama3.id_to_token(i) for i in llama3.encode("ab", add_special=False)] == ["ab"]
    assert [qwen2.id_to_token(i) for i in qwen2.encode("ab", add_special=False)] == ["a", "b"]


def test_bos_follows_the_file_and_else_llamacpps_default(tmp_path):
    v = byte_level(["12", "123", "1234", "ab"], ["1 2", "12 3", "123 4"], specials=["<|begin|>", "<|end|>"])
    ids = {"bos": 260, "eos": 261}
    default_on = load_tokenizer(write_vocab(tmp_path / "a.gguf", pre="llama-bpe", ids=ids, **v))
    assert default_on.encode("ab") == [260, default_on.token_to_id("ab")]
    off = load_tokenizer(write_vocab(tmp_path / "b.gguf", pre="llama-bpe", ids=ids,
                                     flags={"add_bos_token": False}, **v))
    assert off.encode("ab") == off.encode("ab", add_special=False)
    both = load_tokenizer(write_vocab(tmp_path / "c.gguf", pre="qwen2", ids=ids,
                                      flags={"add_bos_token": True, "add_eos_token": True}, **v))
    assert both.encode("ab") == [260] + both.encode("ab", add_special=False) + [261]
    assert both.special_tokens == {"bos_token": "<|begin|>", "eos_token": "<|end|>"}
    with pytest.raises(TokenizerError, match=r"d\.gguf: tokenizer\.ggml\.add_bos_token is true but .* no bos"):
        load_tokenizer(write_vocab(tmp_path / "d.gguf", pre="qwen2", flags={"add_bos_token": True}, **v))


def test_end_of_generation_ids_are_llamacpps(tmp_path):
    # eos, the eot key, and tokens whose text names an end of turn (here a user-defined one,
    # which llama.cpp then treats as a control token: not matched unless specials are parsed).
    v = byte_level(["ab"], ["a b"], specials=["<s>", "</s>", "<my_eot>"])
    v["tokens"] += ["<|im_end|>", "<x>"]
    v["types"] += [USER_DEFINED, USER_DEFINED]
    im_end, x = len(v["tokens"]) - 2, len(v["tokens"]) - 1
    tok = load_tokenizer(write_vocab(tmp_path / "v.gguf", pre="qwen2", ids={"bos": 257, "eos": 258, "eot": 259}, **v))
    assert tok.end_of_generation_ids == {258, 259, im_end}
    assert tok.encode("a<|im_end|>", add_special=False)[-1] == im_end
    assert im_end not in tok.encode("a<|im_end|>", add_special=False, parse_special=False)
    assert tok.encode("a<x>", add_special=False, parse_special=False)[-1] == x  # user-defined: always matched
    b = tok.token_to_id("b")
    assert tok.decode([257, b, 258], skip_special=True) == "b"
    assert tok.decode([257, b, 258]) == "<s>b</s>"
    assert tok.decode([-1, b, tok.vocab_size, 2**40]) == "b"  # outside the vocabulary: nothing


def test_sentencepiece_merges_by_score_and_falls_back_to_bytes(tmp_path):
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["\u2581", "a", "b", "c", "ab", "bc", "\u2581a"]

    def vocab(bc_score: float):
        tokens = ["<unk>", "<s>", "</s>"] + bytes_ + pieces
        types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(pieces)
        scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, bc_score, -9.0]
        return dict(tokens=tokens, types=types, scores=scores, model="llama")

    def pieces_of(tok, text):
        return [tok.id_to_token(i) for i in tok.encode(text, add_special=False)]

    high = load_tokenizer(write_vocab(tmp_path / "h.gguf", **vocab(-0.5)))
    low = load_tokenizer(write_vocab(tmp_path / "l.gguf", **vocab(-6.0)))
    # "▁abc": the pair whose joined piece scores highest merges first: "bc" (-0.5) then "▁a" (-9);
    # with "bc" at -6, "ab" (-5) goes first, and neither "▁ab" nor "abc" is a piece.
    assert pieces_of(high, "abc") == ["\u2581a", "bc"]
    assert pieces_of(low, "abc") == ["\u2581", "ab", "c"]
    assert pieces_of(high, "bc") == ["\u2581", "bc"]
    # "é" is no piece: its two UTF-8 bytes; decoding joins them and drops the dummy prefix.
    assert pieces_of(high, "é") == ["\u2581", "<0xC3>", "<0xA9>"]
    assert high.decode(high.encode("é a"), skip_special=True) == "é a"
    assert high.decode(high.encode("é a")) == "<s> é a"  # the dummy prefix stays after a BOS, as in HF
    assert high.encode("a") == [1] + high.encode("a", add_special=False)  # add_bos: llama's default
    no_prefix = load_tokenizer(write_vocab(tmp_path / "n.gguf", flags={"add_space_prefix": False}, **vocab(-0.5)))
    assert pieces_of(no_prefix, "abc") == ["a", "bc"]
    assert no_prefix.decode(no_prefix.encode(" abc", add_special=False)) == " abc"


def test_named_chat_templates_and_their_origin(tmp_path):
    v = byte_level(["ab"], ["a b"])
    path = write_vocab(tmp_path / "v.gguf", pre="qwen2", chat_template=[
        {"name": "default", "template": "{{ messages[0]['content'] }}"},
        {"name": "tool_use", "template": "tools:{{ tools | length }}\n{{ raise_exception('no') }}"},
    ], **v)
    tok = load_tokenizer(path)
    assert sorted(tok.chat_templates) == ["default", "tool_use"]
    msgs = [{"role": "user", "content": "hi"}]
    assert tok.render_chat(msgs) == "hi"
    with pytest.raises(ChatTemplateError,
                       match=r"v\.gguf: tokenizer\.chat_template\.tool_use: line 2: raise_exception: no"):
        tok.render_chat(msgs, tools=[{"type": "function"}])


@pytest.mark.parametrize("change, message", [
    (dict(pre="my-new-bpe"), r"tokenizer\.ggml\.pre 'my-new-bpe' is not a pre-tokenizer strata supports"),
    (dict(pre="kimi-k2"), r"tokenizer\.ggml\.pre 'kimi-k2' is not a pre-tokenizer strata supports"),
    (dict(model="t5"), r"tokenizer\.ggml\.model 't5' is not a vocabulary kind strata reads"),
    (dict(merges=[]), r"metadata key 'tokenizer\.ggml\.merges' is missing"),
    (dict(merges=["ab"]), r"tokenizer\.ggml\.merges entry 0 \('ab'\) is not two pieces"),
    (dict(merges=["x yz"]), r"tokenizer\.ggml\.merges do not fit tokenizer\.ggml\.tokens"),
    (dict(ids={"eos": 999}), r"metadata key 'tokenizer\.ggml\.eos_token_id' is 999, outside the vocabulary"),
    (dict(tokens_dup=True), r"tokenizer\.ggml\.tokens has 'a' twice"),
])
def test_bad_vocabularies_are_one_line_errors_naming_file_and_key(tmp_path, change, message):
    v = byte_level(["ab"], ["a b"])
    if change.pop("tokens_dup", False):
        v["tokens"][-1] = "a"
    v.update(change)
    v.setdefault("pre", "qwen2")
    if not v["merges"] and "merges" in change:
        v["merges"] = None
    with pytest.raises(TokenizerError, match=r"v\.gguf: " + message) as e:
        load_tokenizer(write_vocab(tmp_path / "v.gguf", **v))
    assert "\n" not in str(e.value)


def test_a_gguf_without_a_vocabulary_says_so(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "w.gguf", "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(TokenizerError, match=r"w\.gguf: metadata key 'tokenizer\.ggml\.model' is missing"):
        load_tokenizer(tmp_path / "w.gguf")


def test_a_converted_model_gguf_reads_its_vocabulary_without_its_weights():
    # The fixture models were converted by llama.cpp's convert_hf_to_gguf.py from the 258-token
    # byte-level tokenizer of ../shared/tools/llamacpp-oracle/tok.py, where "hello" is 256, 257, 78.
    from strata.runtime.text.gguf_header import read_gguf_metadata

    path = FIXTURES / "qwen2-q8_0.gguf"
    assert read_gguf_metadata(path).tensor_count > 0
    tok = load_tokenizer(path)
    assert tok.encode("hello") == [256, 257, 78]
    assert tok.decode(tok.encode("hello wörld ✅")) == "hello wörld ✅"
    assert tok.end_of_generation_ids == {tok.token_to_id("<|endoftext|>")}
