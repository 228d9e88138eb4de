"""The CUDA target's compiled program behind the runtime protocol (`strata.runtime.program`):
the generated host (`OUT/model.py` with `OUT/kernels.py`) on a GPU, or in Triton's interpreter
on the CPU.

    program = load(out, store, interpret=True)
    step = program.prefill([1, 2, 3], 0)      # the argmax is taken on the device
    step.token, step.logits                   # read back when asked for
    step = program.decode(step.token, 3)      # CUDA-graph replay on a GPU
    step = program.decode(step.token, 4, params)  # drawn by the compiled sampler, beside the argmax
    logits, = program.call("step_paged", ...)  # a batched entry compiled in (--set entries=...)
    chooser = program.chooser()               # a sequence's next token from those host logits
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.modules import import_generated
from strata.errors import StrataError
from strata.semantics.host_inputs import check_args
from strata.semantics.programs import SequenceSampler
from strata.semantics.sampling_inputs import Sampling, SequenceTokens, has_penalties, needs_sampler, token_mask_of

MODEL_PY = "model.py"


class CudaProgramError(StrataError):
    """A compiled CUDA model that cannot be loaded or run."""


class CudaCallError(CudaProgramError, ValueError):
    """An entry's call refused (its arguments) or failed: a ValueError, as every program's `call`
    raises for its arguments."""


def load_model_py(out_dir: str | Path):
    """Import `out_dir/model.py` (which loads `kernels.py` beside it)."""
    return import_generated(Path(out_dir) / MODEL_PY, requires=("kernels.py",), what="the model for cuda")


class CudaStep:
    """A step's device results: the chosen id [1, 1] and the last row's logits [1, vocab]."""

    def __init__(self, token, logits):
        self._token, self._logits = token, logits

    @property
    def token(self) -> int:
        return int(self._token.reshape(-1)[0].item())

    @property
    def logits(self):
        return self._logits.reshape(-1).float().cpu().numpy()


class CudaProgram:
    """A generated CUDA `Model` (device weights, state, kernels; decode captured as a CUDA
    graph on a GPU) as a program."""

    def __init__(self, module: Any, weights: Any, interpret: bool, group: Any = None):
        # one rank of a tensor-parallel program takes its ranks' process group; its decode runs
        # uncaptured (collectives inside a CUDA graph have not been run on GPUs here yet)
        ranks = {"group": group} if group is not None else {}
        try:
            self.model = module.Model(weights, interpret=interpret, cuda_graph=not interpret and group is None, **ranks)
        except module.ModelError as e:
            raise CudaProgramError(str(e)) from None
        self.module = module
        self.runtime = "Triton interpreter" if interpret else "cuda"
        self.name = str(self.model.MODEL_NAME or "model")
        self.vocab = int(self.model.VOCAB)
        self.n_ctx = int(self.model.N_CTX)
        self.tokens = SequenceTokens(self.vocab)
        #: entry -> (its arguments, its results (not listed)): prefill, decode and the batched ones
        one = {"prefill": (("tokens", (1, -1), "int32"), ("pos", None, "int32")),
               "decode": (("token", (1, 1), "int32"), ("pos", None, "int32"))}
        self.entries = {e: (tuple(a), ()) for e, a in {**one, **getattr(self.model, "ARGS", {})}.items()}

    def reset(self) -> None:
        self.model.reset()

    def _run(self, fn, args, fed, start: int, output: bool, sampling: Sampling | None) -> CudaStep:
        try:
            token, logits = fn(*args)
            self.tokens.feed(fed, start, output)
            if needs_sampler(sampling):
                # the logits stay on the device: the sampler reads them where the step left them
                counts = self.tokens.counts() if has_penalties(sampling) else (None, None)
                token = self.model.sample_logits(
                    logits, sampling.key, start + len(fed), temperature=sampling.temperature, top_k=sampling.top_k,
                    top_p=sampling.top_p, min_p=sampling.min_p, repetition_penalty=sampling.repetition_penalty,
                    presence_penalty=sampling.presence_penalty, frequency_penalty=sampling.frequency_penalty,
                    prompt_counts=counts[0], output_counts=counts[1], mask=token_mask_of(sampling))
            return CudaStep(token, logits)
        except self.module.ModelError as e:
            raise CudaProgramError(str(e)) from None

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> CudaStep:
        tokens = [int(t) for t in tokens]
        return self._run(self.model.prefill, (tokens, start), tokens, start, False, sampling)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> CudaStep:
        return self._run(self.model.decode, (int(token), pos), [int(token)], pos, True, sampling)

    def chooser(self) -> SequenceSampler:
        """One sequence's choice from the host logits a batched entry returned: the argmax, or
        the compiled sampler (on the device) on them."""
        return SequenceSampler(self.vocab, self._sample_rows)

    def _sample_rows(self, logits, key, step, temperature, top_k, top_p, min_p, repetition_penalty,
                     presence_penalty, frequency_penalty, prompt_counts, output_counts, mask):
        import torch

        try:
            ids = self.model.sample_logits(
                torch.from_numpy(np.ascontiguousarray(logits, np.float32)).to(self.model.device), key,
                int(np.asarray(step).reshape(-1)[0]), temperature=float(temperature[0]), top_k=int(top_k[0]),
                top_p=float(top_p[0]), min_p=float(min_p[0]), repetition_penalty=float(repetition_penalty[0]),
                presence_penalty=float(presence_penalty[0]), frequency_penalty=float(frequency_penalty[0]),
                prompt_counts=prompt_counts, output_counts=output_counts, mask=mask)
        except self.module.ModelError as e:
            raise CudaProgramError(str(e)) from None
        return ids.reshape(-1).cpu().numpy()

    def call(self, entry: str, **inputs: Any) -> tuple[np.ndarray, ...]:
        """An entry by name (`entries`): prefill and decode step the one sequence (row 0 of the
        cache), every other entry runs the call's tokens of many rows at once."""
        if entry not in self.entries:
            raise KeyError(entry)
        try:
            if entry in ("prefill", "decode"):
                args = check_args(entry, self.entries[entry][0], inputs)
                tokens = args["token" if entry == "decode" else "tokens"].reshape(-1)
                if entry == "prefill":
                    _, logits = self.model.prefill(tokens, int(args["pos"]))
                else:
                    _, logits = self.model.decode(int(tokens[0]), int(args["pos"]))
                return (logits.reshape(1, -1).float().cpu().numpy(),)
            return self.model.call(entry, **inputs)
        except ValueError as e:  # check_args, and the model's ModelError (a ValueError)
            raise CudaCallError(str(e)) from None

    def read_slot(self, slot: int) -> dict:
        """Slot `slot`'s recurrent state (a hybrid's; empty for another family or a program of
        prefill and decode only), for the scheduler's prefix cache."""
        read = getattr(self.model, "read_slot", None)
        if read is None:
            return {}
        self._check_slot(slot)
        return read(slot)

    def write_slot(self, slot: int, state) -> None:
        self._check_slot(slot)
        slots = getattr(self.model, "slots", {})
        if set(state) != set(slots):
            raise ValueError(f"write_slot: the state names {sorted(state)} are not the program's slot states "
                             f"{sorted(slots)}")
        for name, buf in slots.items():
            if tuple(np.shape(state[name])) != tuple(buf.shape[1:]):
                raise ValueError(f"write_slot: state {name!r} has shape {list(np.shape(state[name]))}, one slot "
                                 f"holds {list(buf.shape[1:])}")
        if slots:
            self.model.write_slot(slot, state)

    def _check_slot(self, slot: int) -> None:
        slots = next(iter(getattr(self.model, "slots", {}).values()), None)
        if slots is not None and not 0 <= slot < slots.shape[0]:
            raise ValueError(f"slot {slot} is not one of the {slots.shape[0]} sequence slots of the state")

    def close(self) -> None:
        pass


def load(out_dir: str | Path, weights: Any, *, interpret: bool = False, group: Any = None) -> CudaProgram:
    """The program of the cuda stage `out_dir` bound to `weights` (llama.cpp tensor names to
    arrays or tensors); `interpret`: in Triton's interpreter on the CPU; `group`: the
    torch.distributed process group of a tensor-parallel program's ranks."""
    return CudaProgram(load_model_py(out_dir), weights, interpret, group)
