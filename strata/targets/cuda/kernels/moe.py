"""Mixture-of-experts kernels: softmax + top-k of the router logits, the routed experts' GEMVs
(gate-up; SiLU-mul + down) reading only the experts a row routes to, and the weighted blend with
the sigmoid-gated shared expert. The router and the shared expert's projections are gemm's
GEMV template (the shared expert is a one-expert case of the same template).

Layouts: expert gate_up [E, 2*inter, H] (gate rows first), down [E, H, inter]; expert rows are
slot-major per token (row i*top_k + j is token i's j-th expert).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata.targets.cuda.kernels.gemm import INT4, as_weight, launch_gemv, launch_linear

#: llama.cpp's clamp of the top-k weight sum (2^-14) before renormalising.
NORM_MIN = 6.103515625e-05


@triton.jit
def topk_softmax_kernel(x_ptr, w_ptr, id_ptr, E, x_rs, TOP_K: tl.constexpr, NORM: tl.constexpr,
                        BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr):
    """One row: p = softmax(x); the TOP_K largest p, ties to the lower expert (a stable sort);
    weights renormalised by max(sum, 2^-14) when NORM."""
    row = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, BLOCK_E)
    em = e < E
    x = tl.load(x_ptr + row * x_rs + e, mask=em, other=-float("inf")).to(tl.float32)
    z = tl.exp(x - tl.max(x, axis=0))
    p = z / tl.sum(z, axis=0)
    p = tl.where(em, p, -1.0)
    slots = tl.arange(0, BLOCK_K)
    ws = tl.zeros([BLOCK_K], dtype=tl.float32)
    ids = tl.zeros([BLOCK_K], dtype=tl.int32)
    for s in tl.static_range(TOP_K):
        best = tl.max(p, axis=0)
        i = tl.min(tl.where(p == best, e, BLOCK_E), axis=0)
        ws = tl.where(slots == s, best, ws)
        ids = tl.where(slots == s, i, ids)
        p = tl.where(e == i, -2.0, p)
    if NORM:
        ws = ws / tl.maximum(tl.sum(ws, axis=0), 6.103515625e-05)
    km = slots < TOP_K
    tl.store(w_ptr + row * TOP_K + slots, ws, mask=km)
    tl.store(id_ptr + row * TOP_K + slots, ids, mask=km)


def launch_topk_softmax(logits: torch.Tensor, top_k: int, norm: bool):
    """`top_k` (moe_topk_softmax): logits [n, E] -> (weights [n, k] f32, ids [n, k] int32)."""
    n, e = logits.shape
    w = torch.empty((n, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((n, top_k), dtype=torch.int32, device=logits.device)
    topk_softmax_kernel[(n,)](logits, w, ids, e, logits.stride(0), TOP_K=top_k, NORM=norm,
                              BLOCK_E=triton.next_power_of_2(e), BLOCK_K=triton.next_power_of_2(top_k))
    return w, ids


def launch_router(x: torch.Tensor, w, *, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`router` (moe_router_gemv): the router logits x @ W.T, [n, E]."""
    return launch_linear(x, w, out_dtype=out_dtype)


def launch_expert_gate_up(x: torch.Tensor, ids: torch.Tensor, w, *, out_dtype: torch.dtype | None = None):
    """`expert_gate_up`: row i*k + j = x[i] @ W[ids[i, j]].T, [n*k, 2*inter] (routed experts only)."""
    w = as_weight(w)
    n, k = ids.shape
    out = torch.empty((n * k, w.n), dtype=out_dtype or x.dtype, device=x.device)
    return launch_gemv(x, w, out, ids=ids.reshape(-1).contiguous(), x_div=k, **_packed_tiles(w))


def _packed_tiles(w) -> dict:
    """A GGUF block format's GEMV tiles (launch_linear's: 8 x 128, spill-free on sm_90), else the defaults."""
    return {"block_n": 8, "block_k": 128} if w.fmt > INT4 else {}


def launch_expert_silu_down(gate_up: torch.Tensor, ids: torch.Tensor, w, *, out_dtype: torch.dtype | None = None):
    """`silu_mul` + `expert_down`: row r = (silu(gu[r, :I]) * gu[r, I:]) @ W[ids.flat[r]].T, [n*k, H]."""
    w = as_weight(w)
    out = torch.empty((gate_up.shape[0], w.n), dtype=out_dtype or gate_up.dtype, device=gate_up.device)
    return launch_gemv(gate_up, w, out, ids=ids.reshape(-1).contiguous(), silu_in=True, **_packed_tiles(w))


