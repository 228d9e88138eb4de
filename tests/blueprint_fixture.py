"""A hand-written blueprint function shaped like the kbp-graph/v1 plan (Qwen3.6-35B-A3B decode), for
any list of layer kinds: node ids, ops, edge ids and dims as in the plan, nodes at top level in op
order (no groups), as the converter emits them before blueprint-assign-precision.

    blueprint_text(["linear_attention", "full_attention"])            # the plan's layers 0 and 3
    blueprint_text(["attention"] * 2, ffn="dense", qk_norm=True)      # a Qwen3-like dense model

Layer kinds: `linear_attention` (Gated DeltaNet block `lN.gdn`), `full_attention` (Qwen3.6's
gated attention `lN.attn`: q projection with its gate, q_split, q/k norms, rope, kv_write,
paged attention, sigmoid_gate_mul), `attention` (a dense family's attention: no split or gate,
q/k norms if `qk_norm`). `ffn`: `moe_shared` (Qwen3.6's MoE with a shared expert, `lN.moe_ffn`),
`moe` (Qwen3-MoE, no shared expert: no shared gate_up/act/down; the dialect's `blend` always
takes a shared row and gate, so this variant feeds it the post-norm rows and a `shared_gate` linear
as stand-ins, for grouping tests only), `dense` (SwiGLU `lN.ffn`: post_norm, gate_up, act, down, add).
"""

from __future__ import annotations

from collections.abc import Sequence

KINDS = ("linear_attention", "full_attention", "attention")
FFNS = ("moe_shared", "moe", "dense")

GDN_CONV = "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim"
GDN_QKVZ = "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2"


def E(rows: str, dim: str, el: str = "bf16") -> str:
    return f'!blueprint.edge<"{rows}", "{dim}", {el}>'


H = E("n", "hidden")


def _v(edge_id: str) -> str:
    return "%" + edge_id.replace(".", "_")


class _Writer:
    def __init__(self, effects: bool):
        self.lines: list[str] = []
        self.effects = effects

    def node(self, outs: Sequence[tuple[str, str]], op: str, operands: Sequence[str], node: str, *,
             middle: str = "", attrs: Sequence[str] = (), effects: Sequence[str] = (), slots: Sequence[str] = (),
             point: dict[str, str] | None = None, in_types: Sequence[str] = ()) -> None:
        """One node: `outs` are (edge id, type); `operands` edge ids (`%arg` names kept)."""
        a = [f'node = "{node}"']
        if outs:
            a.append("edges = [" + ", ".join(f'"{e}"' for e, _ in outs) + "]")
        if effects and self.effects:
            a.append("effects = [" + ", ".join(f"#blueprint.effect<{e}>" for e in effects) + "]")
            if slots:
                a.append("slots = [" + ", ".join(f'"{s}"' for s in slots) + "]")
        if point:
            a.append("point = {" + ", ".join(f'{k} = "{v}"' for k, v in point.items()) + "}")
        a.extend(attrs)
        lhs = ", ".join(_v(e) for e, _ in outs)
        ops = ", ".join(o if o.startswith("%") else _v(o) for o in operands)
        sig = ", ".join(in_types)
        res = ", ".join(t for _, t in outs)
        text = f"blueprint.{op} {ops}{middle} {{{', '.join(a)}}} : {sig}" + (f" -> {res}" if outs else "")
        self.lines.append(f"  {lhs} = {text}" if outs else f"  {text}")


