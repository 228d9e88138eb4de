"""ggml's Q8_0 / Q4_0 rounding (strata/ir/ggml_blocks.py): bit for bit the gguf package's
quantize-then-dequantize (its numpy port of ggml-quants.c), and idempotent."""

from __future__ import annotations

import numpy as np
import pytest

from strata.ir.ggml_blocks import BLOCK, round_blocks

gguf = pytest.importorskip("gguf")
TYPES = {"int8": gguf.GGMLQuantizationType.Q8_0, "int4": gguf.GGMLQuantizationType.Q4_0}


@pytest.mark.parametrize("elem", ["int8", "int4"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 500.0])
def test_round_blocks_is_ggmls(elem: str, scale: float) -> None:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((5, 3 * BLOCK)) * scale).astype(np.float32)
    w[0, :BLOCK] = 0  # an all-zero block
    w[1, BLOCK:2 * BLOCK] = -w[1, BLOCK:2 * BLOCK].max()  # ties for the largest magnitude
    ref = gguf.quants.dequantize(gguf.quants.quantize(w, TYPES[elem]), TYPES[elem]).reshape(w.shape)
    got = round_blocks(w, elem)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(round_blocks(got, elem), got)  # a Q8_0 / Q4_0 weight stays as it is
    assert not np.array_equal(got, w)


def test_round_blocks_refuses_a_partial_block() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        round_blocks(np.zeros((2, 40), np.float32), "int8")
