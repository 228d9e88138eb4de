"""Reference semantics of token sampling: Philox 4x32-10 and the sampler, in pure numpy.

Like ``strata.semantics.kernels``, these functions are also the CPU target's kernels: a code
generator copies their source into standalone modules, so each function is self-contained (its
only globals are ``np`` and the other top-level functions of this file), and there are no
module-level constants.

The random stream
-----------------
Philox 4x32-10 exactly as Triton's ``tl.randint4x(seed, offset)`` computes it: the 64-bit seed
is the Philox key ``(k0, k1) = (lo32(seed), hi32(seed))``, a 64-bit offset is the counter
``(c0, c1, c2, c3) = (lo32(offset), hi32(offset), 0, 0)`` (a 32-bit offset leaves ``c1 = 0``),
ten rounds, and ``tl.randint`` is the first of the four output words.

A sampling call is keyed by ``key`` (two int64, the module level's ``key: Tensor[2; i64]``), the
generation ``step`` and the batch ``row``. Its one random word per row is

    bits[row] = tl.randint(seed=key[0], offset=key[1] + step * 2**32 + row)   (offset mod 2**64)

i.e. ``key[0]`` is the Philox key and ``key[1]`` the base of the counter, as torch's
``(seed, offset)`` Philox state; step and row (each below 2**32) take the counter's high and
low 32-bit halves, so no two (step, row) pairs of one key share a counter. (The CUDA launcher
takes the step as an i32: below 2**31 there.)

The sampler
-----------
Logits [rows, vocab] f32 -> token ids, in the order of vLLM's penalties and HF's warpers
(``transformers.generation.utils._get_logits_processor``):

0. the token mask (a grammar's allowed tokens), when given: a bitmask [rows, ceil(vocab/32)]
   int32 laid out as llguidance and xgrammar write it, bit ``j`` of word ``w`` allowing token
   ``32 * w + j``; a disallowed token's logit becomes -inf, so no step below can bring it back
   (it gets no mass, and greedy takes the first maximum of the allowed tokens). A row must
   allow at least one token (the result of a row that allows none is outside the contract);
1. repetition penalty (HF's ``RepetitionPenaltyLogitsProcessor``): on tokens seen in the
   prompt or the output, negative logits are multiplied by it, the others divided;
2. frequency penalty: ``l -= frequency * output_count`` (OpenAI's and vLLM's definition);
3. presence penalty: ``l -= presence`` where ``output_count > 0``;
4. temperature 0: the first index of the maximum (today's greedy ``argmax``), nothing below;
   otherwise ``z = l / temperature``;
5. top-k: keep ``z >= `` the k-th largest z (ties at it kept, as HF's ``TopKLogitsWarper``);
   k <= 0 or k >= vocab keeps all;
6. top-p: HF's ``TopPLogitsWarper`` over the top-k softmax: in ascending (z, index) order,
   drop the tokens whose cumulative mass is <= (1 - top_p) of the total, keeping the last;
   top_p >= 1 keeps all. Ties are ordered by index (so of tokens tied at the cut, the highest
   indices stay): HF's order there is torch.sort's, which is not stable, and the index order
   is HF's result with a stable sort;
7. min-p: drop ``p < min_p * max p`` (HF's ``MinPLogitsWarper``), i.e. ``exp(z - max z) < min_p``;
8. one uniform per row draws by the inverse CDF over the kept tokens in vocabulary order.

Exactness across implementations. The Triton kernel (``strata.targets.cuda.kernels.sampling``)
draws the same ids as this file, by construction, not by luck:

* every float operation is one IEEE-rounded f32 operation (+, -, *, correctly rounded /) in
  a fixed order; ``exp`` is :func:`exp_f32`, a polynomial of such operations (a library exp
  differs between numpy and a GPU in the last bit), and the kernel is compiled without FMA
  contraction or flush-to-zero;
* probabilities become integer masses, ``w = trunc(exp(z - max z) * 2**40)`` (int64; the top
  token's mass is 2**40 and a vocabulary up to 2**23 sums below 2**63), so every sum, prefix
  sum and comparison of masses is exact in any order: the kernel's blocked sums, searches and
  scans agree with numpy's sort and cumsum bit for bit. A token whose exp(z - max z) is below
  2**-40 gets no mass: the distribution moves by at most vocab * 2**-40 (1.4e-7 at 150k);
* the uniform is the raw 32-bit word, and the target mass is ``floor(bits * W / 2**32)`` in
  integers: resolution 2**-32 over the whole [0, 1), where a float32 uniform near 1 has 2**-24.

Outside the contract: NaN or +inf logits, and a temperature so small that logit / temperature
overflows f32 (HF's softmax is NaN there too).

Inverse CDF rather than Gumbel-max: Gumbel-max needs a uniform and a log per vocabulary entry,
whose rounding no two libraries share; the inverse CDF needs one word per row and no log.
"""

