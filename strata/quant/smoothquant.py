"""SmoothQuant carried out on the weights: the groups and the alpha that the `smoothquant`
pass recorded (`strata.passes.smoothquant`) applied to a weight store, exactly in f32.

    changed, scales = smooth_weights(store, groups, ranges, alpha)   # norm / s, projections * s

For activations with per-channel max |x| a (from `strata calibrate`) feeding projections W_i,
s = max(a^alpha / max_i|W_i|^(1-alpha), eps) per input channel; the norm weight before them is
divided by s and each projection's columns multiplied by it, so the model computes the same
function while the projections' inputs are flatter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from strata.passes.smoothquant import EPS, SmoothGroup, SmoothQuantError



def smoothing_scales(act_absmax: np.ndarray, weights: Sequence[np.ndarray], alpha: float) -> np.ndarray:
    """s [K] for activations with per-channel max |x| `act_absmax` [K] feeding `weights` ([N_i, K] each)."""
    a = np.asarray(act_absmax, np.float64)
    wmax = np.maximum(np.max([np.abs(np.asarray(w, np.float64)).max(axis=0) for w in weights], axis=0), EPS)
    return np.maximum(a ** alpha / wmax ** (1.0 - alpha), EPS).astype(np.float32)


def smooth_weights(weights: Any, groups: Sequence[SmoothGroup], ranges: Mapping[str, Any],
                   alpha: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the changed tensors by name, s by norm name): each norm weight / s, each projection's
    columns * s. `weights` has `.get(name)` (a WeightStore) or is a mapping."""
    def get(name: str) -> np.ndarray:
        return np.asarray(weights[name] if isinstance(weights, Mapping) else weights.get(name), np.float32)

    linears = ranges.get("linears", {})
    changed: dict[str, np.ndarray] = {}
    scales: dict[str, np.ndarray] = {}
    for g in groups:
        ws = [get(w) for w in g.linears]
        missing = [w for w in g.linears if w not in linears]
        if missing:
            raise SmoothQuantError(f"no calibration range for linear '{missing[0]}' (linears.{missing[0]})")
        acts = [np.asarray(linears[w]["absmax"], np.float32) for w in g.linears]
        k = ws[0].shape[-1]
        if any(a.shape != (k,) for a in acts):
            raise SmoothQuantError(f"the ranges of '{g.linears[0]}' have {acts[0].shape[0]} channels, K = {k}")
        s = smoothing_scales(np.max(acts, axis=0), ws, alpha)
        scales[g.norm] = s
        changed[g.norm] = (get(g.norm) / s).astype(np.float32)
        for name, w in zip(g.linears, ws):
            changed[name] = (w * s[None, :]).astype(np.float32)
    return changed, scales
