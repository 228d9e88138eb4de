"""Tools, tool_choice and reasoning on /v1/chat/completions through the official `openai` client.

A scripted engine (the server's own, in this process, on a free loopback port) answers with a
chosen reply a few characters a token, so every marker is split across tokens: a call comes back
as `tool_calls` whose streamed fragments join to the unstreamed JSON, a broken call comes back
as the text it was, reasoning goes to `reasoning_content`. Bad fields are one 400 each, and the
server goes on serving.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest

from serve_support import free_port
from strata.models.default_vocab import DATA_DIR
from strata.runtime.serve.batch_engine import DoneEvent, RequestLimits, TextEvent
from strata.runtime.text import ChatTemplate, load_tokenizer

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")
from strata.runtime.serve.server import create_app  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ENFORCED = importlib.util.find_spec("llguidance") is not None
TOOLS_TEMPLATE = ROOT / "examples" / "templates" / "chatml-tools.jinja"
#: ChatML whose generation prompt closes the thinking when enable_thinking is false (as Qwen3's).
THINKING_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}")

BOOK = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table",
    "parameters": {"type": "object", "required": ["city", "day", "guests", "vegan"], "properties": {
        "city": {"type": "string"}, "day": {"type": "string", "enum": ["sat", "sun"]},
        "guests": {"type": "integer", "minimum": 1, "maximum": 12}, "vegan": {"type": "boolean"}}}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ARGS = {"city": "Zürich", "day": "sat", "guests": 4, "vegan": True}
CALL = '<tool_call>\n{"name": "book_table", "arguments": ' + json.dumps(ARGS, ensure_ascii=False) + '}\n</tool_call>'
ASK = [{"role": "user", "content": "Book a table for 4 in Zürich on Saturday, vegan."}]


class ScriptedEngine:
    """What the server needs of a `ServeEngine`, answering every request with `reply`, 3 characters a token."""

    def __init__(self, template: str | ChatTemplate):
        self.tokenizer = load_tokenizer(DATA_DIR)
        self.tokenizer.use_chat_template(template if isinstance(template, ChatTemplate) else
                                         ChatTemplate(template, origin="the test's template"))
        self.limits = RequestLimits(self.tokenizer, self.tokenizer.vocab_size, 4096, 4096)
        self.observer, self.draining, self.in_flight = None, False, 0
        self.reply, self.prompts, self.constraints = "", [], []

    def stalled(self, timeout):
        return None

    def submit(self, prompt, max_tokens, *, sampling, stop, emit, logprobs, request_id, constraint=None):
        self.prompts.append(self.tokenizer.decode(prompt))
        self.constraints.append(constraint)
        handle = SimpleNamespace(prompt=prompt, finish_reason=None, completion_tokens=0, request_id=request_id)
        for at in range(0, len(self.reply), 3):
            emit(TextEvent(self.reply[at:at + 3], [0]))
            handle.completion_tokens += 1
        handle.finish_reason = "stop"
        emit(DoneEvent("stop"))
        return handle

    def cancel(self, handle):
        pass


def _served_with(template: Path | str):
    """(engine, client, server, thread): a server on a free port over a scripted engine with `template`
    (a file, or a template's text)."""
    engine = ScriptedEngine(ChatTemplate.from_file(template) if isinstance(template, Path) else template)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine, "scripted"), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=30)
    return engine, client, server, thread


@pytest.fixture(scope="module")
def served():
    """({name: engine}, {name: openai client}) of servers over scripted engines: the ChatML tools
    template, a thinking template, and a plain one with neither tools nor thinking."""
    templates = {"tools": TOOLS_TEMPLATE, "thinking": THINKING_TEMPLATE,
                 "plain": "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}"}
    engines, clients, running = {}, {}, []
    try:
        for name, template in templates.items():
            engine, client, server, thread = _served_with(template)
            engines[name], clients[name] = engine, client
            running.append((server, thread))
        yield engines, clients
    finally:
        for server, thread in running:
            server.should_exit = True
            thread.join(timeout=10)


def _ask(client, stream=False, **fields):
    return client.chat.completions.create(model="scripted", messages=fields.pop("messages", ASK), stream=stream,
                                          **fields)


