"""A hand-written fused blueprint modeled on the kbp-graph/v1 plan (Qwen3.6-35B-A3B decode, rows 1): the
embedding, Gated DeltaNet + MoE layers as the plan's layers 0..2, gated-attention + MoE layers as
its layer 3, the head. Node ids, ops, edge ids and types, precision, steps, points, state effects,
groups (rules, kernels, the cross-layer add + norm) are the plan's. Shared by the kbp-graph,
blueprint-collapse, Graphviz and table tests.

`blueprint_text(kinds)` builds the function for a list of layer kinds ("linear_attention" or
"full_attention"); `TEXT` is embed + 2 GDN + 1 attention + head. Each group yields exactly the
values used outside it (the yields are derived, not written).
"""

from __future__ import annotations

from xdsl.dialects import func

from strata.dialects import parse_ir


def E(rows: str, dim: str, el: str) -> str:
    return f'!blueprint.edge<"{rows}", "{dim}", {el}>'


H = E("n", "hidden", "bf16")
QKVZ = E("n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", "bf16")
CV = E("n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", "f32")
T = {
    "tok": E("n", "1", "i32"), "h": H, "xn": H, "qkvz": QKVZ, "ba": E("n", "lin_v_heads*2", "f32"),
    "decay": E("n", "lin_v_heads", "f32"), "beta": E("n", "lin_v_heads", "f32"), "conv": CV, "qkv": CV,
    "core": E("n", "lin_v_heads*lin_v_dim", "f32"), "gated": E("n", "lin_v_heads*lin_v_dim", "bf16"),
    "o": H, "y": H, "router_logits": E("n", "experts", "bf16"), "topk_w": E("n", "top_k", "f32"),
    "topk_id": E("n", "top_k", "i32"), "egu": E("n*top_k", "moe_inter*2", "bf16"),
    "eact": E("n*top_k", "moe_inter", "f32"), "edown": E("n*top_k", "hidden", "bf16"),
    "sgu": E("n", "shared_inter*2", "bf16"), "sact": E("n", "shared_inter", "f32"), "sdown": H,
    "sg": E("n", "1", "f32"), "f": H, "qg": E("n", "q_heads*head_dim*2", "bf16"),
    "q": E("n", "q_heads*head_dim", "bf16"), "gate": E("n", "q_heads*head_dim", "bf16"),
    "k": E("n", "kv_heads*head_dim", "bf16"), "v": E("n", "kv_heads*head_dim", "bf16"),
    "qn": E("n", "q_heads*head_dim", "bf16"), "kn": E("n", "kv_heads*head_dim", "bf16"),
    "qr": E("n", "q_heads*head_dim", "bf16"), "kr": E("n", "kv_heads*head_dim", "bf16"),
    "a": E("n", "q_heads*head_dim", "bf16"), "ag": E("n", "q_heads*head_dim", "bf16"),
    "logits": E("n", "vocab", "bf16"), "next": E("n", "1", "i32"),
}
FP8 = "fp8/block128x128"
LIN_FP8 = ["act bf16", f"weight {FP8}->bf16", "mma bf16*bf16", "accumulate f32", "scale f32"]
LIN_BF16 = ["act bf16", "weight bf16->bf16", "mma bf16*bf16", "accumulate f32", "scale none"]
DOWN_FP8 = ["act f32", f"weight {FP8}->f32", "mma f32*f32", "accumulate f32", "scale f32"]
C32 = ["compute f32"]
W8 = ("w8a16_m32", "w8a16_gemm_pipelined_m32::w8a16_gemm_pipelined_m32", "w8a16_gemm",
      "tensor_core:mma.sync.m16n8k16.bf16")
CROSS = ("cross_layer_add_norm", "residual_add_rms_norm_exact::residual_add_rms_norm_exact", "rms_norm", "memory",
         "bit_identical(residual_add_rms_norm_exact_microtest)")


def fmt(text: str) -> str:
    elem, _, block = text.partition("/block")
    sizes = ", ".join(block.split("x"))
    return f"#blueprint.format<{elem}, block = [{sizes}]>" if block else f"#blueprint.format<{elem}>"


