"""Op-level expansions of attention with RoPE and a KV cache (llama.cpp's graph): grouped-query
attention, and the gated attention of the hybrids.

Q, then V, then K (llama.cpp expands K last so that rope can fuse into the cache write);
each per-layer cache is an `op.state` `cache_{k,v}_l<il>` laid out [ctx, KvHeads*HeadDim],
written by SET_ROWS at the call's rows; attention reads a VIEW of its first `n_kv` rows
through FLASH_ATTN_EXT, or the unfused MUL_MAT / SOFT_MAX / MUL_MAT chain.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f32,
    f64,
    i32,
    i64,
)
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.ir.dtypes import dtype_named
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering, LoweringError, tensor


def rope_scaling(inst: BlockInstance) -> dict | None:
    """The block's `rope_scaling` dictionary as plain values, or None."""
    attr = inst.attr("rope_scaling")
    if not isinstance(attr, DictionaryAttr):
        return None
    return {k: (v.data if isinstance(v, StringAttr) else v.value.data) for k, v in attr.data.items()}


def llama3_freq_factors(theta: float, head_dim: int, rs: dict) -> list[float]:
    """llama.cpp's rope_freqs for llama3 scaling: original / scaled inverse frequency."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = old_ctx / lo, old_ctx / hi
    smooth = (old_ctx / wavelen - lo) / (hi - lo)
    scaled = np.where(wavelen > low_wl, inv / factor, inv)
    mid = (wavelen <= low_wl) & (wavelen >= high_wl)
    scaled = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return [float(x) for x in (inv / scaled)]


@EXPANSIONS.register("std.attn.grouped_query")
class GroupedQueryAttention:
    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue) -> SSAValue:
        g, S, sfx = lo.g, lo.S, lo.suffix(inst)
        shards = inst.dim("Shards")
        n_head, n_kv_head, d = inst.dim("Heads") // shards, inst.dim("KvHeads") // shards, inst.dim("HeadDim")
        rope = _rope(lo, inst, d)

        def project(name: str, heads: int, norm: str | None, label: str) -> SSAValue:
            y = lo.call(inst.child(name), "forward", x, label=label)
            y = g.reshape(y, (S, heads, d), label)
            if norm is not None and inst.has(norm):
                y = lo.call(inst.child(norm), "forward", y, label=label.replace("cur", "cur_normed"))
            return y

        q = rope(project("q_proj", n_head, "q_norm", f"Qcur{sfx}"), f"Qcur{sfx}")
        v = project("v_proj", n_kv_head, None, f"Vcur{sfx}")
        k = rope(project("k_proj", n_kv_head, "k_norm", f"Kcur{sfx}"), f"Kcur{sfx}")
        attn = attend(lo, inst, q, k, v, n_head, n_kv_head, d, f"kqv_out{sfx}")
        return lo.call(inst.child("o_proj"), "forward", attn)


def attend(lo: Lowering, inst: BlockInstance, q: SSAValue, k: SSAValue, v: SSAValue, n_head: int,
           n_kv_head: int, d: int, label: str) -> SSAValue:
    """llama.cpp's build_attn with a KV cache: write k and v [S, KvHeads, d] at the call's
    rows, then attend with q [S, Heads, d] over the first n_kv cache rows; returns the
    heads joined, [S, Heads * d], named `label`."""
    if lo.plan is not None:
        return attend_streams(lo, inst, q, k, v, n_head, n_kv_head, d, label)
    g, S, il, sfx = lo.g, lo.S, inst.layer or 0, lo.suffix(inst)
    # Q, then V, then K (llama.cpp expands K last so that rope can fuse into the cache write).
    for x in (q, v, k):
        g.expand(x)
    caches = []
    for kind, src in (("k", k), ("v", v)):
        elem = dtype_named(lo.kv_type or inst.state[f"cache_{kind}"].dtype).attr
        cache = lo.state(f"cache_{kind}_l{il}", (lo.n_ctx, n_kv_head * d), elem)
        rows = lo.input("kv_rows", (S,), i64, f"{kind}_idxs", key=("kv_rows", il, kind),
                        label=lo.input_name(f"{kind}_rows"))
        flat = g.view(src, (S, n_kv_head * d))
        g.expand(g.add(O.SetRowsOp.create(operands=[cache, flat, rows], result_types=[cache.type])))
        caches.append(cache)

    mask = lo.input("kq_mask", (S, lo.n_kv), f32, "kq_mask")
    qp = g.permute(g.view(q, (S, n_head, d)), (1, 0, 2))
    kp, vp = (g.permute(g.view(c, (lo.n_kv, n_kv_head, d)), (1, 0, 2)) for c in caches)
    scale = {"scale": FloatAttr(1.0 / math.sqrt(d), f64)}
    if lo.flash_attn:
        op = O.FlashAttnExtOp.create(operands=[qp, kp, vp, mask], result_types=[tensor((S, n_head, d))],
                                     attributes=scale)
        return g.reshape(g.add(op), (S, n_head * d), label)
    kq = g.mul_mat(kp, qp, f"kq{sfx}")
    kq = g.add(O.SoftMaxOp.create(operands=[kq, mask], result_types=[kq.type], attributes=scale),
               f"kq_soft_max{sfx}")
    vt = g.unary(O.ContOp, g.unary(O.TransposeOp, vp, (n_kv_head, d, lo.n_kv)), (n_kv_head, d, lo.n_kv))
    kqv = g.mul_mat(vt, kq, f"kqv{sfx}")
    return g.unary(O.ContOp, g.permute(kqv, (1, 0, 2)), (S, n_head * d), label)


def attend_streams(lo: Lowering, inst: BlockInstance, q: SSAValue, k: SSAValue, v: SSAValue, n_head: int,
                   n_kv_head: int, d: int, label: str) -> SSAValue:
    """`attend` for an entry of several sequences (see `CallPlan`): K and V of the call's N
    tokens go to their cache cells (SET_ROWS at `kv_rows`, -1 for a token that keeps none);
    attention runs in the plan's streams, FLASH_ATTN_EXT (or MUL_MAT / SOFT_MAX / MUL_MAT)
    with a leading dim of streams when there are several, over the keys of each stream:

    * "self": the call's own k and v (stream r: the tokens of row r);
    * "cache": a VIEW of the cache, row r's first n_kv cells for stream r (or every cell,
      for one stream);
    * "paged": GET_ROWS of the cells the block table reaches (`kv_cells`).

    The mask (`kq_mask` [S, C], or [R, S, C]) keeps each query to its own sequence."""
    plan, g, N, il, sfx = lo.plan, lo.g, lo.S, inst.layer or 0, lo.suffix(inst)
    assert plan is not None
    R, C, width = plan.streams, plan.n_kv, n_kv_head * d
    s = plan.per_stream if R > 1 else N
    for x in (q, v, k):
        g.expand(x)
    keys = []
    for kind, src in (("k", k), ("v", v)):
        if plan.kv != "self" or plan.writes:
            elem = dtype_named(inst.state[f"cache_{kind}"].dtype).attr
            cache = lo.state(f"cache_{kind}_l{il}", (plan.batch * lo.n_ctx, width), elem)
            rows = lo.input("kv_rows", (N,), i64, f"{kind}_idxs", key=("kv_rows", il, kind))
            g.expand(g.add(O.SetRowsOp.create(operands=[cache, g.view(src, (N, width)), rows],
                                              result_types=[cache.type])))
        if plan.kv == "self":
            keys.append(src)
        else:
            if plan.kv == "paged":
                cells = lo.input("kv_cells", (R * C,), i64, "kv_cells")
                keys.append(g.reshape(g.binary(O.GetRowsOp, cache, cells, (R * C, width)),
                                      (R * C, n_kv_head, d)))
            elif R > 1:  # row r's first C cells
                keys.append(g.view(cache, (R, C, n_kv_head, d), None, 0, (lo.n_ctx * width, width, d, 1)))
            else:
                keys.append(g.view(cache, (plan.batch * lo.n_ctx, n_kv_head, d)))

    def shaped(x: SSAValue, shape: tuple[int, ...]) -> SSAValue:
        return x if O.shape_of(x) == shape else g.reshape(x, shape)

    def heads(x: SSAValue, n: int, tokens: int) -> SSAValue:  # [tokens, n, d] -> [R, n, S, d] or [n, S, d]
        if R == 1:
            return g.permute(shaped(x, (tokens, n, d)), (1, 0, 2))
        return g.permute(shaped(x, (R, s if tokens == N else C, n, d)), (0, 2, 1, 3))

    rows_k = N if plan.kv == "self" else (R * C if R == 1 or plan.kv == "paged" else None)
    qp = heads(q, n_head, N)
    if rows_k is None:  # a view of the cache, already [R, C, KvHeads, d]
        kp, vp = (g.permute(x, (0, 2, 1, 3)) for x in keys)
    else:
        kp, vp = (heads(x, n_kv_head, rows_k) for x in keys)
    lead = (R,) if R > 1 else ()
    mask = lo.input("kq_mask", (*lead, s, C), f32, "kq_mask")
    scale = {"scale": FloatAttr(1.0 / math.sqrt(d), f64)}
    if lo.flash_attn:
        op = O.FlashAttnExtOp.create(operands=[qp, kp, vp, mask], result_types=[tensor((*lead, s, n_head, d))],
                                     attributes=scale)
        return g.reshape(g.add(op), (N, n_head * d), label)
    kq = g.mul_mat(kp, qp, f"kq{sfx}")  # [R, Heads, S, C]
    mask = g.reshape(mask, (R, 1, s, C)) if R > 1 else mask
    kq = g.add(O.SoftMaxOp.create(operands=[kq, mask], result_types=[kq.type], attributes=scale), f"kq_soft_max{sfx}")
    vt_shape = (*lead, n_kv_head, d, C)
    vt = g.unary(O.ContOp, g.unary(O.TransposeOp, vp, vt_shape), vt_shape)
    kqv = g.mul_mat(vt, kq, f"kqv{sfx}")  # [R, Heads, S, d]
    return g.unary(O.ContOp, g.permute(kqv, (0, 2, 1, 3) if R > 1 else (1, 0, 2)), (N, n_head * d), label)


@EXPANSIONS.register("std.attn.gated")
class GatedAttention:
    """Gated full attention, as llama.cpp's build_layer_attn of Qwen3.5 / Qwen3-Next: q_proj
    gives per head [query | gate] (`Qcur_full`); q and k get their (zero-centred) norms and a
    rope over the first `rotary_dim` dims; the attention output times sigmoid(gate) goes
    through o_proj (`attn_output`). The block's `ggml_q_split` says how llama.cpp takes the
    query and the gate out of Qcur_full: strided views of it (absent: Qwen3.5's), or a
    reshape to [S, Heads, 2*HeadDim] first (`reshape`: Qwen3-Next's, which also names them
    `Qcur_view` and `gate`)."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue) -> SSAValue:
        g, S, sfx = lo.g, lo.S, lo.suffix(inst)
        shards = inst.dim("Shards")
        n_head, n_kv_head, d = inst.dim("Heads") // shards, inst.dim("KvHeads") // shards, inst.dim("HeadDim")
        rope = _rope(lo, inst, d)
        q_full = lo.call(inst.child("q_proj"), "forward", x, label=f"Qcur_full{sfx}")  # [S, Heads * 2d]
        k = lo.call(inst.child("k_proj"), "forward", x, label=f"Kcur{sfx}")
        v = lo.call(inst.child("v_proj"), "forward", x, label=f"Vcur{sfx}")
        split = inst.str_attr("ggml_q_split")
        if split not in (None, "reshape"):
            raise LoweringError(f"convert-module-to-op: {inst.name}: ggml_q_split '{split}' is not 'reshape'")
        heads, strides = (S, n_head, d), (n_head * 2 * d, 2 * d, 1)  # every head's [query | gate]
        if split == "reshape":
            q_full = g.reshape(q_full, (S, n_head, 2 * d))
            q = g.view(q_full, heads, f"Qcur_view{sfx}", 0, strides)
            gate = g.view(q_full, heads, f"gate{sfx}", d, strides)
        else:
            q = g.view(q_full, heads, f"Qcur_reshaped{sfx}", 0, strides)
            gate = g.view(q_full, heads, None, d, strides)
        q = lo.call(inst.child("q_norm"), "forward", q, label=f"Qcur_normed{sfx}")
        k = lo.call(inst.child("k_norm"), "forward", g.reshape(k, (S, n_kv_head, d)), label=f"Kcur_normed{sfx}")
        gate = g.unary(O.ContOp, gate, (S, n_head * d), None if split else f"gate_reshaped{sfx}")
        v = g.reshape(v, (S, n_kv_head, d), f"Vcur{sfx}")
        q, k = rope(q, f"Qcur{sfx}"), rope(k, f"Kcur{sfx}")
        attn = attend(lo, inst, q, k, v, n_head, n_kv_head, d, f"attn_pregate{sfx}")
        gate = g.unary(O.SigmoidOp, gate, (S, n_head * d), f"gate_sigmoid{sfx}")
        attn = g.binary(O.MulOp, attn, gate, (S, n_head * d), f"attn_gated{sfx}")
        return lo.call(inst.child("o_proj"), "forward", attn, label=f"attn_output{sfx}")


def extra_stream_pairs(sections: tuple[int, ...], pairs: int, interleaved: bool) -> list[int]:
    """The rotary pairs that ggml's multi-section rope (ggml_mrope_cache_init) turns by M-RoPE's
    fourth position stream (e), given `sections` (4, ggml's) and `pairs` rotated pairs."""
    total = sum(sections)
    s0, s1, s2 = sections[:3]

    def stream_e(i: int) -> bool:
        sector = i % total
        if interleaved:
            return not ((sector % 3 == 1 and sector < 3 * s1) or (sector % 3 == 2 and sector < 3 * s2)
                        or (sector % 3 == 0 and sector < 3 * s0))
        return sector >= s0 + s1 + s2

    return [i for i in range(pairs) if stream_e(i)]


def text_sections(sections: tuple[int, ...], pairs: int, interleaved: bool) -> tuple[int, ...]:
    """The M-RoPE sections for text: llama.cpp's, unless they send a rotary pair to the fourth
    stream (e), which llama.cpp feeds zeros for text while HF rotates every pair by the
    position. For text the t, h and w streams are all the position, so any sections that
    avoid e give HF's (and, where llama.cpp's avoid e, llama.cpp's) values; [n, n, n, 0]
    always does. Only interleaved sections can reach e before the pairs run out."""
    if interleaved and extra_stream_pairs(sections, pairs, interleaved):
        return (pairs, pairs, pairs, 0)
    return sections


#: What M-RoPE's fourth stream is for text (a block's `mrope_extra_stream`): `position`, as in
#: HF, where every pair turns by the token's position; `zero`, as llama.cpp feeds it, where the
#: pairs that the sections send to it are not turned (a GGUF read as llama.cpp reads it).
MROPE_EXTRA_STREAMS = ("position", "zero")


def _rope(lo: Lowering, inst: BlockInstance, head_dim: int):
    """A function that applies the block's rope: NeoX over the first `rotary_dim` dims (all
    by default), with llama3 factors if it has them, or multi-section (`rope_mode` imrope or
    mrope, `mrope_section`) with M-RoPE's four position streams, as llama.cpp's
    ggml_rope_multi for text (`mrope_extra_stream`: see MROPE_EXTRA_STREAMS)."""
    theta = inst.float_attr("rope_theta")
    n_dims = int(inst.float_attr("rotary_dim", float(head_dim)))
    mode = inst.str_attr("rope_mode", "neox")
    if mode not in O.ROPE_MODES or mode == "norm":
        raise LoweringError(f"convert-module-to-op: {inst.name}: rope_mode '{mode}' is not neox, mrope or imrope")
    scaling = rope_scaling(inst)
    freq = None
    if scaling is not None:
        if scaling.get("rope_type") != "llama3":
            raise LoweringError(f"convert-module-to-op: {inst.name}: rope scaling "
                                f"'{scaling.get('rope_type')}' is not supported")
        factors = llama3_freq_factors(theta, head_dim, scaling)
        freq = lo.once(("rope_freqs", tuple(factors)), lambda: lo.g.add(O.ConstantOp(
            DenseIntOrFPElementsAttr.from_list(tensor((head_dim // 2,)), factors), "rope_freqs")), shared=True)
    attrs = {
        "n_dims": IntegerAttr(n_dims, i64),
        "mode": StringAttr(mode),
        "freq_base": FloatAttr(theta, f64),
        "freq_scale": FloatAttr(1.0, f64),
    }
    multi = mode in O.MULTI_ROPE_MODES
    if multi:
        section = inst.attr("mrope_section")
        values = list(section.get_values()) if isinstance(section, DenseArrayBase) else []
        if not values or len(values) > 4:
            raise LoweringError(f"convert-module-to-op: {inst.name}: rope_mode '{mode}' needs mrope_section (up to 4)")
        sections = tuple(values + [0] * (4 - len(values)))
        extra = inst.str_attr("mrope_extra_stream", "position")
        if extra not in MROPE_EXTRA_STREAMS:
            raise LoweringError(f"convert-module-to-op: {inst.name}: mrope_extra_stream '{extra}' is not "
                                f"{' or '.join(MROPE_EXTRA_STREAMS)}")
        if extra == "position":
            sections = text_sections(sections, n_dims // 2, mode == "imrope")
        attrs["sections"] = DenseArrayBase.from_list(i64, sections)

    def apply(x: SSAValue, label: str) -> SSAValue:
        if multi:  # four streams per token: t, h, w (the positions for text) and e (zeros)
            n = DYNAMIC_INDEX if lo.dynamic else 4 * lo.S
            positions = lo.input("mrope_positions", (n,), i32, "inp_pos", label=lo.input_name("positions"))
        else:
            positions = lo.input("positions", (lo.S,), i32, "inp_pos", label=lo.input_name("positions"))
        operands = [x, positions] + ([freq] if freq is not None else [])
        return lo.g.add(O.RopeOp.create(operands=operands, result_types=[x.type], attributes=dict(attrs)), label)

    return apply
