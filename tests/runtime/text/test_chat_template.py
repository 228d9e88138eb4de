"""Chat templates: byte-equal to transformers' apply_chat_template, and one-line errors with the line.

The templates are the real ones of ../shared/refs/tokenizers (Qwen3-0.6B, Llama-3.1-8B-Instruct,
and the qwen2 vocabulary's own, in its HF directory and its GGUF); transformers' tokenizer is
built from the same HF directory, with no hub.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from strata.runtime.text import ChatTemplate, ChatTemplateError, load_tokenizer

REFS = Path(__file__).resolve().parents[3].parent / "shared" / "refs" / "tokenizers"
needs_refs = pytest.mark.skipif(not REFS.is_dir(), reason="no ../shared/refs/tokenizers beside the checkout")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather <b>now</b> & 'soon' in a city (e.g. Zürich, 東京)",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    "multi-turn": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "A joke, please ✅ 日本語"},
    ],
    "reasoning": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet back", "tool_calls": None},
        {"role": "user", "content": "Again"},
    ],
    "tools": [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
    ],
}
FLAGS = [{}, {"enable_thinking": False}, {"enable_thinking": True}]


@pytest.fixture(scope="module")
def gguf_template():
    return load_tokenizer(REFS / "gguf" / "ggml-vocab-qwen2.gguf").chat_template


@pytest.fixture(scope="module")
def pair():
    """(strata's tokenizer, transformers' tokenizer), both from hf/qwen2."""
    import transformers  # imported here: it takes seconds

    directory = REFS / "hf" / "qwen2"
    return load_tokenizer(directory), transformers.AutoTokenizer.from_pretrained(str(directory))


def _templates() -> list[str]:
    if not REFS.is_dir():
        return []
    return sorted(p.name for p in (REFS / "templates").glob("*.jinja")) + ["hf/qwen2", "gguf/qwen2"]


@needs_refs
@pytest.mark.parametrize("template", _templates())
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_rendered_text_equals_transformers(pair, gguf_template, template, conversation):
    ours, theirs = pair
    if template == "hf/qwen2":
        chosen, source = ours.chat_template, None
    elif template == "gguf/qwen2":
        chosen, source = gguf_template, gguf_template.source
    else:
        chosen = ChatTemplate.from_file(REFS / "templates" / template)
        source = chosen.source
    messages = CONVERSATIONS[conversation]
    tools = TOOLS if conversation == "tools" else None
    for add_generation_prompt in (False, True):
        for flags in FLAGS:
            want = theirs.apply_chat_template(messages, tools=tools, chat_template=source, tokenize=False,
                                              add_generation_prompt=add_generation_prompt, **flags)
            got = ours.render_chat(messages, tools=tools, template=chosen,
                                   add_generation_prompt=add_generation_prompt, **flags)
            assert got == want, (add_generation_prompt, flags)
            ids = theirs.apply_chat_template(messages, tools=tools, chat_template=source, tokenize=True,
                                             return_dict=False, add_generation_prompt=add_generation_prompt, **flags)
            assert ours.encode(got, add_special=False) == list(ids)


@needs_refs
def test_continue_final_message_and_strftime_now_as_transformers(pair):
    ours, theirs = pair
    qwen3 = ChatTemplate.from_file(REFS / "templates" / "Qwen-Qwen3-0.6B.jinja")
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]
    want = theirs.apply_chat_template(messages, chat_template=qwen3.source, tokenize=False, continue_final_message=True)
    assert ours.render_chat(messages, template=qwen3, continue_final_message=True) == want
    assert want.endswith("1, 2, ")
    dated = "{{ strftime_now('%d %b %Y') }}|{{ bos_token }}|{{ messages | tojson(indent=1) }}"
    for _ in range(2):  # once more if the day turned between the renders
        day = datetime.now().strftime("%d %b %Y")
        got = ours.render_chat(messages, template=dated)
        want = theirs.apply_chat_template(messages, chat_template=dated, tokenize=False)
        if datetime.now().strftime("%d %b %Y") == day:
            break
    assert got == want
    assert got.startswith(day + "|<|endoftext|>|[\n {")


@pytest.mark.parametrize("source, message", [
    ("ok\n{% for m in messages %}\n{{ m.content }", r"t\.jinja: line 3: unexpected '}'"),
    ("{% if messages %}\n{{ 1 }}", r"t\.jinja: line 2: Unexpected end of template"),
    ("a\n{% if messages[0].role != 'system' %}{{ raise_exception('System message first!') }}{% endif %}",
     r"t\.jinja: line 2: raise_exception: System message first!$"),
    ("a\nb\n{{ messages[0].content.missing.deeper }}", r"t\.jinja: line 3: 'str object' has no attribute 'missing'"),
    ("{{ nothing_here() }}", r"t\.jinja: line 1: 'nothing_here' is undefined"),
    ("{{ 1 // 0 }}", r"t\.jinja: line 1: ZeroDivisionError: integer division or modulo by zero"),
    ("{% set ns = namespace(__class__=1) %}", r"t\.jinja: line 1: a chat template cannot set the underscore"),
    ("{{ messages.append(1) }}", r"t\.jinja: line 1: .*unsafe"),
])
def test_template_errors_name_the_origin_and_the_line(source, message):
    with pytest.raises(ChatTemplateError, match=message) as e:
        ChatTemplate(source, origin="t.jinja").render([{"role": "user", "content": "hi"}])
    assert "\n" not in str(e.value)


def test_template_checks_and_bad_messages():
    with pytest.raises(ChatTemplateError, match=r"t\.jinja: line 1: "):
        ChatTemplate("{% endfor %}", origin="t.jinja").check()
    ChatTemplate("{{ messages }}", origin="t.jinja").check()
    plain = ChatTemplate("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}", origin="t.jinja")
    assert plain.render([{"role": "user", "content": "a", "name": None}]) == "user:a;"
    with pytest.raises(ChatTemplateError, match=r"no messages"):
        plain.render([])
    with pytest.raises(ChatTemplateError, match=r"a chat message must be a dict"):
        plain.render(["hello"])
    with pytest.raises(ChatTemplateError, match=r"cannot be used together"):
        plain.render([{"role": "user", "content": "a"}], add_generation_prompt=True, continue_final_message=True)
