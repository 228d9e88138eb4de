"""POST /tokenize and /detokenize: the model's tokenizer over HTTP, in llama-server's shapes and vLLM's.

    tokenize_reply({"content": "Hello", "with_pieces": True}, limits, "m")  # llama-server's
        -> {"tokens": [{"id": 9906, "piece": "Hello"}]}
    tokenize_reply({"prompt": "Hello"}, limits, "m")                        # vLLM's (or "messages")
        -> {"count": 2, "max_model_len": 2048, "tokens": [1, 9906], "token_strs": None}
    detokenize_reply({"tokens": [9906]}, limits, "m")                       # both servers' bodies
        -> {"content": "Hello", "prompt": "Hello"}

Both servers answer on the same paths, so the body says whose it is: `content` is
llama-server's (llama.cpp tools/server README: `add_special` default false, `parse_special`
default true, `with_pieces`: each token as {"id", "piece"}, the piece a string when its bytes are
UTF-8 and the list of its bytes when not); `prompt` or `messages` is vLLM's (serving_tokenization:
`add_special_tokens` default true for a prompt and false for messages, which go through the chat
template with `add_generation_prompt` default true, `continue_final_message`,
`chat_template_kwargs`; `return_token_strs`: the vocabulary's strings of the ids). The two
detokenize bodies are the same (`tokens`, vLLM's adds an optional `model`), so the reply carries
both servers' field: `content` (llama-server's) and `prompt` (vLLM's), the same text.

Anything else is an `ApiError` (400) naming the field: a body of neither shape or of both, a
field of the wrong type, an id outside the vocabulary; another model's name is 404.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from strata.errors import StrataError
from strata.runtime.serve.requests import ApiError

#: The most ids one detokenize body may hold (a context of the largest models, and then some).
MAX_DETOKENIZE_IDS = 1 << 20
#: Names the chat template gets from the server itself; `chat_template_kwargs` may not set them.
_RESERVED_TEMPLATE_NAMES = frozenset({"messages", "tools", "documents", "add_generation_prompt",
                                      "continue_final_message", "template"})


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _body(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def check_model(body: Mapping[str, Any], model_name: str) -> None:
    """An optional `model` must be this server's (404 for another, as the completions answer)."""
    model = body.get("model")
    if model is None or model == model_name:
        return
    if not isinstance(model, str):
        raise ApiError(f"'model' must be a string, got {_shown(model)}", "model")
    raise ApiError(f"the model '{model[:80]}' does not exist; this server serves '{model_name}'", "model", 404,
                   "model_not_found")


def flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    """A boolean field (null: its default)."""
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(f"'{name}' must be a boolean, got {_shown(v)}", name)
    return v


def token_ids(value: Any, vocab: int, field: str, limit: int | None = None) -> list[int]:
    """A list of token ids in [0, vocab) (an integral float counts, as JSON Schema counts it)."""
    if not isinstance(value, list):
        raise ApiError(f"'{field}' must be a list of token ids, got {_shown(value)}", field)
    if limit is not None and len(value) > limit:
        raise ApiError(f"'{field}' holds {len(value)} ids; at most {limit}", field)
    ids = []
    for i, t in enumerate(value):
        if isinstance(t, float) and t.is_integer():
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int):
            raise ApiError(f"'{field}[{i}]' must be a token id (an integer), got {_shown(t)}", field)
        if not 0 <= t < vocab:
            raise ApiError(f"'{field}[{i}]': token id {t} is outside the vocabulary [0, {vocab})", field)
        ids.append(t)
    return ids


def _text(body: Mapping[str, Any], name: str) -> str:
    from strata.runtime.text import check_utf8

    v = body.get(name)
    if not isinstance(v, str):
        raise ApiError(f"'{name}' must be a string, got {_shown(v)}", name)
    try:
        return check_utf8(v, f"'{name}'")
    except StrataError as e:
        raise ApiError(str(e), name) from None


