"""Gated DeltaNet kernels: the ba projection + gates, the causal conv1d update + SiLU + L2 norm
(with the conv-state snapshot), and the gated delta rule (a step per token for decode, chunks of
64 tokens for prefill, as flash-linear-attention does).

Layouts (the blueprint's, after llama.cpp):
- gates: ba = x @ [W_b; W_a].T is [b | a] per row; decay g = softplus(a + dt_bias) * A with
  A = -exp(A_log) (the weight table's `neg_exp`), beta = sigmoid(b); softplus(x) = x above 20.
- conv: weight [C, K], state [C, K-1] (the last K-1 inputs, oldest first); input = the first C
  columns of the qkvz edge; out[t, c] = silu(sum_j w[c, j] * full[c, t + j]), full = [state | x^T].
- L2 norm of each lin_k_dim-wide head of the q and k columns: x / sqrt(|x|^2 + eps_total), with
  eps_total = lin_k_dim * eps for the op level's rms_norm form, else 1e-6.
- recurrence: state [Hv, Dv, Dk], state[h, j, i] = S_h[i, j] (ggml's GATED_DELTA_NET); value head
  h reads q/k head h // (Hv/Hk) when grouped, else h % Hk. Per token: S *= exp(g);
  u = beta (v - S^T k); S += k u^T; o = S^T q / sqrt(Dk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata.targets.cuda.kernels.gemm import as_weight, load_weight_tile

#: The op level's L2-norm epsilon without an `eps` (strata.semantics.module_hybrid.L2NORM_EPS).
L2NORM_EPS = 1e-6
#: Tokens per chunk of the chunked delta rule: a power of two (one tl.arange); the sequence's
#: last chunk is partial, its rows past the sequence masked out (zero k, q and gates).
CHUNK = 64
#: The chunk kernels' products read operands this many columns at a time (tl.dot's smallest K).
CHUNK_DOT_K = 16


@triton.jit
def gdn_gates_kernel(x_ptr, w_ptr, s_ptr, z_ptr, a_ptr, dt_ptr, g_ptr, beta_ptr, HV, K, x_rs, w_rs, s_rs,
                     FMT: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """One row: b, a = x @ W_b.T, x @ W_a.T (a GEMV of 2*HV outputs), then the gates."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    hm = h < HV
    acc_b = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc_a = tl.zeros([BLOCK_H], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * x_rs + ks, mask=ks < K, other=0.0).to(tl.float32)
        wb = load_weight_tile(w_ptr, s_ptr, z_ptr, h, ks, HV, K, w_rs, s_rs, FMT, QBN, QBK)
        # rows HV + h (the lanes h >= HV read b rows again or nothing; their results are not stored)
        wa = load_weight_tile(w_ptr, s_ptr, z_ptr, HV + h, ks, 2 * HV, K, w_rs, s_rs, FMT, QBN, QBK)
        acc_b += tl.sum(wb * x[None, :], axis=1)
        acc_a += tl.sum(wa * x[None, :], axis=1)
    z = acc_a + tl.load(dt_ptr + h, mask=hm, other=0.0).to(tl.float32)
    sp = tl.where(z > 20.0, z, tl.log(1.0 + tl.exp(tl.minimum(z, 20.0))))
    g = sp * tl.load(a_ptr + h, mask=hm, other=0.0).to(tl.float32)
    tl.store(g_ptr + row * HV + h, g, mask=hm)
    tl.store(beta_ptr + row * HV + h, 1.0 / (1.0 + tl.exp(-acc_b)), mask=hm)


def launch_gdn_gates(x: torch.Tensor, w_ba, a: torch.Tensor, dt_bias: torch.Tensor):
    """gdn_ba_gates_gemv_per_row (`linear` role ba + `gdn_gates`): x [n, H], W_ba [2*Hv, H] (b rows
    first; a dense tensor or a gemm.Weight), a = A [Hv], dt_bias [Hv]
    -> (decay g [n, Hv] f32, beta [n, Hv] f32)."""
    w = as_weight(w_ba)
    n, hv = x.shape[0], w.n // 2
    g = torch.empty((n, hv), dtype=torch.float32, device=x.device)
    beta = torch.empty_like(g)
    s = w.scale if w.scale is not None else w.data
    z = w.zero if w.zero is not None else w.data
    w_rs, _, s_rs, _, _ = w.strides()
    gdn_gates_kernel[(n,)](x, w.data, s, z, a, dt_bias, g, beta, hv, w.k, x.stride(0), w_rs, s_rs,
                           FMT=w.fmt, QBN=w.block[0], QBK=w.block[1], BLOCK_H=triton.next_power_of_2(hv),
                           BLOCK_K=min(64, triton.next_power_of_2(w.k)))
    return g, beta


