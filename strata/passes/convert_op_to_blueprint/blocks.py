"""The recognisers of convert-op-to-blueprint: one per kind of block (embedding, Gated
DeltaNet, attention, sparse MoE, dense FFN, head). Each finds its subgraphs in the op level
from their anchors (params and the ops using them), reads the hyperparameters and sizes
off those ops, and emits the block's blueprint nodes in the block's order.

Node ids are kbp-graph/v1's (`l0.gdn.qkvz`), edge ids too (`l0.gdn.xn`): `<block>.<name>`,
with blocks `embed`, `l<i>.gdn`, `l<i>.attn`, `l<i>.moe_ffn`, `l<i>.ffn` and `head`.
Edge dims are expressions over kbp-graph/v1's symbols, each checked against the op level's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    f64,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, SSAValue

from strata.dialects import blueprint as B
from strata.dialects import op as O
from strata.dialects.blueprint.attrs import EdgeType, StateEffectAttr
from strata.dialects.blueprint.facts import WeightReadAttr
from strata.passes.convert_op_to_blueprint.collectives import gathered, ranks_of, reduced, sharded_attrs
from strata.passes.convert_op_to_blueprint.graph import (
    ConversionError,
    Dims,
    OpGraph,
    float_attr,
    root,
    shape,
)


def _strings(items: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(s) for s in items])


class Emitter:
    """Appends blueprint nodes to a block, naming nodes and edges, and records the weights
    the nodes read (with the op level's conversion of each)."""

    def __init__(self, block: Block, graph: OpGraph, dims: Dims, element: Attribute, mode: str):
        self.block, self.graph, self.dims, self.element, self.mode = block, graph, dims, element, mode
        self.weights: dict[str, WeightReadAttr] = {}
        self.states: dict[str, Attribute] = {}

    def weight(self, name: str, convert: str | None = None, args: Sequence[int] = ()) -> StringAttr:
        """A param by its op-level name; its stored name, conversion and (in a tensor-parallel
        function) this rank's piece go to the weight table."""
        p = self.graph.params.get(name)
        source = p.source.data if p is not None and p.source is not None else None
        if convert is None and p is not None and p.conversion is not None:
            convert, args = p.conversion
        piece = p.piece if p is not None else None
        split = (piece[0], piece[1], *piece[2]) if piece is not None else ()
        if source is not None or convert is not None or split:
            self.weights[name] = WeightReadAttr(name, source, convert, args, split)
        return StringAttr(name)

    def node(self, cls: type[B.NodeOp], block: str, name: str, operands: Sequence[SSAValue],
             outs: Sequence[tuple[str, str, str, Attribute | None]], **attrs: Any) -> list[SSAValue]:
        """Emit `<block>.<name>`; `outs` are (edge name, rows, dim, element or None: the model's)."""
        attributes: dict[str, Attribute] = {"node": StringAttr(f"{block}.{name}")}
        if outs:
            attributes["edges"] = _strings([f"{block}.{o[0]}" for o in outs])
        for key, value in attrs.items():
            if value is None:
                continue
            if isinstance(value, Attribute):
                attributes[key] = value
            elif isinstance(value, bool):
                if value:
                    attributes[key] = UnitAttr()
            elif isinstance(value, float):
                attributes[key] = FloatAttr(value, f64)
            elif isinstance(value, int):
                attributes[key] = IntegerAttr(value, i64)
            elif isinstance(value, str):
                attributes[key] = StringAttr(value)
            elif isinstance(value, dict):
                attributes[key] = DictionaryAttr({k: StringAttr(v) for k, v in value.items()})
            else:
                raise TypeError(f"attribute {key}: {value!r}")
        types = [EdgeType(rows, dim, el if el is not None else self.element) for _, rows, dim, el in outs]
        op = cls.create(operands=list(operands), result_types=types, attributes=attributes)
        for r, o in zip(op.results, outs):
            r.name_hint = f"{block}.{o[0]}"
        self.block.add_op(op)
        return list(op.results)


def _effects(*pairs: tuple[str, str]) -> ArrayAttr[StateEffectAttr]:
    return ArrayAttr([StateEffectAttr(s, e) for s, e in pairs])


def _state_of(em: "Emitter", value: SSAValue, what: str) -> str:
    state = em.graph.state_read(value)
    if state is None:
        raise ConversionError(f"convert-op-to-blueprint: {what} reads no op.state")
    name = state.state_name.data
    em.states[name] = state.result.type
    return name


# ---------------------------------------------------------------------------------------------
# Blocks


def embed(em: Emitter, tokens: SSAValue) -> SSAValue:
    g = em.graph
    table = g.params.get("token_embd.weight")
    if table is None:
        raise ConversionError("convert-op-to-blueprint: no token_embd.weight")
    ranks = ranks_of(em)
    lookup = O.GetRowsShardedOp if ranks > 1 else O.GetRowsOp
    if not any(g.users(t.result, lookup) for t in g.aliases["token_embd.weight"]):
        raise ConversionError(f"convert-op-to-blueprint: token_embd.weight is gathered by no {lookup.name}")
    vocab, hidden = shape(table.result)
    if ranks > 1:  # the rank's rows of a vocabulary-split table: the ranks' lookups sum to the embedding
        em.dims.set("ranks", ranks, "op.ranks")
        vocab *= ranks
    em.dims.set("vocab", vocab, "token_embd.weight")
    em.dims.set("hidden", hidden, "token_embd.weight")
    (h,) = em.node(B.EmbedOp, "embed", "embed", [tokens], [("h", "n", "hidden", None)],
                   param=em.weight("token_embd.weight"), **sharded_attrs(em))
    if ranks > 1:
        h = reduced(em, "embed", g.user(table.result, O.GetRowsShardedOp, "op.get_rows_sharded"), h, "h_sum")
    return h


def _norm(em: Emitter, cls, block: str, name: str, param: O.ParamOp, x: SSAValue, out: str = "xn") -> SSAValue:
    _, rms = em.graph.normed(param)
    (y,) = em.node(cls, block, name, [x], [(out, "n", "hidden", None)],
                   param=em.weight(param.tensor_name.data), eps=float_attr(rms, "eps"))
    return y


def _linear(em: Emitter, block: str, name: str, role: str, x: SSAValue, params: Sequence[O.ParamOp],
            out: str, dim: str, element: Attribute | None = None, **attrs: Any) -> SSAValue:
    """A projection of `x` by the row-concatenation of `params` (several: a merged projection)."""
    rows = sum(shape(p.result)[0] for p in params)
    em.dims.check(dim, rows, f"{block}.{name} ({' + '.join(p.tensor_name.data for p in params)})")
    for p in params:
        em.graph.mul_mat_of(p)  # each must be a projection at the op level
    concat = [em.weight(p.tensor_name.data).data for p in params[1:]]
    biases = [em.graph.params.get(p.tensor_name.data.removesuffix(".weight") + ".bias") for p in params]
    if any(b is not None for b in biases) and (len(params) > 1 or biases[0] is None):
        raise ConversionError(f"convert-op-to-blueprint: {block}.{name} merges projections with biases")
    (y,) = em.node(B.LinearOp, block, name, [x], [(out, "n", dim, element)],
                   param=em.weight(params[0].tensor_name.data), role=role,
                   concat=_strings(concat) if concat else None,
                   bias=em.weight(biases[0].tensor_name.data) if biases[0] is not None else None, **attrs)
    return y


def _f32() -> Attribute:
    from xdsl.dialects.builtin import f32

    return f32


def gdn(em: Emitter, layer: int, p: dict[str, O.ParamOp], h: SSAValue) -> SSAValue:
    """A Gated DeltaNet block: input norm, qkvz and ba projections, gates, conv (+ its
    snapshot outside prefill), l2 norm, recurrence, gated norm, out projection, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.gdn"
    net = g.reach(g.user(p["ssm_conv1d.weight"].result, O.SsmConvOp, "op.ssm_conv").results[0],
                  O.GatedDeltaNetOp, "op.gated_delta_net")
    _, _, dk = shape(net.operands[0])
    _, hv, dv = shape(net.operands[2])
    # q and k may reach the op repeated to the value heads: the key heads come from the conv's
    # channels, 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim.
    channels = shape(p["ssm_conv1d.weight"].result)[0]
    hk = (channels - hv * dv) // (2 * dk)
    d.set("lin_k_heads", hk, "op.ssm_conv's channels")
    d.set("lin_k_dim", dk, "op.gated_delta_net's q")
    d.set("lin_v_heads", hv, "op.gated_delta_net's v")
    d.set("lin_v_dim", dv, "op.gated_delta_net's v")
    xn = _norm(em, B.RmsNormOp, blk, "input_norm", p["attn_norm.weight"], h)
    qkvz = _linear(em, blk, "qkvz", "qkvz", xn, [p["attn_qkv.weight"], p["attn_gate.weight"]], "qkvz",
                   "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2")
    gates_point = {"gate": "softplus", "decay": "head" if shape(net.operands[3])[-1] == 1 else "channel"}
    if "ssm_ba.weight" in p:
        # llama.cpp's ssm_ba holds [b | a] per key head; the node reads all b rows, then all a rows.
        r = hv // hk
        name = p["ssm_ba.weight"].tensor_name.data
        d.check("lin_v_heads*2", shape(p["ssm_ba.weight"].result)[0], name)
        g.mul_mat_of(p["ssm_ba.weight"])
        (ba,) = em.node(B.LinearOp, blk, "ba", [xn], [("ba", "n", "lin_v_heads*2", _f32())],
                        param=em.weight(name, "ungroup_rows", [hk, 0, 2, r, r]), role="ba")
    else:
        ba = _linear(em, blk, "ba", "ba", xn, [p["ssm_beta.weight"], p["ssm_alpha.weight"]], "ba",
                     "lin_v_heads*2", _f32())
    decay, beta = em.node(B.GdnGatesOp, blk, "gates", [ba],
                          [("decay", "n", "lin_v_heads", _f32()), ("beta", "n", "lin_v_heads", _f32())],
                          weights=_strings([em.weight(p["ssm_a"].tensor_name.data).data,
                                            em.weight(p["ssm_dt.bias"].tensor_name.data).data]),
                          point=gates_point)
    conv_op = g.user(p["ssm_conv1d.weight"].result, O.SsmConvOp, "op.ssm_conv")
    concat = root(conv_op.operands[0]).owner
    if not isinstance(concat, O.ConcatOp):
        raise ConversionError(f"convert-op-to-blueprint: {blk}'s op.ssm_conv does not read [state | rows]")
    conv_slot = _state_of(em, concat.operands[0], f"{blk}'s op.ssm_conv")
    conv_dim = d.check("lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", shape(conv_op.results[0])[-1],
                       f"{blk}.conv")
    (conv,) = em.node(B.Conv1dUpdateOp, blk, "conv", [qkvz], [("conv", "n", conv_dim, _f32())],
                      param=em.weight(p["ssm_conv1d.weight"].tensor_name.data),
                      effects=_effects(("conv", "update")), slots=_strings([conv_slot]))
    if em.mode != "prefill":
        em.node(B.StateSnapshotOp, blk, "conv_ckpt", [conv], [],
                effects=_effects(("conv", "snapshot")), slots=_strings([conv_slot]))
    q_norm = root(net.operands[0]).owner  # op.scale(op.rms_norm(view)), maybe repeated to the value heads
    while isinstance(q_norm, O.RepeatOp):
        q_norm = root(q_norm.operands[0]).owner
    if not isinstance(q_norm, O.ScaleOp) or not isinstance(root(q_norm.operands[0]).owner, O.RmsNormOp):
        raise ConversionError(f"convert-op-to-blueprint: {blk}'s q is not l2-normalised (op.scale of op.rms_norm)")
    l2_eps = float_attr(root(q_norm.operands[0]).owner, "eps")
    (qkv,) = em.node(B.L2NormOp, blk, "l2", [conv], [("qkv", "n", conv_dim, _f32())], eps=l2_eps)
    h_slot = _state_of(em, net.operands[5], f"{blk}'s op.gated_delta_net")
    (core,) = em.node(B.GdnRecurrenceOp, blk, "recur", [decay, beta, qkv],
                      [("core", "n", "lin_v_heads*lin_v_dim", _f32())],
                      effects=_effects(("h", "update")), slots=_strings([h_slot]),
                      point={"decay": gates_point["decay"], "gate_act": "silu"},
                      grouped=_grouped(net, hk, hv))
    _, norm = g.normed(p["ssm_norm.weight"])
    (gated,) = em.node(B.GatedRmsNormOp, blk, "out_norm", [qkvz, core],
                       [("gated", "n", "lin_v_heads*lin_v_dim", None)],
                       param=em.weight(p["ssm_norm.weight"].tensor_name.data), eps=float_attr(norm, "eps"))
    o = _linear(em, blk, "out", "gdn_out", gated, [p["ssm_out.weight"]], "o", "hidden")
    o = reduced(em, blk, g.mul_mat_of(p["ssm_out.weight"]), o, "o_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, o], [("y", "n", "hidden", None)])
    return y


def _grouped(net: O.GatedDeltaNetOp, hk: int, hv: int) -> bool:
    """Whether value head h reads key head h // (hv / hk) (else h % hk, ggml's default). Keys
    repeated to the value heads before the op show the order in their [.., hk, hv / hk, d] form."""
    if "grouped" in net.attributes:
        return True
    q = net.operands[0]
    if shape(q)[-2] == hk:
        return False
    src = q.owner.operands[0] if isinstance(q.owner, O.ReshapeOp) else q
    dims = shape(src)
    return len(dims) >= 3 and dims[-3] == hk and dims[-2] == hv // hk


def _rope_of(g: OpGraph, value: SSAValue) -> O.RopeOp:
    """The rope of a q or k projection (after its bias and norm, if any)."""
    return g.reach(value, O.RopeOp, "op.rope", depth=8)  # type: ignore[return-value]


def attention(em: Emitter, layer: int, p: dict[str, O.ParamOp], h: SSAValue) -> SSAValue:
    """An attention block: input norm, q (with its gate), k, v, q/k norms, rope, KV write,
    attention over the cache, the output gate, o, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.attn"
    q_mm, k_mm, v_mm = (g.mul_mat_of(p[f"attn_{w}.weight"]) for w in "qkv")
    q_rope, k_rope = _rope_of(g, q_mm.results[0]), _rope_of(g, k_mm.results[0])
    _, heads, hd = shape(q_rope.operands[0])
    _, kv_heads, _ = shape(k_rope.operands[0])
    d.set("q_heads", heads, f"{blk}'s q rope")
    d.set("kv_heads", kv_heads, f"{blk}'s k rope")
    d.set("head_dim", hd, f"{blk}'s q rope")
    gated = shape(p["attn_q.weight"].result)[0] == 2 * heads * hd
    xn = _norm(em, B.RmsNormOp, blk, "input_norm", p["attn_norm.weight"], h)
    q_dim = "q_heads*head_dim*2" if gated else "q_heads*head_dim"
    q = _linear(em, blk, "q", "q", xn, [p["attn_q.weight"]], "qg" if gated else "q", q_dim)
    gate = None
    if gated:
        q, gate = em.node(B.SplitOp, blk, "q_split", [q], [("q", "n", "q_heads*head_dim", None),
                                                            ("gate", "n", "q_heads*head_dim", None)],
                          point={"layout": "interleaved"})
    k = _linear(em, blk, "k", "k", xn, [p["attn_k.weight"]], "k", "kv_heads*head_dim")
    v = _linear(em, blk, "v", "v", xn, [p["attn_v.weight"]], "v", "kv_heads*head_dim")
    if "attn_q_norm.weight" in p:
        q = _norm_heads(em, blk, "q_norm", p["attn_q_norm.weight"], q, "qn", "q_heads*head_dim")
        k = _norm_heads(em, blk, "k_norm", p["attn_k_norm.weight"], k, "kn", "kv_heads*head_dim")
    rope = {key: q_rope.attributes[key] for key in ("mode", "n_dims", "freq_base", "freq_scale", "sections")
            if key in q_rope.attributes}
    if q_rope.freq_factors is not None:  # llama3 scaling: each pair's frequency divided by its factor
        table = root(q_rope.freq_factors).owner
        if not isinstance(table, O.ConstantOp):
            raise ConversionError(f"convert-op-to-blueprint: {blk}'s rope frequency factors are not a constant")
        rope["freq_factors"] = DenseArrayBase.from_list(f64, [float(v) for v in table.value.get_values()])
    qr, kr = em.node(B.RopeOp, blk, "rope", [q, k], [("qr", "n", "q_heads*head_dim", None),
                                                      ("kr", "n", "kv_heads*head_dim", None)], **rope)
    k_write = g.reach(k_rope.results[0], O.SetRowsOp, "KV cache write (op.set_rows) of K", depth=4)
    v_write = g.reach(v_mm.results[0], O.SetRowsOp, "KV cache write (op.set_rows) of V", depth=5)
    k_slot = _state_of(em, k_write.operands[0], f"{blk}'s K write")
    v_slot = _state_of(em, v_write.operands[0], f"{blk}'s V write")
    slots = _strings([k_slot, v_slot])
    em.node(B.KvWriteOp, blk, "kv_write", [kr, v], [], effects=_effects(("k", "write"), ("v", "write")),
            slots=slots)
    flash = g.users(q_rope.results[0], O.FlashAttnExtOp)
    if not flash:
        raise ConversionError(f"convert-op-to-blueprint: {blk} is not lowered with flash attention")
    (a,) = em.node(B.PagedAttentionOp, blk, "attend", [qr, kr, v], [("a", "n", "q_heads*head_dim", None)],
                   effects=_effects(("k", "read"), ("v", "read")), slots=slots,
                   scale=float_attr(flash[0], "scale"))
    if gate is not None:
        (a,) = em.node(B.SigmoidGateMulOp, blk, "gate_mul", [gate, a], [("ag", "n", "q_heads*head_dim", None)])
    o = _linear(em, blk, "o", "o", a, [p["attn_output.weight"]], "o", "hidden")
    o = reduced(em, blk, g.mul_mat_of(p["attn_output.weight"]), o, "o_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, o], [("y", "n", "hidden", None)])
    return y


def _norm_heads(em: Emitter, blk: str, name: str, param: O.ParamOp, x: SSAValue, out: str, dim: str) -> SSAValue:
    _, rms = em.graph.normed(param)
    (y,) = em.node(B.QkNormOp, blk, name, [x], [(out, "n", dim, None)],
                   param=em.weight(param.tensor_name.data), eps=float_attr(rms, "eps"))
    return y


def _post_norm(em: Emitter, blk: str, p: dict[str, O.ParamOp], h: SSAValue) -> SSAValue:
    for key in ("post_attention_norm.weight", "ffn_norm.weight"):
        if key in p:
            return _norm(em, B.RmsNormOp, blk, "post_norm", p[key], h)
    raise ConversionError(f"convert-op-to-blueprint: {blk} has no FFN norm weight")


def moe(em: Emitter, layer: int, p: dict[str, O.ParamOp], h: SSAValue) -> SSAValue:
    """A sparse MoE block: post norm, router, top-k, routed experts (gate-up, SiLU, down),
    the shared expert and its gate when there is one, the blend, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.moe_ffn"
    _, inter, _ = shape(p["ffn_gate_exps.weight"].result)
    # the router's experts: all of them (a rank's expert weights hold fewer with whole experts per rank)
    d.set("experts", shape(p["ffn_gate_inp.weight"].result)[0], p["ffn_gate_inp.weight"].tensor_name.data)
    d.set("moe_inter", inter, p["ffn_gate_exps.weight"].tensor_name.data)
    whole_experts = bool(g.users(p["ffn_gate_exps.weight"].result, O.MulMatIdShardedOp))
    by_rank = sharded_attrs(em) if whole_experts else {}
    gate_id = g.user(p["ffn_gate_exps.weight"].result, (O.MulMatIdOp, O.MulMatIdShardedOp), "op.mul_mat_id")
    d.set("top_k", shape(gate_id.operands[2])[-1], f"{blk}'s expert ids")
    logits_mm = g.mul_mat_of(p["ffn_gate_inp.weight"])
    norm_topk = _normalises(g, logits_mm)
    xn = _post_norm(em, blk, p, h)
    (logits,) = em.node(B.RouterOp, blk, "router", [xn], [("router_logits", "n", "experts", None)],
                        param=em.weight(p["ffn_gate_inp.weight"].tensor_name.data))
    topk_w, topk_id = em.node(B.TopKOp, blk, "top_k", [logits], [("topk_w", "n", "top_k", _f32()),
                                                                   ("topk_id", "n", "top_k", i32)],
                              norm=norm_topk)
    shared = "ffn_gate_shexp.weight" in p
    (egu,) = em.node(B.ExpertGateUpOp, blk, "experts_gate_up", [xn, topk_id],
                     [("egu", "n*top_k", "moe_inter*2", None)],
                     param=em.weight(p["ffn_gate_exps.weight"].tensor_name.data),
                     concat=_strings([em.weight(p["ffn_up_exps.weight"].tensor_name.data).data]), **by_rank)
    sgu = None
    if shared:
        d.set("shared_inter", shape(p["ffn_gate_shexp.weight"].result)[0], "ffn_gate_shexp.weight")
        sgu = _linear(em, blk, "shared_gate_up", "shared_gate_up", xn,
                      [p["ffn_gate_shexp.weight"], p["ffn_up_shexp.weight"]], "sgu", "shared_inter*2")
    (eact,) = em.node(B.SiluMulOp, blk, "experts_act", [egu], [("eact", "n*top_k", "moe_inter", _f32())])
    (edown,) = em.node(B.ExpertDownOp, blk, "experts_down", [eact, topk_id], [("edown", "n*top_k", "hidden", None)],
                       param=em.weight(p["ffn_down_exps.weight"].tensor_name.data), **by_rank)
    blend_in = [topk_w, edown]
    point = None
    if sgu is not None:
        (sact,) = em.node(B.SiluMulOp, blk, "shared_act", [sgu], [("sact", "n", "shared_inter", _f32())])
        sdown = _linear(em, blk, "shared_down", "shared_down", sact, [p["ffn_down_shexp.weight"]], "sdown", "hidden")
        sg = _linear(em, blk, "shared_gate", "shared_gate", xn, [p["ffn_gate_inp_shexp.weight"]], "sg", "1", _f32())
        blend_in += [sdown, sg]
        point = {"shared_gate": "sigmoid"}
    (f,) = em.node(B.BlendOp, blk, "blend", blend_in, [("f", "n", "hidden", None)], point=point)
    down_id = g.user(p["ffn_down_exps.weight"].result, (O.MulMatIdOp, O.MulMatIdShardedOp), "op.mul_mat_id")
    f = reduced(em, blk, down_id, f, "f_sum", depth=d["top_k"] + 8)  # past the slots' views and sums
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, f], [("y", "n", "hidden", None)])
    return y


def _normalises(g: OpGraph, logits_mm) -> bool:
    """Whether the top-k weights are renormalised: divided by their sum clamped to [lo, hi]
    with lo < hi (llama.cpp divides by a sum clamped to [1, 1] when it does not)."""
    try:
        clamp = g.reach(logits_mm.results[0], O.ClampOp, "op.clamp", depth=10)
    except ConversionError:
        return False
    return float_attr(clamp, "min") < float_attr(clamp, "max")


def ffn(em: Emitter, layer: int, p: dict[str, O.ParamOp], h: SSAValue) -> SSAValue:
    """A dense SwiGLU FFN block: post norm, merged gate-up projection, SiLU, down, residual add."""
    d, blk = em.dims, f"l{layer}.ffn"
    d.set("inter", shape(p["ffn_gate.weight"].result)[0], p["ffn_gate.weight"].tensor_name.data)
    xn = _post_norm(em, blk, p, h)
    gu = _linear(em, blk, "gate_up", "gate_up", xn, [p["ffn_gate.weight"], p["ffn_up.weight"]], "gu", "inter*2")
    (act,) = em.node(B.SiluMulOp, blk, "act", [gu], [("act", "n", "inter", _f32())])
    dn = _linear(em, blk, "down", "down", act, [p["ffn_down.weight"]], "d", "hidden")
    dn = reduced(em, blk, em.graph.mul_mat_of(p["ffn_down.weight"]), dn, "d_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, dn], [("y", "n", "hidden", None)])
    return y


def head(em: Emitter, h: SSAValue) -> tuple[SSAValue, SSAValue]:
    """Final norm, LM head (its own weight or the tied embedding), greedy argmax."""
    g = em.graph
    norm_w = g.params.get("output_norm.weight")
    if norm_w is None:
        raise ConversionError("convert-op-to-blueprint: no output_norm.weight")
    mul, rms = g.normed(norm_w)
    (xn,) = em.node(B.FinalNormOp, "head", "final_norm", [h], [("xn", "n", "hidden", None)],
                    param=em.weight("output_norm.weight"), eps=float_attr(rms, "eps"))
    mm = g.reach(mul.results[0], O.MulMatOp, "LM head projection", depth=4)
    w = root(mm.operands[0]).owner
    if not isinstance(w, O.ParamOp):
        raise ConversionError("convert-op-to-blueprint: the final norm feeds no projection by a param")
    d_vocab = shape(w.results[0])[0]
    split = bool(g.users(mm.results[0], O.AllGatherOp))  # each rank's piece of the vocabulary
    cols = "vocab / ranks" if split else "vocab"
    em.dims.check(cols, d_vocab, w.tensor_name.data)  # type: ignore[attr-defined]
    (logits,) = em.node(B.LmHeadOp, "head", "lm_head", [xn], [("logits", "n", cols, None)],
                        param=em.weight(w.tensor_name.data))  # type: ignore[attr-defined]
    logits = gathered(em, "head", mm, logits, "vocab")
    (nxt,) = em.node(B.ArgmaxOp, "head", "argmax", [logits], [("next", "n", "1", i32)])
    return nxt, logits


def mixer_kind(p: dict[str, O.ParamOp]) -> str:
    if "ssm_conv1d.weight" in p:
        return "linear_attention"
    if "attn_q.weight" in p:
        return "full_attention"
    raise ConversionError(f"convert-op-to-blueprint: a layer with params {sorted(p)[:6]}... is neither "
                          "attention nor a Gated DeltaNet")


def ffn_kind(p: dict[str, O.ParamOp]) -> str:
    if "ffn_gate_inp.weight" in p:
        return "moe_ffn"
    if "ffn_gate.weight" in p:
        return "ffn"
    raise ConversionError(f"convert-op-to-blueprint: a layer with params {sorted(p)[:6]}... has no FFN")
