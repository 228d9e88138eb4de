"""Strata's op-level IR reproduces llama.cpp's own graphs and values for the hybrid families.

The Qwen3.5 and Qwen3.5-MoE tiny checkpoints of tests/data/llamacpp, written op by op in
Strata's IR as llama.cpp's qwen35.cpp / qwen35moe.cpp build them (the tests stand in for the
expansion of those families, to check the ops): the trace must equal llama.cpp's row for row,
and every op's sum the sum that llama-eval-callback logged. The GGUF stores the
linear-attention V heads tiled while Strata's weights are HF's grouped ones, so the graphs use
op.gated_delta_net {grouped}; sums do not see the order.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from strata.verify.llamacpp import parse_callback_log
from support import LLAMACPP

E, VOCAB, N_CTX = 64, 320, 256
HEADS, KV_HEADS, HD, N_ROT, SECTIONS = 4, 2, 32, 8, (2, 1, 1, 0)
LHK, LHV, LD, LK = 2, 4, 16, 4
LC = 2 * LHK * LD + LHV * LD
N_EXP, TOP_K, MOE_INNER, DENSE_INNER = 8, 2, 32, 96


def _ty(shape, elem: str = "f32") -> str:
    return f"tensor<{'x'.join(str(d) for d in shape)}x{elem}>"


class _Graph:
    """IR text in the order llama.cpp builds its graph; leaves are declared once."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.types: dict[str, str] = {}
        self.count = 0

    def leaf(self, kind: str, name: str, shape, elem: str = "f32", label: str | None = None) -> str:
        key = f"{kind}:{name}:{label}"
        if key not in self.types:
            v = f"%l{len(self.types)}"
            attrs = f' {{name = "{label}"}}' if label else ""
            typ = _ty(shape, elem)
            self.lines.append(f'{v} = op.{kind} "{name}"{attrs} : {typ}')
            self.types[key] = v
            self.types[v] = typ
        return self.types[key]

    def op(self, text: str, operands: list[str], shape, elem: str = "f32", name: str | None = None) -> str:
        v = f"%v{self.count}"
        self.count += 1
        attrs = text.split(" ", 1)
        body, extra = attrs[0], (attrs[1] if len(attrs) > 1 else "")
        extra = extra.strip()
        if name is not None:
            extra = (extra[:-1] + f', name = "{name}"}}') if extra else f'{{name = "{name}"}}'
        typ = _ty(shape, elem)
        self.types[v] = typ
        ins = ", ".join(self.types[o] for o in operands)
        self.lines.append(f"{v} = op.{body} {', '.join(operands)} {extra} : {ins} -> {typ}".replace("  ", " "))
        return v

    def text(self, result: str) -> str:
        body = "\n  ".join(self.lines)
        return (f'func.func @main() -> {self.types[result]} attributes {{"op.n_kv" = {N_CTX} : i64}} {{\n  {body}\n'
                f"  func.return {result} : {self.types[result]}\n}}\n")


