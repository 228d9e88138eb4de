"""The EPU gate (Quadric Chimera's): the EPU program's logits against ONNX Runtime's on the same int4
graph (MatMulNBits) that the w4a16 stage wrote.

    metrics = score_epu(model, out, [1, 2, 3])     # rank_of_ort_argmax, rel_rmse_affine, topk_overlap, ...
    result = gate_steps(model, out, [1, 2, 3], steps=4)   # the same on each of 4 greedy steps
    lines, passed = score_model("M", [1, 2, 3], steps=4)   # `strata score`: compile (or reuse), gate

The reference is built from the w4a16 stage before any custom-op replacement; the bar is
Chimera's: the same top-1 token and rel_rmse_affine <= 0.08. On a step after the first, ORT
prefills the prompt and the tokens the EPU chose before it (the EPU's own path), so both sides
see the same context at every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError

#: Chimera's bar on rel_rmse_affine (its best build reached 0.0448).
MAX_REL_RMSE_AFFINE = 0.08


def ort_logits(model: Any, out: str | Path, prompt: Sequence[int]) -> np.ndarray:
    """ONNX Runtime's logits for the last token of `prompt` on the w4a16 stage's int4 graph: the gate's reference."""
    from strata.quant.w4a16 import W4A16Weights
    from strata.verify.onnx_judge import llama_prefill_onnx, packed_of, run_onnx

    stage = W4A16Weights.open(Path(out) / "w4a16" / "q")
    ids = np.asarray(prompt, np.int64).reshape(-1)
    (y,) = run_onnx(llama_prefill_onnx(model.config, stage, packed_of(stage), stage.block, len(ids)), {"input_ids": ids})
    return np.asarray(y[-1], np.float64)


def score_epu(model: Any, out: str | Path, prompt: Sequence[int]) -> dict[str, float]:
    """The gate's metrics: the EPU driver's first-token logits (built with g++ if needed)
    against ONNX Runtime's on the same int4 graph."""
    return gate_steps(model, out, prompt, 1).steps[0]


@dataclass
class GateResult:
    """The gate on `len(steps)` greedy steps: each step's `logit_metrics`, the EPU's tokens."""

    steps: list[dict[str, float]]
    ids: list[int]
    max_rel_rmse_affine: float = MAX_REL_RMSE_AFFINE

    def worst(self) -> dict[str, float]:
        """The worst of each figure over the steps (highest rank and error, lowest overlap)."""
        return {"rank_of_ort_argmax": max(m["rank_of_ort_argmax"] for m in self.steps),
                "rel_rmse_affine": max(m["rel_rmse_affine"] for m in self.steps),
                "topk_overlap": min(m["topk_overlap"] for m in self.steps)}

    @property
    def passed(self) -> bool:
        w = self.worst()
        return w["rank_of_ort_argmax"] == 0 and w["rel_rmse_affine"] <= self.max_rel_rmse_affine


def gate_steps(model: Any, out: str | Path, prompt: Sequence[int], steps: int = 1,
               max_rel_rmse_affine: float = MAX_REL_RMSE_AFFINE) -> GateResult:
    """The EPU driver (built with g++ if needed) generates `steps` tokens greedily from `prompt`;
    each step's logits are scored against ORT's on the prompt and the EPU's tokens before it."""
    from strata.targets.epu.program import EpuProgram
    from strata.verify.metrics import logit_metrics

    program = EpuProgram(out, model.name)
    rows: list[np.ndarray] = []
    ids: list[int] = []
    try:
        logits = program.prefill(list(prompt), 0).logits
        for i in range(steps):
            rows.append(np.asarray(logits, np.float64))
            ids.append(int(np.argmax(rows[-1])))
            if i + 1 < steps:
                logits = program.decode(ids[-1], len(prompt) + i).logits
    finally:
        program.close()
    metrics = [logit_metrics(row, ort_logits(model, out, [*prompt, *ids[:i]])) for i, row in enumerate(rows)]
    return GateResult(metrics, ids, max_rel_rmse_affine)


def _figures(m: Mapping[str, float]) -> str:
    return (f"rank_of_ort_argmax={m['rank_of_ort_argmax']} rel_rmse_affine={m['rel_rmse_affine']:.4f} "
            f"topk_overlap={m['topk_overlap']:.2f}")


def score_model(model_path: str | Path, prompt: Sequence[int], steps: int = 1, knobs: Mapping[str, Any] | None = None,
                cache_dir: str | Path | None = None, max_rel_rmse_affine: float = MAX_REL_RMSE_AFFINE,
                target_name: str = "epu") -> tuple[list[str], bool]:
    """`strata score`: compile `model_path` for the EPU into its cache (reused while it matches;
    default the one `strata run --target epu` uses), run the gate on `steps` greedy steps and
    return (the lines to print, whether it passed). The last line is the worst figures over the
    steps and `gate=pass` or `gate=fail`."""
    import math

    from strata.pipeline import cached_compile, load_model
    from strata.runtime.opener import cache_dir_of, resolved_knobs
    from strata.runtime.request import check_request
    from strata.verify.onnx_judge import check_llama

    if target_name != "epu":
        raise StrataError(f"score: the gate scores the EPU target against ONNX Runtime; --target {target_name} "
                          "has no gate (use --target epu)")
    if not (isinstance(steps, int) and steps >= 1):
        raise StrataError(f"score: --steps must be at least 1, got {steps}")
    if not (math.isfinite(max_rel_rmse_affine) and 0 < max_rel_rmse_affine <= 1):
        raise StrataError(f"score: --max-rel-rmse-affine must be a number in (0, 1], got {max_rel_rmse_affine}")
    model = load_model(model_path)
    check_llama(model.config)  # the reference graph's reach, before the compile
    knobs = resolved_knobs(model, target_name, knobs)
    check_request(prompt, steps, int(model.config.vocab_size), int(knobs["ctx"]))
    cache = Path(cache_dir) if cache_dir is not None else cache_dir_of(model, target_name)
    out, rebuilt = cached_compile(model, target_name, cache, knobs)
    result = gate_steps(model, out, prompt, steps, max_rel_rmse_affine)
    lines = [f"compiled {model.source} for epu into {out} ({rebuilt or 'reused'})"]
    lines += [f"step {i}: token {tok} {_figures(m)}" for i, (tok, m) in enumerate(zip(result.ids, result.steps))]
    verdict = "pass" if result.passed else "fail"
    lines.append(f"{_figures(result.worst())} gate={verdict} (bar: rank 0, rel_rmse_affine <= {max_rel_rmse_affine:g}"
                 f"{f', worst of {steps} steps' if steps > 1 else ''})")
    return lines, result.passed
