"""`strata tokenize`: a tokenizer alone (no weights): the ids of a text as llama-tokenize prints
them, the text of ids, and chat templates rendered on a message list.

    print(tokenize("model.gguf", text="Hello world"))        # [9707, 1879]   (llama-tokenize --ids)
    print(detokenize("tok-dir", [9707, 1879]))                # Hello world
    print(render_messages("tok-dir", "chat.json", text=True)) # the template's text
    tokenizer_at("model.gguf")                                # a model's, a tokenizer directory's, a vocabulary's

MODEL is anything with a tokenizer: an HF directory with tokenizer.json (weights or not), a
config.json beside one, or a GGUF file (a vocabulary-only GGUF too). Text is encoded as
llama-tokenize encodes it by default: BOS where the vocabulary adds one, special tokens
written in the text parsed (`<|im_start|>` is one id); no escape processing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strata.errors import StrataError
from strata.ir.inputs import MiB, read_bytes
from strata.runtime.opener import NO_TOKENIZER_HINT
from strata.runtime.text import ChatTemplate, TextInputError, TokenizerError, check_utf8, load_tokenizer

#: The most read of a text to tokenize or a messages file (a book is a few MiB).
TEXT_LIMIT = 64 * MiB


class MessagesError(StrataError):
    """A message list (or template arguments) that cannot be rendered."""


def tokenizer_at(path: str | Path):
    """The tokenizer of `path`: a GGUF file, a directory with tokenizer.json, or a config.json's directory."""
    p = Path(path)
    if p.is_file() and p.name == "config.json":
        p = p.parent
    if p.is_dir() and not (p / "tokenizer.json").is_file():
        raise TokenizerError(f"{p}: no tokenizer.json here (and it is not a GGUF file); {NO_TOKENIZER_HINT} for "
                             "generation, but tokenizing needs a tokenizer")
    return load_tokenizer(p)


def format_ids(ids: Sequence[int]) -> str:
    """Ids on one line as `llama-tokenize --ids` prints them: `[1, 15043, 3186]`."""
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"


def read_text_file(path: str | Path) -> str:
    """A text file's content, byte for byte (a trailing newline is a token too), as UTF-8."""
    data = read_bytes(path, "text file", TEXT_LIMIT, TextInputError, missing=f"{path}: cannot read: no such file")
    return check_utf8(data, str(path))


def tokenize(path: str | Path, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> str:
    """The ids of `text` (`format_ids`)."""
    tok = tokenizer_at(path)
    return format_ids(tok.encode(check_utf8(text, "--prompt"), add_special=add_special, parse_special=parse_special))


def detokenize(path: str | Path, ids: Sequence[int], *, skip_special: bool = False) -> str:
    """The text of `ids` (each in the tokenizer's vocabulary)."""
    tok = tokenizer_at(path)
    for i in ids:
        if not 0 <= int(i) < tok.vocab_size:
            raise TokenizerError(f"--decode: id {int(i)} is outside the vocabulary [0, {tok.vocab_size})")
    return tok.decode(ids, skip_special=skip_special)


def _read_messages(path: str | Path) -> list[Mapping[str, Any]]:
    data = read_bytes(path, "messages file", TEXT_LIMIT, MessagesError, missing=f"{path}: cannot read: no such file")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise MessagesError(f"{path}: invalid UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise MessagesError(f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    messages = raw.get("messages") if isinstance(raw, dict) else raw
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise MessagesError(f"{path}: expected a list of messages (objects with 'role' and 'content'), "
                            "or an object with 'messages'")
    for i, m in enumerate(messages):
        if not isinstance(m.get("role"), str):
            raise MessagesError(f"{path}: message {i} has no 'role' string")
    return messages


def template_kwargs_of(text: str | None) -> dict[str, Any]:
    """--template-kwargs: a JSON object of the template's extra variables (`{"enable_thinking": false}`)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise MessagesError(f"--template-kwargs: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(value, dict):
        raise MessagesError("--template-kwargs: expected a JSON object, e.g. '{\"enable_thinking\": false}'")
    return value


def render_messages(path: str | Path, messages_file: str | Path, *, template_file: str | Path | None = None,
                    template_kwargs: Mapping[str, Any] | None = None, generation_prompt: bool = True,
                    text: bool = False) -> str:
    """The chat template on the messages of `messages_file`: its ids (`format_ids`), or with
    `text` the rendered text itself. `template_file`: a Jinja file in place of the model's."""
    tok = tokenizer_at(path)
    messages = _read_messages(messages_file)
    template = ChatTemplate.from_file(template_file) if template_file is not None else None
    kwargs = dict(template_kwargs or {})
    rendered = tok.render_chat(messages, add_generation_prompt=generation_prompt, template=template, **kwargs)
    return rendered if text else format_ids(tok.encode(rendered, add_special=False))