def _linear_attention(gr: _Graph, il: int, x: str, t_: int) -> str:
    """build_layer_attn_linear (qwen35.cpp) with build_conv_state and build_recurrent_attn."""
    nr, ns = (LK - 1) * LC, LHV * LD * LD
    sc = gr.leaf("input", "state_copy", (1,), "i32", label="rs_s_copy")
    w = lambda n, shape: gr.leaf("param", f"blk.{il}.{n}", shape)  # noqa: E731
    # build_rs for the conv state: zero a slot, gather the read slots, copy the extra ones
    cr = gr.leaf("state", f"cache_r_l{il}", (1, nr))
    crr = gr.op("reshape", [cr], (1, nr))
    gr.op("scale {scale = 0.0 : f64}", [gr.op("view {offset = 0 : i64}", [crr], (nr,))], (nr,),
          name=f"cache_r_l{il} (reshaped) (view) (view)")
    # llama.cpp views rs_s_copy once per graph (build_rs_inp): the slots read, and the rest
    if not hasattr(gr, "copy_views"):
        gr.copy_views = (gr.op("view {offset = 0 : i64}", [sc], (1,), "i32"), None)
    main = gr.copy_views[0]
    cst = gr.op("get_rows", [crr, main], (1, nr), name=f"conv_states-{il}")
    if gr.copy_views[1] is None:
        gr.copy_views = (main, gr.op("view {offset = 1 : i64}", [sc], (0,), "i32"))
    none = gr.copy_views[1]
    extra = gr.op("get_rows", [crr, none], (0, nr))
    gr.op("cpy", [extra, gr.op(f"view {{offset = {nr} : i64}}", [cr], (0, nr))], (0, nr))
    csr = gr.op("reshape", [cst], (LC, LK - 1), name=f"conv_states_reshaped-{il}")
    qkv = gr.op("mul_mat", [w("attn_qkv.weight", (LC, E)), x], (t_, LC))
    qkv = gr.op("reshape", [qkv], (t_, LC), name=f"linear_attn_qkv_mixed-{il}")
    qkvt = gr.op("transpose", [qkv], (LC, t_), name=f"qkv_mixed_transposed-{il}")
    ci = gr.op("concat {axis = 1 : i64}", [csr, qkvt], (LC, LK - 1 + t_), name=f"conv_input-{il}")
    last = gr.op(f"view {{offset = {t_} : i64, strides = array<i64: {LK - 1 + t_}, 1>}}", [ci], (LC, LK - 1),
                 name=f"conv_state_last-{il}")
    gr.op("cpy", [last, gr.op("view {offset = 0 : i64}", [cr], (1, nr), name=f"conv_state_update-{il}")], (1, nr))
    # build_rs for the recurrent state
    cs = gr.leaf("state", f"cache_s_l{il}", (1, ns))
    csr2 = gr.op("reshape", [cs], (1, ns))
    gr.op("scale {scale = 0.0 : f64}", [gr.op("view {offset = 0 : i64}", [csr2], (ns,))], (ns,),
          name=f"cache_s_l{il} (reshaped) (view) (view)")
    s0 = gr.op("get_rows", [csr2, main], (1, ns))
    sx = gr.op("get_rows", [csr2, none], (0, ns))
    gr.op("cpy", [sx, gr.op(f"view {{offset = {ns} : i64}}", [cs], (0, ns))], (0, ns))
    conv = gr.op("ssm_conv", [ci, w("ssm_conv1d.weight", (LC, LK))], (t_, LC), name=f"conv_output_raw-{il}")
    silu = gr.op("silu", [conv], (t_, LC), name=f"conv_output_silu-{il}")
    l2 = f"{{eps = {1e-6 / LD} : f64}}"
    strides = f"strides = array<i64: {LC}, {LD}, 1>"
    q = gr.op(f"view {{offset = 0 : i64, {strides}}}", [silu], (t_, LHK, LD), name=f"q_conv-{il}")
    q = gr.op(f"scale {{scale = {1 / math.sqrt(LD)} : f64}}", [gr.op(f"rms_norm {l2}", [q], (t_, LHK, LD))],
              (t_, LHK, LD), name=f"q_conv_predelta-{il}")
    k = gr.op(f"view {{offset = {LHK * LD} : i64, {strides}}}", [silu], (t_, LHK, LD), name=f"k_conv-{il}")
    k = gr.op(f"scale {{scale = {1 / math.sqrt(LD)} : f64}}", [gr.op(f"rms_norm {l2}", [k], (t_, LHK, LD))],
              (t_, LHK, LD), name=f"k_conv_predelta-{il}")
    v = gr.op(f"view {{offset = {2 * LHK * LD} : i64, {strides}}}", [silu], (t_, LHV, LD), name=f"v_conv_predelta-{il}")
    a = gr.op("reshape", [gr.op("mul_mat", [w("ssm_alpha.weight", (LHV, E)), x], (t_, LHV))], (t_, LHV), name=f"alpha-{il}")
    a = gr.op("softplus", [gr.op("add", [a, w("ssm_dt.bias", (LHV,))], (t_, LHV))], (t_, LHV), name=f"a_softplus-{il}")
    g = gr.op("reshape", [gr.op("mul", [a, w("ssm_a", (LHV,))], (t_, LHV), name=f"gate-{il}")], (t_, LHV, 1))
    b = gr.op("reshape", [gr.op("mul_mat", [w("ssm_beta.weight", (LHV, E)), x], (t_, LHV))], (t_, LHV, 1), name=f"beta-{il}")
    b = gr.op("sigmoid", [b], (t_, LHV, 1), name=f"beta_sigmoid-{il}")
    st = gr.op("reshape", [s0], (LHV, LD, LD), name=f"state_predelta-{il}")
    gdn = gr.op("gated_delta_net {grouped}", [q, k, v, g, b, st], (t_ + LD, LHV * LD))
    ns_ = gr.op(f"view {{offset = {t_ * LHV * LD} : i64}}", [gdn], (LHV, LD, LD), name=f"new_state-{il}")
    gr.op("cpy", [ns_, gr.op("view {offset = 0 : i64}", [cs], (1, ns))], (1, ns))
    o = gr.op("view {offset = 0 : i64}", [gdn], (t_, LHV, LD), name=f"attn_output-{il}")
    o = gr.op("mul", [gr.op("rms_norm {eps = 1.0e-06 : f64}", [o], (t_, LHV, LD), name=f"norm-{il}"),
                      w("ssm_norm.weight", (LD,))], (t_, LHV, LD))
    z = gr.op("mul_mat", [w("attn_gate.weight", (LHV * LD, E)), x], (t_, LHV * LD), name=f"z-{il}")
    z = gr.op("silu", [gr.op("reshape", [z], (t_, LHV, LD))], (t_, LHV, LD))
    o = gr.op("reshape", [gr.op("mul", [o, z], (t_, LHV, LD))], (t_, LHV * LD), name=f"final_output-{il}")
    o = gr.op("mul_mat", [w("ssm_out.weight", (E, LHV * LD)), o], (t_, E), name=f"linear_attn_out-{il}")
    return gr.op("reshape", [o], (t_, E))


