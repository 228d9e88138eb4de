"""FixedPoint32 arithmetic primitives: rounding half away from zero, saturation, the exact
integer square root and bit length, and the stated accuracy of exp of negatives and sigmoid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from strata.semantics.fixed_arith import (
    INT32_MAX,
    INT32_MIN,
    bit_length,
    exp_neg,
    from_fixed,
    isqrt,
    rdiv,
    rshift_round,
    sigmoid_q31,
    to_fixed,
)

RNG = np.random.default_rng(0)


def test_rounding_is_half_away_from_zero():
    np.testing.assert_array_equal(rshift_round(np.array([-3, -1, 1, 3, 5, -5, 4]), 1), [-2, -1, 1, 2, 3, -3, 2])
    np.testing.assert_array_equal(rdiv(np.array([-5, 5, 7, -7, 6]), 2), [-3, 3, 4, -4, 3])
    np.testing.assert_array_equal(to_fixed(np.array([0.5, -0.5, 1.5, -2.5]), 0), [1, -1, 2, -3])
    assert to_fixed(np.array([1e9]), 10)[0] == INT32_MAX and to_fixed(np.array([-1e9]), 10)[0] == INT32_MIN


def test_isqrt_and_bit_length_exact():
    v = np.concatenate([np.arange(0, 2000), RNG.integers(0, 2 ** 62, 5000), [2 ** 62 - 1, 2 ** 61, 2 ** 53 + 1]]).astype(np.int64)
    assert [int(r) for r in isqrt(v)] == [math.isqrt(int(x)) for x in v]
    assert [int(b) for b in bit_length(v)] == [int(x).bit_length() for x in v]


@pytest.mark.parametrize("frac", [31, 27, 16, 4, 0])
def test_exp_of_negatives_within_1_25_lsb_of_q31(frac):
    # Stated accuracy: |E - e^d * 2^31| <= 1.25 (measured max 1.23 over these grids); e^0 exact.
    lo = -min(40.0, 2.0 ** (31 - frac) - 1)
    d = to_fixed(np.concatenate([np.linspace(lo, 0, 100001), [0.0]]), frac)
    e = exp_neg(d, frac)
    assert np.abs(e - np.exp(from_fixed(d, frac)) * 2.0 ** 31).max() <= 1.25
    assert e[-1] == 2 ** 31 and e.min() >= 0


def test_sigmoid_q31_within_1_75_lsb():
    x = to_fixed(np.linspace(-30, 30, 200001), 24)
    ref = 1 / (1 + np.exp(-from_fixed(x, 24)))
    assert np.abs(sigmoid_q31(x, 24) - ref * 2.0 ** 31).max() <= 1.75  # exp's 1.25 (slope <= 1) + 0.5 rounding
