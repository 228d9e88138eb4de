"""The gate's logit metrics (strata/verify/metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest

from strata.verify.metrics import logit_metrics, metrics_line


def test_metrics():
    ref = np.random.default_rng(0).standard_normal(1000)
    m = logit_metrics(ref, ref)
    assert m["rank_of_ort_argmax"] == 0 and m["rel_rmse_affine"] == 0 and m["topk_overlap"] == 1
    # an affine change is free for rel_rmse_affine (softmax ignores the offset), not for rel_rmse
    m = logit_metrics(1.5 * ref + 3.0, ref)
    assert m["rel_rmse_affine"] < 1e-12 and m["rel_rmse"] > 1 and m["a"] == pytest.approx(1.5)
    assert m["b"] == pytest.approx(3.0)
    noise = np.random.default_rng(1).standard_normal(1000)
    m = logit_metrics(ref + 0.1 * noise, ref)
    assert 0.09 < m["rel_rmse_affine"] < 0.11
    ours = ref.copy()
    top = int(np.argmax(ref))
    ours[np.argsort(-ref)[1:4]] = ref[top] + 1  # three tokens overtake the reference's top-1
    assert logit_metrics(ours, ref)["rank_of_ort_argmax"] == 3
    assert metrics_line(logit_metrics(ours, ref)).startswith("rank_of_ort_argmax=3 rel_rmse_affine=")
    with pytest.raises(ValueError, match="same length"):
        logit_metrics(ref[:5], ref)
