"""The EPU gate (seed 004): the EPU program's first-token logits against ONNX Runtime's on the
same int4 graph (MatMulNBits) that the w4a16 stage wrote.

    metrics = score_epu(model, out, [1, 2, 3])     # rank_of_ort_argmax, rel_rmse_affine, topk_overlap, ...

The reference is built from the w4a16 stage before any custom-op replacement; the bar is the
seed's: the same top-1 token and rel_rmse_affine <= 0.08.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def ort_logits(model: Any, out: str | Path, prompt: Sequence[int]) -> np.ndarray:
    """ONNX Runtime's first-token logits on the w4a16 stage's int4 graph: the gate's reference."""
    from strata.quant.w4a16 import W4A16Weights
    from strata.verify.onnx_judge import llama_prefill_onnx, packed_of, run_onnx

    stage = W4A16Weights.open(Path(out) / "w4a16" / "q")
    ids = np.asarray(prompt, np.int64).reshape(-1)
    (y,) = run_onnx(llama_prefill_onnx(model.config, stage, packed_of(stage), stage.block, len(ids)), {"input_ids": ids})
    return np.asarray(y[-1], np.float64)


def score_epu(model: Any, out: str | Path, prompt: Sequence[int]) -> dict[str, float]:
    """The gate's metrics: the EPU driver's first-token logits (built with g++ if needed)
    against ONNX Runtime's on the same int4 graph."""
    from strata.targets.epu.program import EpuProgram
    from strata.verify.metrics import logit_metrics

    program = EpuProgram(out, model.name)
    try:
        logits = program.prefill(list(prompt), 0).logits
    finally:
        program.close()
    return logit_metrics(logits, ort_logits(model, out, prompt))
