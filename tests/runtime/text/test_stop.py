"""Stop strings in streamed text: the shown text ends before the stop string complete first,
however the stream is cut, and a tail that may start one is held back only while it still may."""

from __future__ import annotations

import random

import pytest

from strata.runtime.text import StopStrings, TextInputError, check_utf8


def run(stops, pieces):
    s = StopStrings(stops)
    shown = []
    for p in pieces:
        shown.append(s.push(p))
        if s.stopped:
            break
    else:
        shown.append(s.flush())
    return shown, s


def test_a_stop_string_split_over_pieces_is_found_and_not_shown():
    shown, s = run(["###", "\nUser:"], ["Hello #", "#", "# more"])
    assert shown == ["Hello ", "", ""] and s.matched == "###"
    shown, s = run(["\nUser:"], list("Sure.\nUser: hi"))
    assert "".join(shown) == "Sure." and s.matched == "\nUser:"
    assert s.push("more") == "" and s.flush() == ""


def test_a_tail_is_held_only_while_it_can_grow_into_a_stop_string():
    s = StopStrings(["##"])
    assert s.push("a#") == "a"
    assert s.push("b") == "#b"
    assert s.push("c#") == "c"
    assert s.flush() == "#" and not s.stopped
    assert StopStrings([]).push("anything ##") == "anything ##"


def test_the_stop_string_complete_first_wins_however_the_text_is_cut():
    for pieces in (["xab", "cd"], ["xabcd"], list("xabcd")):
        shown, s = run(["abcd", "bc"], pieces)
        assert "".join(shown) == "xa" and s.matched == "bc"
    shown, s = run(["ab", "zab"], ["zabc"])
    assert "".join(shown) == "" and s.matched == "zab"  # ending together: the longer


def test_any_cut_of_the_stream_shows_the_text_before_the_first_stop():
    rng = random.Random(7)
    alphabet = "ab\n:#é日"
    for _ in range(2000):
        stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(1, 6))))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        hits = [(text.find(st) + len(st), text.find(st), st) for st in stops if st in text]
        shown, s = run(stops, pieces)
        if hits:
            _, at, first = min(hits)
            assert "".join(shown) == text[:at] and s.matched == first, (stops, pieces)
        else:
            assert "".join(shown) == text and not s.stopped, (stops, pieces)


def test_bad_stop_strings_and_bad_text():
    with pytest.raises(TextInputError, match="a stop string must be non-empty text"):
        StopStrings(["ok", ""])
    assert check_utf8(b"caf\xc3\xa9", "--prompt") == "café"
    with pytest.raises(TextInputError, match=r"^--prompt: invalid UTF-8 at byte 3$"):
        check_utf8(b"caf\xe9!", "--prompt")
    argv_like = b"ab\xffcd".decode("utf-8", "surrogateescape")  # how Python hands over such an argument
    with pytest.raises(TextInputError, match=r"^--prompt: invalid UTF-8 at byte 2$"):
        check_utf8(argv_like, "--prompt")
    with pytest.raises(TextInputError, match=r"^the text to encode: invalid UTF-8 at byte 4$"):
        from strata.runtime.text.tokenizer import Tokenizer

        Tokenizer.encode(None, "日a\ud800")  # checked before the tokenizer is touched
