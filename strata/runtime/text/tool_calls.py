"""Tool calls in a model's reply, in the format its chat template teaches it.

    fmt = tool_call_format(template.source)      # HERMES, LLAMA3_JSON, or None
    parser = ToolCallParser(fmt, names={"get_weather"})
    for text in streamed_texts:
        for piece in parser.feed(text):          # Content(text) or Call(name, arguments)
            ...
    pieces = parser.finish()

Two formats, recognised from the template's own text (never from a file name):

* `HERMES` (Qwen2.5, Qwen3, Hermes, and the ChatML tools template in examples/templates/): each
  call is `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, several in a row, after
  optional text. A template that writes `<tool_call>` and `</tool_call>` teaches it.
* `LLAMA3_JSON` (Llama 3.1, 3.2, 3.3): the whole reply is `{"name": ..., "parameters": {...}}`
  (after `<|python_tag|>`, a special token the detokenizer drops); several separated by `;`.
  A template that writes a `"name"` and then a `"parameters"` key teaches it.

Each format names the triple a grammar needs to force one call: the text that opens a call, the
text that closes it, and the key of its arguments (`open`, `close`, `args_key`).

A call is emitted only whole and checked: a JSON object whose `name` is one of the request's tools
and whose arguments are an object. Anything else (a body that is not JSON, an unknown name, a call
cut off by max_tokens) comes back as the plain text it was, so a client never sees a broken call.
Text around calls is content; whitespace after a call is dropped. A marker split across tokens is
held back until it is whole or cannot be one. `parse_tool_calls(text)` is the same parser fed the
whole text at once, so a streamed reply and an unstreamed one are the same pieces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class ToolCallFormat:
    """How a template's model writes a tool call: `open` + {"name": ..., `args_key`: {...}} + `close`."""

    name: str
    open: str
    close: str
    args_key: str


HERMES = ToolCallFormat("hermes", "<tool_call>\n", "\n</tool_call>", "arguments")
LLAMA3_JSON = ToolCallFormat("llama3_json", "", "", "parameters")

#: What Llama 3 writes before a call (a special token: usually dropped from the text before this).
PYTHON_TAG = "<|python_tag|>"

_ARGS_KEY = re.compile(r'\\?"(arguments|parameters)\\?"\s*:')
_NAME_THEN_PARAMETERS = re.compile(r'\\?"name\\?"\s*:.{0,200}?\\?"parameters\\?"\s*:', re.DOTALL)


@lru_cache(maxsize=32)  # read once per template, not per request
def tool_call_format(template_source: str) -> ToolCallFormat | None:
    """The tool-call format the template teaches (see the module's doc), or None if it teaches none."""
    if "<tool_call>" in template_source and "</tool_call>" in template_source:
        key = _ARGS_KEY.search(template_source, template_source.index("<tool_call>"))
        if key is None or key.group(1) == HERMES.args_key:
            return HERMES
        return ToolCallFormat(HERMES.name, HERMES.open, HERMES.close, key.group(1))
    if _NAME_THEN_PARAMETERS.search(template_source):
        return LLAMA3_JSON
    return None


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class Call:
    name: str
    #: The arguments as a JSON text (OpenAI's `function.arguments`).
    arguments: str


Piece = Content | Call


