"""RMSNorm kernels: residual add + RMSNorm (plain; a zero-centred norm's weight arrives already
converted to 1 + w by the weight table), per-head RMSNorm (q/k norm), gated RMSNorm (GDN's
output norm: rms_norm(core) * w * silu(z)).

    y = x / sqrt(mean(x^2) + eps) * w          (the reference's K.rms_norm, then * w)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, x_rs, r_rs, y_rs, h_rs, eps,
                    HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    """One row: h = x (+ r), stored when HAS_RES; y = rms_norm(h) * w."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * x_rs + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:
        x += tl.load(r_ptr + row * r_rs + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(h_ptr + row * h_rs + cols, x, mask=m)
        x = x.to(h_ptr.dtype.element_ty).to(tl.float32)  # the norm reads the sum as stored
    ms = tl.sum(x * x, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_rs + cols, x / tl.sqrt(ms + eps) * w, mask=m)


@triton.jit
def gated_rms_norm_kernel(z_ptr, x_ptr, w_ptr, y_ptr, z_off, z_rs, x_rs, y_rs, eps,
                          HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """Row `program_id(0)`, head `program_id(1)`: rms_norm(x_head) * w * silu(z_head)."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK)
    m = d < HEAD_DIM
    x = tl.load(x_ptr + row * x_rs + h * HEAD_DIM + d, mask=m, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + row * z_rs + z_off + h * HEAD_DIM + d, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d, mask=m, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / HEAD_DIM
    y = x / tl.sqrt(ms + eps) * w * (z / (1.0 + tl.exp(-z)))
    tl.store(y_ptr + row * y_rs + h * HEAD_DIM + d, y, mask=m)


def launch_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, *, residual: torch.Tensor | None = None,
                    out: torch.Tensor | None = None, sum_out: torch.Tensor | None = None,
                    out_dtype: torch.dtype | None = None):
    """`rms_norm` / `final_norm` (input_norm_residual, final_norm), and with `residual` the
    `residual_add` + `rms_norm` pair (residual_add_post_norm, cross_layer_add_norm,
    residual_add_norm): returns y, or (sum, y) with a residual (sum = x + residual)."""
    n, c = x.shape
    out = out if out is not None else torch.empty((n, c), dtype=out_dtype or x.dtype, device=x.device)
    if residual is not None and sum_out is None:
        sum_out = torch.empty((n, c), dtype=x.dtype, device=x.device)
    r = residual if residual is not None else x
    h = sum_out if sum_out is not None else out
    rms_norm_kernel[(n,)](x, r, w, out, h, c, x.stride(0), r.stride(0), out.stride(0), h.stride(0), eps,
                          HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(c))
    return (sum_out, out) if residual is not None else out


def launch_qk_norm(x: torch.Tensor, w: torch.Tensor, eps: float, *, out: torch.Tensor | None = None):
    """`qk_norm` (qk_norm_rows): RMSNorm of each head_dim-wide head of x [n, heads*head_dim], w [head_dim]."""
    hd = w.shape[-1]
    x2 = x.reshape(-1, hd)  # a view of a contiguous edge
    out = out if out is not None else torch.empty_like(x)
    o2 = out.view(-1, hd)
    rms_norm_kernel[(x2.shape[0],)](x2, x2, w, o2, o2, hd, hd, hd, hd, hd, eps,
                                    HAS_RES=False, BLOCK=triton.next_power_of_2(hd))
    return out


def launch_gated_rms_norm(lhs: torch.Tensor, core: torch.Tensor, w: torch.Tensor, eps: float, *,
                          out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None):
    """`gated_rms_norm` (gdn_out_norm_*): z = the last core-width columns of `lhs`; per head of
    w's width: rms_norm(core) * w * silu(z)."""
    n, width = core.shape
    hd = w.shape[-1]
    out = out if out is not None else torch.empty((n, width), dtype=out_dtype or core.dtype, device=core.device)
    gated_rms_norm_kernel[(n, width // hd)](lhs, core, w, out, lhs.shape[1] - width, lhs.stride(0), core.stride(0),
                                            out.stride(0), eps, HEAD_DIM=hd, BLOCK=triton.next_power_of_2(hd))
    return out
