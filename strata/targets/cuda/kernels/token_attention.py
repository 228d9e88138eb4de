"""Attention of a batch of tokens from many sequences (the batched and paged entries): each
token has its own row of a block table and its own position, and its K/V go to a cache cell of
their own.

A call's tokens come as runs: consecutive tokens of one row at consecutive positions (a prompt
chunk, a decode step, a packed segment). Token t of a run starting at position p0 sees the
row's positions 0 .. p0 + t, read through the row's table: position j lives in cell
table[row, j // page] * page + j % page. Only the pages up to the run's last position are read
(the live ones). The same addressing serves every layout: a paged pool (the table the
scheduler hands out), a cache of Batch rows of MaxSeq cells (a table of one page of MaxSeq
cells per row) and a call's own tokens (a scratch cache, one page per segment).

The program's rows are (token, query head of the group) pairs of one run, as in the one-sequence
kernel (`attention.py`), so the GROUP query heads of a KV head share its K/V tiles; a run longer
than a block takes several blocks. The host lists the blocks (`token_blocks`: first token, run
length, first pair, row), so one launch covers every run of the call.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from strata.targets.cuda.kernels.attention import attend_keys, attention_tiles


@triton.jit
def kv_write_cells_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, cell_ptr, width, k_rs, v_rs, c_rs, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cell = tl.load(cell_ptr + i + 0 * cols)  # the token's cell, on every lane
    m = (cols < width) & (cell >= 0)  # cell -1: a token that writes nothing (padding, an idle row)
    tl.store(kc_ptr + cell * c_rs + cols, tl.load(k_ptr + i * k_rs + cols, mask=m), mask=m)
    tl.store(vc_ptr + cell * c_rs + cols, tl.load(v_ptr + i * v_rs + cols, mask=m), mask=m)


def launch_kv_write_cells(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          cells: torch.Tensor) -> None:
    """k, v [n, kv_heads*head_dim] to the cache rows `cells` (int64 [n]; -1: not written)."""
    n, width = k.shape
    bl = min(1024, triton.next_power_of_2(width))
    kv_write_cells_kernel[(n, triton.cdiv(width, bl))](k, v, k_cache, v_cache, cells, width, k.stride(0), v.stride(0),
                                                       k_cache.stride(0), BLOCK=bl)


@triton.jit
def token_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, table_ptr, pos_ptr, blk_ptr, table_rs, q_rs, kv_rs, o_rs,
                           scale, PAGE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_BF16: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    tok0 = tl.load(blk_ptr + b * 4)  # the run's first token
    n_q = tl.load(blk_ptr + b * 4 + 1)  # the run's tokens
    m0 = tl.load(blk_ptr + b * 4 + 2)  # the block's first (token, head) pair within the run
    row = tl.load(blk_ptr + b * 4 + 3).to(tl.int64)  # the run's row of the table
    pos = tl.load(pos_ptr + tok0)
    m = m0 + tl.arange(0, BLOCK_M)
    tok = m // GROUP
    hq = kvh * GROUP + m % GROUP
    m_ok = tok < n_q
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    rows_q = (tok0 + tok)[:, None].to(tl.int64)
    q = tl.load(q_ptr + rows_q * q_rs + hq[:, None] * HEAD_DIM + d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    q_pos = pos + tok
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    last_tok = tl.minimum(n_q - 1, (m0 + BLOCK_M - 1) // GROUP)
    hi = pos + last_tok + 1  # the positions any pair of this block sees: the live pages only
    tb = table_ptr + row * table_rs
    for start in range(0, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        j_ok = j < hi
        cells = tl.load(tb + j // PAGE, mask=j_ok, other=0).to(tl.int64) * PAGE + j % PAGE
        m_i, l_i, acc = attend_keys(q, k_ptr, v_ptr, cells, j, j_ok, d, d_ok, kvh, kv_rs, q_pos, m_i, l_i, acc, scale,
                                    HEAD_DIM, DOT_BF16)
    out = acc / l_i[:, None]
    tl.store(o_ptr + rows_q * o_rs + hq[:, None] * HEAD_DIM + d[None, :], out, mask=m_ok[:, None] & d_ok[None, :])


def token_runs(rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The runs of a call's tokens, int64 [runs, 3] (first token, length, table row): maximal
    stretches of one row (>= 0) at consecutive positions; a token of row -1 is in none."""
    rows, positions = np.asarray(rows, np.int64), np.asarray(positions, np.int64)
    n = rows.size
    if n == 0:
        return np.zeros((0, 3), np.int64)
    same = np.zeros(n, bool)
    same[1:] = (rows[1:] == rows[:-1]) & (positions[1:] == positions[:-1] + 1)
    starts = np.flatnonzero(~same)
    ends = np.append(starts[1:], n)
    runs = np.stack([starts, ends - starts, rows[starts]], axis=1)
    return runs[runs[:, 2] >= 0]


def token_tiles(q_rows: int, head_dim: int, group: int, bf16: bool) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) for the longest run's `q_rows` (token, head) pairs: the
    one-sequence kernel's tiles (`attention_tiles`) up to a 128-wide head; a wider head takes
    32 x 16 (4 warps) for a chunk, since the table lookup of each key costs the 64 x 32 tile its
    registers (checked without spills by aot.py)."""
    if bf16 and head_dim > 128 and q_rows > 16:
        return 32, 16, 4
    return attention_tiles(q_rows, head_dim, group, bf16)


def token_blocks(runs: np.ndarray, group: int, block_m: int) -> np.ndarray:
    """The blocks of (token, head) pairs of the runs, int32 [blocks, 4]: (first token, run
    length, first pair, row), `block_m` pairs each."""
    out = [(t0, n, m0, r) for t0, n, r in runs.tolist() for m0 in range(0, n * group, block_m)]
    return np.asarray(out, np.int32).reshape(-1, 4)


def launch_token_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, call, scale: float, *,
                           head_dim: int, kv_heads: int, out: torch.Tensor) -> torch.Tensor:
    """q [n, q_heads*head_dim] of the call's tokens against the cache cells their rows' tables
    reach -> out (rows of tokens in no run keep what `out` held: the caller zeroes them). `call`:
    `table` (int32 [rows, pages], device), `page` (cells per page: a constexpr, one compile per
    program's page size), `positions` (int32 [n],
    device), `runs` (`token_runs`) and `blocks` (a dict caching the block list per tile). The
    K/V of the call's tokens must be written first (launch_kv_write_cells)."""
    group = q.shape[1] // head_dim // kv_heads
    dot_bf16 = q.dtype == torch.bfloat16
    longest = int(call.runs[:, 1].max()) if call.runs.size else 1
    bm, bn, warps = token_tiles(longest * group, head_dim, group, dot_bf16)
    key = (group, bm)
    if key not in call.blocks:
        call.blocks[key] = torch.from_numpy(token_blocks(call.runs, group, bm)).to(q.device)
    blocks = call.blocks[key]
    if blocks.shape[0] == 0:
        return out
    token_attention_kernel[(blocks.shape[0], kv_heads)](
        q, k_cache, v_cache, out, call.table, call.positions, blocks, call.table.stride(0), q.stride(0),
        k_cache.stride(0), out.stride(0), float(scale), PAGE=int(call.page), GROUP=group, HEAD_DIM=head_dim,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=bm, BLOCK_N=bn, DOT_BF16=dot_bf16, num_warps=warps)
    return out
