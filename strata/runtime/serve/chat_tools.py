"""A chat request's tools, tool choice, template variables and reasoning, read and checked, and the
prompt they render to.

    prompt = chat_prompt(body, tokenizer, messages)
    prompt.ids, prompt.plan            # the prompt's ids; how to read the reply (ChatPlan)
    prompt.constraint                  # what forces a tool call (tool_choice required or named), or None

Fields (OpenAI's, vLLM's and llama-server's):
* `tools`: [{"type": "function", "function": {"name", "description"?, "parameters"? (a JSON
  schema object), "strict"?}}], given to the template as transformers' `apply_chat_template(...,
  tools=...)` gives them.
* `tool_choice`: "auto" (the default with tools), "none" (the template still sees the tools; the
  reply is not read for calls, as vLLM does), "required", or {"type": "function", "function":
  {"name": N}} (N one of the tools). The last two are forced by a grammar (`tool_constraint`).
* `chat_template_kwargs`: the template's extra variables (`{"enable_thinking": false}`).
* `reasoning_format`: llama-server's; "none" leaves the thinking in `content`.
* In `messages`: an assistant's `tool_calls` (their `arguments` JSON text is given to the template
  as the object it holds, as vLLM does) and `tool` messages, which go back through the template.

The reply is read for calls in the format the chosen template teaches (`tool_calls.tool_call_format`);
a request with tools to a template that teaches none is refused, naming --chat-template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strata.errors import StrataError
from strata.runtime.text.reasoning import ThinkMarkers, opens_thinking, think_markers
from strata.runtime.text.tool_calls import ToolCallFormat, tool_call_format

class ChatFieldError(StrataError):
    """A chat field that cannot be used (`param`: which); `requests.parse_chat` answers it 400."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message, self.param = message, param


_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The template's own variables, which `chat_template_kwargs` cannot set.
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"})
TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ChatPlan:
    """How to read a chat reply: for tool calls (`tool_format`, None: not read for them) among
    `tool_names`, and for reasoning (`think`, None: not split; `thinking`: the prompt opened it)."""

    tool_format: ToolCallFormat | None = None
    tool_names: frozenset[str] = frozenset()
    tool_choice: str = "none"
    forced_name: str | None = None
    think: ThinkMarkers | None = None
    thinking: bool = False

    @property
    def reads_reply(self) -> bool:
        return self.tool_format is not None or self.think is not None


@dataclass(frozen=True)
class ChatPrompt:
    ids: list[int]
    plan: ChatPlan
    #: A `strata.runtime.constrain.ConstraintSpec` forcing the call, or None (see `tool_constraint`).
    constraint: Any = None


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def read_tools(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, str, str | None]:
    """(tools or None, tool_choice mode, the named function or None)."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ChatFieldError(f"'tools' must be a list of tools, got {_shown(tools)}", "tools")
        seen = set()
        for i, tool in enumerate(tools):
            name = _check_tool(tool, f"tools[{i}]")
            if name in seen:
                raise ChatFieldError(f"tools[{i}]: the function '{name}' is given twice", f"tools[{i}]")
            seen.add(name)
        tools = tools or None
    choice = body.get("tool_choice")
    names = {t["function"]["name"] for t in tools or ()}
    if choice is None:
        return tools, ("auto" if tools else "none"), None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise ChatFieldError(f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)} or a named function, got "
                                 f"{_shown(choice)}", "tool_choice")
        if choice != "none" and not tools:
            raise ChatFieldError(f"'tool_choice' '{choice}' needs 'tools'", "tool_choice")
        return tools, choice, None
    function = choice.get("function") if isinstance(choice, dict) else None
    if not (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(function, dict)
            and isinstance(function.get("name"), str)):
        raise ChatFieldError("'tool_choice' must be one of auto, none, required or "
                             "{\"type\": \"function\", \"function\": {\"name\": ...}}, got " + _shown(choice),
                             "tool_choice")
    if function["name"] not in names:
        raise ChatFieldError(f"'tool_choice' names the function '{function['name'][:64]}', which is not in 'tools'",
                             "tool_choice")
    return tools, "function", function["name"]


def _check_tool(tool: Any, where: str) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
        raise ChatFieldError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, "
                             f"got {_shown(tool)}", where)
    name = function.get("name")
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise ChatFieldError(f"{where}.function.name must be 1 to 64 letters, digits, '_', '.' or '-', "
                             f"got {_shown(name)}", f"{where}.function.name")
    if not isinstance(function.get("description", ""), str):
        raise ChatFieldError(f"{where}.function.description must be a string", f"{where}.function.description")
    params = function.get("parameters")
    if params is not None:
        what = f"{where}.function.parameters"
        if not isinstance(params, dict):
            raise ChatFieldError(f"{what} must be a JSON schema object, got {_shown(params)}", what)
        if params.get("type", "object") != "object":
            raise ChatFieldError(f"{what}: the arguments' schema must have type 'object', "
                                 f"got {_shown(params['type'])}", what)
        if not isinstance(params.get("properties", {}), dict):
            raise ChatFieldError(f"{what}.properties must be an object", what)
        required = params.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ChatFieldError(f"{what}.required must be a list of property names", what)
    return name


def read_template_kwargs(body: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ChatFieldError(f"'chat_template_kwargs' must be an object, got {_shown(kwargs)}", "chat_template_kwargs")
    bad = sorted(k for k in kwargs if k in _RESERVED or not k.isidentifier())
    if bad:
        raise ChatFieldError(f"'chat_template_kwargs' cannot set '{bad[0][:40]}'", "chat_template_kwargs")
    return dict(kwargs)


def messages_for_template(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the template sees them: an assistant's tool calls checked, their arguments
    (OpenAI's JSON text) the object they hold."""
    out = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if calls is None:
            out.append(m)
            continue
        where = f"messages[{i}].tool_calls"
        if m.get("role") != "assistant" or not isinstance(calls, list):
            raise ChatFieldError(f"{where}: only an assistant message has tool_calls, a list", where)
        shown = []
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ChatFieldError(f"{where}[{j}] must be {{\"type\": \"function\", \"function\": {{\"name\", "
                                     f"\"arguments\"}}}}", f"{where}[{j}]")
            args = function.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    raise ChatFieldError(f"{where}[{j}].function.arguments is not valid JSON",
                                         f"{where}[{j}]") from None
            shown.append({**call, "function": {**function, "arguments": args}})
        out.append({**m, "tool_calls": shown})
    return out