def _joined(chunks):
    """(content, reasoning, calls [(id, name, arguments)], finish_reason) of a stream."""
    content, reasoning, calls, reasons = "", "", {}, []
    for c in chunks:
        for choice in c.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or ():
                if call.id is not None:  # the first delta of a call: its id, type and name
                    assert call.index not in calls and call.type == "function" and call.function.name
                    calls[call.index] = [call.id, call.function.name, call.function.arguments or ""]
                else:
                    calls[call.index][2] += call.function.arguments or ""
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    assert len(reasons) == 1
    return content, reasoning, [tuple(calls[i]) for i in sorted(calls)], reasons[0]


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "book_table"}}])
def test_a_call_comes_back_as_tool_calls_streamed_or_not(served, choice):
    if choice != "auto" and not ENFORCED:
        pytest.skip("no llguidance (the `grammar` extra): a forced tool_choice needs its grammar")
    engines, clients = served
    engines["tools"].reply = "Booking it now.\n" + CALL + "\n"
    whole = _ask(clients["tools"], tools=[WEATHER, BOOK], tool_choice=choice)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.content == "Booking it now.\n"
    (call,) = message.tool_calls
    assert call.type == "function" and call.function.name == "book_table" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == ARGS
    content, reasoning, calls, reason = _joined(_ask(clients["tools"], stream=True, tools=[WEATHER, BOOK],
                                                     tool_choice=choice))
    assert (content, reasoning, reason) == (message.content, "", "tool_calls")
    assert [(name, args) for _, name, args in calls] == [("book_table", call.function.arguments)]
    if choice != "auto":  # the grammar that forces the call reaches the engine
        assert engines["tools"].constraints[-1] is not None
    # the tools reached the template, in its system message
    assert '"name": "book_table"' in engines["tools"].prompts[-1] and "<tools>" in engines["tools"].prompts[-1]


def test_several_calls_and_the_history_goes_back_through_the_template(served):
    engines, clients = served
    weather = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    engines["tools"].reply = weather + "\n" + CALL
    whole = _ask(clients["tools"], tools=[WEATHER, BOOK])
    calls = whole.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "book_table"]
    assert whole.choices[0].message.content is None
    _, _, streamed, _ = _joined(_ask(clients["tools"], stream=True, tools=[WEATHER, BOOK]))
    assert [args for _, _, args in streamed] == [c.function.arguments for c in calls]
    history = ASK + [whole.choices[0].message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": f"result of {c.function.name}"} for c in calls]
    engines["tools"].reply = "Done: booked, and it is cold in Oslo."
    reply = _ask(clients["tools"], messages=history, tools=[WEATHER, BOOK])
    assert reply.choices[0].message.content == engines["tools"].reply and reply.choices[0].finish_reason == "stop"
    prompt = engines["tools"].prompts[-1]
    assert weather in prompt and CALL in prompt  # the calls, as the model wrote them
    assert ("<|im_start|>user\n<tool_response>\nresult of get_weather\n</tool_response>\n<tool_response>\n"
            "result of book_table\n</tool_response><|im_end|>\n") in prompt


@pytest.mark.parametrize("broken", [
    '<tool_call>\n{"name": "book_table", "arguments": {"city": "Zü',      # cut off
    '<tool_call>\n{"name": "drop_tables", "arguments": {}}\n</tool_call>',  # not one of the tools
    '<tool_call>\n{name: book_table}\n</tool_call>',                       # not JSON
])
def test_a_broken_call_in_auto_is_plain_text(served, broken):
    engines, clients = served
    engines["tools"].reply = "Let me see. " + broken
    whole = _ask(clients["tools"], tools=[WEATHER, BOOK])
    assert whole.choices[0].message.content == engines["tools"].reply and not whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "stop"
    assert _joined(_ask(clients["tools"], stream=True, tools=[WEATHER, BOOK])) == (engines["tools"].reply, "", [], "stop")


def test_tool_choice_none_reads_no_calls(served):
    engines, clients = served
    engines["tools"].reply = CALL
    whole = _ask(clients["tools"], tools=[BOOK], tool_choice="none")
    assert whole.choices[0].message.content == CALL and whole.choices[0].finish_reason == "stop"
    assert "<tools>" in engines["tools"].prompts[-1]  # as vLLM: the template still sees the tools


def test_reasoning_goes_to_reasoning_content(served):
    engines, clients = served
    engines["thinking"].reply = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello!"
    whole = _ask(clients["thinking"])
    message = whole.choices[0].message
    assert message.content == "Hello!" and message.model_extra["reasoning_content"] == "The user greets me.\nI greet back."
    assert _joined(_ask(clients["thinking"], stream=True)) == ("Hello!", message.model_extra["reasoning_content"],
                                                                [], "stop")
    # enable_thinking through chat_template_kwargs (vLLM's field) reaches the template
    _ask(clients["thinking"], extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert engines["thinking"].prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # llama-server's reasoning_format none: the thinking stays in the content
    raw = _ask(clients["thinking"], extra_body={"reasoning_format": "none"}).choices[0].message
    assert raw.content == engines["thinking"].reply and "reasoning_content" not in (raw.model_extra or {})
    # a template without think markers: nothing is split
    engines["plain"].reply = engines["thinking"].reply
    plain = _ask(clients["plain"]).choices[0].message
    assert plain.content == engines["thinking"].reply and "reasoning_content" not in (plain.model_extra or {})


BAD = [
    ({"tools": {"type": "function"}}, "'tools' must be a list"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [WEATHER, WEATHER]}, "given twice"),
    ({"tools": [BOOK], "tool_choice": "sometimes"}, "'tool_choice' must be one of"),
    ({"tools": [BOOK], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "not in 'tools'"),
    ({"tool_choice": "required"}, "needs 'tools'"),
    ({"chat_template_kwargs": {"messages": []}}, "cannot set 'messages'"),
    ({"chat_template_kwargs": [1]}, "'chat_template_kwargs' must be an object"),
    ({"reasoning_format": "weird"}, "'reasoning_format'"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]}, "arguments is not valid JSON"),
]


