"""The batched entries' attention kernels in Triton's interpreter (f32) against a plain torch
attention: K/V written to given cells (-1: none), and each token of a run reading its row's
positions 0 .. its own through the row's table of pages. Runs long enough to take several
blocks of (token, head) pairs and of keys, pages scattered in the pool, 3 query heads per KV
head, a head of 12, and a token of no row."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the CUDA kernel tests need torch (the `test` extra)")
pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")

from strata.targets.cuda.kernels import token_attention as T  # noqa: E402

HEAD, KV_HEADS, GROUP, PAGE = 12, 2, 3, 8


class Call:
    def __init__(self, table, positions, rows, cells):
        self.table = torch.tensor(table, dtype=torch.int32)
        self.positions = torch.tensor(positions, dtype=torch.int32)
        self.cells = torch.tensor(cells, dtype=torch.int64)
        self.page = PAGE
        self.runs = T.token_runs(np.asarray(rows), np.asarray(positions))
        self.blocks: dict = {}


def test_token_runs_split_rows_and_position_jumps():
    rows = [0, 0, 0, 2, 2, -1, 1, 1, 1]
    positions = [4, 5, 6, 0, 1, 0, 3, 5, 6]
    assert T.token_runs(np.array(rows), np.array(positions)).tolist() == [
        [0, 3, 0], [3, 2, 2], [6, 1, 1], [7, 2, 1]]
    blocks = T.token_blocks(np.array([[0, 7, 1]]), 3, 16)  # 21 pairs: two blocks of 16
    assert blocks.tolist() == [[0, 7, 0, 1], [0, 7, 16, 1]]


def test_attention_through_the_tables_equals_plain_attention():
    g = torch.Generator().manual_seed(0)
    pool_pages = 12
    width = KV_HEADS * HEAD
    k_cache = torch.randn(pool_pages * PAGE, width, generator=g)
    v_cache = torch.randn(pool_pages * PAGE, width, generator=g)
    table = [[5, 0, 9, 3, 1], [7, 11, -1, -1, -1], [2, 4, 6, 8, 10]]
    # row 0: a chunk of 20 new tokens at positions 14..33 (past two page ends, three key blocks);
    # row 1: one decode step at 12; a token of no row; row 2: a chunk of 3 at 0..2
    rows = [0] * 20 + [1, -1, 2, 2, 2]
    positions = list(range(14, 34)) + [12, 0, 0, 1, 2]
    n = len(rows)

    def cell(r, p):
        return table[r][p // PAGE] * PAGE + p % PAGE if r >= 0 else -1

    cells = [cell(r, p) for r, p in zip(rows, positions)]
    k_new, v_new = torch.randn(n, width, generator=g), torch.randn(n, width, generator=g)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    for i, c in enumerate(cells):
        if c >= 0:
            want_k[c], want_v[c] = k_new[i], v_new[i]
    call = Call(table, positions, rows, cells)
    T.launch_kv_write_cells(k_new, v_new, k_cache, v_cache, call.cells)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)

    q = torch.randn(n, KV_HEADS * GROUP * HEAD, generator=g)
    scale = HEAD ** -0.5
    out = torch.zeros_like(q)
    T.launch_token_attention(q, k_cache, v_cache, call, scale, head_dim=HEAD, kv_heads=KV_HEADS, out=out)
    for i, (r, p) in enumerate(zip(rows, positions)):
        if r < 0:
            assert not out[i].any()  # in no run: the caller's zeros
            continue
        seen = torch.tensor([cell(r, j) for j in range(p + 1)])
        keys = want_k[seen].reshape(-1, KV_HEADS, HEAD).repeat_interleave(GROUP, 1)
        values = want_v[seen].reshape(-1, KV_HEADS, HEAD).repeat_interleave(GROUP, 1)
        qi = q[i].reshape(-1, HEAD)
        weights = torch.softmax(torch.einsum("hd,jhd->hj", qi, keys) * scale, dim=-1)
        ref = torch.einsum("hj,jhd->hd", weights, values).reshape(-1)
        assert float((out[i] - ref).abs().max()) < 1e-5, i
