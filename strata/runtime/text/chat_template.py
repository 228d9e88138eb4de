"""Chat templates rendered as transformers' `apply_chat_template(..., tokenize=False)` renders them.

    tmpl = ChatTemplate.from_file("Qwen3-0.6B.jinja")
    text = tmpl.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                       enable_thinking=False, eos_token="<|im_end|>")

The environment is the one transformers builds: jinja2's `ImmutableSandboxedEnvironment` with
`trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension and a `{% generation %}` block
(rendered as its body); `tojson` as transformers defines it (`json.dumps`, no HTML escaping,
non-ASCII kept); the globals `raise_exception`, `strftime_now`, a `dict` without attribute access and
a `namespace` that refuses underscore names. The messages get transformers' preparation: keys
whose value is None are dropped, values become plain JSON data, and a message's reasoning given as
`thinking` or `reasoning` is also passed as `reasoning_content` (and `thinking`).

A template that does not parse, or that raises (`raise_exception`) or fails while it renders, is one
`ChatTemplateError` naming where the template came from and its line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from strata.ir.inputs import MiB, read_bytes
from strata.runtime.text.errors import ChatTemplateError

#: The most read of a chat template file (real ones are a few KiB).
TEMPLATE_LIMIT = 16 * MiB

__all__ = ["ChatTemplate", "ChatTemplateError"]

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


class ChatTemplate:
    """One Jinja chat template; `origin` says where it came from, for the errors."""

    def __init__(self, source: str, *, origin: str) -> None:
        self.source = source
        self.origin = origin

    @classmethod
    def from_file(cls, path: str | Path) -> ChatTemplate:
        """The template in the file `path` (a .jinja file)."""
        p = Path(path)
        data = read_bytes(p, "chat template", TEMPLATE_LIMIT, ChatTemplateError, missing=f"{p}: cannot read: no such file")
        try:
            return cls(data.decode("utf-8"), origin=str(p))
        except UnicodeDecodeError as e:
            raise ChatTemplateError(f"{p}: not valid UTF-8 (byte {e.start})") from None

    @classmethod
    def from_option(cls, path: str | Path | None) -> ChatTemplate | None:
        """The template of a --chat-template FILE option, parsed (None when not given)."""
        if path is None:
            return None
        template = cls.from_file(path)
        template.check()
        return template

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r})"

    def check(self) -> None:
        """Parse the template now (`render` does it on first use): a `ChatTemplateError` if it does not parse."""
        self._compiled  # noqa: B018 - the property compiles it

    @cached_property
    def _compiled(self):
        import jinja2

        env = _environment()
        try:
            code = env.compile(self.source, name=self.origin, filename=self.origin)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{self.origin}: line {e.lineno}: {_one_line(e.message or str(e))}") from None
        return env.template_class.from_code(env, code, env.make_globals(None))

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False,
               tools: Sequence[Any] | None = None, documents: Sequence[Mapping[str, Any]] | None = None,
               continue_final_message: bool | str = False, **variables: Any) -> str:
        """The text of `messages` (OpenAI-style dicts) through the template.

        `variables` are the template's other variables: the special tokens (`bos_token=...`) and any
        extra keyword (`enable_thinking=False`). `continue_final_message` leaves the last message
        open for the model to continue (True: its `content`; a str: that field), as transformers does.
        """
        chat = _prepare_messages(messages)
        if not chat:
            raise ChatTemplateError(f"{self.origin}: there are no messages to render")
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError("continue_final_message and add_generation_prompt cannot be used together")
        tool_schemas = _plain(list(tools)) if tools is not None else None
        for tool in tool_schemas or []:
            if not isinstance(tool, dict):
                raise ChatTemplateError(f"a tool must be a JSON schema (a dict), got {type(tool).__name__}")
        docs = _plain(list(documents)) if documents is not None else None
        final = self._mark_final_message(chat, continue_final_message) if continue_final_message else None
        try:
            text = self._compiled.render(messages=chat, tools=tool_schemas, documents=docs,
                                         add_generation_prompt=add_generation_prompt, **_plain(variables))
        except ChatTemplateError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the template raises is the template's error
            raise ChatTemplateError(self._render_error(e)) from None
        if final is not None:
            text = self._cut_after_final_message(text, final)
        return text

    # -- errors -----------------------------------------------------------------------------

    def _render_error(self, e: BaseException) -> str:
        import jinja2

        line = None
        tb = e.__traceback__
        while tb is not None:  # jinja2 rewrites the template's frames to carry its file and line
            if tb.tb_frame.f_code.co_filename == self.origin:
                line = tb.tb_lineno
            tb = tb.tb_next
        if isinstance(e, jinja2.TemplateError) and type(e) is jinja2.TemplateError:
            what = f"raise_exception: {_one_line(str(e))}"  # what the template itself raised
        elif isinstance(e, (jinja2.UndefinedError, jinja2.exceptions.SecurityError)):
            what = _one_line(str(e))
        else:
            what = f"{type(e).__name__}: {_one_line(str(e))}"
        where = f"line {line}: " if line is not None else ""
        return f"{self.origin}: {where}{what}"

    # -- continue_final_message, as transformers does it ------------------------------------

    def _mark_final_message(self, chat: list[dict[str, Any]], field: bool | str) -> str:
        name = field if isinstance(field, str) else "content"
        last = chat[-1]
        final = last.get(name)
        if final is None:
            raise ChatTemplateError(f"continue_final_message: the final message has no '{name}' to continue")
        fields = [name]
        if name in _REASONING_FIELDS:
            fields = [f for f in _REASONING_FIELDS if last.get(f) == final]
        if not any(f in self.source for f in fields):
            raise ChatTemplateError(f"{self.origin}: continue_final_message: the template does not use '{name}'")
        if isinstance(final, (list, tuple)):
            for block in reversed(final):
                if isinstance(block, dict) and "text" in block:
                    final = block["text"]
                    block["text"] = block["text"] + _CONTINUE_TAG
                    break
            else:
                raise ChatTemplateError("continue_final_message: the final message has no text to continue")
        else:
            for f in fields:
                last[f] = last[f] + _CONTINUE_TAG
        return final

    def _cut_after_final_message(self, text: str, final: str) -> str:
        tag = _CONTINUE_TAG.strip()
        if final.strip() not in text or tag not in text:
            raise ChatTemplateError(f"{self.origin}: continue_final_message: the template drops part of the "
                                    f"final message, so it cannot be continued")
        at = text.rindex(tag)
        if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
            return text[:at]
        return text[:at].rstrip()


# ---------------------------------------------------------------------------------------------
# The environment


def _environment():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask marker): its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _namespace_class()
    return env


def _raise_exception(message: str):
    import jinja2

    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """`dict(...)` for templates, without `dict`'s attributes (no way out of the sandbox through it)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _namespace_class():
    import jinja2.utils
    from jinja2.exceptions import SecurityError

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # jinja2's signature trick: `namespace(self=...)` works
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"a chat template cannot set the underscore attribute {name!r} on a namespace")

    return TemplateNamespace


# ---------------------------------------------------------------------------------------------
# The messages


def _prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    chat = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise ChatTemplateError(f"a chat message must be a dict with 'role' and 'content', got {type(m).__name__}")
        message = _plain({k: v for k, v in m.items() if v is not None})
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        chat.append(message)
    return chat


def _plain(value: Any) -> Any:
    """`value` as plain JSON data (what transformers lets a template see); other objects become
    a placeholder naming their type."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return _plain(item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _one_line(s: str) -> str:
    return " ".join(s.split())
