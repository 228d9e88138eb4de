"""How far one logit vector is from a reference's: the gate of Quadric Chimera's pipeline.

    m = logit_metrics(ours, reference)
    m["rank_of_ort_argmax"], m["rel_rmse_affine"], m["topk_overlap"]

- `rank_of_ort_argmax`: how many of our logits are strictly above ours at the reference's top-1
  token (0: our top-1 is the reference's, ties aside);
- `rel_rmse_affine`: fit ours ~ a * reference + b by least squares; the RMS of the residual over
  the reference's standard deviation (a constant offset is a softmax no-op, hence affine);
- `rel_rmse`: RMS of (ours - reference) over the reference's std;
- `topk_overlap`: the share of the reference's top-10 tokens among ours;
- `a`, `b`, `pearson`.
Everything in float64.
"""

from __future__ import annotations

import numpy as np


def logit_metrics(ours: np.ndarray, reference: np.ndarray, k: int = 10) -> dict[str, float]:
    y = np.asarray(ours, np.float64).reshape(-1)
    x = np.asarray(reference, np.float64).reshape(-1)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"logit vectors of {y.size} and {x.size} entries (need the same length, >= 2)")
    std = float(x.std())
    top = int(np.argmax(x))
    xc = x - x.mean()
    var = float((xc * xc).sum())
    a = float((xc * (y - y.mean())).sum() / var) if var else 0.0
    b = float(y.mean() - a * x.mean())
    resid = y - (a * x + b)
    rms = float(np.sqrt(np.mean(resid * resid)))
    k = min(k, x.size)
    ysd = float(y.std())
    return {
        "rank_of_ort_argmax": int((y > y[top]).sum()),
        "rel_rmse_affine": rms / std if std else (0.0 if rms == 0 else float("inf")),
        "rel_rmse": float(np.sqrt(np.mean((y - x) ** 2))) / std if std else float("inf"),
        "topk_overlap": len(set(np.argsort(-x, kind="stable")[:k]) & set(np.argsort(-y, kind="stable")[:k])) / k,
        "a": a,
        "b": b,
        "pearson": float((xc * (y - y.mean())).mean() / (std * ysd)) if std and ysd else 0.0,
    }


def metrics_line(m: dict[str, float]) -> str:
    return (f"rank_of_ort_argmax={m['rank_of_ort_argmax']} rel_rmse_affine={m['rel_rmse_affine']:.4f} "
            f"topk_overlap={m['topk_overlap']:.2f}")