def _attention(gr: _Graph, il: int, x: str, t_: int) -> str:
    """build_layer_attn (qwen35.cpp): gated attention with IMROPE on 8 of 32 dims."""
    w = lambda n, shape: gr.leaf("param", f"blk.{il}.{n}", shape)  # noqa: E731
    pos = gr.leaf("input", "mrope_positions", (4 * t_,), "i32", label="inp_pos")
    rope = (f'rope {{n_dims = {N_ROT} : i64, mode = "imrope", sections = array<i64: {", ".join(map(str, SECTIONS))}>, '
            f'freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64}}')
    qf = gr.op("mul_mat", [w("attn_q.weight", (2 * HEADS * HD, E)), x], (t_, 2 * HEADS * HD), name=f"Qcur_full-{il}")
    qs = f"strides = array<i64: {2 * HEADS * HD}, {2 * HD}, 1>"
    q = gr.op(f"view {{offset = 0 : i64, {qs}}}", [qf], (t_, HEADS, HD), name=f"Qcur_reshaped-{il}")
    q = gr.op("rms_norm {eps = 1.0e-06 : f64}", [q], (t_, HEADS, HD), name=f"norm-{il}")
    q = gr.op("mul", [q, w("attn_q_norm.weight", (HD,))], (t_, HEADS, HD), name=f"Qcur_normed-{il}")
    q = gr.op(rope, [q, pos], (t_, HEADS, HD), name=f"Qcur-{il}")
    v = gr.op("mul_mat", [w("attn_v.weight", (KV_HEADS * HD, E)), x], (t_, KV_HEADS * HD), name=f"Vcur-{il}")
    v = gr.op("reshape", [v], (t_, KV_HEADS, HD), name=f"Vcur-{il}")
    k = gr.op("mul_mat", [w("attn_k.weight", (KV_HEADS * HD, E)), x], (t_, KV_HEADS * HD), name=f"Kcur-{il}")
    k = gr.op("reshape", [k], (t_, KV_HEADS, HD))
    k = gr.op("rms_norm {eps = 1.0e-06 : f64}", [k], (t_, KV_HEADS, HD), name=f"norm-{il}")
    k = gr.op("mul", [k, w("attn_k_norm.weight", (HD,))], (t_, KV_HEADS, HD), name=f"Kcur_normed-{il}")
    k = gr.op(rope, [k, pos], (t_, KV_HEADS, HD), name=f"Kcur-{il}")
    caches = []
    for kind, cur in (("k", k), ("v", v)):
        cache = gr.leaf("state", f"cache_{kind}_l{il}", (N_CTX, KV_HEADS * HD), "f16")
        rows = gr.leaf("input", "kv_rows", (t_,), "i64", label=f"attn_inp_{kind}_idxs")
        flat = gr.op("view {offset = 0 : i64}", [cur], (t_, KV_HEADS * HD))
        gr.op("set_rows", [cache, flat, rows], (N_CTX, KV_HEADS * HD), "f16")
        caches.append(cache)  # later ops view the cache itself (they run after the write)
    q = gr.op("permute {dims = array<i64: 1, 0, 2>}", [gr.op("view {offset = 0 : i64}", [q], (t_, HEADS, HD))],
              (HEADS, t_, HD))
    kv = [gr.op("permute {dims = array<i64: 1, 0, 2>}",
                [gr.op("view {offset = 0 : i64}", [c], (N_CTX, KV_HEADS, HD), "f16")], (KV_HEADS, N_CTX, HD), "f16")
          for c in caches]
    mask = gr.leaf("input", "kq_mask", (t_, N_CTX), "f32")
    o = gr.op(f"flash_attn_ext {{scale = {1 / math.sqrt(HD)} : f64}}", [q, kv[0], kv[1], mask], (t_, HEADS, HD))
    o = gr.op("reshape", [o], (t_, HEADS * HD), name=f"attn_pregate-{il}")
    gate = gr.op(f"view {{offset = {HD} : i64, {qs}}}", [qf], (t_, HEADS, HD))
    gate = gr.op("sigmoid", [gr.op("cont", [gate], (t_, HEADS * HD), name=f"gate_reshaped-{il}")], (t_, HEADS * HD),
                 name=f"gate_sigmoid-{il}")
    o = gr.op("mul", [o, gate], (t_, HEADS * HD), name=f"attn_gated-{il}")
    return gr.op("mul_mat", [w("attn_output.weight", (E, HEADS * HD)), o], (t_, E), name=f"attn_output-{il}")


