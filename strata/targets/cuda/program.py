"""The CUDA target's compiled program behind the runtime protocol (`strata.runtime.program`):
the generated host (`OUT/model.py` with `OUT/kernels.py`) on a GPU, or in Triton's interpreter
on the CPU.

    program = load(out, store, interpret=True)
    step = program.prefill([1, 2, 3], 0)      # the argmax is taken on the device
    step.token, step.logits                   # read back when asked for
    step = program.decode(step.token, 3)      # CUDA-graph replay on a GPU
    step = program.decode(step.token, 4, params)  # drawn by the compiled sampler, beside the argmax
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strata.artifacts.modules import import_generated
from strata.errors import StrataError
from strata.semantics.sampling_inputs import Sampling, SequenceTokens, has_penalties, needs_sampler, token_mask_of

MODEL_PY = "model.py"


class CudaProgramError(StrataError):
    """A compiled CUDA model that cannot be loaded or run."""


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

    def chooser(self):
        """The cuda program chooses on the device, beside its step (the logits stay there): it
        has no chooser over host logits, and runs no batched entry a scheduler would call."""
        raise CudaProgramError("the cuda program draws its tokens on the device within its steps; it has no "
                               "chooser over host logits (batched serving runs on --target cpu)")

    def close(self) -> None:
        pass


def load(out_dir: str | Path, weights: Any, *, interpret: bool = False, group: Any = None) -> CudaProgram:
    """The program of the cuda stage `out_dir` bound to `weights` (llama.cpp tensor names to
    arrays or tensors); `interpret`: in Triton's interpreter on the CPU; `group`: the
    torch.distributed process group of a tensor-parallel program's ranks."""
    return CudaProgram(load_model_py(out_dir), weights, interpret, group)
