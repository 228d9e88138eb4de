"""The CUDA target's Triton kernels against the numpy reference of their groups'
nodes, run by the Triton interpreter on the CPU (TRITON_INTERPRET=1, torch CPU tensors).

The interpreter gets bf16 arithmetic and f32 -> fp8 downcasts wrong, so every test runs in f32:
the kernels take f32 activations, and fp8 / int4 weights are quantized on the host (as the
reference quantizes them) and dequantized by the kernels, the reference multiplying by the same
dequantized weights (`cuda_ref.Bp.kernel_weight` / `dense_weight`). Groups, node attributes,
dims and weights come from the blueprints of tiny checkpoints (`cuda_ref.Bp`).

Tolerance: `cuda_ref.close`, 1e-4 of the larger of 1 and the reference's largest magnitude.
The kernels compute in f32 like the reference; they differ only in the order of f32 sums
(blocked dot products, online softmax, the chunked delta rule's matrix form), whose rounding
is ~1e-6 relative at these sizes (K <= 128 terms), two orders below the bound.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import numpy as np
import torch
import pytest

pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")

from cuda_ref import Bp, close, t  # noqa: E402
from support import HYBRID_FAMILIES, TINY, write_checkpoint  # noqa: E402
from strata.semantics import kernels as K  # noqa: E402
from strata.targets.cuda.kernels import attention, elementwise, gdn, gemm, moe, norms  # noqa: E402

# tests/conftest.py sets TRITON_INTERPRET before any import; a kernel compiled for a GPU here is a setup error
assert type(gemm.gemv_kernel).__name__ == "InterpretedFunction", "the kernels were imported without TRITON_INTERPRET=1"

PREFILL = 5


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_kernels")
    cfgs = {"qwen2": TINY["qwen2"], "qwen3": TINY["qwen3"], "qwen3_5_moe": HYBRID_FAMILIES["qwen3_5_moe"],
            "qwen3_moe": HYBRID_FAMILIES["qwen3_moe"], "qwen3_next": HYBRID_FAMILIES["qwen3_next"]}
    return {k: write_checkpoint(c, root / k) for k, c in cfgs.items()}


_CACHE: dict = {}


def bp(ckpts, fam: str, mode: str = "decode", recipe: str = "f32") -> Bp:
    key = (fam, mode, recipe)
    if key not in _CACHE:
        _CACHE[key] = Bp(ckpts[fam], mode, 1 if mode == "decode" else PREFILL, recipe)
    return _CACHE[key]


# ---------------------------------------------------------------------------------------------
# Norms and row-wise kernels


@pytest.mark.parametrize("rule", ["input_norm_residual", "final_norm"])
def test_rms_norm(ckpts, rule):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group(rule)
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    got = norms.launch_rms_norm(t(ins[node.operands[0]]), b.dense_weight(node), b.env().eps_of(node))
    close(got, want)


@pytest.mark.parametrize("rule", ["residual_add_post_norm", "cross_layer_add_norm"])
def test_residual_add_rms_norm(ckpts, rule):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group(rule)
    ins = b.inputs(g, PREFILL)
    h_want, y_want = b.reference(g, ins)
    add, norm = b.nodes(g)
    h, y = norms.launch_rms_norm(t(ins[add.operands[0]]), b.dense_weight(norm), b.env().eps_of(norm),
                                 residual=t(ins[add.operands[1]]))
    close(h, h_want)
    close(y, y_want)


def test_qk_norm(ckpts):
    b = bp(ckpts, "qwen3", "prefill")
    g = b.group("qk_norm_rows")
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    close(norms.launch_qk_norm(t(ins[node.operands[0]]), b.dense_weight(node), b.env().eps_of(node)), want)


def test_gated_rms_norm(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("gdn_out_norm_f32_per_row")
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    got = norms.launch_gated_rms_norm(t(ins[node.operands[0]]), t(ins[node.operands[1]]), b.dense_weight(node),
                                      b.env().eps_of(node))
    close(got, want)


def test_elementwise_groups(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("sigmoid_gate_mul")
    ins = b.inputs(g, PREFILL)
    node = b.nodes(g)[0]
    close(elementwise.launch_sigmoid_gate_mul(t(ins[node.operands[0]]), t(ins[node.operands[1]])),
          b.reference(g, ins)[0])
    g = b.group("deinterleave_qg")
    ins = b.inputs(g, PREFILL)
    q, gate = elementwise.launch_split_qg(t(ins[b.nodes(g)[0].operands[0]]), b.dims["head_dim"])
    q_want, g_want = b.reference(g, ins)
    assert np.array_equal(q.numpy(), q_want) and np.array_equal(gate.numpy(), g_want)
    g = bp(ckpts, "qwen3", "prefill").group("ffn_residual_add")
    ins = b.inputs(g, PREFILL)
    node = bp(ckpts, "qwen3", "prefill").nodes(g)[0]
    close(elementwise.launch_residual_add(t(ins[node.operands[0]]), t(ins[node.operands[1]])),
          bp(ckpts, "qwen3", "prefill").reference(g, ins)[0])
    x = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    close(elementwise.launch_silu_mul(t(x)), K.swiglu(x[:, :20], x[:, 20:]))


def test_embed_and_argmax(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("embed_row_copy")
    ids = np.array([[3], [0], [127], [3], [64]], np.int32)
    (want,) = b.reference(g, {b.nodes(g)[0].operands[0]: ids})
    got = elementwise.launch_embed(t(ids), b.dense_weight(b.nodes(g)[0]))
    assert np.array_equal(got.numpy(), want)
    g = b.group("argmax_host")
    x = np.random.default_rng(2).standard_normal((4, 300)).astype(np.float32)
    x[1, 17] = x[1, 250] = 9.0  # a tie: the first index wins, as numpy's
    (want,) = b.reference(g, {b.nodes(g)[0].operands[0]: x})
    got = elementwise.launch_argmax(t(x), block=128)  # three blocks per row
    assert np.array_equal(got.numpy(), want) and int(got[1, 0]) == 17


# ---------------------------------------------------------------------------------------------
# GEMV / GEMM


@pytest.mark.parametrize("recipe,rule", [("f32", "f32_m32"), ("fp8-bf16head", "w8a16_m32"), ("w4a16", "w4a16_m32"),
                                         ("bf16", "bf16_m32")])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_linear(ckpts, recipe, rule, mode):
    b = bp(ckpts, "qwen3_5_moe", mode, recipe)
    rows = 1 if mode == "decode" else 12  # 12 > GEMV_MAX_ROWS: the tiled GEMM
    for g in b.groups(rule)[:3]:
        ins = b.inputs(g, rows)
        (want,) = b.reference(g, ins)
        node = b.nodes(g)[0]
        close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node)), want)


def test_linear_fp8_reordered_rows(ckpts):
    """Qwen3-Next's in_proj_qkvz is stored grouped per key head and ungrouped by the weight table
    after fp8 quantization: the rows' scale rows follow them (the row map)."""
    b = bp(ckpts, "qwen3_next", "decode", "fp8-bf16head")
    groups = [g for g in b.groups("w8a16_m32")
              if any(b.table[n].convert is not None for n in b.part_names(b.nodes(g)[0]) if n in b.table)]
    assert groups
    for g in groups:
        ins = b.inputs(g, 1)
        node = b.nodes(g)[0]
        close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node)), b.reference(g, ins)[0])


