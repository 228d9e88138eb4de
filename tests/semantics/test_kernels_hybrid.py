"""The kernels of the hybrid and MoE families' ops (strata.semantics.kernels) against
independent references: torch where it has the op, HF transformers' gated delta rule and
M-RoPE, and loops written from ggml's CPU code (ggml-cpu/ops.cpp, llama.cpp 0.3.36's
vendored copy) where ggml's semantics are its own."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from strata.semantics import kernels as K

BF16 = ml_dtypes.bfloat16


def randn(*shape: int, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=np.float32)))


def close(got: np.ndarray, want, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.dtype == np.float32, got.dtype
    assert got.shape == tuple(want.shape), (got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------
# Element-wise


def test_silu_sigmoid_softplus() -> None:
    x = randn(4, 40, seed=1) * 8
    x[0, :6] = [-1000.0, -90.0, -20.5, 20.5, 90.0, 1000.0]  # exp overflows in a naive formula
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        silu, sig, soft = K.silu(x), K.sigmoid(x), K.softplus(x)
    close(silu, F.silu(t(x)))
    close(sig, torch.sigmoid(t(x)))
    # torch's threshold is ggml's (20); below it ggml computes log(1 + exp(x)), torch log1p(exp(x)).
    close(soft, F.softplus(t(x), beta=1.0, threshold=20.0), atol=1e-6)
    close(soft, torch.where(t(x) > 20, t(x), torch.log(1 + torch.exp(t(x)))), atol=1e-6)
    assert soft[0, 3] == np.float32(20.5)  # above the threshold: x itself
    assert soft[0, 2] == 0.0  # ggml's log(1 + e) rounds 1 + e to 1 (log1p would not)
    close(K.silu(x.astype(BF16)), F.silu(t(x.astype(BF16))))


def test_clamp_is_ggml_max_of_min() -> None:
    x = randn(5, 7, seed=2)
    close(K.clamp(x, -0.5, 0.25), torch.clamp(t(x), -0.5, 0.25), atol=0)
    close(K.clamp(x, 6.103515625e-5, math.inf), torch.clamp(t(x), min=6.103515625e-5), atol=0)
    nan = np.array([np.nan, -np.inf, np.inf], np.float32)
    # MAX(MIN(x, hi), lo) with C comparisons: MIN(NaN, hi) is hi.
    np.testing.assert_array_equal(K.clamp(nan, -1.0, 2.0), [2.0, -1.0, 2.0])


@pytest.mark.parametrize("a_shape, b_shape", [((3, 2), (3, 1)), ((3, 2), (2,)), ((6, 4), (2, 4)), ((3, 2), (3, 2))])
def test_div_tiles_rhs(a_shape, b_shape) -> None:
    a, b = randn(*a_shape, seed=1), randn(*b_shape, seed=2) + 3
    tb = t(b).reshape((1,) * (len(a_shape) - len(b_shape)) + b_shape)
    tiled = tb.repeat(*[da // db for da, db in zip(a_shape, tb.shape)])
    close(K.div(a, b), t(a) / tiled)


def test_div_by_zero_is_inf_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = K.div(np.array([[1.0, 0.0]], np.float32), np.array([0.0], np.float32))
    assert got[0, 0] == np.inf and np.isnan(got[0, 1])


# ---------------------------------------------------------------------------
# Row-wise


def test_sum_rows_keeps_a_dim() -> None:
    x = randn(3, 4, 5, seed=3)
    close(K.sum_rows(x), torch.sum(t(x), dim=-1, keepdim=True))
    close(K.sum_rows(x.astype(BF16)), torch.sum(t(x.astype(BF16)), dim=-1, keepdim=True))


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_argsort(order: str) -> None:
    x = randn(4, 9, seed=4)
    x[1, 2] = x[1, 5] = x[1, 7]  # ties keep their index order
    got = K.argsort(x, order)
    assert got.dtype == np.int32 and got.shape == x.shape
    want = torch.argsort(t(x), dim=-1, descending=order == "desc", stable=True)
    np.testing.assert_array_equal(got, want.numpy())


def test_argsort_top_k_is_a_view_of_the_first_columns() -> None:
    p = torch.softmax(t(randn(3, 8, seed=5)), -1).numpy()
    top = K.view(K.argsort(p, "desc"), (3, 2), 0, (8, 1))
    np.testing.assert_array_equal(top, torch.topk(t(p), 2, dim=-1).indices.numpy())


# ---------------------------------------------------------------------------
# Layout


@pytest.mark.parametrize("src, dst", [((3, 2, 1, 16), (3, 2, 2, 16)), ((16,), (4, 16, 16)), ((2, 3), (4, 9))])
def test_repeat_tiles(src, dst) -> None:
    x = randn(*src, seed=6)
    tx = t(x).reshape((1,) * (len(dst) - len(src)) + src)
    want = tx.repeat(*[d // s for d, s in zip(dst, tx.shape)])
    got = K.repeat(x, dst)
    np.testing.assert_array_equal(got, want.numpy())
    assert K.repeat(x.astype(BF16), dst).dtype == BF16


def test_repeat_keeps_a_dynamic_dim() -> None:
    x = randn(5, 1, 16)
    np.testing.assert_array_equal(K.repeat(x, (-1, 2, 16)), np.tile(x, (1, 2, 1)))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concat(axis: int) -> None:
    a = randn(2, 3, 4, seed=7)
    shape = list(a.shape)
    shape[axis] = 5
    b = randn(*shape, seed=8)
    np.testing.assert_array_equal(K.concat(a, b, axis), torch.cat([t(a), t(b)], dim=axis).numpy())


def test_concat_of_a_transposed_view_keeps_its_values() -> None:
    """llama.cpp's conv input: the conv state [C, K-1] then the transposed projection [T, C]."""
    state, x = randn(8, 3, seed=1), randn(5, 8, seed=2)
    np.testing.assert_array_equal(K.concat(state, K.transpose(x), 1), np.concatenate([state, x.T], 1))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_get_rows_batched(dtype) -> None:
    table = randn(3, 8, 4, seed=9, dtype=dtype)
    ids = np.array([[7, 0], [2, 2], [5, 1]], dtype=np.int32)
    want = torch.gather(t(table), 1, torch.from_numpy(ids).long()[:, :, None].expand(-1, -1, 4))
    close(K.get_rows(table, ids), want, atol=0)
    # two batch dims, and the 2-D case unchanged
    t4 = randn(2, 3, 8, 4, seed=10)
    ids4 = np.random.default_rng(0).integers(0, 8, (2, 3, 5)).astype(np.int32)
    want4 = torch.gather(t(t4), 2, torch.from_numpy(ids4).long()[..., None].expand(-1, -1, -1, 4))
    close(K.get_rows(t4, ids4), want4, atol=0)
    close(K.get_rows(table[0], ids[:, 0]), F.embedding(torch.from_numpy(ids[:, 0]).long(), t(table[0])), atol=0)