class Builder:
    """Nodes and groups in body order; the text comes out with each group's yields derived."""

    def __init__(self) -> None:
        self.groups: list[tuple[tuple, list[dict]]] = []

    def group(self, rule: str, kernel: str | None, family: str | None, compute: str | None,
              numerics: str = "reference", where: str = "device") -> None:
        self.groups.append(((rule, kernel, family, compute, numerics, where), []))

    def node(self, nid: str, op: str, args: list[str], outs: list[str], prec: tuple, steps: list[str],
             weight: str = "", point: dict | None = None, effects: list[str] | None = None,
             out_prec: bool = True) -> None:
        """`outs`: edge ids (the value is %<id with dots as _>), typed by T[last segment]."""
        spec = dict(nid=nid, op=op, args=args, outs=outs, prec=prec, steps=steps, weight=weight,
                    point=point, effects=effects, out_prec=out_prec)
        self.groups[-1][1].append(spec)
        for o in outs:
            TYPES[v(o)] = T[o.rsplit(".", 1)[-1]]

    def text(self, kinds: list[str]) -> str:
        used_by: dict[str, set[int]] = {}
        for gi, (_, nodes) in enumerate(self.groups):
            for n in nodes:
                for a in n["args"]:
                    used_by.setdefault(v(a), set()).add(gi)
        lines = []
        for gi, ((rule, kernel, family, compute, numerics, where), nodes) in enumerate(self.groups):
            mine = {v(o) for n in nodes for o in n["outs"]}
            yields = [v(o) for n in nodes for o in n["outs"] if used_by.get(v(o), set()) - {gi}]
            ga = {"kernel": kernel, "family": family, "compute": compute, "numerics": numerics}
            attrs = ", ".join(f'{k} = "{x}"' for k, x in ga.items() if x is not None)
            res = ", ".join(yields)
            lines.append(f'  {res + " = " if yields else ""}blueprint.group "{rule}" on {where} attributes {{{attrs}}} {{')
            for n in nodes:
                lines.append("    " + node_line(n, mine))
            ys = f" {', '.join(y + '_' for y in yields)} : {', '.join(typ(y) for y in yields)}" if yields else ""
            lines.append(f"    blueprint.yield{ys}")
            lines.append(f"  }}{' : ' + ', '.join(typ(y) for y in yields) if yields else ''}")
        layers = ", ".join(f'"{k}"' for k in kinds)
        head = (f'func.func @decode(%tok: {T["tok"]}) attributes {{blueprint.mode = "decode", blueprint.rows = 1 : i64, '
                f'blueprint.layers = [{layers}], blueprint.model = "Qwen3.6-35B-A3B-FP8", '
                f'blueprint.recipe = "fp8-bf16head", blueprint.dims = #blueprint.dims<hidden = 2048, top_k = 8>}} {{')
        return "\n".join([head, *lines, "  func.return", "}", ""])


def v(edge_id: str) -> str:
    return "%" + edge_id.replace(".", "_")


TYPES: dict[str, str] = {"%tok": T["tok"]}


def typ(value: str) -> str:
    return TYPES[value]


def node_line(n: dict, mine: set[str]) -> str:
    outs = [v(o) for o in n["outs"]]
    names = [o + "_" if o in mine else o for o in outs]
    args = [v(a) if a != "tok" else "%tok" for a in n["args"]]
    arg_text = ", ".join(a + "_" if a in mine else a for a in args)
    w, a, o = n["prec"]
    fields = [f"weight = {fmt(w)}" if w else "", f"activation = {fmt(a)}" if a else "",
              f"output = {fmt(o)}" if o and n["out_prec"] else ""]
    attrs = [f'node = "{n["nid"]}"']
    if n["outs"]:
        attrs.append("edges = [" + ", ".join(f'"{o}"' for o in n["outs"]) + "]")
    if any(fields):
        attrs.append(f"precision = #blueprint.precision<{', '.join(f for f in fields if f)}>")
    attrs.append("steps = [" + ", ".join(f'#blueprint.step<{s.split(" ", 1)[0]}, "{s.split(" ", 1)[1]}">' for s in n["steps"]) + "]")
    if n["point"]:
        attrs.append("point = {" + ", ".join(f'{k} = "{x}"' for k, x in n["point"].items()) + "}")
    if n["effects"]:
        attrs.append("effects = [" + ", ".join(f"#blueprint.effect<{e}>" for e in n["effects"]) + "]")
    sig = ", ".join(typ(a) for a in args) + (" -> " + ", ".join(typ(o) for o in outs) if outs else "")
    lhs = ", ".join(names) + " = " if names else ""
    weight = f" {n['weight']}" if n["weight"] else ""
    return f"{lhs}blueprint.{n['op']} {arg_text}{weight} {{{', '.join(attrs)}}} : {sig}"