def _moe(gr: _Graph, il: int, x: str, t_: int) -> str:
    """build_moe_ffn (softmax routing, renormalised top-k) plus the sigmoid-gated shared expert."""
    w = lambda n, shape: gr.leaf("param", f"blk.{il}.{n}", shape)  # noqa: E731
    probs = gr.op("soft_max {scale = 1.0 : f64}", [gr.op("mul_mat", [w("ffn_gate_inp.weight", (N_EXP, E)), x], (t_, N_EXP),
                                                          name=f"ffn_moe_logits-{il}")], (t_, N_EXP), name=f"ffn_moe_probs-{il}")
    probs3 = gr.op("reshape", [probs], (t_, N_EXP, 1))
    top = gr.op(f"view {{offset = 0 : i64, strides = array<i64: {N_EXP}, 1>}}",
                [gr.op('argsort {order = "desc"}', [probs], (t_, N_EXP), "i32", name=f"ffn_moe_argsort-{il}")],
                (t_, TOP_K), "i32", name=f"ffn_moe_topk-{il}")
    wts = gr.op("reshape", [gr.op("get_rows", [probs3, top], (t_, TOP_K, 1), name=f"ffn_moe_weights-{il}")], (t_, TOP_K))
    total = gr.op("sum_rows", [wts], (t_, 1), name=f"ffn_moe_weights_sum-{il}")
    total = gr.op("clamp {min = 6.103515625e-05 : f64, max = 0x7FF0000000000000 : f64}", [total], (t_, 1),
                  name=f"ffn_moe_weights_sum_clamped-{il}")
    wts = gr.op("reshape", [gr.op("div", [wts, total], (t_, TOP_K), name=f"ffn_moe_weights_norm-{il}")], (t_, TOP_K, 1))
    xr = gr.op("reshape", [x], (t_, 1, E))
    up_shape = (N_EXP, MOE_INNER, E)
    g = gr.op("mul_mat_id", [w("ffn_gate_exps.weight", up_shape), xr, top], (t_, TOP_K, MOE_INNER), name=f"ffn_moe_gate-{il}")
    u = gr.op("mul_mat_id", [w("ffn_up_exps.weight", up_shape), xr, top], (t_, TOP_K, MOE_INNER), name=f"ffn_moe_up-{il}")
    h = gr.op("swiglu", [g, u], (t_, TOP_K, MOE_INNER), name=f"ffn_moe_swiglu-{il}")
    d = gr.op("mul_mat_id", [w("ffn_down_exps.weight", (N_EXP, E, MOE_INNER)), h, top], (t_, TOP_K, E), name=f"ffn_moe_down-{il}")
    d = gr.op("mul", [d, wts], (t_, TOP_K, E), name=f"ffn_moe_weighted-{il}")
    slots = [gr.op(f"view {{offset = {j * E} : i64, strides = array<i64: {TOP_K * E}, 1>}}", [d], (t_, E)) for j in range(TOP_K)]
    out = gr.op("add", slots, (t_, E), name=f"ffn_moe_out-{il}")
    sg = gr.op("mul_mat", [w("ffn_gate_shexp.weight", (MOE_INNER, E)), x], (t_, MOE_INNER), name=f"ffn_gate-{il}")
    su = gr.op("mul_mat", [w("ffn_up_shexp.weight", (MOE_INNER, E)), x], (t_, MOE_INNER), name=f"ffn_up-{il}")
    sh = gr.op("swiglu", [sg, su], (t_, MOE_INNER), name=f"ffn_swiglu-{il}")
    sd = gr.op("mul_mat", [w("ffn_down_shexp.weight", (E, MOE_INNER)), sh], (t_, E), name=f"ffn_shexp-{il}")
    sgate = gr.op("mul_mat", [w("ffn_gate_inp_shexp.weight", (1, E)), x], (t_, 1), name=f"shared_expert_gate-{il}")
    sgate = gr.op("sigmoid", [sgate], (t_, 1), name=f"shared_expert_gate_sigmoid-{il}")
    sd = gr.op("mul", [sd, sgate], (t_, E), name=f"ffn_shexp_gated-{il}")
    return gr.op("add", [out, sd], (t_, E), name=f"ffn_out-{il}")


