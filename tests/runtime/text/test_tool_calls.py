"""Tool calls read from a reply in the template's format: the same pieces streamed (at every cut,
markers split anywhere) as whole; a call that does not parse is the text it was, never a call."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from strata.runtime.text.tool_calls import (
    HERMES,
    LLAMA3_JSON,
    Call,
    Content,
    ToolCallParser,
    join_content,
    parse_tool_calls,
    tool_call_format,
)

ROOT = Path(__file__).resolve().parents[3]
TEMPLATES = ROOT.parent / "shared" / "refs" / "tokenizers" / "templates"
NAMES = {"get_weather", "add"}


def _streamed(text: str, fmt, cuts: list[int], names=NAMES):
    parser = ToolCallParser(fmt, names)
    pieces, at = [], 0
    for cut in [*cuts, len(text)]:
        pieces += parser.feed(text[at:cut])
        at = cut
    return join_content(pieces + parser.finish())


def _every_split_agrees(text: str, fmt, names=NAMES):
    whole = parse_tool_calls(text, fmt, names)
    for cut in range(len(text) + 1):
        assert _streamed(text, fmt, [cut], names) == whole, cut
    rng = random.Random(len(text))
    for _ in range(30):
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), 6)))
        assert _streamed(text, fmt, cuts, names) == whole, cuts
    # a character at a time, as a tokenizer that splits every marker
    assert _streamed(text, fmt, list(range(1, len(text)))) == whole
    return whole


def test_the_format_comes_from_the_template_text():
    assert tool_call_format("{{ '<tool_call>\\n{\"name\": ' }}...{{ '\\\"arguments\\\": ' }}</tool_call>") == HERMES
    assert tool_call_format("{%- for m in messages %}{{ m.content }}{% endfor %}") is None
    assert tool_call_format("""{{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}""") == LLAMA3_JSON
    shipped = (ROOT / "examples" / "templates" / "chatml-tools.jinja").read_text()
    assert tool_call_format(shipped) == HERMES


@pytest.mark.skipif(not TEMPLATES.is_dir(), reason="no ../shared/refs/tokenizers/templates beside the checkout")
def test_the_real_templates_formats():
    assert tool_call_format((TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()) == HERMES
    assert tool_call_format((TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()) == LLAMA3_JSON


def test_hermes_calls_with_text_before_and_between():
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2]}}\n'
            '</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": {"c": "}"}}}\n</tool_call>\n')
    got = _every_split_agrees(text, HERMES)
    assert got == [Content("Let me check.\n"),
                   Call("get_weather", json.dumps({"city": "Zürich", "days": [1, 2]}, ensure_ascii=False)),
                   Call("add", json.dumps({"a": 1, "b": {"c": "}"}}))]
    for call in got[1:]:
        json.loads(call.arguments)


def test_plain_text_is_content_unchanged_even_with_marker_like_pieces():
    for text in ("Hello there", "a < b and <tool is not a call", "ends with <tool_ca", "", "  \n"):
        assert _every_split_agrees(text, HERMES) == ([Content(text)] if text else [])


@pytest.mark.parametrize("broken", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call>',  # not JSON
    '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>',                # not a tool of the request
    '<tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>',              # arguments not an object
    '<tool_call>\n{"name": "add", "arguments": {"a": 1',                            # cut off (max_tokens)
    '<tool_call>\n["add"]\n</tool_call>',
])
def test_a_call_that_does_not_parse_is_its_text(broken):
    text = "Sure: " + broken
    assert _every_split_agrees(text, HERMES) == [Content(text)]


def test_a_good_call_beside_a_broken_one_keeps_the_good_one():
    good = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    bad = '<tool_call>\n{"name": "add", "arguments": {"a": }\n</tool_call>'
    assert _every_split_agrees(good + "\n" + bad, HERMES) == [Call("add", '{"a": 1}'), Content(bad)]


def test_an_unclosed_last_call_that_parses_is_a_call():
    assert _every_split_agrees('<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n', HERMES) == [Call("add", '{"a": 2}')]


def test_llama3_json_calls():
    one = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    assert _every_split_agrees(one, LLAMA3_JSON) == [Call("get_weather", '{"city": "Oslo"}')]
    assert _every_split_agrees("<|python_tag|>" + one, LLAMA3_JSON) == [Call("get_weather", '{"city": "Oslo"}')]
    two = one + '; {"name": "add", "parameters": {"a": 1, "b": 2}}'
    assert _every_split_agrees(two, LLAMA3_JSON) == [Call("get_weather", '{"city": "Oslo"}'),
                                                     Call("add", '{"a": 1, "b": 2}')]
    for text in ("The weather is fine.", '{"name": "get_weather", "parameters": {"city": "Os',
                 '{"name": "nope", "parameters": {}}', "{not json} at all", one + " and some text"):
        assert _every_split_agrees(text, LLAMA3_JSON) == [Content(text)]


def test_arguments_as_a_json_text_and_missing_arguments():
    text = '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1}"}\n</tool_call>'
    assert parse_tool_calls(text, HERMES, NAMES) == [Call("add", '{"a": 1}')]
    assert parse_tool_calls('<tool_call>{"name": "add"}</tool_call>', HERMES, NAMES) == [Call("add", "{}")]