@triton.jit
def conv_l2_kernel(x_ptr, w_ptr, st_ptr, snap_ptr, y_ptr, n_rows, C, N_NORM, x_rs, y_rs, eps,
                   KW: tl.constexpr, HAS_SNAP: tl.constexpr, DK: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_S: tl.constexpr):
    """Channels [pid*DK, pid*DK + DK) (one q/k head when pid < N_NORM / DK) in BLOCK_D lanes (DK
    rounded up to a power of two; the lanes past DK are masked out of every load, store and the
    norm's sum): every row's conv + SiLU (+ L2 norm of the head), then the state's new K-1 columns
    (and the snapshot)."""
    d = tl.arange(0, BLOCK_D)
    c = tl.program_id(0) * DK + d
    cm = (d < DK) & (c < C)
    norm = tl.program_id(0) * DK < N_NORM
    for t in range(0, n_rows):
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j in tl.static_range(KW):
            idx = t + j + tl.zeros([BLOCK_D], dtype=tl.int32)  # column of full = [state | x^T]
            from_state = idx < KW - 1
            sv = tl.load(st_ptr + c * (KW - 1) + idx, mask=cm & from_state, other=0.0).to(tl.float32)
            xv = tl.load(x_ptr + (idx - (KW - 1)).to(tl.int64) * x_rs + c, mask=cm & (idx >= KW - 1),
                         other=0.0).to(tl.float32)
            acc += tl.load(w_ptr + c * KW + j, mask=cm, other=0.0).to(tl.float32) * tl.where(from_state, sv, xv)
        y = acc / (1.0 + tl.exp(-acc))
        if norm:
            y = y / tl.sqrt(tl.sum(tl.where(cm, y * y, 0.0), axis=0) + eps)
        tl.store(y_ptr + t * y_rs + c, y, mask=cm)
    # new state column i = full[:, n_rows + i]: gathered before any store (the program owns c)
    i = tl.arange(0, BLOCK_S)
    idx = n_rows + i[None, :]
    im = cm[:, None] & (i[None, :] < KW - 1)
    old = tl.load(st_ptr + c[:, None] * (KW - 1) + idx, mask=im & (idx < KW - 1), other=0.0)
    new = tl.load(x_ptr + (idx - (KW - 1)).to(tl.int64) * x_rs + c[:, None], mask=im & (idx >= KW - 1), other=0.0)
    val = tl.where(idx < KW - 1, old.to(tl.float32), new.to(tl.float32))
    tl.store(st_ptr + c[:, None] * (KW - 1) + i[None, :], val, mask=im)
    if HAS_SNAP:
        tl.store(snap_ptr + c[:, None] * (KW - 1) + i[None, :], val, mask=im)


