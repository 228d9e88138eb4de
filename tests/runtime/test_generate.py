"""The one generation loop and the text stream over it, on a scripted program (its logits pick a
given id at each position): stop ids, the caller's stop, teacher forcing, sampling parameters
handed to every step, and text chunks that join to the decode and end before a stop string."""

from __future__ import annotations

import numpy as np
import pytest

from strata.models.default_vocab import DATA_DIR
from strata.runtime.engine import Engine
from strata.runtime.generate import GenerationLoop, generate
from strata.runtime.sampling import SamplingParams
from strata.runtime.text import load_tokenizer
from strata.semantics.programs import LogitsStep


class Scripted:
    """A program whose step at position p chooses `script[p]` (its logits peak there)."""

    runtime, name = "scripted", "scripted"

    def __init__(self, script, vocab=512, n_ctx=64):
        self.script, self.vocab, self.n_ctx = list(script), vocab, n_ctx
        self.calls: list[tuple] = []

    def _step(self, pos):
        logits = np.zeros(self.vocab, np.float32)
        logits[self.script[pos]] = 10.0
        return LogitsStep(logits)

    def prefill(self, tokens, start, sampling=None):
        self.calls.append(("prefill", list(tokens), start, sampling))
        return self._step(start + len(tokens))

    def decode(self, token, pos, sampling=None):
        self.calls.append(("decode", token, pos, sampling))
        return self._step(pos + 1)

    def reset(self):
        pass

    def close(self):
        pass


PROMPT = [5, 6, 7]


def test_the_loop_feeds_each_choice_back_and_stops_at_a_stop_id():
    program = Scripted([0] * 3 + [11, 12, 13, 14, 15])
    out = generate(program, PROMPT, 10, stop_ids={14})
    assert out.ids == [11, 12, 13, 14] and out.finish_reason == "stop" and out.stopped_by == 14
    assert [c[:3] for c in program.calls] == [("prefill", PROMPT, 0), ("decode", 11, 3), ("decode", 12, 4),
                                              ("decode", 13, 5)]
    assert generate(Scripted([0] * 3 + [1, 2, 3]), PROMPT, 3).finish_reason == "length"


def test_the_caller_stops_the_loop_without_another_step():
    program = Scripted([0] * 3 + [11, 12, 13, 14])
    loop = GenerationLoop(program, PROMPT, 10)
    for token in loop:
        if token == 12:
            loop.stop("a stop string")
    assert loop.result.ids == [11, 12] and loop.result.stopped_by == "a stop string"
    assert len(program.calls) == 2  # the prefill and one decode: nothing after the stop


def test_forced_tokens_are_fed_and_the_choices_kept():
    program = Scripted([0] * 3 + [11, 12, 13])
    out = generate(program, PROMPT, 3, forced=[40, 41], keep_logits=True)
    assert out.ids == [11, 12, 13] and [c[1] for c in program.calls[1:]] == [40, 41]
    assert out.logits.shape == (3, 512) and out.logits[1].argmax() == 12


def test_sampling_parameters_reach_every_step_with_a_seed():
    program = Scripted([0] * 3 + [11, 12, 13])
    loop = GenerationLoop(program, PROMPT, 3, sampling=SamplingParams(temperature=0.5))
    list(loop)
    used = loop.sampling_used
    assert used.seed is not None and all(c[3] is used for c in program.calls)
    greedy = Scripted([0] * 3 + [11, 12, 13])
    generate(greedy, PROMPT, 3, sampling=SamplingParams(temperature=0.0, seed=1))
    assert all(c[3] is None for c in greedy.calls)  # greedy parameters: the program's argmax, as before


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DATA_DIR)


def test_text_chunks_join_to_the_decode_and_end_at_the_end_id(tok):
    reply = tok.encode("Hello world! How are you today? 日本 🙂", add_special=False)
    end = tok.token_to_id("<|im_end|>")
    program = Scripted([0] * 3 + reply + [end, 9, 9, 9])
    stream = Engine(program, tok).stream(PROMPT, max_new_tokens=40)
    chunks = list(stream)
    assert "".join(c.text for c in chunks) == stream.text == "Hello world! How are you today? 日本 🙂"
    assert [i for c in chunks for i in c.ids] == reply + [end]  # every id once, the end id last
    assert all("\ufffd" not in c.text for c in chunks)  # a character split over tokens comes whole
    assert stream.generation.finish_reason == "stop" and stream.generation.stopped_by == end


def test_a_stop_string_ends_the_text_before_it(tok):
    reply = tok.encode("The answer is 42.\n\nUser: and then?", add_special=False)
    program = Scripted([0] * 3 + reply + [9] * 10)
    stream = Engine(program, tok).stream(PROMPT, max_new_tokens=40, stop=["\nUser:", "never"])
    assert "".join(c.text for c in stream) == "The answer is 42.\n"
    assert stream.stop == "\nUser:" and stream.generation.finish_reason == "stop"
    assert len(stream.generation.ids) < len(reply)  # it stopped at the token that completed the stop string


def test_the_engine_encodes_text_and_messages(tok):
    program = Scripted([0] * 64)
    engine = Engine(program, tok)
    assert engine.encode("Hello") == tok.encode("Hello")
    chat = engine.encode([{"role": "user", "content": "Hello"}])
    assert tok.decode(chat) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert engine.encode("Hello", chat=True, system="Be brief.") == engine.encode(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}])
    from strata.runtime.request import RequestError

    with pytest.raises(RequestError, match="does not fit the context of 64"):
        engine.generate("Hello " * 70)
    with pytest.raises(RequestError, match="more than the model's vocabulary of 100"):
        Engine(Scripted([0], vocab=100), tok)