def _gdn(w: _Writer, i: int, x: str) -> str:
    b, p = f"l{i}.gdn", f"model.layers.{i}.linear_attn"
    Z, BA, HV, CV, V = E("n", GDN_QKVZ), E("n", "lin_v_heads*2", "f32"), E("n", "lin_v_heads", "f32"), \
        E("n", GDN_CONV, "f32"), E("n", "lin_v_heads*lin_v_dim", "f32")
    w.node([(f"{b}.xn", H)], "rms_norm", [x], f"{b}.input_norm", middle=f' weight "model.layers.{i}.input_layernorm.weight"', in_types=[H])
    w.node([(f"{b}.qkvz", Z)], "linear", [f"{b}.xn"], f"{b}.qkvz", middle=f' weight "{p}.in_proj_qkvz.weight" role "qkvz"', in_types=[H])
    w.node([(f"{b}.ba", BA)], "linear", [f"{b}.xn"], f"{b}.ba", middle=f' weight "{p}.in_proj_ba.weight" role "ba"', in_types=[H])
    w.node([(f"{b}.decay", HV), (f"{b}.beta", HV)], "gdn_gates", [f"{b}.ba"], f"{b}.gates",
           middle=f' weights ["{p}.A_log", "{p}.dt_bias"]', point={"gate": "softplus", "decay": "head"}, in_types=[BA])
    w.node([(f"{b}.conv", CV)], "conv1d_update", [f"{b}.qkvz"], f"{b}.conv", middle=f' weight "{p}.conv1d.weight"',
           effects=["conv:update"], slots=[f"conv_l{i}"], in_types=[Z])
    w.node([], "state_snapshot", [f"{b}.conv"], f"{b}.conv_ckpt", effects=["conv:snapshot"], slots=[f"conv_l{i}"], in_types=[CV])
    w.node([(f"{b}.qkv", CV)], "l2_norm", [f"{b}.conv"], f"{b}.l2", in_types=[CV])
    w.node([(f"{b}.core", V)], "gdn_recurrence", [f"{b}.decay", f"{b}.beta", f"{b}.qkv"], f"{b}.recur",
           effects=["h:update"], slots=[f"ssm_l{i}"], point={"decay": "head", "gate_act": "silu"}, in_types=[HV, HV, CV])
    G = E("n", "lin_v_heads*lin_v_dim")
    w.node([(f"{b}.gated", G)], "gated_rms_norm", [f"{b}.qkvz", f"{b}.core"], f"{b}.out_norm",
           middle=f' weight "{p}.norm.weight"', in_types=[Z, V])
    w.node([(f"{b}.o", H)], "linear", [f"{b}.gated"], f"{b}.out", middle=f' weight "{p}.out_proj.weight" role "gdn_out"', in_types=[G])
    w.node([(f"{b}.y", H)], "residual_add", [x, f"{b}.o"], f"{b}.add", in_types=[H, H])
    return f"{b}.y"


def _attn(w: _Writer, i: int, x: str, gated: bool, qk_norm: bool, rope_mode: str) -> str:
    b, p = f"l{i}.attn", f"model.layers.{i}.self_attn"
    Q, QG, KV = E("n", "q_heads*head_dim"), E("n", "q_heads*head_dim*2"), E("n", "kv_heads*head_dim")
    w.node([(f"{b}.xn", H)], "rms_norm", [x], f"{b}.input_norm", middle=f' weight "model.layers.{i}.input_layernorm.weight"', in_types=[H])
    if gated:
        w.node([(f"{b}.qg", QG)], "linear", [f"{b}.xn"], f"{b}.q", middle=f' weight "{p}.q_proj.weight" role "q"', in_types=[H])
        w.node([(f"{b}.q", Q), (f"{b}.gate", Q)], "split", [f"{b}.qg"], f"{b}.q_split", point={"layout": "interleaved"}, in_types=[QG])
    else:
        w.node([(f"{b}.q", Q)], "linear", [f"{b}.xn"], f"{b}.q", middle=f' weight "{p}.q_proj.weight" role "q"', in_types=[H])
    w.node([(f"{b}.k", KV)], "linear", [f"{b}.xn"], f"{b}.k", middle=f' weight "{p}.k_proj.weight" role "k"', in_types=[H])
    w.node([(f"{b}.v", KV)], "linear", [f"{b}.xn"], f"{b}.v", middle=f' weight "{p}.v_proj.weight" role "v"', in_types=[H])
    q, k = f"{b}.q", f"{b}.k"
    if qk_norm:
        w.node([(f"{b}.qn", Q)], "qk_norm", [q], f"{b}.q_norm", middle=f' weight "{p}.q_norm.weight"', in_types=[Q])
        w.node([(f"{b}.kn", KV)], "qk_norm", [k], f"{b}.k_norm", middle=f' weight "{p}.k_norm.weight"', in_types=[KV])
        q, k = f"{b}.qn", f"{b}.kn"
    w.node([(f"{b}.qr", Q), (f"{b}.kr", KV)], "rope", [q, k], f"{b}.rope", attrs=[f'mode = "{rope_mode}"'], in_types=[Q, KV])
    w.node([], "kv_write", [f"{b}.kr", f"{b}.v"], f"{b}.kv_write", effects=["k:write", "v:write"],
           slots=[f"k_l{i}", f"v_l{i}"], in_types=[KV, KV])
    w.node([(f"{b}.a", Q)], "paged_attention", [f"{b}.qr", f"{b}.kr", f"{b}.v"], f"{b}.attend",
           effects=["k:read", "v:read"], slots=[f"k_l{i}", f"v_l{i}"], in_types=[Q, KV, KV])
    a = f"{b}.a"
    if gated:
        w.node([(f"{b}.ag", Q)], "sigmoid_gate_mul", [f"{b}.gate", a], f"{b}.gate_mul", in_types=[Q, Q])
        a = f"{b}.ag"
    w.node([(f"{b}.o", H)], "linear", [a], f"{b}.o", middle=f' weight "{p}.o_proj.weight" role "o"', in_types=[Q])
    w.node([(f"{b}.y", H)], "residual_add", [x, f"{b}.o"], f"{b}.add", in_types=[H, H])
    return f"{b}.y"