from __future__ import annotations

import numpy as np


def philox_4x32(c0, c1, c2, c3, k0, k1, n_rounds: int = 10):
    """Philox 4x32 (Salmon et al., Random123) on uint32 counter words and key words (arrays that
    broadcast), as Triton's ``philox_impl``: returns the four uint32 output words."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(v, dtype=np.uint32) for v in (c0, c1, c2, c3, k0, k1))
    c0, c1, c2, c3, k0, k1 = np.broadcast_arrays(c0, c1, c2, c3, k0, k1)
    low = np.uint64(0xFFFFFFFF)
    for _ in range(n_rounds):
        # 32x32 -> 64-bit products in uint64: the high word is umulhi, the low word the product
        pa = np.uint64(0xD2511F53) * c0.astype(np.uint64)
        pb = np.uint64(0xCD9E8D57) * c2.astype(np.uint64)
        c0, c1, c2, c3 = (
            (pb >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0,
            (pb & low).astype(np.uint32),
            (pa >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1,
            (pa & low).astype(np.uint32),
        )
        with np.errstate(over="ignore"):  # the key schedule wraps modulo 2**32 (numpy warns on scalars)
            k0 = k0 + np.uint32(0x9E3779B9)
            k1 = k1 + np.uint32(0xBB67AE85)
    return c0, c1, c2, c3


def philox_randint4x(seed, offset, n_rounds: int = 10):
    """Triton's ``tl.randint4x(seed, offset)``: four uint32 words per offset. ``seed`` is a 64-bit
    integer (its two's-complement bits when negative); ``offset`` an integer array whose width
    decides, as in Triton, whether its high 32 bits are the second counter word."""
    off = np.asarray(offset)
    if off.dtype.kind not in "iu":
        raise TypeError(f"philox offsets must be integers, not {off.dtype}")
    s = np.asarray(seed)
    s = s.astype(np.int64).view(np.uint64) if s.dtype.kind == "i" else s.astype(np.uint64)
    k0 = (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    k1 = (s >> np.uint64(32)).astype(np.uint32)
    wide = off.dtype.itemsize > 4
    bits = off.astype(np.int64).view(np.uint64) if wide or off.dtype.kind == "i" else off.astype(np.uint64)
    lo = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (bits >> np.uint64(32)).astype(np.uint32) if wide else np.zeros_like(lo)
    zero = np.zeros_like(lo)
    return philox_4x32(lo, hi, zero, zero, k0, k1, n_rounds)


def philox_randint(seed, offset, n_rounds: int = 10) -> np.ndarray:
    """Triton's ``tl.randint(seed, offset)``: the first word of :func:`philox_randint4x`."""
    return philox_randint4x(seed, offset, n_rounds)[0]


def uint_to_uniform_float(x) -> np.ndarray:
    """Triton's ``uint_to_uniform_float`` for 32-bit words: the word as int32, its bitwise
    complement when negative, times 4.6566127342e-10 in f32 (a float32 in [0, 1))."""
    v = np.asarray(x).astype(np.uint32).view(np.int32)
    v = np.where(v < 0, ~v, v)
    return v.astype(np.float32) * np.float32(4.6566127342e-10)


def philox_rand(seed, offset, n_rounds: int = 10) -> np.ndarray:
    """Triton's ``tl.rand(seed, offset)``: float32 uniforms in [0, 1)."""
    return uint_to_uniform_float(philox_randint(seed, offset, n_rounds))


def sampling_random_bits(key, step: int, rows: int) -> np.ndarray:
    """The sampler's random word of each row (uint32 [rows]): ``tl.randint(key[0], key[1] +
    step * 2**32 + row)``, the offset wrapping modulo 2**64 (the module docstring's mapping)."""
    key = np.asarray(key, dtype=np.int64).reshape(-1)
    if key.shape != (2,):
        raise ValueError(f"a sampling key is two int64, not {key.size} values")
    if not 0 <= int(step) < 2**32:
        raise ValueError(f"the sampling step must be in [0, 2**32), not {step}")
    if not 0 <= rows <= 2**32:
        raise ValueError(f"a sampling call takes at most 2**32 rows, not {rows}")
    base = key[1:2].view(np.uint64) + np.uint64(int(step) << 32)  # uint64 arithmetic wraps
    offset = (base + np.arange(rows, dtype=np.uint64)).view(np.int64)
    return philox_randint(key[0], offset)


def exp_f32(x) -> np.ndarray:
    """exp(x) for f32 x <= 0 from IEEE f32 operations only (Cephes' expf: Cody-Waite reduction by
    ln 2, a degree-5 polynomial, the power of two made from its bits), so that a GPU computing
    the same operations gets the same bits; within 1 ulp of exp (0.95 measured). Below -80
    (where the sampler's masses are 0 anyway) it is 0."""
    x = np.asarray(x, dtype=np.float32)
    xc = np.maximum(x, np.float32(-80.0))
    n = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = xc - n * np.float32(0.693359375)
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + np.float32(1.0)
    scale = ((n.astype(np.int32) + np.int32(127)) << np.int32(23)).view(np.float32)
    return np.where(x < np.float32(-80.0), np.float32(0.0), y * scale).astype(np.float32)


def sampling_row_params(rows: int, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                        presence_penalty=0.0, frequency_penalty=0.0) -> dict:
    """The sampler's parameters as per-row arrays (each a scalar or [rows]): f32, top_k int32.
    Raises ValueError on values outside HF's and OpenAI's ranges."""
    p = {"temperature": temperature, "top_p": top_p, "min_p": min_p, "repetition_penalty": repetition_penalty,
         "presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty}
    out = {name: np.broadcast_to(np.asarray(v, dtype=np.float32), (rows,)) for name, v in p.items()}
    out["top_k"] = np.broadcast_to(np.asarray(top_k, dtype=np.int32), (rows,))
    checks = (("temperature", lambda v: v >= 0, ">= 0"), ("top_p", lambda v: (v >= 0) & (v <= 1), "in [0, 1]"),
              ("min_p", lambda v: (v >= 0) & (v <= 1), "in [0, 1]"),
              ("repetition_penalty", lambda v: v > 0, "> 0"),
              ("presence_penalty", np.isfinite, "finite"), ("frequency_penalty", np.isfinite, "finite"))
    for name, ok, what in checks:
        bad = ~ok(out[name])
        if bad.any():
            raise ValueError(f"sampling parameter {name} must be {what}, not {out[name][bad][0]}")
    return out


def sampling_apply_mask(logits, mask=None) -> np.ndarray:
    """Step 0 (f32 [rows, vocab]): -inf where the bitmask ``mask`` (int32 [rows, ceil(vocab/32)],
    bit j of word w: token 32 * w + j) has a zero bit; absent: the logits unchanged."""
    logits = np.asarray(logits, dtype=np.float32)
    if mask is None:
        return logits
    rows, vocab = logits.shape
    words = np.asarray(mask)
    if words.shape != (rows, (vocab + 31) // 32) or words.dtype.kind not in "iu":
        raise ValueError(f"a token mask is int32 [{rows}, {(vocab + 31) // 32}], not {words.dtype} {words.shape}")
    if (words.astype(np.int32) == -1).all():  # every token allowed (an unconstrained row): nothing to do
        return logits
    bits = (words.astype(np.uint32)[:, :, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)
    allowed = bits.reshape(rows, -1)[:, :vocab] != 0
    return np.where(allowed, logits, np.float32(-np.inf)).astype(np.float32)


def sampling_penalize(logits, prompt_counts=None, output_counts=None, repetition_penalty=1.0,
                      presence_penalty=0.0, frequency_penalty=0.0) -> np.ndarray:
    """Steps 1-3 (f32 [rows, vocab]): the repetition penalty on tokens whose prompt or output count
    is positive, then ``- frequency * output_count``, then ``- presence`` where the output count is
    positive. Counts are int [rows, vocab] (absent: zeros); penalties scalars or [rows]."""
    logits = np.asarray(logits, dtype=np.float32)
    rows = logits.shape[0]
    if prompt_counts is None and output_counts is None:
        return logits.copy()
    zeros = np.zeros(logits.shape, dtype=np.int32)
    pc = zeros if prompt_counts is None else np.asarray(prompt_counts, dtype=np.int32)
    oc = zeros if output_counts is None else np.asarray(output_counts, dtype=np.int32)
    if pc.shape != logits.shape or oc.shape != logits.shape:
        raise ValueError(f"token counts {pc.shape} / {oc.shape} do not match the logits {logits.shape}")
    rep = np.broadcast_to(np.asarray(repetition_penalty, dtype=np.float32), (rows,))[:, None]
    pres = np.broadcast_to(np.asarray(presence_penalty, dtype=np.float32), (rows,))[:, None]
    freq = np.broadcast_to(np.asarray(frequency_penalty, dtype=np.float32), (rows,))[:, None]
    seen = (pc + oc) > 0
    out = np.where(seen, np.where(logits < 0, logits * rep, logits / rep), logits)
    out = out - freq * oc.astype(np.float32)
    return np.where(oc > 0, out - pres, out).astype(np.float32)


def sampling_masses(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                    presence_penalty=0.0, frequency_penalty=0.0, prompt_counts=None, output_counts=None, mask=None):
    """Steps 0-7: the integer mass (int64 [rows, vocab]) of every token, the distribution a draw
    follows (mass / row sum). A greedy row (temperature 0) has mass 1 on its argmax."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise ValueError(f"sampling takes logits [rows, vocab], not {logits.shape}")
    rows, vocab = logits.shape
    prm = sampling_row_params(rows, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                              frequency_penalty)
    pen = sampling_penalize(sampling_apply_mask(logits, mask), prompt_counts, output_counts, prm["repetition_penalty"],
                            prm["presence_penalty"], prm["frequency_penalty"])
    temp = prm["temperature"][:, None]
    greedy = temp[:, 0] == 0
    if greedy.all():  # every row takes its argmax: the filters below would decide nothing
        first_max = np.zeros((rows, vocab), np.int64)
        first_max[np.arange(rows), np.argmax(pen, axis=1)] = 1
        return first_max
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(temp > 0, pen / np.where(temp > 0, temp, np.float32(1.0)), pen)
    z = np.where(z == 0, np.float32(0.0), z).astype(np.float32)  # -0.0 -> +0.0: one key per value
    top = z.max(axis=1, keepdims=True)
    k = prm["top_k"].astype(np.int64)
    kth = np.sort(z, axis=1)[np.arange(rows), vocab - np.clip(k, 1, vocab)][:, None]
    keep = (z >= kth) | ((k <= 0) | (k >= vocab))[:, None]
    with np.errstate(invalid="ignore"):
        e = np.where(keep, exp_f32(z - top), np.float32(0.0))
    w = (e * np.float32(2.0**40)).astype(np.int64)
    # top-p: prefix masses in ascending (z, index) order; np.lexsort's last key is the primary one
    order = np.lexsort((np.broadcast_to(np.arange(vocab), z.shape), z), axis=1)
    prefix = np.cumsum(np.take_along_axis(w, order, axis=1), axis=1)
    total = prefix[:, -1:]
    top_p = prm["top_p"].astype(np.float64)[:, None]
    thr = ((np.float64(1.0) - top_p) * total.astype(np.float64)).astype(np.int64)
    drop_sorted = (prefix <= thr) & (top_p < 1)
    drop_sorted[:, -1] = False
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=1)
    w = np.where(drop | (e < prm["min_p"][:, None]), 0, w)
    greedy_w = np.zeros_like(w)
    greedy_w[np.arange(rows), np.argmax(pen, axis=1)] = 1
    return np.where(greedy[:, None], greedy_w, w)


def sampling_distribution(logits, **params) -> np.ndarray:
    """The filtered distribution (float64 [rows, vocab]) that :func:`sample` draws from: each row's
    :func:`sampling_masses` over their sum. Takes the parameters of :func:`sampling_masses`."""
    w = sampling_masses(logits, **params)
    return w / w.sum(axis=1, keepdims=True).astype(np.float64)


def sample_from_masses(masses, bits) -> np.ndarray:
    """The inverse CDF in vocabulary order: per row, the first token whose prefix mass exceeds
    ``floor(bits * W / 2**32)`` (W the row's total mass, bits uint32), as int32 [rows]."""
    w = np.asarray(masses, dtype=np.int64)
    total = w.sum(axis=1).astype(np.uint64)
    x = np.asarray(bits, dtype=np.uint32).astype(np.uint64)
    # bits * W needs 32 + 63 bits: split W into 32-bit halves; each partial product fits in 64
    target = x * (total >> np.uint64(32)) + ((x * (total & np.uint64(0xFFFFFFFF))) >> np.uint64(32))
    prefix = np.cumsum(w, axis=1)
    return (prefix <= target.astype(np.int64)[:, None]).sum(axis=1).astype(np.int32)


def sample(logits, key, step: int = 0, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
           presence_penalty=0.0, frequency_penalty=0.0, prompt_counts=None, output_counts=None,
           mask=None) -> np.ndarray:
    """Sample one token per row of ``logits`` [rows, vocab] (f32): int32 [rows].

    ``key`` is two int64, ``step`` the generation step; parameters are scalars or per-row arrays
    [rows]; ``prompt_counts`` / ``output_counts`` are the occurrences of each token in each row's
    prompt and output so far (int [rows, vocab]; absent: zero), so the sampler keeps no state;
    ``mask`` is the allowed tokens' bitmask (int32 [rows, ceil(vocab/32)]; absent: every token).
    Temperature 0 is greedy: the first index of the masked, penalized logits' maximum."""
    w = sampling_masses(logits, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                        frequency_penalty, prompt_counts, output_counts, mask)
    return sample_from_masses(w, sampling_random_bits(key, step, w.shape[0]))
