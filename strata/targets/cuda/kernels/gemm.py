"""GEMV / GEMM templates: y = x @ W.T (+ bias), with the weight in f32/bf16, fp8 e4m3 with one
f32 scale per (QBN x QBK) block (w8a16), or int4 asymmetric with a scale and zero point per
QBK elements along K (w4a16, ONNX Runtime's MatMulNBits formula: w = (q - zp) * scale).

One template, specialised by constexpr flags as Inductor does:

    FMT       0 dense (f32/bf16/f16), 1 fp8 block (scale row per weight row from a row map),
              2 int4 (two nibbles per byte, low first), 3..8 a GGUF block format read in place
              (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K: `ggml_packed`)
    HAS_BIAS  add a bias row
    SILU_OUT  the weight is [gate; up] (2N rows): y = silu(x W_gate^T) * (x W_up^T)
    SILU_IN   the input row is [gate | up] (2K): x = silu(gate) * up (an expert's down GEMV)
    HAS_IDS   row r multiplies expert ids[r] of a stacked [E, N, K] weight (routed experts only)
    X_DIV     row r reads input row r // X_DIV (top_k slots of a token share its row)

`gemv_kernel` serves decode (one program per output block and row); `gemm_kernel` tiles rows
with `tl.dot` for prefill. `launch_linear` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from strata.targets.cuda.kernels.ggml_packed import GGML_FORMATS, load_ggml_tile

DENSE, FP8, INT4 = 0, 1, 2
#: Row counts up to this use the GEMV kernel; more use the tiled GEMM.
GEMV_MAX_ROWS = 8


@dataclass
class Weight:
    """A linear weight as the kernels read it; [E, N, K] for stacked experts, else [N, K].

    data: dense f32/bf16 [.., N, K]; fp8: float8_e4m3fn [.., N, K]; int4: uint8
    [.., N, ceil(K/2)], element k in the low nibble of byte k//2 when k is even.
    scale: fp8: f32 [.., R, ceil(K/bk)] (scale_inv: w = q * scale[row_map[n], k // bk]); int4:
    f32 [.., N, ceil(K/bk)]. zero: int4: uint8 [.., N, ceil(K/bk)]; fp8: the row map, int32 [N],
    the scale row of each weight row (n // bn for one tensor; a merged projection whose parts
    were quantized apart, or whose rows were reordered, maps its rows to its parts' grids).
    block: (bn, bk), int4 (1, bk).
    A GGUF block format (fmt >= 3): data uint8 [.., N, row bytes], the file's blocks (no scale).
    """

    data: torch.Tensor
    k: int
    fmt: int = DENSE
    scale: torch.Tensor | None = None
    zero: torch.Tensor | None = None
    block: tuple[int, int] = (1, 1)

    @property
    def n(self) -> int:
        return int(self.data.shape[-2])

    def strides(self) -> tuple[int, int, int, int, int]:
        """(row stride of data, expert stride of data, row stride of scale, expert stride of scale,
        expert stride of zero / the row map)."""
        d, s = self.data, self.scale if self.scale is not None else self.data
        z = self.zero if self.zero is not None else self.data
        es = lambda t, nd: int(t.stride(0)) if t.dim() == nd else 0  # noqa: E731
        return int(d.stride(-2)), es(d, 3), int(s.stride(-2)), es(s, 3), es(z, 3 if self.fmt == INT4 else 2)


def dense(w: torch.Tensor) -> Weight:
    return Weight(w.contiguous(), int(w.shape[-1]))


def fp8_weight(q, scale_inv, block: tuple[int, int] = (128, 128), row_map=None) -> Weight:
    """From `strata.ir.fp8.quantize_fp8_block`'s (q e4m3 numpy or torch [.., N, K], scale_inv);
    row_map (int [N]): each row's scale row, default n // bn."""
    if isinstance(q, np.ndarray):
        q = torch.from_numpy(np.ascontiguousarray(q).view(np.uint8)).view(torch.float8_e4m3fn)
    scale = torch.as_tensor(np.asarray(scale_inv, np.float32) if not torch.is_tensor(scale_inv) else scale_inv)
    n = q.shape[-2]
    rows = np.arange(n) // block[0] if row_map is None else np.asarray(row_map)
    rmap = torch.from_numpy(np.ascontiguousarray(rows, np.int32)).to(q.device)
    return Weight(q.contiguous(), int(q.shape[-1]), FP8, scale.float().contiguous(), rmap, tuple(block))


def fp8_concat(parts: list[tuple], block: tuple[int, int] = (128, 128)) -> Weight:
    """A merged projection from parts quantized apart, [(q [.., Ni, K], scale_inv [.., Ri, Kb],
    row_map [Ni] or None)]: rows and scale grids stacked, each part's rows mapped to its grid."""
    qs, ss, maps, base = [], [], [], 0
    for q, s, m in parts:
        qs.append(np.asarray(q))
        ss.append(np.asarray(s, np.float32))
        maps.append(base + (np.arange(q.shape[-2]) // block[0] if m is None else np.asarray(m)))
        base += s.shape[-2]
    return fp8_weight(np.concatenate(qs, axis=-2), np.concatenate(ss, axis=-2), block, np.concatenate(maps))


def int4_weight(q, scale, zero, block: int = 128) -> Weight:
    """From `quantize_int4_block`'s (q uint8 0..15 [.., N, K], scale, zero point): packs q."""
    q = np.asarray(q, np.uint8)
    k = q.shape[-1]
    if k % 2:
        q = np.concatenate([q, np.zeros((*q.shape[:-1], 1), np.uint8)], axis=-1)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return Weight(torch.from_numpy(np.ascontiguousarray(packed)), k, INT4,
                  torch.from_numpy(np.ascontiguousarray(np.asarray(scale, np.float32))),
                  torch.from_numpy(np.ascontiguousarray(np.asarray(zero, np.uint8))), (1, block))


def ggml_weight(blocks, k: int, ggml_type: str) -> Weight:
    """A weight in GGUF's packed blocks: `blocks` uint8 [.., N, row bytes] (as the file stores
    the rows: K / QK blocks each) of ggml type `ggml_type` (`q4_K`, ...), K = `k` values per row."""
    fmt, qk, nbytes, _ = GGML_FORMATS[ggml_type]
    blocks = torch.as_tensor(blocks)
    if blocks.dtype != torch.uint8 or k % qk or blocks.shape[-1] != k // qk * nbytes:
        raise ValueError(f"{ggml_type} blocks {tuple(blocks.shape)} {blocks.dtype} do not hold rows of {k} values")
    return Weight(blocks.contiguous(), int(k), fmt)


@dataclass
class Parts:
    """A merged projection whose parts are stored in different formats (a GGUF whose q, k and v
    differ): the rows of `parts` stacked, each part multiplied by its own launch."""

    parts: list

    @property
    def n(self) -> int:
        return sum(p.n for p in self.parts)

    @property
    def fmt(self) -> int:
        return max(p.fmt for p in self.parts)


def as_weight(w) -> Weight:
    return w if isinstance(w, (Weight, Parts)) else dense(w)


@triton.jit
def load_weight_tile(w_ptr, s_ptr, z_ptr, rows, cols, n_rows, K, w_rs, s_rs,
                     FMT: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr):
    """The f32 tile W[rows, cols] ([len(rows), len(cols)]), dequantized; 0 outside [n_rows, K)."""
    r = rows[:, None]
    c = cols[None, :]
    m = (r < n_rows) & (c < K)
    if FMT == 0:
        w = tl.load(w_ptr + r * w_rs + c, mask=m, other=0.0).to(tl.float32)
    elif FMT == 1:  # z_ptr: the row map (each row's scale row)
        q = tl.load(w_ptr + r * w_rs + c, mask=m, other=0.0).to(tl.float32)
        sr = tl.load(z_ptr + rows, mask=rows < n_rows, other=0)[:, None]
        s = tl.load(s_ptr + sr * s_rs + c // QBK, mask=m, other=0.0)
        w = q * s
    elif FMT == 2:
        byte = tl.load(w_ptr + r * w_rs + c // 2, mask=m, other=0).to(tl.int32)
        nib = (byte >> ((c % 2) * 4)) & 15
        s = tl.load(s_ptr + r * s_rs + c // QBK, mask=m, other=0.0)
        z = tl.load(z_ptr + r * s_rs + c // QBK, mask=m, other=0).to(tl.float32)
        w = (nib.to(tl.float32) - z) * s
    else:
        w = load_ggml_tile(w_ptr, r, c, m, w_rs, FMT)
    return w


@triton.jit
def _silu(x):
    return x / (1.0 + tl.exp(-x))


@triton.jit
def gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, ids_ptr, y_ptr, N, K, x_rs, y_rs, w_rs, w_es, s_rs, s_es,
                z_es, FMT: tl.constexpr, HAS_BIAS: tl.constexpr, SILU_OUT: tl.constexpr, SILU_IN: tl.constexpr,
                HAS_IDS: tl.constexpr, X_DIV: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    if HAS_IDS:
        e = tl.load(ids_ptr + row).to(tl.int64)
        w_ptr += e * w_es
        s_ptr += e * s_es
        z_ptr += e * z_es
    n_rows = 2 * N if SILU_OUT else N
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    x_row = x_ptr + (row // X_DIV).to(tl.int64) * x_rs
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        km = ks < K
        x = tl.load(x_row + ks, mask=km, other=0.0).to(tl.float32)
        if SILU_IN:
            x = _silu(x) * tl.load(x_row + K + ks, mask=km, other=0.0).to(tl.float32)
        w = load_weight_tile(w_ptr, s_ptr, z_ptr, cols, ks, n_rows, K, w_rs, s_rs, FMT, QBN, QBK)
        acc += tl.sum(w * x[None, :], axis=1)
        if SILU_OUT:
            w2 = load_weight_tile(w_ptr, s_ptr, z_ptr, cols + N, ks, n_rows, K, w_rs, s_rs, FMT, QBN, QBK)
            acc2 += tl.sum(w2 * x[None, :], axis=1)
    cm = cols < N
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cm, other=0.0).to(tl.float32)
        if SILU_OUT:
            acc2 += tl.load(b_ptr + N + cols, mask=cm, other=0.0).to(tl.float32)
    if SILU_OUT:
        acc = _silu(acc) * acc2
    tl.store(y_ptr + row.to(tl.int64) * y_rs + cols, acc, mask=cm)


@triton.jit
def gemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, M, N, K, x_rs, y_rs, w_rs, s_rs,
                FMT: tl.constexpr, HAS_BIAS: tl.constexpr, SILU_OUT: tl.constexpr, DOT_BF16: tl.constexpr,
                QBN: tl.constexpr, QBK: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Tiled y = x @ W.T with tl.dot (f32 operands in IEEE precision, or bf16 with DOT_BF16)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_rows = 2 * N if SILU_OUT else N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        xm = (rows[:, None] < M) & (ks[None, :] < K)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * x_rs + ks[None, :], mask=xm, other=0.0).to(tl.float32)
        w = load_weight_tile(w_ptr, s_ptr, z_ptr, cols, ks, n_rows, K, w_rs, s_rs, FMT, QBN, QBK)
        if DOT_BF16:
            acc = tl.dot(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
        if SILU_OUT:
            w2 = load_weight_tile(w_ptr, s_ptr, z_ptr, cols + N, ks, n_rows, K, w_rs, s_rs, FMT, QBN, QBK)
            if DOT_BF16:
                acc2 = tl.dot(x.to(tl.bfloat16), tl.trans(w2.to(tl.bfloat16)), acc2)
            else:
                acc2 = tl.dot(x, tl.trans(w2), acc2, input_precision="ieee")
    cm = cols < N
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cm, other=0.0).to(tl.float32)[None, :]
        if SILU_OUT:
            acc2 += tl.load(b_ptr + N + cols, mask=cm, other=0.0).to(tl.float32)[None, :]
    if SILU_OUT:
        acc = _silu(acc) * acc2
    ym = (rows[:, None] < M) & cm[None, :]
    tl.store(y_ptr + rows[:, None].to(tl.int64) * y_rs + cols[None, :], acc, mask=ym)


def _pow2(n: int, lo: int = 1, hi: int | None = None) -> int:
    p = max(lo, triton.next_power_of_2(max(int(n), 1)))
    return min(p, hi) if hi is not None else p


def _quant_args(w: Weight):
    s = w.scale if w.scale is not None else w.data
    z = w.zero if w.zero is not None else w.data
    return s, z, w.block[0], w.block[1]


def launch_gemv(x: torch.Tensor, w, out: torch.Tensor, *, bias: torch.Tensor | None = None,
                ids: torch.Tensor | None = None, x_div: int = 1, silu_out: bool = False,
                silu_in: bool = False, block_n: int = 16, block_k: int = 256) -> torch.Tensor:
    """GEMV template: out[r] = f(x[r // x_div]) @ W[ids[r]].T for every row r of `out`.
    16 x 256 weight tiles keep an int4/fp8 dequant under 200 registers on sm_90 (aot.py)."""
    w = as_weight(w)
    n = out.shape[-1]
    k = w.k
    rows = out.shape[0]
    s, z, qbn, qbk = _quant_args(w)
    w_rs, w_es, s_rs, s_es, z_es = w.strides()
    bn, bk = _pow2(n, 16, block_n), _pow2(k, 16, block_k)
    grid = (triton.cdiv(n, bn), rows)
    gemv_kernel[grid](x, w.data, s, z, bias if bias is not None else x, ids if ids is not None else x, out,
                      n, k, x.stride(0), out.stride(0), w_rs, w_es, s_rs, s_es, z_es,
                      FMT=w.fmt, HAS_BIAS=bias is not None, SILU_OUT=silu_out, SILU_IN=silu_in,
                      HAS_IDS=ids is not None, X_DIV=x_div, QBN=qbn, QBK=qbk, BLOCK_N=bn, BLOCK_K=bk)
    return out


def launch_gemm(x: torch.Tensor, w, out: torch.Tensor, *, bias: torch.Tensor | None = None,
                silu_out: bool = False, dot_bf16: bool = False, block_m: int = 64, block_n: int = 64,
                block_k: int = 64, num_warps: int = 8) -> torch.Tensor:
    """Tiled GEMM template (prefill): out = x @ W.T (+ bias), or its SiLU-mul of [gate; up].
    8 warps: 64x64x64 tiles with a dequantized weight tile spill with 4 on sm_90 (aot.py)."""
    w = as_weight(w)
    m, n, k = x.shape[0], out.shape[-1], w.k
    s, z, qbn, qbk = _quant_args(w)
    w_rs, _, s_rs, _, _ = w.strides()
    bm, bn, bk = _pow2(m, 16, block_m), _pow2(n, 16, block_n), _pow2(k, 16, block_k)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    gemm_kernel[grid](x, w.data, s, z, bias if bias is not None else x, out, m, n, k, x.stride(0), out.stride(0),
                      w_rs, s_rs, FMT=w.fmt, HAS_BIAS=bias is not None, SILU_OUT=silu_out, DOT_BF16=dot_bf16,
                      QBN=qbn, QBK=qbk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=num_warps)
    return out


def launch_linear(x: torch.Tensor, w, *, bias: torch.Tensor | None = None, out: torch.Tensor | None = None,
                  silu_out: bool = False, out_dtype: torch.dtype | None = None,
                  dot_bf16: bool | None = None) -> torch.Tensor:
    """`linear` / `lm_head` / `router` (and `ffn_gate_up_silu_*` with silu_out): x [M, K] -> [M, N]
    (N = W's rows, or half of them with silu_out). GEMV up to GEMV_MAX_ROWS rows, else GEMM.
    dot_bf16: the GEMM's products in bf16 (the node's activation format; default: x is bf16)."""
    w = as_weight(w)
    n = w.n // 2 if silu_out else w.n
    if out is None:
        out = torch.empty((x.shape[0], n), dtype=out_dtype or x.dtype, device=x.device)
    if isinstance(w, Parts):
        return _launch_parts(x, w, bias, out, silu_out, dot_bf16)
    # gate and up tiles of a quantized weight dequantized together: half as wide (aot.SPECS
    # *_gate_up_silu: 16 x 256 GEMV and 64 x 64 GEMM tiles spill on sm_90)
    # and a GGUF block format's tile alone: its dequant holds several bytes and scales per value
    # (aot.SPECS q8b.*_q4_K ...: 16 x 256 GEMV and 64 x 64 GEMM tiles of Q4_K / Q5_K spill; 8 x 128
    # GEMV tiles and 32-wide K steps of the GEMM, whose 8 warps ptxas holds to 128 registers, keep
    # every format and row block without local memory)
    narrow = (silu_out and w.fmt != DENSE) or w.fmt > INT4
    if x.shape[0] <= GEMV_MAX_ROWS:
        return launch_gemv(x, w, out, bias=bias, silu_out=silu_out, block_n=8 if narrow else 16,
                           block_k=128 if w.fmt > INT4 else 256)
    dot_bf16 = x.dtype == torch.bfloat16 if dot_bf16 is None else dot_bf16
    return launch_gemm(x, w, out, bias=bias, silu_out=silu_out, dot_bf16=dot_bf16, block_n=32 if narrow else 64,
                       block_k=32 if w.fmt > INT4 else 64)


def _launch_parts(x: torch.Tensor, w: Parts, bias, out: torch.Tensor, silu_out: bool, dot_bf16) -> torch.Tensor:
    """A merged projection of parts in different formats: each part's launch writes its columns
    of the output (of [gate; up]'s product, then the SiLU-mul, with silu_out)."""
    full = torch.empty((x.shape[0], w.n), dtype=out.dtype, device=out.device) if silu_out else out
    lo = 0
    for part in w.parts:
        hi = lo + part.n
        launch_linear(x, part, bias=bias[lo:hi] if bias is not None else None, out=full[:, lo:hi], dot_bf16=dot_bf16)
        lo = hi
    if silu_out:
        n = w.n // 2
        out.copy_(torch.nn.functional.silu(full[:, :n].float()) * full[:, n:].float())
    return out