def _dense(gr: _Graph, il: int, x: str, t_: int) -> str:
    w = lambda n, shape: gr.leaf("param", f"blk.{il}.{n}", shape)  # noqa: E731
    g = gr.op("mul_mat", [w("ffn_gate.weight", (DENSE_INNER, E)), x], (t_, DENSE_INNER), name=f"ffn_gate-{il}")
    u = gr.op("mul_mat", [w("ffn_up.weight", (DENSE_INNER, E)), x], (t_, DENSE_INNER), name=f"ffn_up-{il}")
    h = gr.op("swiglu", [g, u], (t_, DENSE_INNER), name=f"ffn_swiglu-{il}")
    return gr.op("mul_mat", [w("ffn_down.weight", (E, DENSE_INNER)), h], (t_, E), name=f"ffn_out-{il}")


def _qwen35_graph(t_: int, moe: bool) -> str:
    gr = _Graph()
    eps = "{eps = 1.0e-06 : f64}"
    tokens = gr.leaf("input", "tokens", (t_,), "i32", label="inp_tokens")
    x = gr.op("get_rows", [gr.leaf("param", "token_embd.weight", (VOCAB, E)), tokens], (t_, E), name="model.input_embed")
    for il in range(4):
        h = gr.op("mul", [gr.op(f"rms_norm {eps}", [x], (t_, E), name=f"norm-{il}"),
                          gr.leaf("param", f"blk.{il}.attn_norm.weight", (E,))], (t_, E), name=f"attn_norm-{il}")
        h = (_attention if il == 3 else _linear_attention)(gr, il, h, t_)
        res = gr.op("add", [h, x], (t_, E), name=f"attn_residual-{il}")
        h = gr.op("mul", [gr.op(f"rms_norm {eps}", [res], (t_, E), name=f"norm-{il}"),
                          gr.leaf("param", f"blk.{il}.post_attention_norm.weight", (E,))], (t_, E), name=f"attn_post_norm-{il}")
        h = (_moe if moe else _dense)(gr, il, h, t_)
        x = gr.op("add", [h, res], (t_, E), name=f"l_out-{il}")
    h = gr.op("mul", [gr.op(f"rms_norm {eps}", [x], (t_, E), name="norm"), gr.leaf("param", "output_norm.weight", (E,))],
              (t_, E), name="h_nextn")
    h = gr.op("get_rows", [h, gr.leaf("input", "out_ids", (1,), "i32", label="out_ids")], (1, E), name="result_norm")
    return gr.text(gr.op("mul_mat", [gr.leaf("param", "output.weight", (VOCAB, E)), h], (1, VOCAB), name="result_output"))