def _gdn(b: Builder, p: str, resid: str) -> None:
    n = b.node
    n(f"{p}.input_norm", "rms_norm", [resid], [f"{p}.xn"], (None, "bf16", "bf16"), C32, 'weight "ln1"')
    b.group(*W8)
    n(f"{p}.qkvz", "linear", [f"{p}.xn"], [f"{p}.qkvz"], (FP8, "bf16", "bf16"), LIN_FP8, 'weight "qkvz" role "qkvz"')
    b.group("gdn_ba_gates_gemv_per_row", "ssm_preprocess::dense_gemv_ba_gates", "gdn_ba_gates_gemv", "cuda_core")
    pt = {"gate": "softplus", "decay": "head"}
    n(f"{p}.ba", "linear", [f"{p}.xn"], [f"{p}.ba"], ("bf16", "bf16", "f32"), LIN_BF16, 'weight "ba" role "ba"', pt)
    n(f"{p}.gates", "gdn_gates", [f"{p}.ba"], [f"{p}.decay", f"{p}.beta"], (None, "f32", None), C32,
      'weights ["A_log", "dt_bias"]', pt)
    b.group("gdn_conv_l2_f32_per_row", "causal_conv1d::causal_conv1d_update_l2norm_f32", "causal_conv1d_l2norm", "cuda_core")
    n(f"{p}.conv", "conv1d_update", [f"{p}.qkvz"], [f"{p}.conv"], (None, "bf16", "f32"), ["state f32", *C32],
      'weight "conv"', effects=["conv:update"])
    n(f"{p}.conv_ckpt", "state_snapshot", [f"{p}.conv"], [], (None, "f32", None), ["state f32"], effects=["conv:snapshot"])
    n(f"{p}.l2", "l2_norm", [f"{p}.conv"], [f"{p}.qkv"], (None, "f32", "f32"), C32)
    b.group("gdn_recurrence_f32_per_row", "gated_delta_rule::gated_delta_rule_decode_f32", "gdn_recurrence", "cuda_core")
    n(f"{p}.recur", "gdn_recurrence", [f"{p}.decay", f"{p}.beta", f"{p}.qkv"], [f"{p}.core"], (None, "f32", "f32"),
      ["state f32", *C32], point={"decay": "head", "gate_act": "silu"}, effects=["h:update"])
    b.group("gdn_out_norm_f32_per_row", "norm::gated_rms_norm_f32_input", "gated_rms_norm", "memory")
    n(f"{p}.out_norm", "gated_rms_norm", [f"{p}.qkvz", f"{p}.core"], [f"{p}.gated"], (None, "f32", "bf16"), C32,
      'weight "gnorm"')
    b.group(*W8)
    n(f"{p}.out", "linear", [f"{p}.gated"], [f"{p}.o"], (FP8, "bf16", "bf16"), LIN_FP8, 'weight "out" role "gdn_out"')