@pytest.mark.parametrize("rows", [1, 12])
def test_linear_bias(ckpts, rows):
    b = bp(ckpts, "qwen2", "prefill")
    g = next(g for g in b.groups("f32_m32") if "bias" in b.nodes(g)[0].attributes)
    ins = b.inputs(g, rows)
    node = b.nodes(g)[0]
    bias = b.vector(node.attributes["bias"].data)
    got = gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node), bias=bias)
    close(got, b.reference(g, ins)[0])


@pytest.mark.parametrize("recipe,rule", [("f32", "ffn_gate_up_silu_f32"), ("fp8-bf16head", "ffn_gate_up_silu_w8a16"),
                                         ("w4a16", "ffn_gate_up_silu_w4a16")])
@pytest.mark.parametrize("rows", [1, 12])
def test_gate_up_silu(ckpts, recipe, rule, rows):
    b = bp(ckpts, "qwen3", "prefill", recipe)
    g = b.group(rule)
    ins = b.inputs(g, rows)
    node = b.nodes(g)[0]
    close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node), silu_out=True), b.reference(g, ins)[0])


@pytest.mark.parametrize("recipe,rule", [("f32", "lm_head_f32_gemv"), ("fp8-bf16head", "lm_head_bf16_gemv"),
                                         ("fp8-bf16head", "moe_router_gemv")])
