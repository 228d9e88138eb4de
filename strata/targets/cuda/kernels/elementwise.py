"""Row-wise kernels: residual add, SiLU-mul, sigmoid gate, the q/gate de-interleave, embedding
rows, and argmax (greedy sampling on device)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata.targets.cuda.kernels.ggml_packed import launch_gather_ggml_rows


@triton.jit
def binary_kernel(a_ptr, b_ptr, y_ptr, n_cols, a_rs, b_rs, y_rs, OP: tl.constexpr, BLOCK: tl.constexpr):
    """OP 0: a + b (residual_add); 1: sigmoid(a) * b (sigmoid_gate_mul); 2: silu(a[:, :n]) * a[:, n:]
    (silu_mul, b unused)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < n_cols
    a = tl.load(a_ptr + row * a_rs + cols, mask=m, other=0.0).to(tl.float32)
    if OP == 2:
        b = tl.load(a_ptr + row * a_rs + n_cols + cols, mask=m, other=0.0).to(tl.float32)
    else:
        b = tl.load(b_ptr + row * b_rs + cols, mask=m, other=0.0).to(tl.float32)
    if OP == 0:
        y = a + b
    elif OP == 1:
        y = b / (1.0 + tl.exp(-a))
    else:
        y = a / (1.0 + tl.exp(-a)) * b
    tl.store(y_ptr + row * y_rs + cols, y, mask=m)


def _binary(a, b, n_cols, op, out, block=1024):
    bl = min(block, triton.next_power_of_2(n_cols))
    binary_kernel[(a.shape[0], triton.cdiv(n_cols, bl))](a, b, out, n_cols, a.stride(0), b.stride(0), out.stride(0),
                                                          OP=op, BLOCK=bl)
    return out


def launch_residual_add(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None):
    """`residual_add` (ffn_residual_add): a + b."""
    return _binary(a, b, a.shape[1], 0, out if out is not None else torch.empty_like(a))


def launch_sigmoid_gate_mul(gate: torch.Tensor, x: torch.Tensor, *, out: torch.Tensor | None = None):
    """`sigmoid_gate_mul`: sigmoid(gate) * x."""
    return _binary(gate, x, x.shape[1], 1, out if out is not None else torch.empty_like(x))


def launch_silu_mul(x: torch.Tensor, *, out: torch.Tensor | None = None):
    """`silu_mul`: silu(x[:, :h]) * x[:, h:] with h = half of x's width."""
    h = x.shape[1] // 2
    out = out if out is not None else torch.empty((x.shape[0], h), dtype=x.dtype, device=x.device)
    return _binary(x, x, h, 2, out)


@triton.jit
def split_qg_kernel(x_ptr, q_ptr, g_ptr, x_rs, q_rs, g_rs, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """Row, head: x's [q | gate] of the head (2*HEAD_DIM wide) to q's and gate's head."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK)
    m = d < HEAD_DIM
    base = x_ptr + row * x_rs + h * 2 * HEAD_DIM
    tl.store(q_ptr + row * q_rs + h * HEAD_DIM + d, tl.load(base + d, mask=m), mask=m)
    tl.store(g_ptr + row * g_rs + h * HEAD_DIM + d, tl.load(base + HEAD_DIM + d, mask=m), mask=m)


def launch_split_qg(x: torch.Tensor, head_dim: int):
    """`split` (deinterleave_qg): x [n, heads*2*head_dim], per head [q | gate] -> (q, gate)."""
    n, w = x.shape
    heads = w // (2 * head_dim)
    q = torch.empty((n, heads * head_dim), dtype=x.dtype, device=x.device)
    g = torch.empty_like(q)
    split_qg_kernel[(n, heads)](x, q, g, x.stride(0), q.stride(0), g.stride(0), HEAD_DIM=head_dim,
                                BLOCK=triton.next_power_of_2(head_dim))
    return q, g


@triton.jit
def embed_kernel(ids_ptr, table_ptr, y_ptr, n_cols, t_rs, y_rs, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < n_cols
    tok = tl.load(ids_ptr + row).to(tl.int64)
    tl.store(y_ptr + row.to(tl.int64) * y_rs + cols, tl.load(table_ptr + tok * t_rs + cols, mask=m), mask=m)


def launch_embed(ids: torch.Tensor, table, *, out: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None):
    """`embed` (embed_row_copy): rows `ids` (int32, [n] or [n, 1]) of the table: a float tensor,
    or a gemm.Weight (a GGUF block format's uint8 blocks, gathered and dequantized; or its values)."""
    ids = ids.reshape(-1).contiguous()  # the kernel reads id i at ids + i
    if not torch.is_tensor(table):
        if table.fmt >= 3:  # a GGUF block format, the file's bytes
            out = out if out is not None else torch.empty((ids.shape[0], table.k), dtype=out_dtype or torch.float32,
                                                          device=table.data.device)
            return launch_gather_ggml_rows(ids, table, out)
        table = table.data  # the values (a store that cannot give the file's blocks)
    n, c = ids.shape[0], table.shape[1]
    out = out if out is not None else torch.empty((n, c), dtype=out_dtype or table.dtype, device=table.device)
    bl = min(1024, triton.next_power_of_2(c))
    embed_kernel[(n, triton.cdiv(c, bl))](ids, table, out, c, table.stride(0), out.stride(0), BLOCK=bl)
    return out


@triton.jit
def argmax_kernel(x_ptr, y_ptr, n_cols, x_rs, y_rs, BLOCK: tl.constexpr):
    """Row max's first index (numpy's argmax), over the row in blocks of BLOCK."""
    row = tl.program_id(0).to(tl.int64)
    best = -float("inf")
    best_i = 0
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * x_rs + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m = tl.max(v, axis=0)
        i = tl.min(tl.where(v == m, cols, n_cols), axis=0)
        take = m > best
        best_i = tl.where(take, i, best_i)
        best = tl.where(take, m, best)
    tl.store(y_ptr + row * y_rs, best_i)


def launch_argmax(x: torch.Tensor, *, out: torch.Tensor | None = None, block: int = 4096):
    """`argmax` (argmax_host / argmax_device): int32 [n, 1], the first index of each row's maximum."""
    out = out if out is not None else torch.empty((x.shape[0], 1), dtype=torch.int32, device=x.device)
    argmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                 BLOCK=min(block, triton.next_power_of_2(x.shape[1])))
    return out
