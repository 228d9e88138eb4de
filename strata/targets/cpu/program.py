"""The CPU target's compiled program behind the runtime protocol (`strata.runtime.program`).

    program = load(out, store)          # OUT/model.py, bound to the weights
    step = program.prefill([1, 2, 3], 0)
    step.token, step.logits             # the greedy choice, the last row's logits
    step = program.decode(step.token, 3, params)   # drawn by the generated `sample_logits`
    logits, = program.call("decode_rows", tokens=[[5], [9]], positions=[3, 7])   # an entry compiled in
    saved = program.read_slot(2)        # sequence slot 2's recurrent state (a hybrid's), restored by write_slot

The compile itself (lowering, the stage directory and its manifest) is the pipeline's; this
file only runs what the target wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.modules import import_generated
from strata.dialects.op import SAMPLER
from strata.errors import StrataError
from strata.semantics.host_inputs import check_args
from strata.semantics.programs import LogitsStep, SampledStep, SequenceSampler
from strata.semantics.sampling_inputs import Sampling

MODEL_PY = "model.py"


def load_compiled(out_dir: str | Path):
    """Import the generated `model.py` of `out_dir`."""
    return import_generated(Path(out_dir) / MODEL_PY, what="the model for the cpu target")


class CpuProgram:
    """A generated `Model` (one method per entry, the KV cache preallocated) as a program; its
    `sample_logits` entry draws the sampled tokens."""

    runtime = "numpy"

    def __init__(self, instance: Any):
        self.model = instance
        if getattr(instance, "native_lib", None) is not None:  # the native kernels compute the products
            self.runtime = "native"
        self.name = str(instance.MODEL_NAME or "model")
        layouts = getattr(instance, "LAYOUTS", {})
        if "decode" in instance.OUTPUTS:
            self.vocab = int(instance.OUTPUTS["decode"][0][-1])
        else:  # a program of other entries
            self.vocab = int(next(iter(layouts.values()))["Vocab"]) if layouts else 0
        self.n_ctx = int(instance.N_CTX)
        self.sampler = self.chooser()
        args = getattr(instance, "ARGS", {})
        results = getattr(instance, "RESULTS", {})
        self.entries = {e: (tuple(args[e]), tuple(results[e])) for e in instance.ENTRIES if e in args and e in results}
        # The generation loop steps one sequence: a program of several rows runs by `call`.
        self.rows = int(layouts.get("decode", {}).get("Batch", 1))

    def chooser(self) -> SequenceSampler:
        return SequenceSampler(self.vocab, self._sample_logits)

    def _sample_logits(self, *args: Any):
        if SAMPLER not in self.model.ENTRIES:
            raise StrataError(f"this compiled cpu model has no @{SAMPLER} entry (compiled before the sampler was "
                              "part of the program); recompile it to sample")
        return getattr(self.model, SAMPLER)(*args)

    def reset(self) -> None:
        self.model.reset()

    def _one_sequence(self, what: str) -> None:
        if self.rows != 1:
            raise StrataError(f"{what}: this program runs Batch = {self.rows} rows; the generation loop steps one "
                              "sequence (run its entries with strata call)")

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        self._one_sequence("prefill")
        if start == 0:  # a new sequence: the recurrent state starts from zero
            self.model.reset()
        ids = np.asarray(tokens, np.int32)
        return self.sampler.choose(self.model.prefill(ids, start)[-1], ids, start, False, sampling)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        self._one_sequence("decode")
        return self.sampler.choose(self.model.decode(int(token), pos)[-1], [int(token)], pos, True, sampling)

    def call(self, entry: str, **inputs: Any) -> tuple[np.ndarray, ...]:
        if entry not in self.entries:
            raise KeyError(entry)
        method = getattr(self.model, entry)
        if entry in ("prefill", "decode") and entry not in getattr(self.model, "LAYOUTS", {}):
            # One sequence: the method takes the tokens flat and the start position.
            args = check_args(entry, self.entries[entry][0], inputs)
            tokens = args["token" if entry == "decode" else "tokens"].reshape(-1)
            out = method(int(tokens[0]) if entry == "decode" else tokens, int(args["pos"]))
        else:
            out = method(**inputs)
        return tuple(np.asarray(x) for x in out) if isinstance(out, tuple) else (np.asarray(out),)

    def read_slot(self, slot: int) -> dict[str, np.ndarray]:
        self._check_slot(slot)
        return self.model.read_slot(slot) if hasattr(self.model, "read_slot") else {}

    def write_slot(self, slot: int, state: Mapping[str, np.ndarray]) -> None:
        self._check_slot(slot)
        names = tuple(getattr(self.model, "SLOT_STATES", ()))
        if set(state) != set(names):
            raise ValueError(f"write_slot: the state names {sorted(state)} are not the program's slot states "
                             f"{sorted(names)}")
        for name in names:
            want = self.model.STATE[name][0][1:]
            if np.shape(state[name]) != tuple(want):
                raise ValueError(f"write_slot: state {name!r} has shape {list(np.shape(state[name]))}, one slot "
                                 f"holds {list(want)}")
        if names:
            self.model.write_slot(slot, state)

    def _check_slot(self, slot: int) -> None:
        slots = min((self.model.STATE[name][0][0] for name in getattr(self.model, "SLOT_STATES", ())), default=None)
        if slots is not None and not 0 <= slot < slots:
            raise ValueError(f"slot {slot} is not one of the {slots} sequence slots of the state")

    def close(self) -> None:
        pass


def load(out_dir: str | Path, weights: Any, group: Any = None, threads: int | None = None,
         **options: Any) -> CpuProgram:
    """The program of the cpu stage `out_dir`, bound to `weights` (a mapping from llama.cpp
    tensor names to arrays, e.g. a WeightStore); a tensor-parallel one (RANKS > 1) binds this
    rank's pieces and runs its collectives on `group` (a torch.distributed process group).
    `threads`: the native kernels' thread pool (None: the cores this process may use); a
    program of numpy kernels only ignores it."""
    if options:
        raise TypeError(f"the cpu target's program takes no options but group and threads, got "
                        f"{', '.join(sorted(options))}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise StrataError(f"threads must be a positive integer, got {threads!r}")
    module = load_compiled(out_dir)
    native = {"threads": threads} if hasattr(module, "NATIVE_LIBRARY") else {}
    if int(getattr(module, "RANKS", 1)) > 1:
        return CpuProgram(module.Model(weights, group, **native))
    if group is not None:
        raise TypeError("this cpu program runs on one rank: it takes no process group")
    return CpuProgram(module.Model(weights, **native))
