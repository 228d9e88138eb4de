"""The sampler's token mask (`strata.semantics.sampling`, step 0): a bitmask [rows, ceil(vocab/32)]
int32 as llguidance and xgrammar lay it out. Against a numpy reference that unpacks the bits
with `np.unpackbits` (little-endian bit order) and sets the disallowed logits to -inf: the same
ids; a masked token is never drawn; an all-allowed mask draws the unmasked ids."""

from __future__ import annotations

import numpy as np
import pytest

from strata.semantics import sampling as S


def _pack(allowed: np.ndarray) -> np.ndarray:
    """[rows, vocab] bool -> the bitmask: bit j of word w is token 32 * w + j."""
    rows, vocab = allowed.shape
    padded = np.zeros((rows, -(-vocab // 32) * 32), bool)
    padded[:, :vocab] = allowed
    return np.packbits(padded, axis=1, bitorder="little").view("<i4")


def _reference_logits(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(mask.astype("<i4").view(np.uint8), axis=1, bitorder="little")[:, :logits.shape[1]]
    return np.where(bits == 1, logits, -np.inf).astype(np.float32)


PARAMS = [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05),
          dict(temperature=1.3, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.2)]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "plain", "filters", "penalties"])
@pytest.mark.parametrize("vocab", [7, 32, 100, 1000])
def test_masked_ids_are_the_references_and_always_allowed(vocab, params):
    rng = np.random.default_rng(vocab)
    rows = 6
    for step in range(8):
        logits = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
        allowed = rng.random((rows, vocab)) < 0.3
        allowed[np.arange(rows), rng.integers(0, vocab, rows)] = True
        mask = _pack(allowed)
        counts = rng.integers(0, 2, (rows, vocab)).astype(np.int32)
        kw = dict(params, prompt_counts=counts, output_counts=counts) if "repetition_penalty" in params else params
        got = S.sample(logits, [5, -9], step, mask=mask, **kw)
        want = S.sample(_reference_logits(logits, mask), [5, -9], step, **kw)
        assert np.array_equal(got, want), (step, got, want)
        assert allowed[np.arange(rows), got].all(), got


def test_an_all_allowed_mask_draws_the_unmasked_ids():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 77)).astype(np.float32)
    everything = np.full((4, 3), -1, np.int32)  # 96 bits for 77 tokens: the padding bits are set too
    for params in PARAMS[:3]:
        for step in range(5):
            assert np.array_equal(S.sample(logits, [1, 2], step, mask=everything, **params),
                                  S.sample(logits, [1, 2], step, **params))
    assert np.array_equal(S.sampling_apply_mask(logits, everything), logits)


def test_one_allowed_token_is_drawn_whatever_the_logits():
    logits = np.zeros((3, 64), np.float32)
    logits[:, 10] = 50.0  # the model's favourite is disallowed
    allowed = np.zeros((3, 64), bool)
    allowed[:, 63] = True  # the last bit of the last word: the word is negative as an int32
    mask = _pack(allowed)
    assert (mask[:, 1] < 0).all()
    for t in (0.0, 0.5, 2.0):
        assert (S.sample(logits, [3, 4], 0, temperature=t, top_k=1, mask=mask) == 63).all()


def test_a_mask_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"a token mask is int32 \[2, 2\], not int32 \(2, 1\)"):
        S.sample(np.zeros((2, 40), np.float32), [0, 0], 0, mask=np.zeros((2, 1), np.int32))
