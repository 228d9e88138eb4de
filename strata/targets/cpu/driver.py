"""Load a compiled CPU model and generate greedily with it.

    out = compile_model(load_model("models/tiny"), "cpu", "build/tiny")   # strata.pipeline
    mod = load_compiled(out)                                              # the generated module
    ids, logits = generate(mod, store, [1, 2, 3], 16)

The compile itself (lowering, the stage directory and its manifest) is the pipeline's
(`strata.pipeline`); this file only runs what it wrote.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from strata.errors import StrataError

MODEL_PY = "model.py"


class CpuDriverError(StrataError):
    """A run of the CPU target that cannot proceed (bad input or output)."""


def load_compiled(out_dir: str | Path):
    """Import the generated ``model.py`` of ``out_dir`` (by path, via importlib)."""
    path = Path(out_dir) / MODEL_PY
    if not path.is_file():
        raise CpuDriverError(f"{path}: no such file; compile the model first")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(f"strata_compiled_{digest}", path)
    if spec is None or spec.loader is None:
        raise CpuDriverError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Generate


def generate(model, weights, prompt_ids: Sequence[int], max_new_tokens: int, *,
             on_token: Callable[[int, int], None] | None = None) -> tuple[list[int], np.ndarray]:
    """Greedy generation: prefill the prompt, then decode one token at a time.

    ``model`` is a loaded compiled module (``load_compiled``) or a ``Model`` instance;
    ``weights`` maps ggml names to arrays (a ``WeightStore``; unused for an instance).
    Returns the new ids and their logits [max_new_tokens, vocab] float32: row 0 is the
    last prompt position's logits (which pick the first new token), row i the logits
    that pick new token i. ``on_token(i, id)`` is called as each new token is chosen.
    """
    instance = model.Model(weights) if hasattr(model, "Model") else model
    vocab = int(instance.OUTPUTS["decode"][0][-1])
    prompt = check_request(prompt_ids, max_new_tokens, vocab, int(instance.N_CTX))
    ids: list[int] = []
    logits = np.zeros((max_new_tokens, vocab), dtype=np.float32)
    if max_new_tokens == 0:
        return ids, logits
    row = instance.prefill(prompt, 0)[-1]
    for i in range(max_new_tokens):
        logits[i] = row
        token = int(np.argmax(row))
        ids.append(token)
        if on_token is not None:
            on_token(i, token)
        if i + 1 < max_new_tokens:
            row = instance.decode(token, len(prompt) + i)[-1]
    return ids, logits


def check_request(prompt_ids: Sequence[int], max_new_tokens: int, vocab: int, n_ctx: int) -> np.ndarray:
    """The prompt as int32 ids, after checking it and the length against vocab and context."""
    prompt = _check_prompt(prompt_ids, vocab)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise CpuDriverError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    # The last new token is returned, never fed back: it needs no cache row.
    if len(prompt) + max(int(max_new_tokens) - 1, 0) > n_ctx:
        raise CpuDriverError(f"the prompt ({len(prompt)} tokens) plus {max_new_tokens} new tokens "
                             f"need {len(prompt) + max_new_tokens - 1} positions, more than the context of "
                             f"{n_ctx}; compile with a larger ctx")
    return prompt


def _check_prompt(prompt_ids: Sequence[int], vocab: int) -> np.ndarray:
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim != 1:
        raise CpuDriverError("the prompt must be a flat list of integer token ids")
    try:
        items = list(prompt_ids)
    except TypeError:
        raise CpuDriverError("the prompt must be a sequence of token ids") from None
    if not items:
        raise CpuDriverError("the prompt is empty; give at least one token id")
    for t in items:
        # Each id is checked as a Python integer first: numpy would make an object array of
        # an id beyond int64, and a list inside the list is not an id.
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise CpuDriverError(f"the prompt must be a flat list of integer token ids, got {str(t)[:40]!r}")
        if not 0 <= int(t) < vocab:
            shown = str(int(t)) if len(str(int(t))) <= 30 else str(int(t))[:27] + "..."
            raise CpuDriverError(f"prompt token id {shown} is outside the vocabulary [0, {vocab})")
    return np.asarray([int(t) for t in items], dtype=np.int32)