def parse_call(body: str, fmt: ToolCallFormat, names: Collection[str] | None) -> Call | None:
    """The call `body` (a JSON object) holds, or None if it is not a whole, valid call."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return _call_of(obj, fmt, names)


def _call_of(obj: Any, fmt: ToolCallFormat, names: Collection[str] | None) -> Call | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if names is not None and obj["name"] not in names:
        return None
    # the template's key; the other common one too (models trained on both write either)
    keys = [k for k in (fmt.args_key, "arguments", "parameters") if k in obj]
    args = obj[keys[0]] if keys else {}
    if isinstance(args, str):  # some models write the arguments as a JSON text
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return Call(obj["name"], json.dumps(args, ensure_ascii=False))


def marker_prefix_length(text: str, marker: str) -> int:
    """The length of the longest end of `text` that is a proper beginning of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ToolCallParser:
    """Tool calls out of a reply streamed in pieces of text (see the module's doc)."""

    def __init__(self, fmt: ToolCallFormat, names: Collection[str] | None = None) -> None:
        self.fmt = fmt
        self.names = None if names is None else frozenset(names)
        self.calls = 0
        self._pending = ""
        self._after_call = False  # whitespace right after a call is dropped
        if fmt.open:  # marked calls (Hermes)
            self._open, self._close = fmt.open.strip(), fmt.close.strip()
            self._inside = False
        else:  # a reply that is all JSON (Llama 3)
            self._state = "start"

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        return self._marked(final=False) if self.fmt.open else self._bare(final=False)

    def finish(self) -> list[Piece]:
        return self._marked(final=True) if self.fmt.open else self._bare(final=True)

    # -- marked calls: <tool_call> ... </tool_call> ------------------------------------------

    def _marked(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            if self._inside:
                at = self._pending.find(self._close)
                if at < 0 and not final:
                    return out
                body = self._pending if at < 0 else self._pending[:at]
                self._pending = "" if at < 0 else self._pending[at + len(self._close):]
                self._inside = False
                call = parse_call(body, self.fmt, self.names)
                if call is None:  # the call as the text it was
                    out.append(Content(self._open + body + ("" if at < 0 else self._close)))
                else:
                    out.append(call)
                    self.calls += 1
                    self._after_call = True
                if at < 0:
                    return out
                continue
            if self._after_call:
                self._pending = self._pending.lstrip()
                if not self._pending:
                    return out
                self._after_call = False
            at = self._pending.find(self._open)
            if at >= 0:
                if at:
                    out.append(Content(self._pending[:at]))
                self._pending = self._pending[at + len(self._open):]
                self._inside = True
                continue
            keep = 0 if final else marker_prefix_length(self._pending, self._open)
            if len(self._pending) > keep:
                out.append(Content(self._pending[:len(self._pending) - keep]))
                self._pending = self._pending[len(self._pending) - keep:]
            return out

    # -- a reply that is all JSON: {"name": ..., "parameters": ...} --------------------------

    def _bare(self, final: bool) -> list[Piece]:
        if self._state == "text":
            text, self._pending = self._pending, ""
            return [Content(text)] if text else []
        if self._state == "start":
            head = self._pending.lstrip()
            if head.startswith(PYTHON_TAG):  # where the tokenizer keeps it as text
                self._pending = head = head[len(PYTHON_TAG):]
            if head.startswith("{"):
                self._state = "json"
            elif head and not final and not PYTHON_TAG.startswith(head):
                self._state = "text"
                return self._bare(final)
        if not final:
            return []
        text, self._pending = self._pending, ""
        calls = self._json_calls(text) if self._state == "json" else None
        if calls is None:
            return [Content(text)] if text else []
        self.calls += len(calls)
        return list(calls)

    def _json_calls(self, text: str) -> list[Call] | None:
        decoder, calls, at = json.JSONDecoder(), [], 0
        while True:
            at = len(text) - len(text[at:].lstrip())
            if at == len(text):
                return calls or None
            if calls:  # several calls: separated by ';'
                if text[at] != ";":
                    return None
                at += 1
                at = len(text) - len(text[at:].lstrip())
            try:
                obj, at = decoder.raw_decode(text, at)
            except ValueError:
                return None
            call = _call_of(obj, self.fmt, self.names)
            if call is None:
                return None
            calls.append(call)


def parse_tool_calls(text: str, fmt: ToolCallFormat, names: Collection[str] | None = None) -> list[Piece]:
    """The pieces of a whole reply: what `ToolCallParser` gives for it fed at once, with
    neighbouring content joined."""
    parser = ToolCallParser(fmt, names)
    return join_content(parser.feed(text) + parser.finish())


def join_content(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, Content) and out and isinstance(out[-1], Content):
            out[-1] = Content(out[-1].text + p.text)
        elif not (isinstance(p, Content) and not p.text):
            out.append(p)
    return out
