"""convert-module-to-op: expand a llama-family `module.model` into ggml's graph.

One entry per run: `prefill` of S tokens (S static, or dynamic with `tokens=0`)
from a start position, or `decode` of one token. The graph follows llama.cpp's
`llm_build_llama`/`llm_build_qwen3` node for node, with its tensor names: Q, V and K
projections (K last, as llama.cpp expands it last), the KV-cache writes as
SET_ROWS into per-layer state `cache_k_l<i>` laid out [ctx, KvHeads*HeadDim], the
visible cache as a VIEW of its first `n_kv` rows, FLASH_ATTN_EXT or the unfused
MUL_MAT / SOFT_MAX / MUL_MAT chain, and, in the last layer of a prefill, the GET_ROWS
that keeps only the rows whose logits are returned.

`n_kv` is `start + S` rounded up to `kv-pad` (capped at `ctx`) when both are known,
else `ctx`: the mask hides the rows not yet written either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
    f64,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from strata.dialects import module as M
from strata.dialects import op as O
from strata.errors import StrataError
from strata.models.llama import LlamaHParams, llama_hparams, model_params

DYN = DYNAMIC_INDEX


def tensor(shape: tuple[int, ...], elem: Attribute = f32) -> TensorType:
    return TensorType(elem, shape)


def llama3_freq_factors(hp: LlamaHParams) -> list[float] | None:
    """llama.cpp's rope_freqs for llama3 scaling: original / scaled inverse frequency."""
    rs = hp.rope_scaling
    if rs is None:
        return None
    d = hp.head_dim
    inv = hp.rope_theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = old_ctx / lo, old_ctx / hi
    smooth = (old_ctx / wavelen - lo) / (hi - lo)
    scaled = np.where(wavelen > low_wl, inv / factor, inv)
    mid = (wavelen <= low_wl) & (wavelen >= high_wl)
    scaled = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return [float(x) for x in (inv / scaled)]


class GraphBuilder:
    """Appends op-level ops to a block; each helper returns the new value."""

    def __init__(self, block: Block):
        self.block = block

    def add(self, op: Operation, label: str | None = None) -> SSAValue:
        if label is not None:
            op.attributes["name"] = StringAttr(label)
        self.block.add_op(op)
        res = op.results[0]
        if label is not None:
            res.name_hint = _hint(label)
        return res

    def param(self, name: str, shape: tuple[int, ...], elem: Attribute) -> SSAValue:
        v = self.add(O.ParamOp(name, tensor(shape, elem)))
        v.name_hint = _hint(name)
        return v

    def unary(self, cls, x: SSAValue, shape, label=None, elem=None, **attrs) -> SSAValue:
        op = cls.create(operands=[x], result_types=[tensor(shape, elem or O.elem_of(x))], attributes=attrs)
        return self.add(op, label)

    def binary(self, cls, a: SSAValue, b: SSAValue, shape, label=None, elem=f32, **attrs) -> SSAValue:
        op = cls.create(operands=[a, b], result_types=[tensor(shape, elem)], attributes=attrs)
        return self.add(op, label)

    def mul_mat(self, w: SSAValue, x: SSAValue, label=None) -> SSAValue:
        ws, xs = O.shape_of(w), O.shape_of(x)
        return self.binary(O.MulMatOp, w, x, (*xs[:-1], ws[-2]), label)

    def view(self, x: SSAValue, shape, label=None, offset: int = 0) -> SSAValue:
        return self.unary(O.ViewOp, x, shape, label, offset=IntegerAttr(offset, i64))

    def permute(self, x: SSAValue, dims: tuple[int, ...], label=None) -> SSAValue:
        s = O.shape_of(x)
        return self.unary(O.PermuteOp, x, tuple(s[d] for d in dims), label, dims=DenseArrayBase.from_list(i64, dims))


def _hint(label: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in label)


@dataclass(frozen=True)
class ConvertModuleToOpPass(ModulePass):
    """Lower the model's `entry` to a `func.func` of op-level ops."""

    name = "convert-module-to-op"

    entry: str = "prefill"
    tokens: int = 0
    start: int = -1
    ctx: int = 0
    kv_pad: int = 256
    flash_attn: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        models = [o for o in op.ops if isinstance(o, M.ModelOp)]
        if len(models) != 1:
            raise StrataError(f"convert-module-to-op: expected one module.model, found {len(models)}")
        model = models[0]
        func_op = lower_llama(llama_hparams(model), model_params(model), self)
        model.detach()
        model.erase()
        op.body.block.add_op(func_op)


