"""Reasoning split at the template's think markers: streamed at every cut (a marker split anywhere)
as whole; markers taken from the template's text; none for a template without them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from strata.runtime.text.reasoning import ReasoningSplitter, ThinkMarkers, opens_thinking, split_reasoning, think_markers

TEMPLATES = Path(__file__).resolve().parents[4] / "shared" / "refs" / "tokenizers" / "templates"
THINK = ThinkMarkers("<think>", "</think>")


def _streamed(text: str, cuts: list[int], thinking: bool = False):
    split = ReasoningSplitter(THINK, thinking=thinking)
    reasoning = content = ""
    at = 0
    for cut in [*cuts, len(text)]:
        r, c = split.feed(text[at:cut])
        reasoning, content, at = reasoning + r, content + c, cut
    r, c = split.finish()
    return (reasoning + r if split.reasoned else None), content + c


def _agrees(text: str, thinking: bool = False):
    whole = split_reasoning(text, THINK, thinking=thinking)
    for cut in range(len(text) + 1):
        assert _streamed(text, [cut], thinking) == whole, cut
    assert _streamed(text, list(range(1, len(text))), thinking) == whole
    rng = random.Random(7)
    for _ in range(20):
        assert _streamed(text, sorted(rng.sample(range(len(text) + 1), min(5, len(text) + 1))), thinking) == whole
    return whole


def test_reasoning_and_answer():
    assert _agrees("<think>\nThe user greets. I greet back.\n</think>\n\nHello!") == \
        ("The user greets. I greet back.", "Hello!")
    assert _agrees("\n<think>a < b, and </thin is not the end</think>ok") == ("a < b, and </thin is not the end", "ok")


def test_no_thinking_is_all_answer():
    for text in ("Hello!", "  spaced  ", "<thinking is a word>", "", "The <think> tag mid-text stays"):
        assert _agrees(text) == (None, text)


def test_cut_off_while_thinking_is_all_reasoning():
    assert _agrees("<think>\nstill going  \n") == ("still going", "")


def test_a_prompt_that_opens_the_thinking():
    assert opens_thinking("<|im_start|>assistant\n<think>\n", THINK)
    assert not opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK)
    assert not opens_thinking("<|im_start|>assistant\n", THINK)
    assert _agrees("I weigh it.\n</think>\n\nYes.", thinking=True) == ("I weigh it.", "Yes.")


def test_markers_come_from_the_template():
    assert think_markers("{{ '<|im_start|>assistant\\n' }}") is None
    assert think_markers("{{ '<reasoning>' + r + '</reasoning>' }}") == ThinkMarkers("<reasoning>", "</reasoning>")


@pytest.mark.skipif(not TEMPLATES.is_dir(), reason="no ../shared/refs/tokenizers/templates beside the checkout")
def test_the_real_templates_markers():
    assert think_markers((TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()) == THINK
    assert think_markers((TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()) is None