def _attn(b: Builder, p: str, resid: str) -> None:
    n = b.node
    n(f"{p}.input_norm", "rms_norm", [resid], [f"{p}.xn"], (None, "bf16", "bf16"), C32, 'weight "ln1"')
    for proj, out, grp in (("q", "qg", True), ("q_split", None, False), ("k", "k", True), ("v", "v", True)):
        if proj == "q_split":
            b.group("deinterleave_qg", "ssm_preprocess::deinterleave_qg", "deinterleave_qg", "memory")
            n(f"{p}.q_split", "split", [f"{p}.qg"], [f"{p}.q", f"{p}.gate"], (None, "bf16", None), ["move bf16"],
              point={"layout": "interleaved"})
            continue
        b.group(*W8)
        n(f"{p}.{proj}", "linear", [f"{p}.xn"], [f"{p}.{out}"], (FP8, "bf16", "bf16"), LIN_FP8,
          f'weight "{proj}" role "{proj}"')
    for x in ("q", "k"):
        b.group("qk_norm_rows", "norm::rms_norm", "rms_norm", "memory")
        n(f"{p}.{x}_norm", "qk_norm", [f"{p}.{x}"], [f"{p}.{x}n"], (None, "bf16", "bf16"), C32, f'weight "{x}_norm"')
    b.group("rope_mrope_interleaved", "rope_mrope_interleaved::rope_forward_mrope_interleaved", "rope", "memory")
    n(f"{p}.rope", "rope", [f"{p}.qn", f"{p}.kn"], [f"{p}.qr", f"{p}.kr"], (None, "bf16", None), C32)
    b.group("kv_write_bf16", "reshape_and_cache::reshape_and_cache_flash", "kv_write", "memory")
    n(f"{p}.kv_write", "kv_write", [f"{p}.kr", f"{p}.v"], [], (None, "bf16", None), ["cache bf16"],
      effects=["k:write", "v:write"])
    b.group("paged_attention_bf16", "paged_decode::paged_decode_attn", "paged_decode_attn", "cuda_core")
    n(f"{p}.attend", "paged_attention", [f"{p}.qr", f"{p}.kr", f"{p}.v"], [f"{p}.a"], (None, "bf16", "bf16"),
      ["cache bf16", "scores f32", "softmax f32", "accumulate f32"], effects=["k:read", "v:read"])
    b.group("sigmoid_gate_mul", "residual_add::sigmoid_gate_mul", "sigmoid_gate_mul", "memory")
    n(f"{p}.gate_mul", "sigmoid_gate_mul", [f"{p}.a", f"{p}.gate"], [f"{p}.ag"], (None, "bf16", "bf16"), C32)
    b.group(*W8)
    n(f"{p}.o", "linear", [f"{p}.ag"], [f"{p}.o"], (FP8, "bf16", "bf16"), LIN_FP8, 'weight "o" role "o"')