def launch_conv_l2(qkvz: torch.Tensor, conv_w: torch.Tensor, state: torch.Tensor, *, k_heads: int, k_dim: int,
                   eps: float | None = None, snapshot: torch.Tensor | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """gdn_conv_l2_*_per_row (`conv1d_update` [+ `state_snapshot`] + `l2_norm`): the first C
    columns of qkvz [n, >=C] through the conv (weight [C, K] or [C, 1, K]; state [C*(K-1)] any
    shape, updated in place; snapshot, if given, receives the updated state) -> [n, C] f32, the
    first 2*k_heads*k_dim columns L2-normalised per head. eps: the l2_norm node's `eps` (None: 1e-6)."""
    w = conv_w.reshape(conv_w.shape[0], conv_w.shape[-1]).contiguous()  # channel c's taps at c*K
    c, kw = w.shape
    n = qkvz.shape[0]
    out = out if out is not None else torch.empty((n, c), dtype=torch.float32, device=qkvz.device)
    eps_total = L2NORM_EPS if eps is None else k_dim * eps
    conv_l2_kernel[(triton.cdiv(c, k_dim),)](qkvz, w, state, snapshot if snapshot is not None else state, out, n, c,
                                             2 * k_heads * k_dim, qkvz.stride(0), out.stride(0), eps_total, KW=kw,
                                             HAS_SNAP=snapshot is not None, DK=k_dim,
                                             BLOCK_D=triton.next_power_of_2(k_dim),
                                             BLOCK_S=triton.next_power_of_2(max(kw - 1, 1)))
    return out


@triton.jit
def gdn_step_kernel(qkv_ptr, g_ptr, b_ptr, st_ptr, o_ptr, n_rows, HK, HV, qkv_rs, o_rs, scale,
                    DK: tl.constexpr, DV: tl.constexpr, GROUPED: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    """Value head program_id(0), value columns block program_id(1): the rows one at a time."""
    h = tl.program_id(0)
    j = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    i = tl.arange(0, BLOCK_K)
    jm = j < DV
    im = i < DK
    if GROUPED:
        hk = h // (HV // HK)
    else:
        hk = h % HK
    sp = st_ptr + h.to(tl.int64) * DV * DK + j[:, None] * DK + i[None, :]
    sm = jm[:, None] & im[None, :]
    st = tl.load(sp, mask=sm, other=0.0).to(tl.float32)  # [BLOCK_V, BLOCK_K]: S^T
    for t in range(0, n_rows):
        base = qkv_ptr + t * qkv_rs
        q = tl.load(base + hk * DK + i, mask=im, other=0.0).to(tl.float32)
        k = tl.load(base + HK * DK + hk * DK + i, mask=im, other=0.0).to(tl.float32)
        v = tl.load(base + 2 * HK * DK + h * DV + j, mask=jm, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + t * HV + h).to(tl.float32)
        beta = tl.load(b_ptr + t * HV + h).to(tl.float32)
        st = st * tl.exp(g)
        u = (v - tl.sum(st * k[None, :], axis=1)) * beta
        st = st + u[:, None] * k[None, :]
        o = tl.sum(st * q[None, :], axis=1) * scale
        tl.store(o_ptr + t * o_rs + h * DV + j, o, mask=jm)
    tl.store(sp, st, mask=sm)


@triton.jit
def _mm_global(a_ptr, a_rs, b_ptr, b_rs, acc, M: tl.constexpr, N: tl.constexpr, KD: tl.constexpr,
               KS: tl.constexpr, PREC: tl.constexpr):
    """acc + A @ B with A [M, KD] (row stride a_rs) and B [KD, N] (row stride b_rs) read from
    global memory KS columns / rows at a time, so that only [M, KS] and [KS, N] operand tiles are
    live (tl.dot in IEEE f32 holds a thread's whole operand rows in registers)."""
    m = tl.arange(0, M)
    n = tl.arange(0, N)
    s = tl.arange(0, KS)
    for k0 in range(0, KD, KS):
        a = tl.load(a_ptr + m[:, None] * a_rs + (k0 + s)[None, :])
        b = tl.load(b_ptr + (k0 + s)[:, None] * b_rs + n[None, :])
        acc = tl.dot(a, b, acc, input_precision=PREC)
    return acc


@triton.jit
def gdn_chunk_prep_kernel(qkv_ptr, g_ptr, b_ptr, w_ptr, u_ptr, qk_ptr, scr_ptr, n_rows, n_pad, HK, HV, qkv_rs,
                          DK: tl.constexpr, DV: tl.constexpr, GROUPED: tl.constexpr, CH: tl.constexpr,
                          SQUARINGS: tl.constexpr, PREC: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
                          KS: tl.constexpr):
    """Chunk program_id(0) of value head program_id(1), independent of the state (the chunks run in
    parallel): with G the cumulative gate in the chunk and A[t, s] = beta_t exp(G_t - G_s) k_t.k_s
    (s < t), T = (I + A)^-1 = prod_j (I + N^(2^j)) with N = -A nilpotent (SQUARINGS = log2(CH) - 1
    squarings); stores W = T (beta exp(G) K) [CH, DK], U0 = T (beta V) [CH, DV] and
    QK = (Q K^T) * exp(G_t - G_s) (s <= t) [CH, CH]. The [CH, CH] products go through the program's
    scratch rows scr [CH, 2 CH] (T | N^(2^j)), KS columns at a time (no spills on sm_90)."""
    c0 = tl.program_id(0) * CH
    h = tl.program_id(1)
    hk = h // (HV // HK) if GROUPED else h % HK
    r = tl.arange(0, CH)
    i = tl.arange(0, BLOCK_K)
    t = c0 + r
    tm = t < n_rows
    rows = qkv_ptr + t[:, None].to(tl.int64) * qkv_rs
    g = tl.load(g_ptr + t * HV + h, mask=tm, other=0.0).to(tl.float32)
    beta = tl.load(b_ptr + t * HV + h, mask=tm, other=0.0).to(tl.float32)
    cum = tl.cumsum(g, axis=0)
    on = r[:, None] >= r[None, :]
    decay = tl.where(on, tl.exp(tl.where(on, cum[:, None] - cum[None, :], 0.0)), 0.0)
    kk = tl.zeros([CH, CH], dtype=tl.float32)
    qk = tl.zeros([CH, CH], dtype=tl.float32)
    for k0 in range(0, DK, BLOCK_K):  # K . K^T and Q . K^T over column blocks of k and q
        km = tm[:, None] & (k0 + i < DK)[None, :]
        k = tl.load(rows + HK * DK + hk * DK + k0 + i[None, :], mask=km, other=0.0).to(tl.float32)
        q = tl.load(rows + hk * DK + k0 + i[None, :], mask=km, other=0.0).to(tl.float32)
        kk = tl.dot(k, tl.trans(k), kk, input_precision=PREC)
        qk = tl.dot(q, tl.trans(k), qk, input_precision=PREC)
    out_rows = (h * n_pad + t[:, None]).to(tl.int64)
    tl.store(qk_ptr + out_rows * CH + r[None, :], qk * decay)
    nmat = tl.where(r[:, None] > r[None, :], -kk * decay * beta[:, None], 0.0)
    inv = tl.where(r[:, None] == r[None, :], 1.0, 0.0) + nmat
    power = nmat
    scr = scr_ptr + (h * n_pad + c0).to(tl.int64) * (2 * CH)  # this program's [CH, 2 CH]
    sp = scr + r[:, None] * (2 * CH) + r[None, :]
    tl.store(sp + CH, power)
    for _ in tl.static_range(SQUARINGS):  # power = power^2; inv += inv @ power
        tl.debug_barrier()
        power = _mm_global(scr + CH, 2 * CH, scr + CH, 2 * CH, tl.zeros([CH, CH], dtype=tl.float32), CH, CH, CH,
                           KS, PREC)
        tl.debug_barrier()
        tl.store(sp, inv)
        tl.store(sp + CH, power)
        tl.debug_barrier()
        inv = _mm_global(scr, 2 * CH, scr + CH, 2 * CH, inv, CH, CH, CH, KS, PREC)
    tl.debug_barrier()
    # T diag(beta exp(G)) | T diag(beta): W and U0 are these times K and V
    tl.store(sp, inv * (beta * tl.exp(cum))[None, :])
    tl.store(sp + CH, inv * beta[None, :])
    tl.debug_barrier()
    for k0 in range(0, DK, BLOCK_K):
        # K rows of the chunk, columns k0 + i; rows past n_rows are 0 in K (masked out of T's columns)
        w = tl.zeros([CH, BLOCK_K], dtype=tl.float32)
        s = tl.arange(0, KS)
        for s0 in range(0, CH, KS):
            a = tl.load(scr + r[:, None] * (2 * CH) + (s0 + s)[None, :])
            ts = c0 + s0 + s
            kb = tl.load(qkv_ptr + ts[:, None].to(tl.int64) * qkv_rs + HK * DK + hk * DK + k0 + i[None, :],
                         mask=(ts < n_rows)[:, None] & (k0 + i < DK)[None, :], other=0.0).to(tl.float32)
            w = tl.dot(a, kb, w, input_precision=PREC)
        tl.store(w_ptr + out_rows * DK + k0 + i[None, :], w, mask=(k0 + i < DK)[None, :])
    for v0 in range(0, DV, BLOCK_V):
        j = v0 + tl.arange(0, BLOCK_V)
        jm = j < DV
        u0 = tl.zeros([CH, BLOCK_V], dtype=tl.float32)
        s = tl.arange(0, KS)
        for s0 in range(0, CH, KS):
            a = tl.load(scr + CH + r[:, None] * (2 * CH) + (s0 + s)[None, :])
            ts = c0 + s0 + s
            vb = tl.load(qkv_ptr + ts[:, None].to(tl.int64) * qkv_rs + 2 * HK * DK + h * DV + j[None, :],
                         mask=(ts < n_rows)[:, None] & jm[None, :], other=0.0).to(tl.float32)
            u0 = tl.dot(a, vb, u0, input_precision=PREC)
        tl.store(u_ptr + out_rows * DV + j[None, :], u0, mask=jm[None, :])


@triton.jit
def gdn_chunk_state_kernel(qkv_ptr, g_ptr, w_ptr, u_ptr, qk_ptr, st_ptr, o_ptr, n_rows, n_pad, HK, HV, qkv_rs, o_rs,
                           scale, DK: tl.constexpr, DV: tl.constexpr, GROUPED: tl.constexpr, CH: tl.constexpr,
                           PREC: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, KS: tl.constexpr):
    """Value head program_id(0), value columns block program_id(1): the chunks in order. With S0
    the state before a chunk: U = U0 - W S0; O = (exp(G) Q S0 + QK U) * scale;
    S = exp(G_last) S0 + sum_s exp(G_last - G_s) k_s u_s^T. The program's state rows S^T
    [BLOCK_V, DK] stay in st (global memory), U replaces U0 in u, then exp(G_last - G) U does: every
    product reads its operands KS columns at a time there (no [CH, DK] operand tile is live)."""
    h = tl.program_id(0)
    hk = h // (HV // HK) if GROUPED else h % HK
    j = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    r = tl.arange(0, CH)
    s = tl.arange(0, KS)
    ib = tl.arange(0, BLOCK_K)
    jm = j < DV
    sp = st_ptr + h.to(tl.int64) * DV * DK + j[None, :] * DK  # S0 [i, j] = S^T[j, i]
    for c0 in range(0, n_rows, CH):
        t = c0 + r
        tm = t < n_rows
        g = tl.load(g_ptr + t * HV + h, mask=tm, other=0.0).to(tl.float32)
        cum = tl.cumsum(g, axis=0)
        g_last = tl.sum(g, axis=0)
        rows = (h * n_pad + t[:, None]).to(tl.int64)
        src = qkv_ptr + t[:, None].to(tl.int64) * qkv_rs
        up = u_ptr + rows * DV + j[None, :]
        e = tl.exp(cum)[:, None]
        u = tl.load(up, mask=jm[None, :], other=0.0)
        o = tl.zeros([CH, BLOCK_V], dtype=tl.float32)
        for k0 in range(0, DK, KS):  # U = U0 - W S0; O = exp(G) Q S0
            im = (k0 + s) < DK
            s0 = tl.load(sp + (k0 + s)[:, None], mask=im[:, None] & jm[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + rows * DK + (k0 + s)[None, :], mask=im[None, :], other=0.0)
            u -= tl.dot(w, s0, input_precision=PREC)
            q = tl.load(src + hk * DK + (k0 + s)[None, :], mask=tm[:, None] & im[None, :], other=0.0).to(tl.float32)
            o = tl.dot(q * e, s0, o, input_precision=PREC)
        tl.debug_barrier()  # every thread has read U0
        tl.store(up, u, mask=jm[None, :])
        tl.debug_barrier()
        for t0 in range(0, CH, KS):  # O += QK U
            qk = tl.load(qk_ptr + rows * CH + (t0 + s)[None, :])
            ub = tl.load(u_ptr + (h * n_pad + c0 + t0 + s[:, None]).to(tl.int64) * DV + j[None, :],
                         mask=jm[None, :], other=0.0)
            o = tl.dot(qk, ub, o, input_precision=PREC)
        tl.store(o_ptr + t[:, None].to(tl.int64) * o_rs + h * DV + j[None, :], o * scale,
                 mask=tm[:, None] & jm[None, :])
        tl.debug_barrier()  # every thread has read U
        tl.store(up, u * tl.exp(g_last - cum)[:, None], mask=jm[None, :])
        tl.debug_barrier()
        for k0 in range(0, DK, BLOCK_K):  # S = exp(G_last) S0 + K^T (exp(G_last - G) U), columns k0 + ib
            im = (k0 + ib) < DK
            sm = im[:, None] & jm[None, :]
            acc = tl.load(sp + (k0 + ib)[:, None], mask=sm, other=0.0).to(tl.float32) * tl.exp(g_last)
            for t0 in range(0, CH, KS):
                ts = c0 + t0 + s
                kt = tl.load(qkv_ptr + ts[None, :].to(tl.int64) * qkv_rs + HK * DK + hk * DK + (k0 + ib)[:, None],
                             mask=(ts < n_rows)[None, :] & im[:, None], other=0.0).to(tl.float32)
                ub = tl.load(u_ptr + (h * n_pad + ts[:, None]).to(tl.int64) * DV + j[None, :],
                             mask=jm[None, :], other=0.0)
                acc = tl.dot(kt, ub, acc, input_precision=PREC)
            tl.store(sp + (k0 + ib)[:, None], acc, mask=sm)
        tl.debug_barrier()  # the state is written before the next chunk reads it


def launch_gdn_recurrence(qkv: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor, *,
                          k_heads: int, k_dim: int, v_heads: int, v_dim: int, grouped: bool,
                          chunked: bool | None = None, snapshot: torch.Tensor | None = None,
                          out: torch.Tensor | None = None, block_v: int = 32, fast_dot: bool = False,
                          prep_block_k: int = 32) -> torch.Tensor:
    """gdn_recurrence_*_per_row (and _ckpt with `snapshot`): qkv [n, 2*Hk*Dk + Hv*Dv] (the conv
    group's output), g, beta [n, Hv] f32, state [Hv*Dv*Dk] f32 in place -> [n, Hv*Dv] f32.
    chunked (default: n > 1) runs chunks of 64 tokens; else one step per token. fast_dot: the
    chunk's products in TF32 on tensor cores (else IEEE f32)."""
    n = qkv.shape[0]
    g, beta = g.contiguous(), beta.contiguous()  # the kernels read row t's gates at t*Hv
    out = out if out is not None else torch.empty((n, v_heads * v_dim), dtype=torch.float32, device=qkv.device)
    chunked = n > 1 if chunked is None else chunked
    bk = triton.next_power_of_2(k_dim)
    if chunked:
        bk, bv = max(16, bk), max(16, min(block_v, triton.next_power_of_2(v_dim)))  # tl.dot's smallest tile
        n_chunks = triton.cdiv(n, CHUNK)
        n_pad = n_chunks * CHUNK
        f32 = dict(dtype=torch.float32, device=qkv.device)
        w = torch.empty((v_heads, n_pad, k_dim), **f32)
        u = torch.empty((v_heads, n_pad, v_dim), **f32)
        qk = torch.empty((v_heads, n_pad, CHUNK), **f32)
        scr = torch.empty((v_heads, n_pad, 2 * CHUNK), **f32)  # the prep kernel's [CH, CH] products
        prec = "tf32" if fast_dot else "ieee"
        gdn_chunk_prep_kernel[(n_chunks, v_heads)](qkv, g, beta, w, u, qk, scr, n, n_pad, k_heads, v_heads,
                                                   qkv.stride(0), DK=k_dim, DV=v_dim, GROUPED=grouped, CH=CHUNK,
                                                   SQUARINGS=(CHUNK - 1).bit_length() - 1, PREC=prec,
                                                   BLOCK_K=max(16, min(prep_block_k, triton.next_power_of_2(k_dim))),
                                                   BLOCK_V=bv, KS=CHUNK_DOT_K, num_warps=8, num_stages=1)
        gdn_chunk_state_kernel[(v_heads, triton.cdiv(v_dim, bv))](
            qkv, g, w, u, qk, state, out, n, n_pad, k_heads, v_heads, qkv.stride(0), out.stride(0),
            float(k_dim) ** -0.5, DK=k_dim, DV=v_dim, GROUPED=grouped, CH=CHUNK, PREC=prec,
            BLOCK_K=max(16, triton.next_power_of_2(triton.cdiv(k_dim, 2))), BLOCK_V=bv, KS=CHUNK_DOT_K, num_warps=8,
            num_stages=1)
    else:
        bv = min(block_v, triton.next_power_of_2(v_dim))
        gdn_step_kernel[(v_heads, triton.cdiv(v_dim, bv))](qkv, g, beta, state, out, n, k_heads, v_heads,
                                                          qkv.stride(0), out.stride(0), float(k_dim) ** -0.5, DK=k_dim,
                                                          DV=v_dim, GROUPED=grouped, BLOCK_K=bk, BLOCK_V=bv)
    if snapshot is not None:
        snapshot.copy_(state.reshape(snapshot.shape))
    return out