def chat_prompt(body: Mapping[str, Any], tokenizer: Any, messages: list[dict[str, Any]]) -> ChatPrompt:
    """The prompt's ids and how to read its reply (see the module's doc)."""
    from strata.runtime.text import check_utf8

    tools, choice, forced = read_tools(body)
    kwargs = read_template_kwargs(body)
    reasoning_format = body.get("reasoning_format")
    if reasoning_format not in (None, "none", "auto", "deepseek"):
        raise ChatFieldError(f"'reasoning_format' must be none, auto or deepseek, got {_shown(reasoning_format)}",
                             "reasoning_format")
    template = tokenizer.select_chat_template(tools=tools)
    fmt = tool_call_format(template.source) if tools else None
    if tools and fmt is None:
        raise ChatFieldError(f"the chat template ({template.origin}) has no tool-call format (neither <tool_call> "
                             "JSON nor Llama 3's JSON): start the server with --chat-template FILE, e.g. "
                             "examples/templates/chatml-tools.jinja", "tools")
    text = tokenizer.render_chat(messages_for_template(messages), add_generation_prompt=True, template=template,
                                 tools=tools, **kwargs)
    ids = tokenizer.encode(check_utf8(text, "the rendered prompt"), add_special=False)
    markers = think_markers(template.source) if reasoning_format != "none" else None
    plan = ChatPlan(tool_format=fmt if choice != "none" else None,
                    tool_names=frozenset(t["function"]["name"] for t in tools or ()), tool_choice=choice,
                    forced_name=forced, think=markers, thinking=markers is not None and opens_thinking(text, markers))
    return ChatPrompt(ids, plan, tool_constraint(plan, tools))


def tool_constraint(plan: ChatPlan, tools: list[dict[str, Any]] | None) -> Any:
    """The grammar that forces a call for tool_choice 'required' or a named function: the one place
    the request asks for it; None for 'auto' and 'none'. A schema the grammar library refuses (or
    no library installed) is a 400 naming 'tools'."""
    if plan.tool_format is None or plan.tool_choice not in ("required", "function"):
        return None
    from strata.runtime import constrain

    fmt = plan.tool_format
    choice = {"type": "function", "function": {"name": plan.forced_name}} if plan.forced_name else "required"
    try:
        spec = constrain.tool_call_constraint(tools, choice, open=fmt.open, close=fmt.close, args_key=fmt.args_key)
        constrain.grammar_of(spec)  # the library's own check: a bad schema is a 400 here
    except StrataError as e:
        raise ChatFieldError(f"'tools': {e}", "tools") from None
    return spec