def _check_options(opts: ConvertModuleToOpPass) -> None:
    """Refuse options that would give IR nobody can parse back or run."""

    def bad(msg: str) -> StrataError:
        return StrataError(f"convert-module-to-op: {msg}")

    if opts.entry not in ("prefill", "decode"):
        raise bad(f"unknown entry '{opts.entry}' (prefill or decode)")
    if opts.tokens < 0:
        raise bad(f"tokens must be >= 0 (0: dynamic), got {opts.tokens}")
    if opts.entry == "decode" and opts.tokens not in (0, 1):
        raise bad(f"decode takes one token, got tokens={opts.tokens}")
    if opts.start < -1:
        raise bad(f"start must be a position >= 0, or -1 for unknown, got {opts.start}")
    if opts.ctx < 0:
        raise bad(f"ctx must be >= 0 (0: the model's MaxSeq), got {opts.ctx}")
    if opts.kv_pad < 1:
        raise bad(f"kv-pad must be >= 1, got {opts.kv_pad}")


def lower_llama(
    hp: LlamaHParams, params: dict[str, tuple[tuple[int, ...], str]], opts: ConvertModuleToOpPass
) -> func.FuncOp:
    _check_options(opts)
    n_ctx = opts.ctx or hp.max_seq
    if opts.entry == "decode":
        S = 1
    else:
        S = opts.tokens if opts.tokens > 0 else DYN
    if S != DYN and opts.start >= 0:
        if opts.start + S > n_ctx:
            raise StrataError(f"convert-module-to-op: {opts.start} + {S} tokens exceed the context of {n_ctx}")
        n_kv = min(n_ctx, -(-(opts.start + S) // opts.kv_pad) * opts.kv_pad)
    else:
        n_kv = n_ctx
    H, Dh, NH, NKV = hp.hidden, hp.head_dim, hp.heads, hp.kv_heads
    wt = hp.dtype

    block = Block()
    g = GraphBuilder(block)

    def W(name: str) -> SSAValue:
        return g.param(name, params[name][0], wt)

    inp_tokens = g.add(O.InputOp("tokens", tensor((S,), i32), "inp_tokens"))
    inp_tokens.name_hint = "inp_tokens"
    inpL = g.binary(O.GetRowsOp, W("token_embd.weight"), inp_tokens, (S, H), "embd")
    inp_pos = g.add(O.InputOp("positions", tensor((S,), i32)))
    inp_pos.name_hint = "inp_pos"
    kq_mask = g.add(O.InputOp("kq_mask", tensor((S, n_kv), f32)))
    kq_mask.name_hint = "kq_mask"
    factors = llama3_freq_factors(hp)
    freq = None
    if factors is not None:
        freq = g.add(O.ConstantOp(DenseIntOrFPElementsAttr.from_list(tensor((Dh // 2,)), factors), "rope_freqs"))
    rope_attrs = {
        "n_dims": IntegerAttr(Dh, i64),
        "mode": StringAttr("neox"),
        "freq_base": FloatAttr(hp.rope_theta, f64),
        "freq_scale": FloatAttr(1.0, f64),
    }
    eps = {"eps": FloatAttr(hp.eps, f64)}
    prune = opts.entry == "prefill" and S != 1
    out_ids = None
    n_out = S

    def rms_mul(x: SSAValue, weight: str, label: str, norm_label: str) -> SSAValue:
        s = O.shape_of(x)
        n = g.unary(O.RmsNormOp, x, s, norm_label, **eps)
        return g.binary(O.MulOp, n, W(weight), s, label)

    def proj(x: SSAValue, w: str, bias: bool, label: str | None) -> SSAValue:
        y = g.mul_mat(W(w + ".weight"), x, label)
        if bias:
            y = g.binary(O.AddOp, y, W(w + ".bias"), O.shape_of(y), label)
        return y

    def rope(x: SSAValue, label: str) -> SSAValue:
        operands = [x, inp_pos] + ([freq] if freq is not None else [])
        op = O.RopeOp.create(operands=operands, result_types=[x.type], attributes=dict(rope_attrs))
        return g.add(op, label)

    for il in range(hp.layers):
        b = f"blk.{il}."
        last = il == hp.layers - 1
        inpSA = inpL
        cur = rms_mul(inpL, b + "attn_norm.weight", f"attn_norm-{il}", f"norm-{il}")
        # Q, then V, then K: llama.cpp expands K last so that rope can fuse into the cache write.
        q = proj(cur, b + "attn_q", hp.qkv_bias, f"Qcur-{il}")
        q = g.unary(O.ReshapeOp, q, (S, NH, Dh), f"Qcur-{il}")
        if hp.qk_norm:
            q = rms_mul(q, b + "attn_q_norm.weight", f"Qcur_normed-{il}", f"norm-{il}")
        q = rope(q, f"Qcur-{il}")
        v = proj(cur, b + "attn_v", hp.qkv_bias, f"Vcur-{il}")
        v = g.unary(O.ReshapeOp, v, (S, NKV, Dh), f"Vcur-{il}")
        k = proj(cur, b + "attn_k", hp.qkv_bias, f"Kcur-{il}")
        k = g.unary(O.ReshapeOp, k, (S, NKV, Dh), f"Kcur-{il}")
        if hp.qk_norm:
            k = rms_mul(k, b + "attn_k_norm.weight", f"Kcur_normed-{il}", f"norm-{il}")
        k = rope(k, f"Kcur-{il}")

        caches = []
        for kind, src in (("k", k), ("v", v)):
            cache = g.add(O.StateOp(f"cache_{kind}_l{il}", tensor((n_ctx, NKV * Dh), wt)))
            cache.name_hint = f"cache_{kind}_l{il}"
            rows = g.add(O.InputOp("kv_rows", tensor((S,), i64)))
            rows.name_hint = f"{kind}_idxs"
            flat = g.view(src, (S, NKV * Dh))
            op = O.SetRowsOp.create(operands=[cache, flat, rows], result_types=[cache.type])
            g.add(op)
            caches.append(cache)

        qv = g.view(q, (S, NH, Dh))
        qp = g.permute(qv, (1, 0, 2))
        kv_views = []
        for cache in caches:
            cv = g.view(cache, (n_kv, NKV, Dh))
            kv_views.append(g.permute(cv, (1, 0, 2)))
        kp, vp = kv_views
        scale = {"scale": FloatAttr(1.0 / math.sqrt(Dh), f64)}
        if opts.flash_attn:
            op = O.FlashAttnExtOp.create(operands=[qp, kp, vp, kq_mask], result_types=[tensor((S, NH, Dh))], attributes=scale)
            attn = g.add(op)
            attn = g.unary(O.ReshapeOp, attn, (S, NH * Dh), f"kqv_out-{il}")
        else:
            kq = g.mul_mat(kp, qp, f"kq-{il}")
            op = O.SoftMaxOp.create(operands=[kq, kq_mask], result_types=[kq.type], attributes=scale)
            kq = g.add(op, f"kq_soft_max-{il}")
            vt = g.unary(O.TransposeOp, vp, (NKV, Dh, n_kv))
            vt = g.unary(O.ContOp, vt, (NKV, Dh, n_kv))
            kqv = g.mul_mat(vt, kq, f"kqv-{il}")
            merged = g.permute(kqv, (1, 0, 2))
            attn = g.unary(O.ContOp, merged, (S, NH * Dh), f"kqv_out-{il}")
        cur = proj(attn, b + "attn_output", hp.o_bias, None)
        if last and prune:
            n_out = 1
            out_ids = g.add(O.InputOp("out_ids", tensor((n_out,), i32)))
            out_ids.name_hint = "inp_out_ids"
            cur = g.binary(O.GetRowsOp, cur, out_ids, (n_out, H))
            inpSA = g.binary(O.GetRowsOp, inpSA, out_ids, (n_out, H))
        ffn_inp = g.binary(O.AddOp, cur, inpSA, O.shape_of(cur), f"ffn_inp-{il}")
        cur = rms_mul(ffn_inp, b + "ffn_norm.weight", f"ffn_norm-{il}", f"norm-{il}")
        gate = g.mul_mat(W(b + "ffn_gate.weight"), cur, f"ffn_gate-{il}")
        up = g.mul_mat(W(b + "ffn_up.weight"), cur, f"ffn_up-{il}")
        act = g.binary(O.SwigluOp, gate, up, O.shape_of(gate), f"ffn_swiglu-{il}")
        cur = g.mul_mat(W(b + "ffn_down.weight"), act, f"ffn_out-{il}")
        inpL = g.binary(O.AddOp, cur, ffn_inp, O.shape_of(cur), f"l_out-{il}")

    cur = rms_mul(inpL, "output_norm.weight", "result_norm", "norm")
    out_w = "token_embd.weight" if hp.tied else "output.weight"
    logits = g.mul_mat(W(out_w), cur, "result_output")
    block.add_op(func.ReturnOp(logits))
    fn = func.FuncOp(opts.entry, ((), (logits.type,)), Region(block))
    fn.attributes["op.n_ctx"] = IntegerAttr(n_ctx, i64)
    fn.attributes["op.n_kv"] = IntegerAttr(n_kv, i64)
    return fn
