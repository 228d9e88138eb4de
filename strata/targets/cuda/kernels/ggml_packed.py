"""GGUF's block formats read in place: a weight tile dequantized in registers from the blocks a
GGUF file stores (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), exactly as ggml's dequantize_row_*
(ggml-quants.c) defines each value, for the GEMV / GEMM templates (`gemm.load_weight_tile`).

A packed weight is uint8 [.., N, row bytes]: each row of K values is K / QK blocks laid end to
end as the file has them (row bytes = K / QK * block bytes). Every scale is read as the file
stores it (f16 bytes, little-endian; Q4_K / Q5_K's 6-bit scales and mins; Q6_K's int8 scales),
so a value is

    Q8_0  d * q                      (34 bytes / 32: d f16, q int8[32])
    Q4_0  d * (q - 8)                (18 bytes / 32: d f16, q 4-bit[32], value j and j+16 in byte j)
    Q4_1  d * q + m                  (20 bytes / 32: d f16, m f16, q 4-bit[32])
    Q4_K  d * sc * q - dmin * mn     (144 bytes / 256: d, dmin f16, 8 x (sc, mn) 6-bit in 12 bytes, q 4-bit)
    Q5_K  as Q4_K, q + 16 * its bit of qh  (176 bytes / 256: qh[32] before the 4-bit values)
    Q6_K  d * sc * (q - 32)          (210 bytes / 256: ql 4-bit[128], qh 2-bit[64], sc int8[16], d f16)

computed in f32 in ggml's order ((d * sc) * q - dmin * mn). The activations are not quantized:
the products are the dequantized weight's with f32 (or bf16) activations.

A packed token embedding is gathered from the same blocks (`gather_ggml_rows_kernel`): each
requested row dequantized with `load_ggml_tile`, so a tied LM head and the lookup read one copy
of the file's bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: The `gemm` templates' FMT codes of the GGUF block formats, by ggml's type name.
Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K = 3, 4, 5, 6, 7, 8
#: ggml type name -> (FMT code, values per block, bytes per block, ggml's type id).
GGML_FORMATS = {"q8_0": (Q8_0, 32, 34, 8), "q4_0": (Q4_0, 32, 18, 2), "q4_1": (Q4_1, 32, 20, 3),
                "q4_K": (Q4_K, 256, 144, 12), "q5_K": (Q5_K, 256, 176, 13), "q6_K": (Q6_K, 256, 210, 14)}


@triton.jit
def _byte(p, m):
    return tl.load(p, mask=m, other=0).to(tl.int32)


@triton.jit
def _f16_at(p, m):
    """The little-endian f16 at byte pointers `p`, as f32."""
    lo = tl.load(p, mask=m, other=0).to(tl.uint16)
    hi = tl.load(p + 1, mask=m, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _scale_min_k4(sp, j, m):
    """ggml's get_scale_min_k4: sub-block j's (6-bit scale, 6-bit min) of the 12 bytes at `sp`."""
    a = _byte(sp + j, m)
    b = _byte(sp + j + 4, m)
    c = _byte(sp + tl.where(j >= 4, j - 4, j), m)
    low = j < 4
    sc = tl.where(low, a & 63, (b & 15) | ((c >> 6) << 4))
    mn = tl.where(low, b & 63, (b >> 4) | ((a >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)


@triton.jit
def load_ggml_tile(w_ptr, r, c, m, w_rs, FMT: tl.constexpr):
    """The f32 values W[r, c] (r [R, 1], c [1, C] broadcast; 0 where not `m`) of a packed weight
    of format FMT, `w_rs` bytes per row."""
    row = w_ptr + r.to(tl.int64) * w_rs
    if FMT == 3:  # Q8_0
        blk = row + (c // 32) * 34
        q = tl.load(blk + 2 + c % 32, mask=m, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = _f16_at(blk, m) * q
    elif FMT == 4:  # Q4_0
        blk = row + (c // 32) * 18
        j = c % 32
        q = (_byte(blk + 2 + j % 16, m) >> ((j // 16) * 4)) & 15
        w = (q - 8).to(tl.float32) * _f16_at(blk, m)
    elif FMT == 5:  # Q4_1
        blk = row + (c // 32) * 20
        j = c % 32
        q = (_byte(blk + 4 + j % 16, m) >> ((j // 16) * 4)) & 15
        w = q.to(tl.float32) * _f16_at(blk, m) + _f16_at(blk + 2, m)
    elif FMT == 6 or FMT == 7:  # Q4_K, Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and min
        blk = row + (c // 256) * (144 if FMT == 6 else 176)
        e = c % 256
        sub = e // 32
        sc, mn = _scale_min_k4(blk + 4, sub, m)
        qs = blk + (16 if FMT == 6 else 48)
        q = (_byte(qs + (e // 64) * 32 + e % 32, m) >> ((sub % 2) * 4)) & 15
        if FMT == 7:
            q += ((_byte(blk + 16 + e % 32, m) >> sub) & 1) << 4
        w = (_f16_at(blk, m) * sc) * q.to(tl.float32) - _f16_at(blk + 2, m) * mn
    else:  # Q6_K: 2 halves of 128, each 4 quarters of 32 sharing ql bytes (low / high nibble) and qh bytes
        blk = row + (c // 256) * 210
        e = c % 256
        h = e // 128
        quad = (e % 128) // 32
        lane = e % 32
        low = (_byte(blk + h * 64 + (quad % 2) * 32 + lane, m) >> ((quad // 2) * 4)) & 15
        high = (_byte(blk + 128 + h * 32 + lane, m) >> (quad * 2)) & 3
        sc = tl.load(blk + 192 + h * 8 + lane // 16 + quad * 2, mask=m, other=0).to(tl.int8, bitcast=True)
        w = (_f16_at(blk + 208, m) * sc.to(tl.float32)) * ((low | (high << 4)) - 32).to(tl.float32)
    return w


@triton.jit
def gather_ggml_rows_kernel(ids_ptr, w_ptr, y_ptr, n_cols, w_rs, y_rs, FMT: tl.constexpr, BLOCK: tl.constexpr):
    """y[i, :] = row ids[i] of a packed table of format FMT (`w_rs` bytes per row), dequantized."""
    i = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < n_cols
    tok = tl.load(ids_ptr + i)
    w = load_ggml_tile(w_ptr, tok, cols, m, w_rs, FMT)
    tl.store(y_ptr + i.to(tl.int64) * y_rs + cols, w.to(y_ptr.dtype.element_ty), mask=m)


def launch_gather_ggml_rows(ids: torch.Tensor, table, out: torch.Tensor) -> torch.Tensor:
    """Rows `ids` (int32 [n]) of a packed table (a Weight whose `data` is uint8 [vocab, row bytes]
    of format `fmt`, `k` values per row) into `out` [n, k], dequantized."""
    n, k = ids.shape[0], table.k
    bl = min(1024, triton.next_power_of_2(k))
    gather_ggml_rows_kernel[(n, triton.cdiv(k, bl))](ids, table.data, out, k, table.data.stride(0), out.stride(0),
                                                     FMT=table.fmt, BLOCK=bl)
    return out