def _gguf_weights(directory) -> dict[str, np.ndarray]:
    """The checkpoint's weights under their GGUF names, as llama.cpp's converter bakes them
    (1 + w for the zero-centred norms, -exp(A_log), the experts stacked); V heads stay grouped."""
    from safetensors.numpy import load_file

    hf = load_file(str(directory / "model.safetensors"))
    out = {"token_embd.weight": hf["model.embed_tokens.weight"], "output.weight": hf["lm_head.weight"],
           "output_norm.weight": 1 + hf["model.norm.weight"]}
    names = {"linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
             "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
             "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.norm.weight": "ssm_norm.weight",
             "linear_attn.out_proj.weight": "ssm_out.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight", "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
             "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight"}
    centred = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
               "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}
    for il in range(4):
        pre = f"model.layers.{il}."
        for hf_name, name in names.items():
            if pre + hf_name in hf:
                out[f"blk.{il}.{name}"] = hf[pre + hf_name]
        for hf_name, name in centred.items():
            if pre + hf_name in hf:
                out[f"blk.{il}.{name}"] = 1 + hf[pre + hf_name]
        if pre + "linear_attn.A_log" in hf:
            out[f"blk.{il}.ssm_a"] = -np.exp(hf[pre + "linear_attn.A_log"])
            out[f"blk.{il}.ssm_conv1d.weight"] = hf[pre + "linear_attn.conv1d.weight"][:, 0, :]
        for proj in ("gate", "up", "down"):
            if f"{pre}mlp.experts.0.{proj}_proj.weight" in hf:
                out[f"blk.{il}.ffn_{proj}_exps.weight"] = np.stack(
                    [hf[f"{pre}mlp.experts.{e}.{proj}_proj.weight"] for e in range(N_EXP)])
    return out


def _callback_sums(path) -> list[tuple[str, float]]:
    """(tensor name, sum) of every op llama-eval-callback logged, in order."""
    return [(row.name, row.sum) for row in parse_callback_log(path).rows]


@pytest.mark.parametrize("model", ["qwen3.5-tiny", "qwen3.5-moe-tiny"])
@pytest.mark.parametrize("entry, tokens", [("prefill", [256, 257, 78]), ("decode", [71])])
def test_qwen35_graph_and_values_equal_llama_cpp(model: str, entry: str, tokens: list[int]) -> None:
    from strata.dialects import parse_ir
    from strata.exporters.trace import parse_trace, trace_table
    from strata.semantics.op_interp import alloc_state, find_function, run_function
    from strata.targets.cpu import emit_cpu

    directory = LLAMACPP / model
    module = parse_ir(_qwen35_graph(len(tokens), "moe" in model))
    # The graph, row for row (op, tensor names, operand names and shapes).
    assert parse_trace(trace_table(module)) == parse_trace((directory / f"{entry}.txt").read_text())

    # The values: every op's sum as llama.cpp logged it (its KV cache is f16, as here).
    weights = _gguf_weights(directory)
    fn = find_function(module)
    state = alloc_state(fn)
    sums: list[float] = []

    def observe(op, value) -> None:
        if not op.name.startswith(("op.param", "op.state", "op.input")):
            sums.append(float(np.sum(value, dtype=np.float64)))

    logits = run_function(fn, weights, state, np.array(tokens), 0, observe=observe)
    logged = _callback_sums(directory / f"{entry}.callback.log")
    assert len(sums) == len(logged)
    for i, ((name, want), got) in enumerate(zip(logged, sums)):
        assert got == pytest.approx(want, rel=2e-3, abs=1e-3), f"row {i + 1}: {name}"

    # The CPU target computes the same logits and leaves the same state.
    ns: dict = {}
    exec(compile(emit_cpu(module), "model.py", "exec"), ns)  # noqa: S102
    cpu = ns["Model"](weights)
    np.testing.assert_allclose(cpu.main(tokens, 0), logits, rtol=1e-5, atol=1e-5)
    for name, buffer in state.items():
        np.testing.assert_allclose(getattr(cpu, name).astype(np.float32), buffer.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_every_ggml_op_of_the_reference_graphs_has_an_op() -> None:
    """Each ggml op in the four families' traces (Qwen3-MoE, Qwen3.5, Qwen3.5-MoE, Qwen3-Next)
    is the trace row of some op of the dialect."""
    from strata.dialects.op import Op
    from strata.exporters.trace import TRACE, parse_trace

    have = {TRACE[cls].ggml_op for cls in Op.operations} - {None}
    used = {row[1] for path in LLAMACPP.glob("*/*.txt") for row in parse_trace(path.read_text())}
    assert len(used) >= 25
    assert used <= have, sorted(used - have)