def test_empty_gather_view_and_copy() -> None:
    """llama.cpp's copy of the `extra` recurrent states: zero rows gathered, copied into an
    empty view of the state; nothing is written."""
    state = randn(1, 384, seed=11)
    before = state.copy()
    rows = K.get_rows(state, np.zeros(0, np.int32))
    assert rows.shape == (0, 384)
    dst = K.view(state, (0, 384), 384)
    assert K.cpy(rows, dst) is dst
    np.testing.assert_array_equal(state, before)


def test_cpy_into_a_view_of_state_writes_the_state() -> None:
    state = np.zeros((1, 384), np.float32)
    window = randn(128, 6, seed=12)
    last = K.view(window, (128, 3), 3, (6, 1))  # the conv state's next value: the last 3 columns
    K.cpy(last, K.view(state, (1, 384), 0))
    np.testing.assert_array_equal(state.reshape(128, 3), window[:, 3:])


# ---------------------------------------------------------------------------
# Routed experts


def mul_mat_id_reference(experts: torch.Tensor, b: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """ggml_compute_forward_mul_mat_id: row (t, j) = experts[ids[t, j]] @ b[t, j % Nb]."""
    tt, u = ids.shape
    out = torch.empty(tt, u, experts.shape[1])
    for i in range(tt):
        for j in range(u):
            out[i, j] = experts[int(ids[i, j])] @ b[i, j % b.shape[1]]
    return out


@pytest.mark.parametrize("n_b", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_mul_mat_id(n_b: int, dtype) -> None:
    e, m, k, tt, u = 8, 12, 16, 5, 2
    experts = randn(e, m, k, seed=1, dtype=dtype)
    b = randn(tt, n_b, k, seed=2)
    ids = np.array([[3, 0], [3, 7], [0, 3], [5, 5], [1, 3]], dtype=np.int32)
    got = K.mul_mat_id(experts, b, ids)
    close(got, mul_mat_id_reference(t(experts), t(b), torch.from_numpy(ids)), atol=1e-5)


def test_mul_mat_id_reads_only_the_routed_experts() -> None:
    experts = randn(6, 4, 8, seed=3)
    experts[[1, 2, 4]] = np.nan  # never routed: a dense product would spread NaN everywhere
    ids = np.array([[0, 3], [5, 0], [3, 3]], dtype=np.int32)
    got = K.mul_mat_id(experts, randn(3, 1, 8, seed=4), ids)
    assert np.isfinite(got).all()
    with pytest.raises(ValueError, match="expert ids must be in"):
        K.mul_mat_id(experts, randn(3, 1, 8), np.array([[0, 6], [1, 2], [0, 0]], np.int32))


def test_moe_routing_chain_matches_torch_topk() -> None:
    """llama.cpp's routing: softmax, ARGSORT + top-k view, GET_ROWS of the probabilities,
    SUM_ROWS, CLAMP, DIV; the experts by MUL_MAT_ID, weighted by MUL."""
    tt, e, k, hidden, inner = 4, 8, 2, 16, 12
    x, router = randn(tt, hidden, seed=1), randn(e, hidden, seed=2)
    gate, up, down = randn(e, inner, hidden, seed=3), randn(e, inner, hidden, seed=4), randn(e, hidden, inner, seed=5)
    probs = K.soft_max(K.mul_mat(router, x), None, 1.0)
    top = K.view(K.argsort(probs, "desc"), (tt, k), 0, (e, 1))
    w = K.get_rows(probs.reshape(tt, e, 1), top).reshape(tt, k)
    w = K.div(w, K.clamp(K.sum_rows(w), 6.103515625e-5, math.inf))
    xr = x.reshape(tt, 1, hidden)
    h = K.swiglu(K.mul_mat_id(gate, xr, top), K.mul_mat_id(up, xr, top))
    y = K.mul(K.mul_mat_id(down, h, top), w.reshape(tt, k, 1)).sum(axis=1)

    tp = torch.softmax(t(x) @ t(router).T, -1)
    tw, ti = torch.topk(tp, k, -1)
    tw = tw / tw.sum(-1, keepdim=True)
    want = torch.zeros(tt, hidden)
    for i in range(tt):
        for j in range(k):
            ex = int(ti[i, j])
            hh = F.silu(t(gate)[ex] @ t(x)[i]) * (t(up)[ex] @ t(x)[i])
            want[i] += tw[i, j] * (t(down)[ex] @ hh)
    close(y.astype(np.float32), want, atol=1e-4)


# ---------------------------------------------------------------------------
# Linear attention


@pytest.mark.parametrize("seqs", [False, True])
def test_ssm_conv_is_a_causal_depthwise_conv1d(seqs: bool) -> None:
    c, kk, tt = 12, 4, 5
    sx = randn(c, kk - 1 + tt, seed=1)
    w = randn(c, kk, seed=2)
    want = F.conv1d(t(sx)[None], t(w)[:, None, :], groups=c)[0].T  # [T, C]
    if seqs:
        close(K.ssm_conv(sx[None], w), want[None])
    else:
        close(K.ssm_conv(sx, w), want)
    # decode: one new column after the K-1 of the state
    close(K.ssm_conv(sx[:, :kk], w), want[:1])


def ssm_conv_ggml(sx: np.ndarray, c: np.ndarray) -> np.ndarray:
    """ggml_compute_forward_ssm_conv_f32, loop for loop (float32 sums in order of i0)."""
    nc, nr, n_t = c.shape[1], sx.shape[0], sx.shape[1] - c.shape[1] + 1
    out = np.zeros((n_t, nr), np.float32)
    for i2 in range(n_t):
        for i1 in range(nr):
            s = np.float32(0)
            for i0 in range(nc):
                s = np.float32(s + np.float32(sx[i1, i2 + i0] * c[i1, i0]))
            out[i2, i1] = s
    return out


def test_ssm_conv_sums_in_ggml_order() -> None:
    sx, w = randn(6, 7, seed=3), randn(6, 4, seed=4)
    np.testing.assert_array_equal(K.ssm_conv(sx, w), ssm_conv_ggml(sx, w))


def hf_gated_delta(q, k, v, g, beta, state, grouped: bool):
    """HF transformers' torch_recurrent_gated_delta_rule (Qwen3-Next / Qwen3.5) on Strata's
    layouts; ggml's tiled head order is HF's grouped one with q and k tiled first."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    hk, hv = q.shape[1], v.shape[1]
    tq, tk = t(q), t(k)
    if not grouped:
        tq, tk = tq.repeat(1, hv // hk, 1), tk.repeat(1, hv // hk, 1)  # head h reads h % Hk
    s0 = t(state).transpose(-1, -2)[None]  # HF's S [Hv, dk, dv]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, s = torch_recurrent_gated_delta_rule(tq[None], tk[None], t(v)[None], t(g)[None, ..., 0], t(beta)[None, ..., 0],
                                                  initial_state=s0, output_final_state=True)
    return out[0], s[0].transpose(-1, -2)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 7, 16, 40])  # 16 and more: computed in chunks
def test_gated_delta_net_matches_hf(grouped: bool, tokens: int) -> None:
    hk, hv, d = 2, 4, 16
    q, k, v = randn(tokens, hk, d, seed=1), randn(tokens, hk, d, seed=2), randn(tokens, hv, d, seed=3)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)  # the model l2-normalizes q and k first
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    g = -np.abs(randn(tokens, hv, 1, seed=4))
    beta = torch.sigmoid(t(randn(tokens, hv, 1, seed=5))).numpy()
    state = randn(hv, d, d, seed=6) * 0.1
    got = K.gated_delta_net(q, k, v, g, beta, state, grouped=grouped)
    assert got.shape == (tokens + d, hv * d) and got.dtype == np.float32
    out, s = hf_gated_delta(q, k, v, g, beta, state, grouped)
    close(got[:tokens].reshape(tokens, hv, d), out, atol=2e-5)
    close(got.reshape(-1)[tokens * hv * d:].reshape(hv, d, d), s, atol=2e-5)


def gated_delta_ggml(q, k, v, g, beta, state):
    """ggml_compute_forward_gated_delta_net_one_chunk (K = 1, one sequence), written from
    its loops: the state is M[j][i] = S[i][j]; q and k heads broadcast as iv1 % neq1."""
    tt, hk, d = q.shape
    hv = v.shape[1]
    kda = g.shape[-1] == d
    out = np.zeros((tt + d, hv * d), np.float32)
    att = out[:tt].reshape(tt, hv, d)
    new = out.reshape(-1)[tt * hv * d:].reshape(hv, d, d)
    for h in range(hv):
        m = state[h].astype(np.float32).copy()
        for i in range(tt):
            qd, kd, vd = q[i, h % hk], k[i, h % hk], v[i, h]
            if kda:
                m = m * np.exp(g[i, h])[None, :]
            else:
                m = m * np.exp(g[i, h, 0])
            delta = (vd - m @ kd) * beta[i, h, 0]
            m = m + delta[:, None] * kd[None, :]
            att[i, h] = (m @ qd) * np.float32(1.0 / math.sqrt(d))
        new[h] = m
    return out


@pytest.mark.parametrize("kda", [False, True])
def test_gated_delta_net_follows_ggml_loops(kda: bool) -> None:
    tt, hk, hv, d = 3, 2, 4, 8
    q, k, v = randn(tt, hk, d, seed=7) * 0.3, randn(tt, hk, d, seed=8) * 0.3, randn(tt, hv, d, seed=9)
    g = -np.abs(randn(tt, hv, d if kda else 1, seed=10))
    beta = np.abs(randn(tt, hv, 1, seed=11)) % 1
    state = randn(hv, d, d, seed=12) * 0.1
    close(K.gated_delta_net(q, k, v, g, beta, state), gated_delta_ggml(q, k, v, g, beta, state), atol=1e-5)


@pytest.mark.parametrize("grouped", [False, True])
def test_gated_delta_net_in_chunks_follows_the_recurrence(grouped: bool) -> None:
    """A long sequence (computed 16 tokens at a time) equals the token-by-token recurrence,
    with decays from none to strong (a chunk's gate sums reach e^-400: the flushed factors)
    and beta from 0 to 1; and a second call carries the state on."""
    tt, hk, hv, d = 53, 2, 4, 16
    q, k, v = randn(tt, hk, d, seed=21), randn(tt, hk, d, seed=22), randn(tt, hv, d, seed=23)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    g = -np.abs(randn(tt, hv, 1, seed=24)) * np.array([0.0, 0.1, 2.0, 25.0], np.float32)[None, :, None]
    beta = np.random.default_rng(25).uniform(0, 1, (tt, hv, 1)).astype(np.float32)
    state = randn(hv, d, d, seed=26) * 0.1
    want = np.zeros((tt + d, hv * d), np.float32)
    s = state
    for i in range(tt):  # one token at a time: the recurrence, never chunked
        step = K.gated_delta_net(q[i:i + 1], k[i:i + 1], v[i:i + 1], g[i:i + 1], beta[i:i + 1], s, grouped=grouped)
        want[i] = step[0]
        s = step[1:].reshape(hv, d, d)
    want[tt:] = s.reshape(d, hv * d)
    got = K.gated_delta_net(q, k, v, g, beta, state, grouped=grouped)
    close(got, want, atol=2e-5)
    first = K.gated_delta_net(q[:37], k[:37], v[:37], g[:37], beta[:37], state, grouped=grouped)
    second = K.gated_delta_net(q[37:], k[37:], v[37:], g[37:], beta[37:], first[37:].reshape(hv, d, d), grouped=grouped)
    close(second, got[37:], atol=2e-5)


def test_gated_delta_net_carries_state_across_calls() -> None:
    """A prefill of 4 tokens equals a prefill of 3 and a decode of 1 from its new state."""
    hk, hv, d = 1, 2, 8
    q, k, v = randn(4, hk, d, seed=1) * 0.3, randn(4, hk, d, seed=2) * 0.3, randn(4, hv, d, seed=3)
    g, beta = -np.abs(randn(4, hv, 1, seed=4)), np.full((4, hv, 1), 0.5, np.float32)
    s0 = np.zeros((hv, d, d), np.float32)
    full = K.gated_delta_net(q, k, v, g, beta, s0)
    first = K.gated_delta_net(q[:3], k[:3], v[:3], g[:3], beta[:3], s0)
    s1 = first.reshape(-1)[3 * hv * d:].reshape(hv, d, d)
    second = K.gated_delta_net(q[3:], k[3:], v[3:], g[3:], beta[3:], s1)
    close(second[:1], full[3:4], atol=1e-6)
    close(second[1:], full[4:], atol=1e-6)


# ---------------------------------------------------------------------------
# Multi-section rope


def mrope_ggml(x: np.ndarray, pos: np.ndarray, n_dims: int, sections, interleaved: bool, base: float) -> np.ndarray:
    """ggml_mrope_cache_init + rotate_pairs (NEOX pairs), in float64 (ggml accumulates
    theta *= theta_scale in float32: the same angles up to rounding)."""
    s, _, dd = x.shape
    sect_dims = sum(sections)
    sec_w = sections[0] + sections[1]
    theta_scale = base ** (-2.0 / n_dims)
    out = x.astype(np.float64).copy()
    for tok in range(s):
        p = [pos[tok + s * kk] for kk in range(4)]
        th = [float(v) for v in p]  # theta_t, theta_h, theta_w, theta_e
        for i0 in range(0, dd, 2):
            sector = (i0 // 2) % sect_dims
            if interleaved:
                if sector % 3 == 1 and sector < 3 * sections[1]:
                    theta = th[1]
                elif sector % 3 == 2 and sector < 3 * sections[2]:
                    theta = th[2]
                elif sector % 3 == 0 and sector < 3 * sections[0]:
                    theta = th[0]
                else:
                    theta = th[3]
            else:
                theta = th[0]
                if sections[0] <= sector < sec_w:
                    theta = th[1]
                elif sec_w <= sector < sec_w + sections[2]:
                    theta = th[2]
                elif sector >= sec_w + sections[2]:
                    theta = th[3]
            if i0 < n_dims:
                ic = i0 // 2
                c, sn = math.cos(theta), math.sin(theta)
                x0, x1 = x[tok, :, ic].astype(np.float64), x[tok, :, ic + n_dims // 2].astype(np.float64)
                out[tok, :, ic] = x0 * c - x1 * sn
                out[tok, :, ic + n_dims // 2] = x0 * sn + x1 * c
            th = [v * theta_scale for v in th]
    return out.astype(np.float32)


@pytest.mark.parametrize("mode", ["imrope", "mrope"])
@pytest.mark.parametrize("n_dims, sections", [(8, (2, 1, 1, 0)), (32, (11, 11, 10, 0)), (16, (3, 2, 1, 1))])
def test_multi_section_rope_follows_ggml(mode: str, n_dims: int, sections) -> None:
    s, dd = 4, max(32, n_dims)
    x = randn(s, 3, dd, seed=1)
    pos = np.concatenate([np.array([5, 9, 40, 700]), np.array([1, 2, 3, 4]), np.array([7, 7, 8, 8]),
                          np.array([2, 0, 1, 3])]).astype(np.int32)
    got = K.rope(x, pos, n_dims, mode, 10000.0, 1.0, None, sections)
    close(got, mrope_ggml(x, pos, n_dims, sections, mode == "imrope", 10000.0), atol=2e-5)
    np.testing.assert_array_equal(got[..., n_dims:], x[..., n_dims:])  # partial rotary passes the rest


def test_imrope_matches_hf_qwen3_5_text_rotary() -> None:
    """HF's interleaved M-RoPE (Qwen3.5) with three distinct position streams; the fourth
    (e) stream is unused when the sections fill the rotary pairs."""
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb

    cfg = Qwen3_5TextConfig(head_dim=32, hidden_size=64, num_attention_heads=2, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
        "mrope_section": [3, 3, 2], "mrope_interleaved": True})
    s = 5
    streams = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 1, 2, 9], [4, 4, 4, 0, 1]])
    x = randn(s, 2, 32, seed=2)
    cos, sin = Qwen3_5TextRotaryEmbedding(cfg)(t(x), streams[:, None, :])
    want, _ = apply_rotary_pos_emb(t(x)[None].transpose(1, 2), t(x)[None].transpose(1, 2), cos, sin)
    pos = np.concatenate([streams.numpy().reshape(-1), np.full(s, 99)]).astype(np.int32)
    got = K.rope(x, pos, 16, "imrope", 10000.0, 1.0, None, (3, 3, 2, 0))
    close(got, want[0].transpose(0, 1), atol=2e-5)


def test_text_imrope_is_plain_neox_rope() -> None:
    """For text the three streams are the positions: IMROPE reduces to NEOX on n_dims dims."""
    x = randn(3, 4, 32, seed=3)
    pos4 = K.host_input("mrope_positions", np.arange(3), 6, 16)
    got = K.rope(x, pos4, 8, "imrope", 10000.0, 1.0, None, (2, 1, 1, 0))
    close(got, K.rope(x, pos4[:3], 8, "neox", 10000.0, 1.0), atol=0)


def test_hybrid_host_inputs() -> None:
    toks = np.array([5, 9, 2])
    p4 = K.host_input("mrope_positions", toks, 4, 8)
    assert p4.dtype == np.int32 and p4.tolist() == [4, 5, 6, 4, 5, 6, 4, 5, 6, 0, 0, 0]
    sc = K.host_input("state_copy", toks, 4, 8)
    assert sc.dtype == np.int32 and sc.tolist() == [0]


# ---------------------------------------------------------------------------
# The new ops through their consumers: the op interpreter and the CPU target run the
# kernels above; one small function per op, executed both ways.

_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(BF16): "bf16"}


def _type_of(a: np.ndarray) -> str:
    return f"tensor<{'x'.join(map(str, a.shape))}x{_TYPES[a.dtype]}>"


def _function(params: dict[str, np.ndarray], body: str, result: str, state: dict[str, str] | None = None) -> str:
    lines = [f'  %{n} = op.param "{n}" : {_type_of(a)}' for n, a in params.items()]
    lines += [f'  %{n} = op.state "{n}" : {typ}' for n, typ in (state or {}).items()]
    return "\n".join([f'func.func @prefill() -> {result} attributes {{"op.n_kv" = 8 : i64}} {{', *lines,
                      *("  " + line.strip() for line in body.strip().splitlines()), f"  func.return %r : {result}", "}"])


def run_both(params: dict[str, np.ndarray], body: str, result: str, tokens=(1, 2, 3)) -> tuple[np.ndarray, np.ndarray]:
    """The function's result from the op interpreter and from the generated CPU module."""
    from strata.dialects import parse_ir
    from strata.semantics.op_interp import alloc_state, find_function, run_function
    from strata.targets.cpu import emit_cpu

    module = parse_ir(_function(params, body, result))
    fn = find_function(module)
    interp = run_function(fn, params, alloc_state(fn), np.array(tokens), 0)
    ns: dict = {}
    exec(compile(emit_cpu(module), "model.py", "exec"), ns)  # noqa: S102
    cpu = ns["Model"](params).prefill(list(tokens), 0)
    return interp, cpu


P = {"x": randn(3, 8, seed=1), "s": np.abs(randn(3, 1, seed=2)) + 1, "w": randn(4, 5, 8, seed=3),
     "b": randn(3, 1, 8, seed=4), "ids": np.array([[0, 3], [2, 2], [1, 0]], np.int32), "p": randn(3, 4, 1, seed=5),
     "sx": randn(8, 6, seed=6), "c": randn(8, 4, seed=7), "q": randn(3, 2, 16, seed=8) * 0.3,
     "k": randn(3, 2, 16, seed=9) * 0.3, "v": randn(3, 4, 16, seed=10), "g": -np.abs(randn(3, 4, 1, seed=11)),
     "beta": np.full((3, 4, 1), 0.5, np.float32), "st": randn(4, 16, 16, seed=12) * 0.1, "h": randn(3, 4, 32, seed=13)}

CASES = {
    "div": ("%r = op.div %x, %s : tensor<3x8xf32>, tensor<3x1xf32> -> tensor<3x8xf32>", "tensor<3x8xf32>",
            lambda: K.div(P["x"], P["s"])),
    "clamp": ("%r = op.clamp %x {min = -0.5 : f64, max = 0x7FF0000000000000 : f64} : tensor<3x8xf32> -> tensor<3x8xf32>",
              "tensor<3x8xf32>", lambda: K.clamp(P["x"], -0.5, math.inf)),
    "silu": ("%r = op.silu %x : tensor<3x8xf32> -> tensor<3x8xf32>", "tensor<3x8xf32>", lambda: K.silu(P["x"])),
    "sigmoid": ("%r = op.sigmoid %x : tensor<3x8xf32> -> tensor<3x8xf32>", "tensor<3x8xf32>", lambda: K.sigmoid(P["x"])),
    "softplus": ("%r = op.softplus %x : tensor<3x8xf32> -> tensor<3x8xf32>", "tensor<3x8xf32>", lambda: K.softplus(P["x"])),
    "sum_rows": ("%r = op.sum_rows %x : tensor<3x8xf32> -> tensor<3x1xf32>", "tensor<3x1xf32>", lambda: K.sum_rows(P["x"])),
    "argsort": ("""%a = op.argsort %x {order = "desc"} : tensor<3x8xf32> -> tensor<3x8xi32>
                   %r = op.view %a {offset = 0 : i64, strides = array<i64: 8, 1>} : tensor<3x8xi32> -> tensor<3x2xi32>""",
                "tensor<3x2xi32>", lambda: K.argsort(P["x"], "desc")[:, :2]),
    "repeat": ("%r = op.repeat %p : tensor<3x4x1xf32> -> tensor<3x4x2xf32>", "tensor<3x4x2xf32>",
               lambda: K.repeat(P["p"], (3, 4, 2))),
    "concat": ("%r = op.concat %sx, %c {axis = 1 : i64} : tensor<8x6xf32>, tensor<8x4xf32> -> tensor<8x10xf32>",
               "tensor<8x10xf32>", lambda: K.concat(P["sx"], P["c"], 1)),
    "get_rows": ("%r = op.get_rows %p, %ids : tensor<3x4x1xf32>, tensor<3x2xi32> -> tensor<3x2x1xf32>", "tensor<3x2x1xf32>",
                 lambda: K.get_rows(P["p"], P["ids"])),
    "mul_mat_id": ("%r = op.mul_mat_id %w, %b, %ids : tensor<4x5x8xf32>, tensor<3x1x8xf32>, tensor<3x2xi32> -> tensor<3x2x5xf32>",
                   "tensor<3x2x5xf32>", lambda: K.mul_mat_id(P["w"], P["b"], P["ids"])),
    "ssm_conv": ("%r = op.ssm_conv %sx, %c : tensor<8x6xf32>, tensor<8x4xf32> -> tensor<3x8xf32>", "tensor<3x8xf32>",
                 lambda: K.ssm_conv(P["sx"], P["c"])),
    "gated_delta_net": (
        """%r = op.gated_delta_net %q, %k, %v, %g, %beta, %st {grouped} : tensor<3x2x16xf32>, tensor<3x2x16xf32>,
               tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>""",
        "tensor<19x64xf32>", lambda: K.gated_delta_net(P["q"], P["k"], P["v"], P["g"], P["beta"], P["st"], grouped=True)),
    "rope_imrope": (
        """%pos = op.input "mrope_positions" {name = "inp_pos"} : tensor<12xi32>
           %r = op.rope %h, %pos {n_dims = 8 : i64, mode = "imrope", sections = array<i64: 2, 1, 1, 0>,
                                  freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>""",
        "tensor<3x4x32xf32>",
        lambda: K.rope(P["h"], K.host_input("mrope_positions", np.arange(3), 0, 8), 8, "imrope", 1e4, 1.0, None, (2, 1, 1, 0))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_new_ops_run_in_the_interpreter_and_the_cpu_target(case: str) -> None:
    body, result, want = CASES[case]
    names = [n for n in P if f"%{n}," in body or f"%{n} " in body or f"%{n}\n" in body]
    interp, cpu = run_both({n: P[n] for n in names}, body, result)
    expect = want()
    np.testing.assert_array_equal(interp, expect)
    np.testing.assert_array_equal(cpu, expect)
    assert interp.dtype == cpu.dtype == expect.dtype


# ---------------------------------------------------------------------------
# llama.cpp's linear-attention rows (qwen35.cpp's build_layer_attn_linear, the trace's
# rows 4-51 for layer 0) in Strata's ops, run as a prefill then a decode that carry the conv
# and recurrent states, against HF's causal conv1d and gated delta rule.

HK, HV, D, KC = 1, 2, 8, 4
CH = 2 * HK * D + HV * D  # conv channels: q, k, v
NR, NS = (KC - 1) * CH, HV * D * D  # the conv and recurrent state sizes


def _linear_attention_text(entry: str, tokens: int | None) -> str:
    """The rows as IR for `tokens` tokens, or a dynamic number (None): the views that grow
    with the tokens then say so with per_token. The per-token inputs (the projection, the
    gates) are rows of tables picked by the token ids."""
    f = "f32"
    tt = "?" if tokens is None else str(tokens)
    win = "?" if tokens is None else str(KC - 1 + tokens)
    rows = "?" if tokens is None else str(tokens + D)
    if tokens is None:
        last = f"offset = 0 : i64, strides = array<i64: {KC - 1}, 1>, per_token = array<i64: 1, 1, 0>"
        new_state = f"offset = 0 : i64, per_token = array<i64: {HV * D}>"
    else:
        last = f"offset = {tokens} : i64, strides = array<i64: {KC - 1 + tokens}, 1>"
        new_state = f"offset = {tokens * HV * D} : i64"
    return f"""
func.func @{entry}() -> tensor<{tt}x{HV * D}x{f}> attributes {{"op.n_kv" = 8 : i64}} {{
  %tq = op.param "qkv" : tensor<8x{CH}x{f}>
  %tg = op.param "g" : tensor<8x{HV}x{f}>
  %tb = op.param "beta" : tensor<8x{HV}x{f}>
  %ids = op.input "tokens" : tensor<{tt}xi32>
  %qkv = op.get_rows %tq, %ids : tensor<8x{CH}x{f}>, tensor<{tt}xi32> -> tensor<{tt}x{CH}x{f}>
  %g2 = op.get_rows %tg, %ids : tensor<8x{HV}x{f}>, tensor<{tt}xi32> -> tensor<{tt}x{HV}x{f}>
  %g = op.reshape %g2 : tensor<{tt}x{HV}x{f}> -> tensor<{tt}x{HV}x1x{f}>
  %b2 = op.get_rows %tb, %ids : tensor<8x{HV}x{f}>, tensor<{tt}xi32> -> tensor<{tt}x{HV}x{f}>
  %beta = op.reshape %b2 : tensor<{tt}x{HV}x{f}> -> tensor<{tt}x{HV}x1x{f}>
  %w = op.param "conv1d" : tensor<{CH}x{KC}x{f}>
  %sc = op.input "state_copy" {{name = "rs_s_copy"}} : tensor<1xi32>
  %cr = op.state "cache_r_l0" : tensor<1x{NR}x{f}>
  %crr = op.reshape %cr : tensor<1x{NR}x{f}> -> tensor<1x{NR}x{f}>
  %crz = op.view %crr {{offset = 0 : i64}} : tensor<1x{NR}x{f}> -> tensor<{NR}x{f}>
  %zero = op.scale %crz {{scale = 0.0 : f64, name = "cache_r_l0 (reshaped) (view) (view)"}} : tensor<{NR}x{f}> -> tensor<{NR}x{f}>
  %main = op.view %sc {{offset = 0 : i64}} : tensor<1xi32> -> tensor<1xi32>
  %cst = op.get_rows %crr, %main {{name = "conv_states-0"}} : tensor<1x{NR}x{f}>, tensor<1xi32> -> tensor<1x{NR}x{f}>
  %none = op.view %sc {{offset = 1 : i64}} : tensor<1xi32> -> tensor<0xi32>
  %extra = op.get_rows %crr, %none : tensor<1x{NR}x{f}>, tensor<0xi32> -> tensor<0x{NR}x{f}>
  %crv = op.view %cr {{offset = {NR} : i64}} : tensor<1x{NR}x{f}> -> tensor<0x{NR}x{f}>
  %cp0 = op.cpy %extra, %crv : tensor<0x{NR}x{f}>, tensor<0x{NR}x{f}> -> tensor<0x{NR}x{f}>
  %csr = op.reshape %cst {{name = "conv_states_reshaped-0"}} : tensor<1x{NR}x{f}> -> tensor<{CH}x{KC - 1}x{f}>
  %xt = op.transpose %qkv : tensor<{tt}x{CH}x{f}> -> tensor<{CH}x{tt}x{f}>
  %ci = op.concat %csr, %xt {{axis = 1 : i64, name = "conv_input-0"}} : tensor<{CH}x{KC - 1}x{f}>, tensor<{CH}x{tt}x{f}> -> tensor<{CH}x{win}x{f}>
  %last = op.view %ci {{{last}}} : tensor<{CH}x{win}x{f}> -> tensor<{CH}x{KC - 1}x{f}>
  %upd = op.view %cr {{offset = 0 : i64}} : tensor<1x{NR}x{f}> -> tensor<1x{NR}x{f}>
  %cp1 = op.cpy %last, %upd : tensor<{CH}x{KC - 1}x{f}>, tensor<1x{NR}x{f}> -> tensor<1x{NR}x{f}>
  %cs = op.state "cache_s_l0" : tensor<1x{NS}x{f}>
  %csr2 = op.reshape %cs : tensor<1x{NS}x{f}> -> tensor<1x{NS}x{f}>
  %s0 = op.get_rows %csr2, %main : tensor<1x{NS}x{f}>, tensor<1xi32> -> tensor<1x{NS}x{f}>
  %st = op.reshape %s0 {{name = "state_predelta-0"}} : tensor<1x{NS}x{f}> -> tensor<{HV}x{D}x{D}x{f}>
  %conv = op.ssm_conv %ci, %w : tensor<{CH}x{win}x{f}>, tensor<{CH}x{KC}x{f}> -> tensor<{tt}x{CH}x{f}>
  %silu = op.silu %conv : tensor<{tt}x{CH}x{f}> -> tensor<{tt}x{CH}x{f}>
  %q = op.view %silu {{offset = 0 : i64, strides = array<i64: {CH}, {D}, 1>}} : tensor<{tt}x{CH}x{f}> -> tensor<{tt}x{HK}x{D}x{f}>
  %k = op.view %silu {{offset = {HK * D} : i64, strides = array<i64: {CH}, {D}, 1>}} : tensor<{tt}x{CH}x{f}> -> tensor<{tt}x{HK}x{D}x{f}>
  %v = op.view %silu {{offset = {2 * HK * D} : i64, strides = array<i64: {CH}, {D}, 1>}} : tensor<{tt}x{CH}x{f}> -> tensor<{tt}x{HV}x{D}x{f}>
  %gdn = op.gated_delta_net %q, %k, %v, %g, %beta, %st {{grouped}} : tensor<{tt}x{HK}x{D}x{f}>, tensor<{tt}x{HK}x{D}x{f}>, tensor<{tt}x{HV}x{D}x{f}>, tensor<{tt}x{HV}x1x{f}>, tensor<{tt}x{HV}x1x{f}>, tensor<{HV}x{D}x{D}x{f}> -> tensor<{rows}x{HV * D}x{f}>
  %ns = op.view %gdn {{{new_state}, name = "new_state-0"}} : tensor<{rows}x{HV * D}x{f}> -> tensor<{HV}x{D}x{D}x{f}>
  %csv = op.view %cs {{offset = 0 : i64}} : tensor<1x{NS}x{f}> -> tensor<1x{NS}x{f}>
  %cp2 = op.cpy %ns, %csv : tensor<{HV}x{D}x{D}x{f}>, tensor<1x{NS}x{f}> -> tensor<1x{NS}x{f}>
  %o = op.view %gdn {{offset = 0 : i64, name = "attn_output-0"}} : tensor<{rows}x{HV * D}x{f}> -> tensor<{tt}x{HV}x{D}x{f}>
  %r = op.cont %o : tensor<{tt}x{HV}x{D}x{f}> -> tensor<{tt}x{HV * D}x{f}>
  func.return %r : tensor<{tt}x{HV * D}x{f}>
}}
"""


def _hf_linear_attention(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """HF's causal depthwise conv1d + SiLU, then the gated delta rule from a zero state."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    tt = x.shape[0]
    conv = F.silu(F.conv1d(F.pad(x.T[None], (KC - 1, 0)), w[:, None, :], groups=CH)[0].T)  # [T, C]
    q, k, v = conv[:, :HK * D], conv[:, HK * D:2 * HK * D], conv[:, 2 * HK * D:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, _ = torch_recurrent_gated_delta_rule(q.reshape(1, tt, HK, D), k.reshape(1, tt, HK, D), v.reshape(1, tt, HV, D),
                                                  g[None, ..., 0], beta[None, ..., 0])
    return out[0].reshape(tt, HV * D)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_llama_cpp_linear_attention_rows_carry_state(dynamic: bool) -> None:
    from strata.dialects import parse_ir
    from strata.semantics.op_interp import alloc_state, find_function, run_function
    from strata.targets.cpu import emit_cpu

    module = parse_ir("builtin.module {" + _linear_attention_text("prefill", None if dynamic else 3)
                      + _linear_attention_text("decode", None if dynamic else 1) + "}")
    weights = {"qkv": randn(8, CH, seed=1), "g": -np.abs(randn(8, HV, seed=2)),
               "beta": torch.sigmoid(t(randn(8, HV, seed=3))).numpy(), "conv1d": randn(CH, KC, seed=4)}
    ids = [1, 5, 2, 7]  # a prompt of three, then one decoded token
    want = _hf_linear_attention(t(weights["qkv"][ids]), t(weights["conv1d"]), t(weights["g"][ids])[..., None],
                                t(weights["beta"][ids])[..., None])

    prefill, decode = find_function(module, "prefill"), find_function(module, "decode")
    state = alloc_state(prefill)  # zeroed: llama.cpp's zeroing SCALE is a pure op.scale here
    close(run_function(prefill, weights, state, np.array(ids[:3]), 0), want[:3], atol=2e-5)
    close(run_function(decode, weights, state, np.array(ids[3:]), 3), want[3:], atol=2e-5)

    ns: dict = {}
    exec(compile(emit_cpu(module), "model.py", "exec"), ns)  # noqa: S102
    model = ns["Model"](weights)
    close(model.prefill(ids[:3], 0), want[:3], atol=2e-5)
    close(model.decode(ids[3], 3), want[3:], atol=2e-5)
    np.testing.assert_array_equal(model.cache_r_l0, state["cache_r_l0"])
    np.testing.assert_array_equal(model.cache_s_l0, state["cache_s_l0"])