def chat_messages(value: Any) -> list[dict[str, Any]]:
    """OpenAI's chat messages as the template takes them: each content a string (text parts joined)."""
    if not isinstance(value, list) or not value:
        raise ApiError(f"'messages' must be a non-empty list of messages, got {_shown(value)}", "messages")
    plain = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a 'role' string", f"messages[{i}]")
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ApiError(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        if content is not None and not isinstance(content, str):
            raise ApiError(f"messages[{i}].content must be a string, got {_shown(content)}", f"messages[{i}].content")
        plain.append({**m, "content": content or ""})
    return plain


# -- pieces: a token's own bytes --------------------------------------------------------------


@cache
def _byte_level_chars() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): the printable character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer: Any, token_id: int) -> bytes:
    """The bytes a token stands for: a byte-fallback token's (`<0xC3>`) byte, a byte-level
    vocabulary's bytes, else the UTF-8 of its decoded text (which has them whole)."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text.encode("utf-8")
    stored = tokenizer.id_to_token(token_id) or ""
    byte = _BYTE_TOKEN.fullmatch(stored)
    if byte:
        return bytes([int(byte.group(1), 16)])
    chars = _byte_level_chars()
    if stored and all(c in chars for c in stored):
        return bytes(chars[c] for c in stored)
    return text.encode("utf-8")


def piece(tokenizer: Any, token_id: int) -> str | list[int]:
    """llama-server's piece: the token's text when its bytes are UTF-8, else the list of its bytes."""
    raw = token_bytes(tokenizer, token_id)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


# -- the replies ------------------------------------------------------------------------------


def tokenize_reply(body: Any, limits: Any, model_name: str) -> dict[str, Any]:
    """POST /tokenize in the shape of the body's server (see the module's doc)."""
    body = _body(body)
    tokenizer = limits.tokenizer
    shapes = [name for name in ("content", "prompt", "messages") if name in body]
    if len(shapes) != 1:
        given = f"it has {', '.join(repr(s) for s in shapes)}" if shapes else "it has none"
        raise ApiError("the body needs exactly one of 'content' (llama-server's /tokenize), 'prompt' or 'messages' "
                       f"(vLLM's); {given}", shapes[-1] if shapes else "content")
    if shapes == ["content"]:
        text = _text(body, "content")
        ids = _encode(tokenizer, text, add_special=flag(body, "add_special", False),
                      parse_special=flag(body, "parse_special", True), field="content")
        if flag(body, "with_pieces", False):
            return {"tokens": [{"id": t, "piece": piece(tokenizer, t)} for t in ids]}
        return {"tokens": ids}
    check_model(body, model_name)
    strings = flag(body, "return_token_strs", False)
    if shapes == ["prompt"]:
        ids = _encode(tokenizer, _text(body, "prompt"), add_special=flag(body, "add_special_tokens", True),
                      field="prompt")
    else:
        ids = _encode_chat(tokenizer, body)
    return {"count": len(ids), "max_model_len": limits.n_ctx, "tokens": ids,
            "token_strs": [tokenizer.id_to_token(t) for t in ids] if strings else None}


def _encode(tokenizer: Any, text: str, *, add_special: bool, field: str, parse_special: bool = True) -> list[int]:
    try:
        return tokenizer.encode(text, add_special=add_special, parse_special=parse_special)
    except StrataError as e:
        raise ApiError(str(e), field) from None


def _encode_chat(tokenizer: Any, body: Mapping[str, Any]) -> list[int]:
    messages = chat_messages(body.get("messages"))
    generation = flag(body, "add_generation_prompt", True)
    continued = flag(body, "continue_final_message", False)
    if generation and continued:
        raise ApiError("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                       "continue_final_message")
    extra = body.get("chat_template_kwargs") or {}
    if not isinstance(extra, dict):
        raise ApiError(f"'chat_template_kwargs' must be an object, got {_shown(extra)}", "chat_template_kwargs")
    for key in extra:
        if not key.isidentifier() or key in _RESERVED_TEMPLATE_NAMES:
            raise ApiError(f"'chat_template_kwargs' may not set {_shown(key)}", "chat_template_kwargs")
    try:
        text = tokenizer.render_chat(messages, add_generation_prompt=generation, continue_final_message=continued,
                                     **extra)
    except StrataError as e:  # the template refused the messages
        raise ApiError(str(e), "messages") from None
    return _encode(tokenizer, text, add_special=flag(body, "add_special_tokens", False), field="messages")


def detokenize_reply(body: Any, limits: Any, model_name: str) -> dict[str, Any]:
    """POST /detokenize: the text of `tokens`, as both servers name it (see the module's doc)."""
    body = _body(body)
    check_model(body, model_name)
    if "tokens" not in body:
        raise ApiError("the body needs 'tokens': a list of token ids", "tokens")
    ids = token_ids(body["tokens"], limits.tokenizer.vocab_size, "tokens", MAX_DETOKENIZE_IDS)
    text = limits.tokenizer.decode(ids)
    return {"content": text, "prompt": text}
