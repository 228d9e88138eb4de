"""Triton kernels of the CUDA target, one module per theme, each with `launch_<name>` launchers
that take torch tensors (rows are the blueprint's edges: 2-D, row-major, [rows, dim]).

    norms        residual add + RMSNorm, per-head (q/k) RMSNorm, gated RMSNorm
    gemm         GEMV / GEMM templates: f32, bf16, fp8 block dequant (w8a16), int4 (w4a16), and
                 GGUF's block formats read in place (ggml_packed: Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)
    attention    RoPE (neox, norm, mrope, imrope, partial), KV write, flash attention
                 (decode and prefill; contiguous or paged cache)
    token_attention  KV write to given cells, attention of many sequences' tokens, each through
                 its row's block table (the batched and paged entries)
    gdn          Gated DeltaNet: ba gates, conv1d update + SiLU + L2 norm, recurrence (step, chunked)
    moe          router, softmax + top-k, routed/shared expert GEMVs, weighted blend
    elementwise  residual add, SiLU-mul, sigmoid gate, q/gate split, embedding rows, argmax

Sizes: no dim is assumed a power of two. Every tl.arange range is one (its launcher rounds the
dim up with triton.next_power_of_2 and passes it as a constexpr), and the lanes past the dim are
masked out of every load, store and reduction (a masked load gives 0 to a sum and -inf to a
maximum, softmax or top-k). Tiles are chosen per dim and checked on sm_90 by aot.py.

Numerics: every kernel loads its inputs, converts them to f32, computes in f32 and stores in
the element type of the output tensor the caller passes (so a bf16 edge is a bf16 tensor).
Where the blueprint rounds an intermediate edge of a fused group (a residual sum that is also
an output), the kernel rounds it through that output's element type before using it, as the
reference does.
"""
