"""The runtime protocol: what a loaded program of any target exposes to the engine.

    program = open_program(model, "cpu")       # strata.runtime.opener: compiled, loaded, bound
    step = program.prefill([1, 2, 3], 0)       # a new sequence at position 0
    step.token, step.logits                    # the program's choice, the last row's logits
    step = program.decode(step.token, 3)
    step = program.decode(step.token, 4, SamplingParams(temperature=0.8, seed=1))  # its sampler's draw
    logits, = program.call("decode_rows", tokens=[[5], [9]], positions=[3, 7])   # any entry of the module level
    chooser = program.chooser()                # one sequence's next token, from logits a `call` returned
    saved = program.read_slot(2)               # slot 2's recurrent state (a hybrid's), for a prefix cache
    program.write_slot(0, saved)               # ... restored: a sequence in slot 0 continues from it
    step = chooser.choose(logits[0], [5], 3, True, params)
    program.close()

Each target implements it in its own folder (`strata/targets/<name>/program.py`: the CPU's
generated numpy module, the CUDA host, the EPU driver stepped over a pipe, onnxruntime
sessions), and the reference interpreters do too (`strata.semantics.programs`). Everything above
it (the generation loop, text, sampling, scheduling, the server) is written once, here.

Sampling: given `SamplingParams` (`strata.runtime.sampling`), a step's token is drawn by the
program's own compiled sampler (`@sample_logits`, `op.sample`; on the device for cuda) from the
step's logits, keyed by (the seed, the position the token takes), with the penalties over the
tokens the program was fed for this sequence (prefill: prompt, decode: output). Without them,
or with temperature 0 and no penalties, the token is the program's argmax, as before. The EPU
decodes greedily and refuses sampling; onnxruntime samples on the host with the numpy sampler.

The choice is written once, as a `Chooser` (`strata.semantics.programs.SequenceSampler`): a
program's own prefill and decode choose with one, and the scheduler, which runs a batched entry
by `call` and gets rows of logits back, asks the program for one per sequence (`chooser`), so a
request gets the same ids batched or alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from strata.runtime.sampling import SamplingParams


class Step(Protocol):
    """One step's result. `token`: the id the program chose (its argmax: greedy, or its sampler's
    draw); `logits`: the last row's logits [vocab] on the host (a device program copies them
    only when asked), as the model computed them (before penalties and temperature)."""

    @property
    def token(self) -> int: ...

    @property
    def logits(self) -> np.ndarray: ...


class Chooser(Protocol):
    """One sequence's choice of its next tokens: the argmax without sampling parameters (or with
    greedy ones), else the program's compiled sampler keyed by (the seed, the position the token
    takes) over the tokens fed to this sequence so far."""

    def choose(self, logits: np.ndarray, fed: Sequence[int], start: int, output: bool,
               sampling: SamplingParams | None) -> Step:
        """The step that fed `fed` at positions start.. (output tokens when `output`: a decode)
        and computed `logits` (its last row, [vocab])."""


class Program(Protocol):
    """A compiled model loaded with its weights and its state (the KV cache, recurrent state)."""

    #: The model's name, its vocabulary size, and how many positions its state holds.
    name: str
    vocab: int
    n_ctx: int
    #: What runs it, for messages ("numpy", "cuda", "Triton interpreter", "epu driver", ...).
    runtime: str

    def reset(self) -> None:
        """Forget every sequence: the state as it was when loaded."""

    def prefill(self, tokens: Sequence[int], start: int, sampling: SamplingParams | None = None) -> Step:
        """Run `tokens` at positions start.. (start 0 begins a new sequence); their KV rows and
        recurrent state are written. `sampling` (with a seed): the token is drawn by the sampler."""

    def decode(self, token: int, pos: int, sampling: SamplingParams | None = None) -> Step:
        """Run one token at position `pos` (an output token, for the penalties)."""

    def close(self) -> None:
        """Release what the program holds (a driver process, device memory)."""

    def chooser(self) -> Chooser:
        """A fresh `Chooser` for one sequence (its token counts empty) that draws as this
        program's own steps draw; a program that decodes greedily refuses sampling parameters
        in it as in its steps."""

    #: Each entry the program runs by `call` -> (its arguments, its results): the arguments as
    #: (name, shape or None for a scalar, numpy dtype name), a shape's -1 being the call's size
    #: (S or P); the results as (shape, numpy dtype name), None for the call's size. A program
    #: that runs only the generation loop's prefill and decode has none.
    entries: Mapping[str, tuple[tuple, tuple]]

    def call(self, entry: str, **inputs) -> tuple[np.ndarray, ...]:
        """Run `entry` (the module level's entries: decode_rows, prefill_slots, ...) on `inputs`, its
        arguments by name, on the program's state (the calls of one program share its KV cache
        and recurrent state); returns its results. Bad inputs raise ValueError naming the
        argument."""

    def read_slot(self, slot: int) -> dict[str, np.ndarray]:
        """A copy of what sequence slot `slot` of the `call` entries keeps besides the KV pages
        (a hybrid family's conv and Gated DeltaNet state, every layer) by buffer name: the
        state after the last token the slot's sequence ran. {} for a program that keeps none
        (attention only: its KV cells are addressed by the caller)."""

    def write_slot(self, slot: int, state: Mapping[str, np.ndarray]) -> None:
        """Set sequence slot `slot` to `state` (as `read_slot` gave it, maybe of another slot): a
        sequence continued in that slot at position p > 0 reads it as the state after p tokens.
        A state of other names or shapes raises ValueError."""
