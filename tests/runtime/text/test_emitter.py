"""The one text layer (`TextEmitter`): a reply's pieces join to the decode of its ids, a stop
string is never shown and ends the reply at the id that completes it, an end-of-generation id is
no text, and every id is handed back once, in order, with the piece it completes."""

from __future__ import annotations

import pytest

from strata.models.default_vocab import DATA_DIR
from strata.runtime.text import TextEmitter, end_of_generation_ids, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DATA_DIR)


def _emit(tok, ids, stop=(), end_ids=()):
    emitter = TextEmitter(tok, [], stop, end_ids)
    pieces = []
    for t in ids:
        piece = emitter.push(t)
        if piece is not None:
            pieces.append(piece)
        if emitter.stopped:
            break
    else:
        piece = emitter.finish()
        if piece is not None:
            pieces.append(piece)
    return pieces, emitter


def test_pieces_join_to_the_decode_and_hand_back_every_id(tok):
    ids = tok.encode("Once upon a time, there was a llama.")
    pieces, emitter = _emit(tok, ids)
    assert "".join(p.text for p in pieces) == tok.decode(ids, skip_special=True)
    assert [t for p in pieces for t in p.ids] == ids and not emitter.stopped and emitter.matched is None


def test_a_stop_string_is_not_shown_and_ends_the_reply(tok):
    ids = tok.encode("Once upon a time, there was a llama.")
    pieces, emitter = _emit(tok, ids, stop=["there"])
    assert "".join(p.text for p in pieces) == "Once upon a time, " and emitter.matched == "there"
    handed = [t for p in pieces for t in p.ids]
    assert handed == ids[:len(handed)] and len(handed) < len(ids)  # up to the id that completed it


def test_an_end_of_generation_id_is_no_text(tok):
    ends = end_of_generation_ids(tok, tok.vocab_size)
    assert ends and all(0 <= i < tok.vocab_size for i in ends)
    end = min(ends)
    ids = tok.encode("Hello") + [end]
    pieces, _ = _emit(tok, ids, end_ids=ends)
    assert "".join(p.text for p in pieces) == tok.decode(ids[:-1], skip_special=True)
    assert pieces[-1].ids[-1] == end
