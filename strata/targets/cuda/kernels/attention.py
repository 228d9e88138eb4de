"""Attention kernels: RoPE (ggml's modes), the KV-cache write, and flash attention against a
contiguous or paged KV cache (decode and prefill, one kernel).

RoPE (the reference's K.rope): pair i < n_dims/2 turns by p_i * inv_freq[i], inv_freq[i] =
freq_scale * freq_base^(-2i/n_dims) (computed on the host in f64, passed as f32). "neox" pairs
dims (i, i + n_dims/2), "norm" pairs (2i, 2i+1), "mrope"/"imrope" pair like neox and take pair
i's position from stream 0..3 (t, h, w, e) of positions [4, n] picked by the sections (plain
M-RoPE: sections in turn; interleaved: t, h, w cycling). Dims from n_dims on pass through.

Attention: the cache holds rows [0, pos + n) (row j of key/value head g at [j, g*head_dim:]);
query i (at position pos + i) sees rows j <= pos + i, softmax(q.k * scale) v, head h reading
KV head h // (q_heads / kv_heads). The program's rows are (token, query head of the group)
pairs, so the GROUP query heads of a KV head share its K/V tiles (decode: GROUP rows). Paged:
logical row j lives at physical row block_table[j // PAGE] * PAGE + j % PAGE.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

MODES = {"neox": 0, "norm": 1, "mrope": 2, "imrope": 3}


@triton.jit
def rope_kernel(x_ptr, y_ptr, pos_ptr, inv_ptr, n_rows, x_rs, y_rs,
                HEAD_DIM: tl.constexpr, N_DIMS: tl.constexpr, MODE: tl.constexpr,
                S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr):
    row = tl.program_id(0)
    head = tl.program_id(1)
    i = tl.arange(0, BLOCK_H)
    ok = i < N_DIMS // 2
    if MODE == 1:
        a = 2 * i
        b = 2 * i + 1
    else:
        a = i
        b = i + N_DIMS // 2
    if MODE >= 2:
        sector = i % (S0 + S1 + S2 + S3)
        if MODE == 3:
            stream = tl.where((sector % 3 == 1) & (sector < 3 * S1), 1,
                              tl.where((sector % 3 == 2) & (sector < 3 * S2), 2,
                                       tl.where((sector % 3 == 0) & (sector < 3 * S0), 0, 3)))
        else:
            stream = tl.where(sector < S0, 0, tl.where(sector < S0 + S1, 1, tl.where(sector < S0 + S1 + S2, 2, 3)))
        p = tl.load(pos_ptr + stream * n_rows + row, mask=ok, other=0).to(tl.float32)
    else:
        p = tl.load(pos_ptr + row).to(tl.float32)
    theta = p * tl.load(inv_ptr + i, mask=ok, other=0.0)
    c = tl.cos(theta)
    s = tl.sin(theta)
    xb = x_ptr + row.to(tl.int64) * x_rs + head * HEAD_DIM
    yb = y_ptr + row.to(tl.int64) * y_rs + head * HEAD_DIM
    x0 = tl.load(xb + a, mask=ok, other=0.0).to(tl.float32)
    x1 = tl.load(xb + b, mask=ok, other=0.0).to(tl.float32)
    tl.store(yb + a, x0 * c - x1 * s, mask=ok)
    tl.store(yb + b, x0 * s + x1 * c, mask=ok)
    if N_DIMS < HEAD_DIM:
        t = N_DIMS + tl.arange(0, BLOCK_T)
        tm = t < HEAD_DIM
        tl.store(yb + t, tl.load(xb + t, mask=tm), mask=tm)


def rope_inv_freq(n_dims: int, freq_base: float, freq_scale: float = 1.0, freq_factors=None,
                  device=None) -> torch.Tensor:
    """freq_scale * freq_base^(-2i/n_dims) / freq_factors[i] (llama3 scaling; absent: 1), i < n_dims/2,
    computed in f64, f32 (cache it per layer)."""
    inv = float(freq_scale) * float(freq_base) ** (-np.arange(n_dims // 2, dtype=np.float64) * 2.0 / n_dims)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[: n_dims // 2]
    return torch.from_numpy(inv.astype(np.float32)).to(device)


def rope_positions(pos: int, n: int, mode: str, device=None) -> torch.Tensor:
    """The positions of rows pos .. pos+n-1: [n] int32, or for M-RoPE text [4, n] (p, p, p, 0)."""
    p = torch.arange(pos, pos + n, dtype=torch.int32, device=device)
    if mode in ("mrope", "imrope"):
        return torch.stack([p, p, p, torch.zeros_like(p)])
    return p


def launch_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, *, head_dim: int, n_dims: int,
                mode: str = "neox", sections=(0, 0, 0, 0), out: torch.Tensor | None = None) -> torch.Tensor:
    """`rope` on one edge x [n, heads*head_dim] (call it for q and for k; rope_* rules).
    positions: [n] int32 (neox/norm) or [4, n] (mrope/imrope); inv_freq from rope_inv_freq."""
    n, w = x.shape
    out = out if out is not None else torch.empty_like(x)
    s = tuple(int(v) for v in (list(sections) + [0, 0, 0, 0])[:4])
    rope_kernel[(n, w // head_dim)](x, out, positions.contiguous(), inv_freq, n, x.stride(0), out.stride(0),
                                    HEAD_DIM=head_dim, N_DIMS=n_dims, MODE=MODES[mode], S0=s[0], S1=s[1], S2=s[2],
                                    S3=s[3], BLOCK_H=triton.next_power_of_2(max(n_dims // 2, 1)),
                                    BLOCK_T=triton.next_power_of_2(max(head_dim - n_dims, 1)))
    return out


@triton.jit
def kv_write_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, bt_ptr, pos_ptr, pos, width, k_rs, v_rs, c_rs,
                    PAGED: tl.constexpr, PAGE: tl.constexpr, BLOCK: tl.constexpr, POS_DEV: tl.constexpr):
    if POS_DEV:  # the position read on the device (a CUDA graph replays with a new one)
        pos = tl.load(pos_ptr)
    i = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < width
    j = pos + i
    if PAGED:
        dst = tl.load(bt_ptr + j // PAGE).to(tl.int64) * PAGE + j % PAGE
    else:
        dst = j.to(tl.int64)
    tl.store(kc_ptr + dst * c_rs + cols, tl.load(k_ptr + i * k_rs + cols, mask=m), mask=m)
    tl.store(vc_ptr + dst * c_rs + cols, tl.load(v_ptr + i * v_rs + cols, mask=m), mask=m)


def launch_kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int, *,
                    block_table: torch.Tensor | None = None, page: int = 16) -> None:
    """`kv_write` (kv_write_*): k, v [n, kv_heads*head_dim] to cache rows pos .. pos+n-1 (paged
    through block_table, int32 [pages], when given). pos: an int, or an int32 [1] device tensor
    read by the kernel (for CUDA graphs)."""
    n, width = k.shape
    bl = min(1024, triton.next_power_of_2(width))
    dev = torch.is_tensor(pos)
    kv_write_kernel[(n, triton.cdiv(width, bl))](k, v, k_cache, v_cache, block_table if block_table is not None else k,
                                                 pos if dev else k, 0 if dev else pos, width, k.stride(0), v.stride(0),
                                                 k_cache.stride(0), PAGED=block_table is not None, PAGE=page, BLOCK=bl,
                                                 POS_DEV=dev)


@triton.jit
def attend_keys(q, k_ptr, v_ptr, rows, j, j_ok, d, d_ok, kvh, kv_rs, q_pos, m_i, l_i, acc, scale,
                HEAD_DIM: tl.constexpr, DOT_BF16: tl.constexpr):
    """One block of keys of the online softmax: the K/V cache rows `rows` (positions `j`, `j_ok`
    live) against the queries `q` at positions `q_pos` (causal), folded into the running max
    `m_i`, sum `l_i` and output `acc`: (m_i, l_i, acc) after them."""
    kvm = j_ok[:, None] & d_ok[None, :]
    kt = tl.load(k_ptr + rows[:, None] * kv_rs + kvh * HEAD_DIM + d[None, :], mask=kvm, other=0.0).to(tl.float32)
    vt = tl.load(v_ptr + rows[:, None] * kv_rs + kvh * HEAD_DIM + d[None, :], mask=kvm, other=0.0).to(tl.float32)
    if DOT_BF16:
        s = tl.dot(q.to(tl.bfloat16), tl.trans(kt.to(tl.bfloat16)))
    else:
        s = tl.dot(q, tl.trans(kt), input_precision="ieee")
    s = s * scale
    vis = (j[None, :] <= q_pos[:, None]) & j_ok[None, :]
    s = tl.where(vis, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if DOT_BF16:
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), vt.to(tl.bfloat16))
    else:
        acc = acc * alpha[:, None] + tl.dot(p, vt, input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, bt_ptr, pos_ptr, n_q, pos, q_rs, kv_rs, o_rs, scale,
                     GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr, DOT_BF16: tl.constexpr,
                     POS_DEV: tl.constexpr):
    if POS_DEV:  # the position read on the device (a CUDA graph replays with a new one)
        pos = tl.load(pos_ptr)
    pid_m = tl.program_id(0)
    kvh = tl.program_id(1)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tok = m // GROUP
    hq = kvh * GROUP + m % GROUP
    m_ok = tok < n_q
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + tok[:, None].to(tl.int64) * q_rs + hq[:, None] * HEAD_DIM + d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    q_pos = pos + tok
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    last_tok = tl.minimum(n_q - 1, (pid_m * BLOCK_M + BLOCK_M - 1) // GROUP)
    hi = pos + last_tok + 1  # keys any row of this block sees
    for start in range(0, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        j_ok = j < hi
        if PAGED:
            rows = tl.load(bt_ptr + j // PAGE, mask=j_ok, other=0).to(tl.int64) * PAGE + j % PAGE
        else:
            rows = j.to(tl.int64)
        m_i, l_i, acc = attend_keys(q, k_ptr, v_ptr, rows, j, j_ok, d, d_ok, kvh, kv_rs, q_pos, m_i, l_i, acc, scale,
                                    HEAD_DIM, DOT_BF16)
    out = acc / l_i[:, None]
    tl.store(o_ptr + tok[:, None].to(tl.int64) * o_rs + hq[:, None] * HEAD_DIM + d[None, :], out,
             mask=m_ok[:, None] & d_ok[None, :])


def attention_tiles(q_rows: int, head_dim: int, group: int, bf16: bool) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) for `q_rows` (token, query head) rows: tiles that compile for
    sm_90 without spills (aot.py) at every head dim up to 256 and every group, a power of two or not.
    Rows come in blocks of 16, 32 or 64 (the smallest power of two holding them, at most 64).
    Measured with the AOT build, where no alignment is known and every load is scalar (so a
    thread holds an address per element): IEEE f32 products hold a thread's operand rows in
    registers and fit only 16 x 16 tiles; bf16 up to a 128-wide head fits 16 x 16, 32 x 32 (8
    warps) and 64 x 64 (8 warps); a 256-wide head block fits 64 x 32 (8 warps) only for a head of
    256 shared by 2, 4, 8 or 16 query heads (64 rows then hold whole groups), else 16 x 16."""
    bm = max(16, min(64, triton.next_power_of_2(q_rows)))
    if not bf16 or bm == 16:
        return 16, 16, 4
    if max(16, triton.next_power_of_2(head_dim)) <= 128:
        return (32, 32, 8) if bm == 32 else (64, 64, 8)
    if bm == 64 and head_dim == 256 and group in (2, 4, 8, 16):
        return 64, 32, 8
    return 16, 16, 4


