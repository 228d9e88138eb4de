"""FixedPoint32 integer arithmetic in numpy int64: the building blocks of the `fixed` dialect's
semantics (`strata.semantics.fixed_interp`).

A FixedPoint32<f> value is an int32 X meaning X * 2^-f. Every intermediate here is an int64
whose bound is stated where it is computed; no float enters a result (floats appear only in
`to_fixed`/`from_fixed`, at the boundary, and in the constants below, each rounded once).

Rounding, everywhere: to nearest, halves away from zero (C's `round`, as ONNX Runtime's int4
quantizer rounds): `rshift_round(-3, 1) == -2`, `rshift_round(3, 1) == 2`, `rdiv(-5, 2) == -3`.
Saturation: results are clamped to [-2^31, 2^31 - 1] (`sat32`); a left shift that would leave
int64 is clamped first (`lshift_sat`), so an overflowing value saturates rather than wraps.

exp: `exp_neg(d, f)` = e^d for d <= 0 in Q31 (2^31 = 1.0): d * log2(e) split into an integer n
and a fraction r in [0, 1), 2^-r = e^(-r ln 2) by a degree-12 Taylor polynomial in Horner form,
every step rounded in Q31, then shifted right by n (rounded). Measured (tests): |error| <= 2 LSB
of Q31 (2^-30) for every d; the Taylor remainder is below 2^-40.
"""

from __future__ import annotations

import math

import numpy as np

I64 = np.int64
INT32_MIN = -(2 ** 31)
INT32_MAX = 2 ** 31 - 1
EXP_FRAC = 31  # the exp of a negative, in Q31: 2^31 is 1.0
LOG2E_Q30 = round(math.log2(math.e) * 2 ** 30)
LN2_Q31 = round(math.log(2) * 2 ** 31)
TAYLOR_TERMS = 12


def sat32(v: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(v, I64), INT32_MIN, INT32_MAX)


def rshift_round(v: np.ndarray, s) -> np.ndarray:
    """v / 2^s rounded half away from zero; s >= 0 (scalar or array). |v| < 2^63 - 2^(s-1)."""
    v = np.asarray(v, I64)
    s = np.asarray(s, I64)
    if not np.any(s):
        return v.copy()
    half = np.where(s > 0, np.left_shift(I64(1), np.maximum(s - 1, 0)), 0)
    mag = np.right_shift(np.abs(v) + half, s)
    return np.where(v < 0, -mag, mag)


def lshift_sat(v: np.ndarray, s) -> np.ndarray:
    """v * 2^s for s >= 0, v first clamped to +-2^(62-s) so the result stays within +-2^62."""
    v = np.asarray(v, I64)
    s = np.asarray(s, I64)
    lim = np.left_shift(I64(1), np.maximum(62 - s, 0))
    return np.left_shift(np.clip(v, -lim, lim), s)


def shift(v: np.ndarray, s) -> np.ndarray:
    """v * 2^-s: a rounding right shift for s > 0, a saturating left shift for s < 0."""
    s = np.asarray(s, I64)
    if s.ndim == 0:
        return rshift_round(v, s) if s >= 0 else lshift_sat(v, -s)
    return np.where(s >= 0, rshift_round(v, np.maximum(s, 0)), lshift_sat(v, np.maximum(-s, 0)))


def rdiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b rounded half away from zero, for b > 0 (|a| < 2^63)."""
    a = np.asarray(a, I64)
    b = np.asarray(b, I64)
    q, r = np.divmod(np.abs(a), b)
    q = q + (r >= b - r)
    return np.where(a < 0, -q, q)


def ceil_log2(n: int) -> int:
    """The smallest g with 2^g >= n (n >= 1)."""
    return max(0, (int(n) - 1).bit_length())


def bit_length(v: np.ndarray) -> np.ndarray:
    """The bit length of each non-negative int64 (0 for 0), exactly (a float estimate, corrected
    where the float rounded up to the next power of two)."""
    v = np.asarray(v, I64)
    bl = np.frexp(v.astype(np.float64))[1].astype(I64)
    return np.where((bl > 0) & (v < np.left_shift(I64(1), np.maximum(bl - 1, 0))), bl - 1, bl)


def isqrt(v: np.ndarray) -> np.ndarray:
    """floor(sqrt(v)) of each 0 <= v < 2^62, exactly (a float estimate, then corrected)."""
    v = np.asarray(v, I64)
    r = np.floor(np.sqrt(v.astype(np.float64))).astype(I64)
    for _ in range(2):
        r = np.where(r * r > v, r - 1, r)
        r = np.where((r + 1) * (r + 1) <= v, r + 1, r)
    return r


def to_fixed(x: np.ndarray, frac: int) -> np.ndarray:
    """A float array as FixedPoint32<frac>: x * 2^frac rounded half away from zero, saturated."""
    y = np.asarray(x, np.float64) * 2.0 ** frac
    y = np.sign(y) * np.floor(np.abs(y) + 0.5)
    return np.clip(y, INT32_MIN, INT32_MAX).astype(I64)


def from_fixed(x: np.ndarray, frac: int) -> np.ndarray:
    return np.asarray(x, I64).astype(np.float64) * 2.0 ** -frac


def exp_neg(d: np.ndarray, frac: int) -> np.ndarray:
    """e^d in Q31 for d <= 0 given at `frac` fractional bits (|d| <= 2^32): see the module
    docstring. 0 <= result <= 2^31, and exactly 2^31 at d = 0."""
    d = np.minimum(np.asarray(d, I64), 0)
    d = np.maximum(d, -(64 << frac))  # e^-64 < 2^-92: 0 in Q31 either way; bounds the product below
    # |d * LOG2E_Q30| <= min(2^32, 2^(frac+6)) * 1.45 * 2^30 < 2^63; to Q31 of d * log2(e).
    z = shift(d * LOG2E_Q30, frac + 30 - EXP_FRAC)
    a = -z
    n = np.right_shift(a, EXP_FRAC)
    r = a & ((1 << EXP_FRAC) - 1)  # Q31, in [0, 1)
    u = rshift_round(r * LN2_Q31, EXP_FRAC)  # Q31 of r * ln 2, in [0, 0.7): u * p < 2^62
    one = I64(1) << EXP_FRAC
    p = np.full(u.shape, one, I64)
    for k in range(TAYLOR_TERMS, 0, -1):  # e^-u = 1 - u(1 - u/2(1 - u/3(...)))
        p = one - rdiv(rshift_round(u * p, EXP_FRAC), I64(k))
    return rshift_round(p, np.minimum(n, 62))


def softmax_q31(x: np.ndarray, frac: int, valid: np.ndarray | None = None) -> np.ndarray:
    """Softmax of each row (last axis) of x at `frac`, in Q31 (not saturated: one sure entry
    is 2^31). Entries where `valid` is False get probability 0 (a row needs one valid entry).

    d = x - max <= 0 (|d| < 2^32); E = exp_neg(d) in Q31; S = sum E in [2^31, L * 2^31];
    S' = S rounded to 31 bits (S = S' * 2^z); R = round(2^61 / S') in [2^30, 2^31];
    p = E * R (< 2^62) shifted right by 61 + z - 31, rounded."""
    x = np.asarray(x, I64)
    if valid is None:
        valid = np.ones(x.shape, bool)
    m = np.max(np.where(valid, x, np.iinfo(I64).min // 4), axis=-1, keepdims=True)
    e = np.where(valid, exp_neg(np.where(valid, x - m, 0), frac), 0)
    s = e.sum(axis=-1, keepdims=True)  # >= 2^31: the max's entry is exactly 2^31
    z = bit_length(s) - 31
    s1 = rshift_round(s, z)
    r = rdiv(I64(1) << 61, s1)
    return rshift_round(e * r, 61 + z - EXP_FRAC)


def sigmoid_q31(x: np.ndarray, frac: int) -> np.ndarray:
    """sigmoid(x) in Q31 (0..2^31, not saturated): 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x)
    for x < 0, each one rounded division of integers below 2^62."""
    x = np.asarray(x, I64)
    e = exp_neg(-np.abs(x), frac)
    one = I64(1) << EXP_FRAC
    pos = rdiv(np.full(x.shape, one << EXP_FRAC, I64), one + e)
    neg = rdiv(e << EXP_FRAC, one + e)
    return np.where(x >= 0, pos, neg)