def _moe(w: _Writer, i: int, x: str, shared: bool) -> str:
    b, p = f"l{i}.moe_ffn", f"model.layers.{i}.mlp"
    L, TW, TI = E("n", "experts"), E("n", "top_k", "f32"), E("n", "top_k", "i32")
    GU, ACT, ED = E("n*top_k", "moe_inter*2"), E("n*top_k", "moe_inter", "f32"), E("n*top_k", "hidden")
    SGU, SACT, SG = E("n", "shared_inter*2"), E("n", "shared_inter", "f32"), E("n", "1", "f32")
    w.node([(f"{b}.xn", H)], "rms_norm", [x], f"{b}.post_norm", middle=f' weight "model.layers.{i}.post_attention_layernorm.weight"', in_types=[H])
    w.node([(f"{b}.router_logits", L)], "router", [f"{b}.xn"], f"{b}.router", middle=f' weight "{p}.gate.weight"', in_types=[H])
    w.node([(f"{b}.topk_w", TW), (f"{b}.topk_id", TI)], "top_k", [f"{b}.router_logits"], f"{b}.top_k", in_types=[L])
    w.node([(f"{b}.egu", GU)], "expert_gate_up", [f"{b}.xn", f"{b}.topk_id"], f"{b}.experts_gate_up",
           middle=f' weight "{p}.experts.gate_up_proj"', in_types=[H, TI])
    if shared:
        w.node([(f"{b}.sgu", SGU)], "linear", [f"{b}.xn"], f"{b}.shared_gate_up",
               middle=f' weight "{p}.shared_expert.gate_up_proj.weight" role "shared_gate_up"', in_types=[H])
    w.node([(f"{b}.eact", ACT)], "silu_mul", [f"{b}.egu"], f"{b}.experts_act", in_types=[GU])
    w.node([(f"{b}.edown", ED)], "expert_down", [f"{b}.eact", f"{b}.topk_id"], f"{b}.experts_down",
           middle=f' weight "{p}.experts.down_proj"', in_types=[ACT, TI])
    if not shared:
        # No shared expert: blend's shared operands are stand-ins (see the module doc).
        w.node([(f"{b}.sg", SG)], "linear", [f"{b}.xn"], f"{b}.shared_gate",
               middle=f' weight "{p}.shared_expert_gate.weight" role "shared_gate"', in_types=[H])
        w.node([(f"{b}.f", H)], "blend", [f"{b}.topk_w", f"{b}.edown", f"{b}.xn", f"{b}.sg"], f"{b}.blend",
               in_types=[TW, ED, H, SG])
    else:
        w.node([(f"{b}.sact", SACT)], "silu_mul", [f"{b}.sgu"], f"{b}.shared_act", in_types=[SGU])
        w.node([(f"{b}.sdown", H)], "linear", [f"{b}.sact"], f"{b}.shared_down",
               middle=f' weight "{p}.shared_expert.down_proj.weight" role "shared_down"', in_types=[SACT])
        w.node([(f"{b}.sg", SG)], "linear", [f"{b}.xn"], f"{b}.shared_gate",
               middle=f' weight "{p}.shared_expert_gate.weight" role "shared_gate"', in_types=[H])
        w.node([(f"{b}.f", H)], "blend", [f"{b}.topk_w", f"{b}.edown", f"{b}.sdown", f"{b}.sg"], f"{b}.blend",
               point={"shared_gate": "sigmoid"}, in_types=[TW, ED, H, SG])
    w.node([(f"{b}.y", H)], "residual_add", [x, f"{b}.f"], f"{b}.add", in_types=[H, H])
    return f"{b}.y"


