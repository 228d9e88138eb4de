"""Streaming detokenization: the pushed pieces join to the one-shot decode, characters arrive whole.

Measured on both reference vocabularies (SentencePiece with byte fallback, byte-level BPE): every
reference case, a few hundred random texts of mixed scripts cut into random chunks of ids, and
a stream that continues a prompt.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from strata.runtime.text import load_tokenizer

REFS = Path(__file__).resolve().parents[3].parent / "shared" / "refs" / "tokenizers"
pytestmark = pytest.mark.skipif(not REFS.is_dir(), reason="no ../shared/refs/tokenizers beside the checkout")

VOCABS = ("llama-spm", "qwen2")
# ASCII, accented Latin, Cyrillic, CJK, Khmer, emoji (with a ZWJ sequence and a variation
# selector), whitespace runs: characters of 1 to 4 UTF-8 bytes that vocabularies split over tokens.
POOL = list("abc XYZ 09.,!?'") + list("éàüñçÄÖ") + list("нещо") + list("我想在工作東京日本語") + \
    list("កាន់តែ") + ["🦙", "🚀", "😶\u200d🌫\ufe0f", "✅", "👍🏽"] + ["\n", "\t", "  ", "\r\n"] \
    + ["\ua670", "\U0001d518", "\U0001fae0"]  # rarer: split over tokens even by Qwen2's 151k vocabulary


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load_tokenizer(REFS / "gguf" / f"ggml-vocab-{name}.gguf") for name in VOCABS}


def stream(detok, ids, rng=None) -> list[str]:
    pieces, i = [], 0
    while i < len(ids):
        n = 1 if rng is None else rng.choice([1, 1, 1, 2, 3])
        pieces.append(detok.push(ids[i:i + n] if n > 1 else ids[i]))
        i += n
    pieces.append(detok.flush())
    return pieces


def reference_texts() -> list[str]:
    return (REFS / "gguf" / "ggml-vocab-qwen2.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")


@pytest.mark.parametrize("name", VOCABS)
def test_pieces_join_to_the_one_shot_decode(tokenizers, name):
    tok = tokenizers[name]
    rng = random.Random(1234)
    texts = reference_texts() + ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    for text in texts:
        for add_special, skip_special in ((False, False), (True, True), (True, False)):
            ids = tok.encode(text, add_special=add_special)
            pieces = stream(tok.detokenizer(skip_special=skip_special), ids, rng)
            assert "".join(pieces) == tok.decode(ids, skip_special=skip_special), (text, ids)
            assert not any("\ufffd" in p for p in pieces), (text, pieces)


@pytest.mark.parametrize("name", VOCABS)
def test_a_character_split_over_tokens_arrives_whole(tokenizers, name):
    tok = tokenizers[name]
    seen = 0
    for ch in ["🦙", "😶", "東", "é", "ក", "👍", "\ua670", "\U0001d518", "\U0001fae0"]:
        ids = tok.encode(f"a{ch}", add_special=False)
        per_id = [tok.decode([i]) for i in ids]
        split = [k for k, piece in enumerate(per_id) if "\ufffd" in piece]  # ids holding part of a character
        if not split:
            continue
        seen += 1
        detok = tok.detokenizer()
        out = [detok.push(i) for i in ids]
        assert all(out[k] == "" for k in split[:-1]), (ch, out)  # nothing until the character is whole
        assert ch in out[split[-1]], (ch, out)
        assert "".join(out) == tok.decode(ids)
    assert seen >= 2  # each vocabulary spells some of these over several tokens


@pytest.mark.parametrize("name", VOCABS)
def test_a_stream_continues_its_context(tokenizers, name):
    tok = tokenizers[name]
    full = tok.encode("Once upon a time, 東京 was far", add_special=False)
    for cut in range(1, len(full)):
        context, generated = full[:cut], full[cut:]
        joined = "".join(stream(tok.detokenizer(context=context), generated))
        assert joined == tok.decode(full)[len(tok.decode(context)):]
        assert "".join(stream(tok.detokenizer(), generated)) == tok.decode(generated)
    # SentencePiece drops the leading space of a decode; after its context the space stays.
    if name == "llama-spm":
        cut = next(k for k in range(len(full)) if tok.decode(full[:k]) == "Once upon a")
        assert "".join(stream(tok.detokenizer(context=full[:cut]), full[cut:cut + 1])) == " time"
        assert tok.decode(full[cut:cut + 1]) == "time"


def test_flush_gives_an_unfinished_character_as_the_decode_does(tokenizers):
    tok = tokenizers["llama-spm"]
    ids = tok.encode("🦙", add_special=False)
    partial = ids[:-1]
    assert [tok.id_to_token(i) for i in ids[1:]] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"]  # no piece: bytes
    detok = tok.detokenizer()
    assert [detok.push(i) for i in partial] == [""] * len(partial)
    assert detok.flush() == tok.decode(partial)
    assert detok.ids == partial
    again = tok.detokenizer()
    assert again.push(np.array(ids)) + again.flush() == tok.decode(ids)  # numpy ids, as a sampler gives them


@pytest.mark.parametrize("name", VOCABS)
def test_random_ids_join_to_the_decode_wherever_their_bytes_are_utf8(tokenizers, name):
    tok = tokenizers[name]
    rng = random.Random(99)
    valid = 0
    for _ in range(400):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 12))]
        pieces = stream(tok.detokenizer(skip_special=True), ids, rng)  # never raises, whatever the ids
        want = tok.decode(ids, skip_special=True)
        if "\ufffd" not in want:
            valid += 1
            assert "".join(pieces) == want, ids
    assert valid > 100