def test_head_and_router(ckpts, recipe, rule):
    b = bp(ckpts, "qwen3_5_moe", "decode", recipe)
    g = b.group(rule)
    ins = b.inputs(g, 1)
    node = b.nodes(g)[0]
    close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node)), b.reference(g, ins)[0])


# ---------------------------------------------------------------------------------------------
# RoPE, KV write, attention


def _rope_args(node):
    a = node.attributes
    return dict(mode=a["mode"].data, n_dims=int(a["n_dims"].value.data),
                sections=tuple(a["sections"].get_values()) if "sections" in a else (0, 0, 0, 0)), \
        (float(a["freq_base"].value.data), float(a["freq_scale"].value.data))


@pytest.mark.parametrize("fam,rule", [("qwen3", "rope_neox"), ("qwen3_5_moe", "rope_mrope_interleaved")])
@pytest.mark.parametrize("pos", [0, 37])
def test_rope_groups(ckpts, fam, rule, pos):
    """neox (full rotary) and interleaved M-RoPE with partial rotary (n_dims 8 of head_dim 32)."""
    b = bp(ckpts, fam, "prefill")
    g = b.group(rule)
    ins = b.inputs(g, PREFILL)
    want = b.reference(g, ins, pos=pos)
    node = b.nodes(g)[0]
    kw, (base, fscale) = _rope_args(node)
    inv = attention.rope_inv_freq(kw["n_dims"], base, fscale)
    positions = attention.rope_positions(pos, PREFILL, kw["mode"])
    for x, w in zip(node.operands, want):
        close(attention.launch_rope(t(ins[x]), positions, inv, head_dim=b.dims["head_dim"], **kw), w)


@pytest.mark.parametrize("mode,n_dims,sections", [("norm", 16, None), ("norm", 6, None), ("mrope", 12, (2, 2, 1, 1)),
                                                  ("imrope", 16, (3, 3, 2, 0))])
def test_rope_modes(mode, n_dims, sections):
    """The modes the tiny families do not produce, against the reference's K.rope (pairs (2i, 2i+1);
    plain M-RoPE's sections in turn; positions of four distinct streams)."""
    rng = np.random.default_rng(3)
    n, heads, hd = 4, 3, 16
    x = rng.standard_normal((n, heads * hd)).astype(np.float32)
    if sections is None:
        pos = np.array([0, 5, 9, 40], np.int32)
        positions = t(pos)
    else:
        pos = rng.integers(0, 50, 4 * n).astype(np.int32)
        positions = t(pos.reshape(4, n))
    want = K.rope(x.reshape(n, heads, hd), pos, n_dims, mode, 1e4, 0.5, None, sections).reshape(n, -1)
    got = attention.launch_rope(t(x), positions, attention.rope_inv_freq(n_dims, 1e4, 0.5), head_dim=hd,
                                n_dims=n_dims, mode=mode, sections=sections or (0, 0, 0, 0))
    close(got, want)


def _pages(ctx: int, page: int, seed: int):
    """A block table mapping logical pages to shuffled physical ones (two spare pages)."""
    n_pages = ctx // page
    table = np.random.default_rng(seed).permutation(n_pages + 2)[:n_pages].astype(np.int32)
    return table, n_pages + 2