def launch_shared_silu_down(gate_up: torch.Tensor, w, *, out_dtype: torch.dtype | None = None):
    """The shared expert's `silu_mul` + `linear` shared_down: (silu(g) * u) @ W.T, [n, H]."""
    w = as_weight(w)
    out = torch.empty((gate_up.shape[0], w.n), dtype=out_dtype or gate_up.dtype, device=gate_up.device)
    return launch_gemv(gate_up, w, out, silu_in=True, **_packed_tiles(w))


def launch_moe_gate_up(x: torch.Tensor, ids: torch.Tensor, w_experts, w_shared=None, *,
                       out_dtype: torch.dtype | None = None):
    """moe_gate_up_* / moe_gate_up_shared_*: (routed gate-up [n*k, 2*inter], shared gate-up
    [n, 2*shared_inter] or None)."""
    routed = launch_expert_gate_up(x, ids, w_experts, out_dtype=out_dtype)
    shared = launch_linear(x, w_shared, out_dtype=out_dtype or x.dtype) if w_shared is not None else None
    return routed, shared


def launch_moe_silu_down(gate_up: torch.Tensor, ids: torch.Tensor, w_experts, shared_gate_up=None, w_shared=None,
                         *, out_dtype: torch.dtype | None = None):
    """moe_silu_down_* / moe_silu_down_shared_*: (routed down [n*k, H], shared down [n, H] or None)."""
    routed = launch_expert_silu_down(gate_up, ids, w_experts, out_dtype=out_dtype)
    shared = (launch_shared_silu_down(shared_gate_up, w_shared, out_dtype=out_dtype)
              if shared_gate_up is not None else None)
    return routed, shared


@triton.jit
def blend_kernel(w_ptr, ed_ptr, sd_ptr, x_ptr, sg_ptr, y_ptr, H, K_SG, ed_rs, sd_rs, x_rs, y_rs,
                 TOP_K: tl.constexpr, SHARED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """One row: y = sum_j w[j] * ed[row*TOP_K + j] (+ sigmoid(x . w_sg) * sd[row])."""
    row = tl.program_id(0).to(tl.int64)
    gate = 0.0
    if SHARED:  # the shared gate: a one-output GEMV of the row
        acc = tl.zeros([BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K_SG, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            km = ks < K_SG
            acc += (tl.load(x_ptr + row * x_rs + ks, mask=km, other=0.0).to(tl.float32)
                    * tl.load(sg_ptr + ks, mask=km, other=0.0).to(tl.float32))
        gate = 1.0 / (1.0 + tl.exp(-tl.sum(acc, axis=0)))
    for h0 in range(0, H, BLOCK_H):
        hs = h0 + tl.arange(0, BLOCK_H)
        hm = hs < H
        y = tl.zeros([BLOCK_H], dtype=tl.float32)
        for j in tl.static_range(TOP_K):
            wj = tl.load(w_ptr + row * TOP_K + j).to(tl.float32)
            y += wj * tl.load(ed_ptr + (row * TOP_K + j) * ed_rs + hs, mask=hm, other=0.0).to(tl.float32)
        if SHARED:
            y += gate * tl.load(sd_ptr + row * sd_rs + hs, mask=hm, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_rs + hs, y, mask=hm)


def launch_blend(weights: torch.Tensor, expert_down: torch.Tensor, *, shared_down: torch.Tensor | None = None,
                 x: torch.Tensor | None = None, w_shared_gate: torch.Tensor | None = None,
                 out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """moe_weighted_sum (`blend`) and moe_weighted_sum_blend (`linear` shared_gate + `blend`):
    weights [n, k], expert_down [n*k, H]; with the shared expert, shared_down [n, H], x [n, H']
    (the FFN input) and w_shared_gate [1, H'] (a dense f32/bf16 row)."""
    n, k = weights.shape
    weights = weights.contiguous()  # the kernel reads row i's weights at weights + i*k
    h = expert_down.shape[1]
    shared = shared_down is not None
    out = out if out is not None else torch.empty((n, h), dtype=out_dtype or expert_down.dtype,
                                                  device=expert_down.device)
    sd = shared_down if shared else expert_down
    xx = x if shared else expert_down
    sg = w_shared_gate.reshape(-1) if shared else expert_down
    k_sg = xx.shape[1]
    blend_kernel[(n,)](weights, expert_down, sd, xx, sg, out, h, k_sg, expert_down.stride(0), sd.stride(0),
                       xx.stride(0), out.stride(0), TOP_K=k, SHARED=shared,
                       BLOCK_H=min(1024, triton.next_power_of_2(h)), BLOCK_K=min(1024, triton.next_power_of_2(k_sg)))
    return out