def _dense_ffn(w: _Writer, i: int, x: str) -> str:
    b, p = f"l{i}.ffn", f"model.layers.{i}.mlp"
    GU, ACT = E("n", "inter*2"), E("n", "inter", "f32")
    w.node([(f"{b}.xn", H)], "rms_norm", [x], f"{b}.post_norm", middle=f' weight "model.layers.{i}.post_attention_layernorm.weight"', in_types=[H])
    w.node([(f"{b}.gu", GU)], "linear", [f"{b}.xn"], f"{b}.gate_up", middle=f' weight "{p}.gate_up_proj.weight" role "gate_up"', in_types=[H])
    w.node([(f"{b}.act", ACT)], "silu_mul", [f"{b}.gu"], f"{b}.act", in_types=[GU])
    w.node([(f"{b}.down", H)], "linear", [f"{b}.act"], f"{b}.down", middle=f' weight "{p}.down_proj.weight" role "down"', in_types=[ACT])
    w.node([(f"{b}.y", H)], "residual_add", [x, f"{b}.down"], f"{b}.add", in_types=[H, H])
    return f"{b}.y"


def blueprint_text(layers: Sequence[str], *, ffn: str = "moe_shared", mode: str = "decode", rows: int = 1,
                   effects: bool = True, qk_norm: bool = True, rope_mode: str = "imrope") -> str:
    """The function's IR text (a module holding `func.func @decode`). `effects=False` leaves out
    every `effects`/`slots` attribute (blueprint-place-state then sets the effects)."""
    assert all(k in KINDS for k in layers) and ffn in FFNS
    w = _Writer(effects)
    tok = E("n", "1", "i32")
    w.node([("embed.h", H)], "embed", ["%tok"], "embed.embed", middle=' weight "model.embed_tokens.weight"', in_types=[tok])
    x = "embed.h"
    for i, kind in enumerate(layers):
        if kind == "linear_attention":
            x = _gdn(w, i, x)
        else:
            x = _attn(w, i, x, gated=kind == "full_attention", qk_norm=qk_norm or kind == "full_attention",
                      rope_mode=rope_mode)
        x = _dense_ffn(w, i, x) if ffn == "dense" else _moe(w, i, x, shared=ffn == "moe_shared")
    V = E("n", "vocab")
    w.node([("head.xn", H)], "final_norm", [x], "head.final_norm", middle=' weight "model.norm.weight"', in_types=[H])
    w.node([("head.logits", V)], "lm_head", ["head.xn"], "head.lm_head", middle=' weight "lm_head.weight"', in_types=[H])
    w.node([("head.next", tok)], "argmax", ["head.logits"], "head.argmax", in_types=[V])
    kinds = ", ".join(f'"{k}"' for k in layers)
    attrs = (f'attributes {{"blueprint.mode" = "{mode}", "blueprint.rows" = {rows} : i64, '
             f'"blueprint.layers" = [{kinds}]}}')
    body = "\n".join(w.lines)
    return (f"func.func @decode(%tok: {tok}) -> {tok} {attrs} {{\n{body}\n"
            f"  func.return %head_next : {tok}\n}}\n")


#: The groups the kbp-graph/v1 plan of Qwen3.6-35B-A3B gives each layer, by its template (layer i > 0; layer 0 adds
#: `input_norm_residual`), and the prologue and head.
SEED_GROUPS_PER_LAYER = {"linear_attention": 13, "full_attention": 18}
SEED_GROUPS_OUTSIDE = ["embed_row_copy", "input_norm_residual", "final_norm", "lm_head_bf16_gemv", "argmax_host"]