@pytest.mark.parametrize("mode,pos", [("decode", 0), ("decode", 21), ("prefill", 0), ("prefill", 9)])
@pytest.mark.parametrize("paged", [False, True])
def test_kv_write_and_attention(ckpts, mode, pos, paged):
    """kv_write_f32 then paged_attention_f32 (GQA: 4 query heads on 2 KV heads, scale from the node),
    the cache either contiguous or in shuffled pages of 8 rows."""
    b = bp(ckpts, "qwen3_5_moe", mode)
    n = 1 if mode == "decode" else PREFILL
    gw, ga = b.group("kv_write_f32"), b.group("paged_attention_f32")
    kvw, att = b.nodes(gw)[0], b.nodes(ga)[0]
    ctx, width = 64, b.dims["kv_heads"] * b.dims["head_dim"]
    rng = np.random.default_rng(pos)
    kname, vname = (s.data for s in kvw.slots.data)
    state = {kname: rng.standard_normal((ctx, width)).astype(np.float32),
             vname: rng.standard_normal((ctx, width)).astype(np.float32)}  # rows >= pos: stale, never read
    caches = {k: v.copy() for k, v in state.items()}
    ins = b.inputs(gw, n) | b.inputs(ga, n)
    b.reference(gw, ins, state, pos)
    (want,) = b.reference(ga, ins, state, pos)
    page, table = 8, None
    if paged:
        order, n_phys = _pages(ctx, page, pos)
        phys = {k: np.zeros((n_phys * page, width), np.float32) for k in caches}
        for logical, p in enumerate(order):
            for k in caches:
                phys[k][p * page:(p + 1) * page] = caches[k][logical * page:(logical + 1) * page]
        caches, table = phys, t(order)
    kc, vc = t(caches[kname]), t(caches[vname])
    attention.launch_kv_write(t(ins[kvw.operands[0]]), t(ins[kvw.operands[1]]), kc, vc, pos, block_table=table,
                              page=page)
    got = attention.launch_attention(t(ins[att.operands[0]]), kc, vc, pos, float(att.attributes["scale"].value.data),
                                     head_dim=b.dims["head_dim"], kv_heads=b.dims["kv_heads"], block_table=table,
                                     page=page, block_n=16)  # several key blocks
    close(got, want)
    if not paged:
        close(kc[:pos + n], state[kname][:pos + n])
        close(vc[:pos + n], state[vname][:pos + n])


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet


def _state(b: Bp, node, rng) -> dict:
    name = node.slots.data[0].data
    ty = b.fn.attributes["blueprint.state"].data[name]
    return {name: (rng.standard_normal(tuple(ty.get_shape())) * 0.3).astype(np.float32)}


@pytest.mark.parametrize("recipe", ["f32", "fp8-bf16head"])
def test_gdn_gates(ckpts, recipe):
    b = bp(ckpts, "qwen3_5_moe", "prefill", recipe)
    g = b.group("gdn_ba_gates_gemv_per_row")
    ins = b.inputs(g, PREFILL)
    g_want, beta_want = b.reference(g, ins)
    lin, gates = b.nodes(g)
    a_name, dt_name = (s.data for s in gates.attributes["weights"].data)
    dec, beta = gdn.launch_gdn_gates(t(ins[lin.operands[0]]), b.kernel_weight(lin), b.vector(a_name), b.vector(dt_name))
    close(dec, g_want)
    close(beta, beta_want)


@pytest.mark.parametrize("mode,rows", [("decode", 1), ("prefill", 2), ("prefill", 7)])
def test_gdn_conv_l2(ckpts, mode, rows):
    """conv1d_update (+ state_snapshot in decode) + l2_norm: the output, the state and its snapshot.
    2 rows < K-1: the new state keeps old columns."""
    b = bp(ckpts, "qwen3_5_moe", mode)
    g = b.group("gdn_conv_l2_f32_per_row")
    conv, l2 = b.node(g, "conv1d_update"), b.node(g, "l2_norm")
    ins = b.inputs(g, rows)
    state = _state(b, conv, np.random.default_rng(rows))
    name = next(iter(state))
    st = t(state[name].copy())
    (want,) = b.reference(g, ins, state)
    snap = torch.zeros_like(st) if any(op.name == "blueprint.state_snapshot" for op in b.nodes(g)) else None
    eps = float(l2.attributes["eps"].value.data) if "eps" in l2.attributes else None
    got = gdn.launch_conv_l2(t(ins[conv.operands[0]]), b.dense_weight(conv), st, k_heads=b.dims["lin_k_heads"],
                             k_dim=b.dims["lin_k_dim"], eps=eps, snapshot=snap)
    close(got, want)
    close(st, state[name])
    if snap is not None:
        close(snap, state[name + ".snapshot"])


