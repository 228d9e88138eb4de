"""The kernels of the entries of several sequences against independent code: GATED_DELTA_NET over
several sequences against one run per sequence, the targets' log-probabilities against torch's
log_softmax, FLASH_ATTN_EXT with streams against one call per stream, GET_ROWS and SET_ROWS of -1."""

from __future__ import annotations

import numpy as np
import torch

from strata.semantics import kernels as K
from strata.semantics import kernels_seq as KS


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _gdn_inputs(t: int, hk: int = 2, hv: int = 4, d: int = 8, seed: int = 0):
    q, k = randn(t, hk, d, seed=seed) * 0.3, randn(t, hk, d, seed=seed + 1) * 0.3
    v = randn(t, hv, d, seed=seed + 2)
    g = -np.abs(randn(t, hv, 1, seed=seed + 3)) * 0.5
    beta = 1 / (1 + np.exp(-randn(t, hv, 1, seed=seed + 4)))
    return q, k, v, g, beta.astype(np.float32)


def test_gated_delta_net_seq_is_each_sequence_alone() -> None:
    """Three sequences interleaved, one padding token, from their own states; lengths above the
    chunked kernel's 16 tokens and below it."""
    t = 40
    seq = np.array([0] * 18 + [2] * 3 + [-1] + [1] * 17 + [2], dtype=np.int32)
    rng = np.random.default_rng(1)
    rng.shuffle(seq)  # tokens of one sequence need not be adjacent
    q, k, v, g, beta = _gdn_inputs(t)
    state = randn(3, 4, 8, 8, seed=9) * 0.1
    for grouped in (False, True):
        out = KS.gated_delta_net_seq(q, k, v, g, beta, seq, state, grouped)
        assert out.shape == (t + 3 * 8, 32)
        finals = out.reshape(-1)[t * 32:].reshape(3, 4, 8, 8)
        for s in range(3):
            idx = np.flatnonzero(seq == s)
            alone = K.gated_delta_net(q[idx], k[idx], v[idx], g[idx], beta[idx], state[s], grouped)
            np.testing.assert_allclose(out[idx], alone[:idx.size], atol=1e-5)
            np.testing.assert_allclose(finals[s], alone.reshape(-1)[idx.size * 32:].reshape(4, 8, 8), atol=1e-5)
        assert not out[:t][seq < 0].any()
    fresh = KS.gated_delta_net_seq(q, k, v, g, beta, seq)  # no states: each from zero, none kept
    assert fresh.shape == (t, 32)
    idx = np.flatnonzero(seq == 1)
    alone = K.gated_delta_net(q[idx], k[idx], v[idx], g[idx], beta[idx], np.zeros((4, 8, 8), np.float32))
    np.testing.assert_allclose(fresh[idx], alone[:idx.size], atol=1e-5)


def test_target_log_probs_is_log_softmax() -> None:
    x, w = randn(7, 16, seed=2), randn(50, 16, seed=3) * 2  # logits of several units: a real softmax
    targets = np.array([0, 49, 3, 3, 17, 25, 48])
    want = torch.log_softmax(torch.from_numpy(x) @ torch.from_numpy(w).T, dim=-1)[torch.arange(7), targets]
    got = KS.target_log_probs(x, w, targets)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5)


def test_target_log_probs_in_chunks_of_the_vocabulary() -> None:
    """A vocabulary of several chunks (more logits than one chunk holds)."""
    p, vocab = 64, (1 << 22) // 64 * 2 + 7  # three chunks, the last of 7 columns
    x = randn(p, 4, seed=5)
    w = randn(vocab, 4, seed=6)
    targets = np.random.default_rng(0).integers(0, vocab, p)
    z = torch.from_numpy(x).double() @ torch.from_numpy(w).double().T
    want = torch.log_softmax(z, -1)[torch.arange(p), torch.from_numpy(targets)].numpy()
    np.testing.assert_allclose(KS.target_log_probs(x, w, targets), want, atol=1e-4)


def test_flash_attn_with_streams_is_one_call_per_stream() -> None:
    q, k, v = randn(3, 4, 2, 8, seed=1), randn(3, 2, 6, 8, seed=2), randn(3, 2, 6, 8, seed=3)
    mask = np.where(np.random.default_rng(0).random((3, 2, 6)) < 0.5, -np.inf, 0).astype(np.float32)
    mask[..., 0] = 0  # every query sees something
    got = K.flash_attn_ext(q, k, v, mask, 0.3)
    assert got.shape == (3, 2, 4, 8)
    for r in range(3):
        np.testing.assert_array_equal(got[r], K.flash_attn_ext(q[r], k[r], v[r], mask[r], 0.3))
    # Columns no query sees drop out (here the middle ones): the same as a mask over all of them.
    m = np.zeros((2, 6), np.float32)
    m[:, 2:4] = -np.inf
    dense = torch.softmax(torch.from_numpy(q[0]).reshape(2, 2, 2, 8) @ torch.from_numpy(k[0])[:, None].transpose(-1, -2)
                          * 0.3 + torch.from_numpy(m), -1) @ torch.from_numpy(v[0])[:, None]
    np.testing.assert_allclose(K.flash_attn_ext(q[0], k[0], v[0], m, 0.3), dense.reshape(4, 2, 8).permute(1, 0, 2),
                               atol=1e-6)


def test_get_rows_and_set_rows_of_minus_one() -> None:
    table = randn(5, 3, seed=1)
    got = K.get_rows(table, np.array([2, -1, 0]))
    np.testing.assert_array_equal(got, np.stack([table[2], np.zeros(3), table[0]]))
    dst = np.zeros((4, 3), np.float32)
    K.set_rows(dst, randn(3, 3, seed=2), np.array([-1, 3, -1]))
    np.testing.assert_array_equal(dst[[0, 1, 2]], 0)
    np.testing.assert_array_equal(dst[3], randn(3, 3, seed=2)[1])
