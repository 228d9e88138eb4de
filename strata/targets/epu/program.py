"""The EPU target's compiled program behind the runtime protocol (`strata.runtime.program`):
the g++-built driver stepped by the host, or the fixed interpreter on the fixed stage's IR.

    program = load(out)                      # ./model weights.bin --steps, kept running
    step = program.prefill([1, 2, 3], 0)     # one device step per token (the driver has one row)
    step.token, step.logits                  # FixedPoint32<frac> logits as exact floats
    program.close()

    reference = EpuInterpreter(model, out)   # the same steps by strata's fixed interpreter

The driver's logits are integers of FixedPoint32<frac>; a step gives them as float64 times
2**-frac, which is exact, so the greedy choice is the driver's own argmax of the integers.
The EPU decodes greedily: its driver has no sampler, and sampling parameters are refused.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strata.semantics.programs import LogitsStep, SequenceSampler
from strata.semantics.sampling_inputs import Sampling, needs_sampler
from strata.targets.epu.build import build_epu
from strata.targets.epu.stages import EpuError, smoothed_store

SAMPLING_REFUSED = ("the EPU decodes greedily (its driver has no sampler): use temperature 0 without penalties, "
                    "or sample on --target cpu or cuda")


def refuse_sampling(sampling: Sampling | None) -> None:
    """A one-line error for parameters that would need a sampler (greedy ones are the argmax)."""
    if needs_sampler(sampling):
        raise EpuError(SAMPLING_REFUSED)


def _no_sampler(*_: Any) -> Any:
    raise EpuError(SAMPLING_REFUSED)


def greedy_chooser(vocab: int) -> SequenceSampler:
    """The EPU's choice for one sequence: the argmax (sampling parameters refused)."""
    return SequenceSampler(vocab, _no_sampler)


class EpuProgram:
    """The built driver in its stepping mode, one process per program."""

    runtime = "epu driver"

    def __init__(self, out: str | Path, name: str = "model"):
        out = Path(out)
        binary = build_epu(out)
        self.name = name
        self.binary = binary
        self.proc = subprocess.Popen([str(binary.resolve()), str((out / "cpp" / "weights.bin").resolve()), "--steps"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.vocab, self.n_ctx, self.frac = (int(x) for x in self._read(3))

    def _read(self, n: int) -> np.ndarray:
        assert self.proc.stdout is not None
        raw = self.proc.stdout.read(4 * n)
        if raw is None or len(raw) != 4 * n:
            self.proc.wait()
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr is not None else ""
            raise EpuError(f"{self.binary}: {(err.strip().splitlines() or ['stopped'])[-1][:300]}")
        return np.frombuffer(raw, "<i4")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode("ascii"))
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._read(1)  # raises with the driver's last message

    def _step(self, token: int, pos: int) -> np.ndarray:
        self._send(f"step {int(token)} {int(pos)}\n")
        return self._read(self.vocab)

    def reset(self) -> None:
        self._send("reset\n")

    def chooser(self) -> SequenceSampler:
        return greedy_chooser(self.vocab)

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep:
        refuse_sampling(sampling)
        if start == 0:
            self.reset()
        for i, t in enumerate(tokens):
            logits = self._step(int(t), start + i)
        return LogitsStep(logits.astype(np.float64) * 2.0 ** -self.frac)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep:
        refuse_sampling(sampling)
        return LogitsStep(self._step(token, pos).astype(np.float64) * 2.0 ** -self.frac)

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __del__(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


class EpuInterpreter:
    """The fixed stage's decode step run by strata's fixed interpreter (exact int64), stepping as
    the driver steps: what the driver must compute, bit for bit."""

    runtime = "fixed interpreter"

    def __init__(self, model: Any, out: str | Path):
        from xdsl.dialects import func

        from strata.dialects import strata_context
        from strata.dialects.fixed import frac_of
        from strata.ir.text import parse_ir

        path = Path(out) / "fixed" / "fixed.mlir"
        self.fn = next(op for op in parse_ir(path.read_text(encoding="utf-8"), str(path), strata_context()).walk()
                       if isinstance(op, func.FuncOp))
        self.half = self.fn.function_type.inputs.data[2].get_shape()[1]  # type: ignore[attr-defined]
        self.theta = float(self.fn.attributes["fixed.rope_theta"].value.data)  # type: ignore[attr-defined]
        self.frac = frac_of(self.fn.function_type.outputs.data[0])
        self.weights = smoothed_store(model, Path(out))
        self.name = model.name
        self.vocab = int(self.fn.function_type.outputs.data[0].get_shape()[-1])  # type: ignore[attr-defined]
        self.n_ctx = int(self.fn.attributes["fixed.ctx"].value.data)  # type: ignore[attr-defined]
        self.reset()

    def chooser(self) -> SequenceSampler:
        return greedy_chooser(self.vocab)

    def reset(self) -> None:
        self.state: dict = {}
        self.cache: dict = {}

    def _step(self, token: int, pos: int) -> np.ndarray:
        from strata.semantics.fixed_interp import rope_tables, run_fixed

        cos, sin = rope_tables(1, 2 * self.half, self.theta, pos)
        (y,) = run_fixed(self.fn, self.weights, [np.array([token], np.int32), np.array([pos], np.int32), cos, sin],
                         state=self.state, cache=self.cache)
        return np.asarray(y[0], np.int64)

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep:
        refuse_sampling(sampling)
        if start == 0:
            self.reset()
        for i, t in enumerate(tokens):
            logits = self._step(int(t), start + i)
        return LogitsStep(logits.astype(np.float64) * 2.0 ** -self.frac)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep:
        refuse_sampling(sampling)
        return LogitsStep(self._step(token, pos).astype(np.float64) * 2.0 ** -self.frac)

    def close(self) -> None:
        pass


def load(out_dir: str | Path, weights: Any = None, **options: Any) -> EpuProgram:
    """The driver of the EPU output `out_dir` (built with g++ first if needed), stepping. The
    weights are in its weights.bin: `weights` is not read."""
    return EpuProgram(out_dir, **options)