@pytest.mark.parametrize("rows,chunked", [(1, False), (5, False), (5, True), (70, True)])
def test_gdn_recurrence(ckpts, rows, chunked):
    """The delta rule a token at a time and in chunks of 64 (70 rows: a full chunk and a partial
    one), on a state [Hv, Dv, Dk] (ggml's), value heads grouped onto key heads as the node says."""
    b = bp(ckpts, "qwen3_5_moe", "decode" if rows == 1 else "prefill")
    g = b.group("gdn_recurrence_f32_per_row")
    node = b.nodes(g)[0]
    rng = np.random.default_rng(rows)
    hk, dk, hv, dv = (b.dims[k] for k in ("lin_k_heads", "lin_k_dim", "lin_v_heads", "lin_v_dim"))
    qk = rng.standard_normal((rows, 2 * hk, dk)).astype(np.float32)
    qk /= np.sqrt((qk * qk).sum(-1, keepdims=True))  # l2-normalised q and k, as the conv group makes them
    qkv = np.concatenate([qk.reshape(rows, -1), rng.standard_normal((rows, hv * dv)).astype(np.float32)], axis=1)
    dec = -np.abs(rng.standard_normal((rows, hv))).astype(np.float32) * 0.3
    beta = (1 / (1 + np.exp(-rng.standard_normal((rows, hv))))).astype(np.float32)
    state = _state(b, node, rng)
    name = next(iter(state))
    st = t(state[name].copy())
    (want,) = b.reference(g, dict(zip(node.operands, (dec, beta, qkv))), state)
    got = gdn.launch_gdn_recurrence(t(qkv), t(dec), t(beta), st, k_heads=hk, k_dim=dk, v_heads=hv, v_dim=dv,
                                    grouped="grouped" in node.attributes, chunked=chunked)
    close(got, want)
    close(st, state[name])


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("n,chunked", [(3, False), (20, True)])
def test_gdn_recurrence_head_maps(grouped, n, chunked):
    """Value head h on key head h % Hk (ggml's default) and h // (Hv/Hk), against K.gated_delta_net;
    head size 32 in blocks of 16: the chunk kernels' column blocks (prep) and state halves."""
    rng = np.random.default_rng(5)
    hk, hv, d = 2, 4, 32
    q, k = (rng.standard_normal((n, hk, d)).astype(np.float32) for _ in range(2))
    q, k = (x / np.sqrt((x * x).sum(-1, keepdims=True)) for x in (q, k))
    v = rng.standard_normal((n, hv, d)).astype(np.float32)
    g = -np.abs(rng.standard_normal((n, hv, 1))).astype(np.float32)
    beta = rng.uniform(0, 1, (n, hv, 1)).astype(np.float32)
    s0 = rng.standard_normal((hv, d, d)).astype(np.float32) * 0.3
    res = K.gated_delta_net(q, k, v, g, beta, s0, grouped=grouped)
    st = t(s0.copy())
    qkv = np.concatenate([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], axis=1)
    got = gdn.launch_gdn_recurrence(t(qkv), t(g[..., 0].copy()), t(beta[..., 0].copy()), st, k_heads=hk, k_dim=d,
                                    v_heads=hv, v_dim=d, grouped=grouped, chunked=chunked, block_v=16,
                                    prep_block_k=16)
    close(got, res[:n])
    close(st, res[n:].reshape(hv, d, d))


# ---------------------------------------------------------------------------------------------
# Mixture of experts


@pytest.mark.parametrize("fam", ["qwen3_5_moe", "qwen3_moe"])
def test_topk_softmax(ckpts, fam):
    """Renormalised (qwen3.5) and raw (qwen3-moe: norm_topk_prob false) top-k weights; a row with
    tied logits picks the lower expert first (the reference's stable argsort)."""
    b = bp(ckpts, fam, "prefill")
    g = b.group("moe_topk_softmax")
    node = b.nodes(g)[0]
    ins = b.inputs(g, PREFILL)
    x = ins[node.operands[0]]
    x[2, :] = 0.5  # all tied
    w_want, id_want = b.reference(g, ins)
    w, ids = moe.launch_topk_softmax(t(x), b.dims["top_k"], "norm" in node.attributes)
    close(w, w_want)
    assert np.array_equal(ids.numpy(), id_want)