def launch_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int, scale: float, *,
                     head_dim: int, kv_heads: int, block_table: torch.Tensor | None = None, page: int = 16,
                     out: torch.Tensor | None = None, block_n: int | None = None) -> torch.Tensor:
    """`paged_attention` (paged_attention_* / contiguous_attention_*): q [n, q_heads*head_dim] at
    positions pos .. pos+n-1 against cache rows [0, pos+n) -> [n, q_heads*head_dim]. The k/v of
    the new rows must be written first (launch_kv_write). Tiles: `attention_tiles`, whatever the
    context (a key block past it is masked; a tile of its own would be one more kernel to compile
    and check); block_n narrows the key blocks. pos: an int, or an int32 [1] device tensor read by
    the kernel (for CUDA graphs)."""
    n, w = q.shape
    group = w // head_dim // kv_heads
    out = out if out is not None else torch.empty_like(q)
    dot_bf16 = q.dtype == torch.bfloat16
    bm, bn, warps = attention_tiles(n * group, head_dim, group, dot_bf16)
    bn = bn if block_n is None else max(16, min(bn, block_n))
    dev = torch.is_tensor(pos)
    grid = (triton.cdiv(n * group, bm), kv_heads)
    attention_kernel[grid](q, k_cache, v_cache, out, block_table if block_table is not None else q,
                           pos if dev else q, n, 0 if dev else pos,
                           q.stride(0), k_cache.stride(0), out.stride(0), float(scale), GROUP=group, HEAD_DIM=head_dim,
                           BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=bm, BLOCK_N=bn,
                           PAGED=block_table is not None, PAGE=page, DOT_BF16=dot_bf16,
                           POS_DEV=dev, num_warps=warps)
    return out


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