@pytest.mark.parametrize("fields,message", BAD)
def test_bad_fields_are_one_400_and_the_server_goes_on(served, fields, message):
    engines, clients = served
    base = clients["tools"].base_url
    body = {"model": "scripted", "messages": ASK, **fields}
    r = httpx2.post(f"{base}chat/completions", json=body, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in error["message"] and "\n" not in error["message"], error
    engines["tools"].reply = "fine"
    assert _ask(clients["tools"]).choices[0].message.content == "fine"


def test_tools_on_a_template_without_a_tool_format_name_the_flag(served):
    _, clients = served
    with pytest.raises(openai.BadRequestError, match="--chat-template"):
        _ask(clients["plain"], tools=[BOOK])


REFS = ROOT.parent / "shared" / "refs" / "tokenizers" / "templates"
needs_refs = pytest.mark.skipif(not REFS.is_dir(), reason="no ../shared/refs/tokenizers/templates beside the checkout")


@needs_refs
def test_qwen3_thinks_then_calls():
    engine, client, server, thread = _served_with(REFS / "Qwen-Qwen3-0.6B.jinja")
    try:
        engine.reply = "<think>\nThey want a table; book_table fits.\n</think>\n\n" + CALL
        message = _ask(client, tools=[WEATHER, BOOK]).choices[0].message
        assert message.model_extra["reasoning_content"] == "They want a table; book_table fits."
        assert message.content is None and json.loads(message.tool_calls[0].function.arguments) == ARGS
        content, reasoning, calls, reason = _joined(_ask(client, stream=True, tools=[WEATHER, BOOK]))
        assert (content, reasoning, reason) == ("", message.model_extra["reasoning_content"], "tool_calls")
        assert [args for _, _, args in calls] == [message.tool_calls[0].function.arguments]
        _ask(client, tools=[BOOK], extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        assert engine.prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@needs_refs
def test_llama31_json_calls():
    engine, client, server, thread = _served_with(REFS / "meta-llama-Llama-3.1-8B-Instruct.jinja")
    try:
        engine.reply = '{"name": "book_table", "parameters": ' + json.dumps(ARGS) + "}"
        message = _ask(client, tools=[WEATHER, BOOK]).choices[0].message
        assert message.content is None and message.tool_calls[0].function.name == "book_table"
        assert json.loads(message.tool_calls[0].function.arguments) == ARGS
        _, _, calls, reason = _joined(_ask(client, stream=True, tools=[WEATHER, BOOK]))
        assert reason == "tool_calls" and [a for _, _, a in calls] == [message.tool_calls[0].function.arguments]
        assert '"name": "book_table"' in engine.prompts[-1]  # the tools, in the first user message
        engine.reply = "Sure, which day?"
        assert _ask(client, tools=[BOOK]).choices[0].message.content == "Sure, which day?"
        engine.reply = '{"name": "book_table", "parameters": {"day": '  # cut off: text
        assert _ask(client, tools=[BOOK]).choices[0].message.content == engine.reply
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_each_choice_of_n_reads_its_own_calls(served):
    engines, clients = served
    engines["tools"].reply = "Sure.\n" + CALL
    whole = _ask(clients["tools"], tools=[BOOK], n=2)
    assert [json.loads(c.message.tool_calls[0].function.arguments) for c in whole.choices] == [ARGS, ARGS]
    per_choice: dict[int, list] = {0: [], 1: []}
    for chunk in _ask(clients["tools"], stream=True, tools=[BOOK], n=2):
        for choice in chunk.choices:
            per_choice[choice.index].append(SimpleNamespace(choices=[choice]))
    for chunks in per_choice.values():
        content, _, calls, reason = _joined(chunks)
        assert (content, reason) == ("Sure.\n", "tool_calls")
        assert [json.loads(args) for _, _, args in calls] == [ARGS]