@pytest.mark.parametrize("fam,recipe,elem", [("qwen3_5_moe", "f32", "f32"), ("qwen3_5_moe", "fp8-bf16head", "fp8"),
                                             ("qwen3_5_moe", "w4a16", "int4"), ("qwen3_moe", "f32", "f32")])
def test_moe_experts(ckpts, fam, recipe, elem):
    """moe_gate_up[_shared]_*, moe_silu_down[_shared]_*, moe_weighted_sum[_blend] on 3 rows: only the
    routed experts' weights are read (per-expert fp8 blocks / int4 scales)."""
    b = bp(ckpts, fam, "prefill", recipe)
    shared = fam == "qwen3_5_moe"
    sfx = "_shared" if shared else ""
    rows = 3
    g = b.group(f"moe_gate_up{sfx}_{elem}")
    ins = b.inputs(g, rows)
    want = b.reference(g, ins)
    egu = b.node(g, "expert_gate_up")
    lin = b.node(g, "linear") if shared else None
    x, ids = t(ins[egu.operands[0]]), t(ins[egu.operands[1]])
    routed, sh = moe.launch_moe_gate_up(x, ids, b.kernel_weight(egu), b.kernel_weight(lin) if shared else None)
    close(routed, want[0])
    if shared:
        close(sh, want[1])
    g = b.group(f"moe_silu_down{sfx}_{elem}")
    ins = b.inputs(g, rows)
    want = b.reference(g, ins)
    down = b.node(g, "expert_down")
    acts = [op for op in b.nodes(g) if op.name == "blueprint.silu_mul"]
    e_in = next(ins[a.operands[0]] for a in acts if a.results[0] in down.operands)
    out_r, out_s = moe.launch_moe_silu_down(
        t(e_in), t(ins[down.operands[1]]), b.kernel_weight(down),
        t(next(ins[a.operands[0]] for a in acts if a.results[0] not in down.operands)) if shared else None,
        b.kernel_weight(b.node(g, "linear")) if shared else None)
    close(out_r, want[0])
    if shared:
        close(out_s, want[1])
    g = b.group("moe_weighted_sum_blend" if shared else "moe_weighted_sum")
    ins = b.inputs(g, rows)
    (want,) = b.reference(g, ins)
    blend = b.node(g, "blend")
    if shared:
        sg = b.node(g, "linear")
        got = moe.launch_blend(t(ins[blend.operands[0]]), t(ins[blend.operands[1]]),
                               shared_down=t(ins[blend.operands[2]]), x=t(ins[sg.operands[0]]),
                               w_shared_gate=b.dense_weight(sg))
    else:
        got = moe.launch_blend(t(ins[blend.operands[0]]), t(ins[blend.operands[1]]))
    close(got, want)


@pytest.mark.parametrize("paged", [False, True])
def test_position_on_the_device(paged):
    """kv_write and attention with the position as an int32 device scalar (what a CUDA graph
    replays; POS_DEV) give what they give with the position as an argument."""
    rng = np.random.default_rng(11)
    ctx, hd, kvh = 48, 16, 2
    table = t(np.random.default_rng(2).permutation(ctx // 8).astype(np.int32)) if paged else None
    for pos in (0, 19):
        caches = [t(rng.standard_normal((ctx, kvh * hd)).astype(np.float32)) for _ in range(2)]
        q, k, v = (t(rng.standard_normal((1, w)).astype(np.float32)) for w in (4 * hd, kvh * hd, kvh * hd))
        got = []
        for p in (pos, torch.tensor([pos], dtype=torch.int32)):
            kc, vc = (c.clone() for c in caches)
            attention.launch_kv_write(k, v, kc, vc, p, block_table=table, page=8)
            got.append((kc, attention.launch_attention(q, kc, vc, p, 0.25, head_dim=hd, kv_heads=kvh,
                                                       block_table=table, page=8, block_n=16)))
        assert torch.equal(got[0][0], got[1][0])
        close(got[1][1], got[0][1].numpy())
