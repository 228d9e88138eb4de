"""The checks every request meets before a program runs it, whatever the target: the prompt's
ids, the number of new tokens against the context, and the weights' values.

    prompt = parse_prompt_ids("1,2,3")
    ids = check_request(prompt, 16, vocab=32000, n_ctx=4096)    # int32, or a one-line error
    room = new_token_room(len(prompt), n_ctx=4096)              # the most new tokens it may ask for
    check_finite(store, names, allow=False)

The context is checked here and nowhere else: `check_fits` (and its `new_token_room`) is what
the generation loop, the chat, the scheduler and the server's request parsing all ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from strata.errors import StrataError, warn


class RequestError(StrataError):
    """A request that cannot run: bad ids, too long for the context, non-finite weights."""


class ContextError(RequestError):
    """A request that needs more positions than the context has."""


def parse_prompt_ids(text: str, flag: str = "--prompt-ids") -> list[int]:
    """Comma-separated token ids, bare or in brackets as `strata tokenize` prints them (`flag`
    names where they came from in messages)."""
    body = str(text).strip()
    if body.startswith("[") and body.endswith("]"):  # llama-tokenize's and strata tokenize's `[1, 2, 3]`
        body = body[1:-1]
    items = [t.strip() for t in body.split(",")]
    if items == [""]:
        raise RequestError(f"{flag} is empty; give comma-separated token ids, e.g. 1,2,3")
    ids = []
    for t in items:
        try:
            ids.append(int(t, 10))
        except ValueError:
            raise RequestError(f"{flag}: {t[:40]!r} is not an integer token id "
                               "(expected comma-separated ids, e.g. 1,2,3)") from None
    return ids


def check_request(prompt_ids: Sequence[int], max_new_tokens: int, vocab: int, n_ctx: int) -> np.ndarray:
    """The prompt as int32 ids, after checking it and the length against vocab and context."""
    prompt = check_prompt(prompt_ids, vocab)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise RequestError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    check_fits(len(prompt), int(max_new_tokens), n_ctx, "; compile with a larger ctx")
    return prompt


def new_token_room(prompt_len: int, n_ctx: int) -> int:
    """The most new tokens a prompt of `prompt_len` leaves room for in a context of `n_ctx`
    (the last new token is returned, never fed back: it needs no cache cell); below 1: the
    prompt itself does not fit."""
    return n_ctx - prompt_len + 1


def check_fits(prompt_len: int, max_new_tokens: int, n_ctx: int, hint: str = "") -> None:
    """Refuse a prompt and a number of new tokens that need more positions than the context has
    (a `ContextError` saying how many they need; `hint`: what to do about it)."""
    if max(max_new_tokens, 1) > new_token_room(prompt_len, n_ctx):
        need = prompt_len + max(max_new_tokens - 1, 0)
        raise ContextError(f"the prompt ({prompt_len} tokens) plus {max_new_tokens} new tokens need {need} "
                           f"positions, more than the context of {n_ctx}{hint}")


def check_prompt(prompt_ids: Sequence[int], vocab: int) -> np.ndarray:
    """The prompt as a flat int32 array of ids in [0, vocab), or a one-line error."""
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim != 1:
        raise RequestError("the prompt must be a flat list of integer token ids")
    try:
        items = list(prompt_ids)
    except TypeError:
        raise RequestError("the prompt must be a sequence of token ids") from None
    if not items:
        raise RequestError("the prompt is empty; give at least one token id")
    for t in items:
        # Each id is checked as a Python integer first: numpy would make an object array of
        # an id beyond int64, and a list inside the list is not an id.
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise RequestError(f"the prompt must be a flat list of integer token ids, got {str(t)[:40]!r}")
        if not 0 <= int(t) < vocab:
            shown = str(int(t)) if len(str(int(t))) <= 30 else str(int(t))[:27] + "..."
            raise RequestError(f"prompt token id {shown} is outside the vocabulary [0, {vocab})")
    return np.asarray([int(t) for t in items], dtype=np.int32)


def check_finite(store: Any, names: Iterable[str], allow: bool) -> None:
    """Refuse weights holding NaN or infinity, naming the first such tensor (or warn)."""
    for name in names:
        if hasattr(store, "all_finite"):  # a GGUF's: its block tensors checked without keeping their values
            if not store.all_finite(name):
                where = f"tensor '{name}' (HF '{store.stored_name(name)}') holds NaN or infinite values"
                if not allow:
                    raise RequestError(f"{store.label}: {where}; refusing to run (--allow-nonfinite runs anyway)")
                warn(f"{store.label}: {where}")
            continue
        w = store.get(name)
        flat = w.reshape(-1)
        for i in range(0, flat.size, 1 << 22):  # in chunks: no copy of a whole big tensor
            if not np.isfinite(np.asarray(flat[i:i + (1 << 22)], dtype=np.float32)).all():
                where = f"tensor '{name}' (HF '{store.stored_name(name)}') holds NaN or infinite values"
                if not allow:
                    raise RequestError(f"{store.label}: {where}; refusing to run (--allow-nonfinite runs anyway)")
                warn(f"{store.label}: {where}")
                break
