"""The reference interpreters as programs of the runtime protocol (`strata.runtime.program`):
the op level and the blueprint level executed op by op, stepping as a compiled target steps.

    program = OpLevelProgram(prefill_fn, decode_fn, store, name="tiny")
    step = program.prefill([1, 2, 3], 0)          # LogitsStep: .logits (last row), .token
    step = program.decode(step.token, 3, params)  # .token drawn by the op-level @sample_logits

`prefill_fn` / `decode_fn` are the op-level (or blueprint-level) functions of one entry each,
lowered for the context the program runs in; the state buffers are the decode entry's. The
sampler is the op level's `@sample_logits` (`strata.dialects.op.sampler_function`), run by the
op interpreter. `SequenceSampler` is the choice of the next token that every program with its
logits on the host shares (the CPU target's, onnxruntime's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func

from strata.semantics.sampling_inputs import Sampling, SequenceTokens, needs_sampler, sampler_arguments


@dataclass(frozen=True)
class LogitsStep:
    """One step's result on the host: the last row's logits, and the greedy choice (the first
    maximum, as numpy's argmax and every target's argmax kernel take it)."""

    logits: np.ndarray

    @property
    def token(self) -> int:
        return int(np.argmax(self.logits))


@dataclass(frozen=True)
class SampledStep:
    """One step's result on the host: the last row's logits, and the id the sampler drew."""

    logits: np.ndarray
    token: int


class SequenceSampler:
    """A program's choice of each next token for its one sequence: the logits' argmax without
    sampling parameters (or with greedy ones), else `run_sampler(logits [1, vocab], *arguments)`,
    the program's compiled `@sample_logits` (`strata.semantics.sampling_inputs` gives the
    arguments: the key, the step, the parameters and the sequence's token counts)."""

    def __init__(self, vocab: int, run_sampler: Callable[..., Any]):
        self.tokens = SequenceTokens(vocab)
        self.run_sampler = run_sampler

    def choose(self, logits: np.ndarray, fed: Sequence[int] | np.ndarray, start: int, output: bool,
               sampling: Sampling | None) -> LogitsStep | SampledStep:
        """The step that fed `fed` at positions start.. (a decode: `output`) and computed `logits`
        (its last row, [vocab])."""
        fed = np.asarray(fed).reshape(-1)
        self.tokens.feed(fed, start, output)
        if not needs_sampler(sampling):
            return LogitsStep(logits)
        args = sampler_arguments(sampling, start + len(fed), self.tokens.counts())
        ids = self.run_sampler(np.asarray(logits, np.float32).reshape(1, -1), *args)
        return SampledStep(logits, int(np.asarray(ids).reshape(-1)[0]))


def _vocab_and_ctx(fn: func.FuncOp) -> tuple[int, int]:
    (out,) = fn.function_type.outputs.data
    n_kv = fn.attributes.get("op.n_kv")
    return int(out.get_shape()[-1]), int(n_kv.value.data) if n_kv is not None else 0  # type: ignore[attr-defined]


class OpLevelProgram:
    """The op-level interpreter (`strata.semantics.op_interp`) stepping a prefill and a decode entry."""

    runtime = "op interpreter"

    def __init__(self, prefill: func.FuncOp, decode: func.FuncOp, weights: Any, name: str = "model",
                 sampler: func.FuncOp | None = None):
        from strata.semantics.op_interp import alloc_state

        self.prefill_fn, self.decode_fn, self.weights, self.name = prefill, decode, weights, name
        self.vocab, self.n_ctx = _vocab_and_ctx(decode)
        self._alloc = lambda: alloc_state(decode)
        self.buffers = self._alloc()
        self._init_sampler(sampler)

    def _init_sampler(self, sampler: func.FuncOp | None) -> None:
        from strata.dialects.op import sampler_function
        from strata.semantics.op_interp import run_function

        #: The op-level sampler this program draws with (`@sample_logits`).
        self.sampler_fn = sampler if sampler is not None else sampler_function(self.vocab)
        self._run_sampler = lambda *args: run_function(self.sampler_fn, {}, {}, [], 0, args=args)
        self.sampler = self.chooser()

    def chooser(self) -> SequenceSampler:
        return SequenceSampler(self.vocab, self._run_sampler)

    def reset(self) -> None:
        self.buffers = self._alloc()

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        from strata.semantics.op_interp import run_function

        if start == 0:
            self.reset()
        ids = np.asarray(tokens, np.int32)
        logits = run_function(self.prefill_fn, self.weights, self.buffers, ids, start)[-1]
        return self.sampler.choose(logits, ids, start, False, sampling)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        from strata.semantics.op_interp import run_function

        ids = np.asarray([token], np.int32)
        logits = run_function(self.decode_fn, self.weights, self.buffers, ids, pos)[-1]
        return self.sampler.choose(logits, ids, pos, True, sampling)

    def close(self) -> None:
        pass


class BlueprintProgram(OpLevelProgram):
    """The blueprint interpreter (`strata.semantics.blueprint_interp`, each node's precision
    emulated) stepping a prefill and a decode blueprint; the state buffers are those of the op
    level's decode entry `state_of`."""

    runtime = "blueprint interpreter"

    def __init__(self, prefill: func.FuncOp, decode: func.FuncOp, weights: Any, state_of: func.FuncOp,
                 name: str = "model", sampler: func.FuncOp | None = None):
        from strata.semantics.op_interp import alloc_state

        self.prefill_fn, self.decode_fn, self.weights, self.name = prefill, decode, weights, name
        self.vocab, self.n_ctx = _vocab_and_ctx(state_of)
        self._alloc = lambda: alloc_state(state_of)
        self.buffers = self._alloc()
        self.cache: dict = {}
        self._init_sampler(sampler)

    def _run(self, fn: func.FuncOp, tokens: np.ndarray, pos: int, output: bool,
             sampling: Sampling | None) -> LogitsStep | SampledStep:
        from strata.semantics.blueprint_interp import run_blueprint

        logits = run_blueprint(fn, self.weights, self.buffers, [tokens.reshape(-1, 1)], pos=pos, cache=self.cache)[1][-1]
        return self.sampler.choose(logits, tokens, pos, output, sampling)

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        if start == 0:
            self.reset()
        return self._run(self.prefill_fn, np.asarray(tokens, np.int32), start, False, sampling)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        return self._run(self.decode_fn, np.asarray([token], np.int32), pos, True, sampling)