def _moe(b: Builder, p: str, mixer: str, resid: str, mixer_out: str) -> None:
    """The mixer's residual add + post norm, then the MoE up to (not including) its residual add."""
    n = b.node
    b.group("residual_add_post_norm", "norm::residual_add_rms_norm", "rms_norm", "memory")
    n(f"{mixer}.add", "residual_add", [resid, mixer_out], [f"{mixer}.y"], (None, "bf16", "bf16"), C32)
    n(f"{p}.post_norm", "rms_norm", [f"{mixer}.y"], [f"{p}.xn"], (None, "f32", "bf16"), C32, 'weight "ln2"')
    b.group("moe_router_gemv", "gemv::dense_gemv_bf16", "dense_bf16", "cuda_core")
    n(f"{p}.router", "router", [f"{p}.xn"], [f"{p}.router_logits"], ("bf16", "bf16", "bf16"), LIN_BF16, 'weight "router"')
    b.group("moe_topk_softmax", "moe_topk::moe_topk_softmax", "moe_topk", "memory")
    n(f"{p}.top_k", "top_k", [f"{p}.router_logits"], [f"{p}.topk_w", f"{p}.topk_id"], (None, "bf16", None), ["score f32"])
    b.group("moe_gate_up_shared_fp8", "moe_shared_expert_fused_fp8::moe_expert_gate_up_shared_fp8", "moe_fp8_1row", "cuda_core")
    n(f"{p}.experts_gate_up", "expert_gate_up", [f"{p}.xn", f"{p}.topk_id"], [f"{p}.egu"], (FP8, "bf16", "bf16"),
      ["gather bf16", *LIN_FP8], 'weight "gate_up"')
    n(f"{p}.shared_gate_up", "linear", [f"{p}.xn"], [f"{p}.sgu"], (FP8, "bf16", "bf16"), LIN_FP8,
      'weight "sh_gate_up" role "shared_gate_up"')
    b.group("moe_silu_down_shared_fp8", "moe_shared_expert_fused_fp8::moe_expert_silu_down_shared_fp8", "moe_fp8_1row", "cuda_core")
    n(f"{p}.experts_act", "silu_mul", [f"{p}.egu"], [f"{p}.eact"], (None, "bf16", "f32"), C32)
    n(f"{p}.experts_down", "expert_down", [f"{p}.eact", f"{p}.topk_id"], [f"{p}.edown"], (FP8, "f32", "bf16"), DOWN_FP8,
      'weight "down"')
    n(f"{p}.shared_act", "silu_mul", [f"{p}.sgu"], [f"{p}.sact"], (None, "bf16", "f32"), C32)
    n(f"{p}.shared_down", "linear", [f"{p}.sact"], [f"{p}.sdown"], (FP8, "f32", "bf16"), DOWN_FP8,
      'weight "sh_down" role "shared_down"')
    b.group("moe_weighted_sum_blend", "moe_expert_gemv::moe_weighted_sum_blend", "moe_blend", "cuda_core")
    pt = {"shared_gate": "sigmoid"}
    n(f"{p}.shared_gate", "linear", [f"{p}.xn"], [f"{p}.sg"], ("bf16", "bf16", "f32"), LIN_BF16,
      'weight "sh_gate" role "shared_gate"', pt)
    n(f"{p}.blend", "blend", [f"{p}.topk_w", f"{p}.edown", f"{p}.sdown", f"{p}.sg"], [f"{p}.f"],
      (None, "bf16", "bf16"), ["scatter f32", "combine f32"], point=pt)


def blueprint_text(kinds: list[str]) -> str:
    b = Builder()
    b.group("embed_row_copy", None, None, None, where="host")
    b.node("embed.embed", "embed", ["tok"], ["embed.h"], (None, None, "bf16"), ["gather bf16"], 'weight "embed"')
    resid = "embed.h"
    for i, kind in enumerate(kinds):
        mixer = f"l{i}.gdn" if kind == "linear_attention" else f"l{i}.attn"
        if i == 0:
            b.group("input_norm_residual", "norm::rms_norm_residual", "rms_norm", "memory")
        (_gdn if kind == "linear_attention" else _attn)(b, mixer, resid)
        _moe(b, f"l{i}.moe_ffn", mixer, resid, f"{mixer}.o")
        if i + 1 < len(kinds):
            b.group(*CROSS)
        else:
            b.group("ffn_residual_add", "residual_add::bf16_residual_add", "residual_add", "memory")
        b.node(f"l{i}.moe_ffn.add", "residual_add", [f"{mixer}.y", f"l{i}.moe_ffn.f"], [f"l{i}.moe_ffn.y"],
               (None, "bf16", "bf16"), C32)
        resid = f"l{i}.moe_ffn.y"
    b.group("final_norm", "norm::rms_norm", "rms_norm", "memory")
    b.node("head.final_norm", "final_norm", [resid], ["head.xn"], (None, "bf16", "bf16"), C32, 'weight "norm"')
    b.group("lm_head_bf16_gemv", "gemv::dense_gemv_bf16", "dense_bf16", "cuda_core")
    b.node("head.lm_head", "lm_head", ["head.xn"], ["head.logits"], ("bf16", "bf16", "bf16"), LIN_BF16, 'weight "lm_head"')
    b.group("argmax_host", None, None, None, where="host")
    b.node("head.argmax", "argmax", ["head.logits"], ["head.next"], (None, "bf16", "i32"), ["compare bf16"])
    return b.text(kinds)


KINDS = ["linear_attention", "linear_attention", "full_attention"]
TEXT = blueprint_text(KINDS)


def blueprint_fn(text: str = TEXT) -> func.FuncOp:
    return next(op for op in parse_ir(text).walk() if isinstance(op, func.FuncOp))
