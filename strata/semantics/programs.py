"""The reference interpreters as programs of the runtime protocol (`strata.runtime.program`):
the op level and the blueprint level executed op by op, stepping as a compiled target steps.

    program = OpLevelProgram(prefill_fn, decode_fn, store, name="tiny")
    step = program.prefill([1, 2, 3], 0)          # LogitsStep: .logits (last row), .token
    step = program.decode(step.token, 3)

`prefill_fn` / `decode_fn` are the op-level (or blueprint-level) functions of one entry each,
lowered for the context the program runs in; the state buffers are the decode entry's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func


@dataclass(frozen=True)
class LogitsStep:
    """One step's result on the host: the last row's logits, and the greedy choice (the first
    maximum, as numpy's argmax and every target's argmax kernel take it)."""

    logits: np.ndarray

    @property
    def token(self) -> int:
        return int(np.argmax(self.logits))


def _vocab_and_ctx(fn: func.FuncOp) -> tuple[int, int]:
    (out,) = fn.function_type.outputs.data
    n_kv = fn.attributes.get("op.n_kv")
    return int(out.get_shape()[-1]), int(n_kv.value.data) if n_kv is not None else 0  # type: ignore[attr-defined]


class OpLevelProgram:
    """The op-level interpreter (`strata.semantics.op_interp`) stepping a prefill and a decode entry."""

    runtime = "op interpreter"

    def __init__(self, prefill: func.FuncOp, decode: func.FuncOp, weights: Any, name: str = "model"):
        from strata.semantics.op_interp import alloc_state

        self.prefill_fn, self.decode_fn, self.weights, self.name = prefill, decode, weights, name
        self.vocab, self.n_ctx = _vocab_and_ctx(decode)
        self._alloc = lambda: alloc_state(decode)
        self.buffers = self._alloc()

    def reset(self) -> None:
        self.buffers = self._alloc()

    def prefill(self, tokens: Sequence[int], start: int) -> LogitsStep:
        from strata.semantics.op_interp import run_function

        if start == 0:
            self.reset()
        return LogitsStep(run_function(self.prefill_fn, self.weights, self.buffers, np.asarray(tokens, np.int32),
                                       start)[-1])

    def decode(self, token: int, pos: int) -> LogitsStep:
        from strata.semantics.op_interp import run_function

        return LogitsStep(run_function(self.decode_fn, self.weights, self.buffers, np.asarray([token], np.int32),
                                       pos)[-1])

    def close(self) -> None:
        pass


class BlueprintProgram(OpLevelProgram):
    """The blueprint interpreter (`strata.semantics.blueprint_interp`, each node's precision
    emulated) stepping a prefill and a decode blueprint; the state buffers are those of the op
    level's decode entry `state_of`."""

    runtime = "blueprint interpreter"

    def __init__(self, prefill: func.FuncOp, decode: func.FuncOp, weights: Any, state_of: func.FuncOp,
                 name: str = "model"):
        from strata.semantics.op_interp import alloc_state

        self.prefill_fn, self.decode_fn, self.weights, self.name = prefill, decode, weights, name
        self.vocab, self.n_ctx = _vocab_and_ctx(state_of)
        self._alloc = lambda: alloc_state(state_of)
        self.buffers = self._alloc()
        self.cache: dict = {}

    def _run(self, fn: func.FuncOp, tokens: np.ndarray, pos: int) -> LogitsStep:
        from strata.semantics.blueprint_interp import run_blueprint

        return LogitsStep(run_blueprint(fn, self.weights, self.buffers, [tokens.reshape(-1, 1)], pos=pos,
                                        cache=self.cache)[1][-1])

    def prefill(self, tokens: Sequence[int], start: int) -> LogitsStep:
        if start == 0:
            self.reset()
        return self._run(self.prefill_fn, np.asarray(tokens, np.int32), start)

    def decode(self, token: int, pos: int) -> LogitsStep:
        return self._run(self.decode_fn, np.asarray([token], np.int32), pos)
