"""The recognisers of convert-op-to-blueprint: one per kind of block (embedding, Gated
DeltaNet, attention, sparse MoE, dense FFN, head). Each finds its subgraphs in the op level
from their anchors (the params of its block instances, by the instance's path below the
layer, `attention.q_proj`, and the member's name; and the ops using them), reads the
hyperparameters and sizes off those ops, and emits the block's blueprint nodes in the block's
order. Which recogniser a layer's mixer and FFN take is their block kind (`MIXERS`, `FFNS`).

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


#: The kind of a layer's mixer (its `attention` sub) -> the layer kind it makes.
MIXERS = {"std.attn.grouped_query": "full_attention", "std.attn.gated": "full_attention",
          "std.attn.gated_delta_net": "linear_attention"}
#: The kind of a layer's FFN (its `mlp` sub) -> the blueprint block it makes.
FFNS = {"std.moe.sparse": "moe_ffn", "std.nn.mlp": "ffn"}


class Members:
    """The params below one block instance (a layer, the model), by the path of their instance
    below it: `p["attention.q_proj"]` is the `weight` of `<path>.attention.q_proj`, and
    `p["attention", "conv1d"]` the member `conv1d` of `<path>.attention`."""

    def __init__(self, graph: OpGraph, path: str):
        self.graph, self.path = graph, path

    def _where(self, key: str | tuple[str, str]) -> tuple[str, str]:
        sub, member = key if isinstance(key, tuple) else (key, "weight")
        return ".".join(p for p in (self.path, sub) if p), member

    def __getitem__(self, key: str | tuple[str, str]) -> O.ParamOp:
        return self.graph.param(*self._where(key))

    def __contains__(self, key: str | tuple[str, str]) -> bool:
        return bool(self.graph.params_of(*self._where(key)))

    def all(self, key: str | tuple[str, str]) -> list[O.ParamOp]:
        return self.graph.params_of(*self._where(key))

    def kind(self, sub: str) -> str | None:
        """The kind of the instance `sub` below this one."""
        return self.graph.kind(f"{self.path}.{sub}" if self.path else sub)


class Emitter:
    """Appends blueprint nodes to a block, naming nodes and edges, and records the weights
    the nodes read (with the op level's conversion of each)."""

    def __init__(self, block: Block, graph: OpGraph, dims: Dims, element: Attribute, mode: str):
        self.block, self.graph, self.dims, self.element, self.mode = block, graph, dims, element, mode
        self.weights: dict[str, WeightReadAttr] = {}
        #: weight name -> the GGUF block type it is stored in, for a weight read whole and as stored
        self.formats: dict[str, str] = {}
        self.states: dict[str, Attribute] = {}

    def weight(self, param: O.ParamOp | str, convert: str | None = None, args: Sequence[int] = ()) -> StringAttr:
        """A param (or its op-level name); its stored name, conversion and (in a tensor-parallel
        function) this rank's piece go to the weight table."""
        name = param if isinstance(param, str) else param.tensor_name.data
        p = self.graph.params.get(name)
        source = p.source.data if p is not None and p.source is not None else None
        if convert is None and p is not None and p.conversion is not None:
            convert, args = p.conversion
        piece = p.piece if p is not None else None
        split = (piece[0], piece[1], *piece[2]) if piece is not None else ()
        if source is not None or convert is not None or split:
            self.weights[name] = WeightReadAttr(name, source, convert, args, split)
        elif p is not None and p.format_name is not None and p.block_order is None:
            self.formats[name] = p.format_name
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


def embedding_table(g: OpGraph) -> O.ParamOp:
    """The token embedding's table (member `weight` of the model's `embedding`; a tied LM head
    reads the same member, as a second op.param or, after cse, the same one): the read the
    lookup gathers from."""
    tables = g.params_of("embedding", "weight")
    if not tables:
        return g.param("embedding", "weight")  # (the one-line error)
    looked_up = [t for t in tables if g.users(t.result, (O.GetRowsOp, O.GetRowsShardedOp))]
    return (looked_up or tables)[0]


def embed(em: Emitter, tokens: SSAValue) -> SSAValue:
    g = em.graph
    table = embedding_table(g)
    name = table.tensor_name.data
    ranks = ranks_of(em)
    lookup = O.GetRowsShardedOp if ranks > 1 else O.GetRowsOp
    if not g.users(table.result, lookup):
        raise ConversionError(f"convert-op-to-blueprint: {name} is gathered by no {lookup.name}")
    vocab, hidden = shape(table.result)
    if ranks > 1:  # the rank's rows of a vocabulary-split table: the ranks' lookups sum to the embedding
        em.dims.set("ranks", ranks, "op.ranks")
        vocab *= ranks
    em.dims.set("vocab", vocab, name)
    em.dims.set("hidden", hidden, name)
    (h,) = em.node(B.EmbedOp, "embed", "embed", [tokens], [("h", "n", "hidden", None)],
                   param=em.weight(table), **sharded_attrs(em))
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
    biases = [_bias_of(em.graph, p) for p in params]
    if any(b is not None for b in biases) and (len(params) > 1 or biases[0] is None):
        raise ConversionError(f"convert-op-to-blueprint: {block}.{name} merges projections with biases")
    (y,) = em.node(B.LinearOp, block, name, [x], [(out, "n", dim, element)],
                   param=em.weight(params[0].tensor_name.data), role=role,
                   concat=_strings(concat) if concat else None,
                   bias=em.weight(biases[0].tensor_name.data) if biases[0] is not None else None, **attrs)
    return y


def _bias_of(g: OpGraph, weight: O.ParamOp) -> O.ParamOp | None:
    """The bias beside a projection's weight: member `bias` of the weight's instance."""
    origin = O.origin_of(weight)
    found = g.params_of(origin.instance, "bias") if origin is not None else []
    return found[0] if found else None


def _f32() -> Attribute:
    from xdsl.dialects.builtin import f32

    return f32


def gdn(em: Emitter, layer: int, p: Members, h: SSAValue) -> SSAValue:
    """A Gated DeltaNet block: input norm, qkvz and ba projections, gates, conv (+ its
    snapshot outside prefill), l2 norm, recurrence, gated norm, out projection, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.gdn"
    net = g.reach(g.user(p["attention", "conv1d"].result, O.SsmConvOp, "op.ssm_conv").results[0],
                  O.GatedDeltaNetOp, "op.gated_delta_net")
    _, _, dk = shape(net.operands[0])
    _, hv, dv = shape(net.operands[2])
    # q and k may reach the op repeated to the value heads: the key heads come from the conv's
    # channels, 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim.
    channels = shape(p["attention", "conv1d"].result)[0]
    hk = (channels - hv * dv) // (2 * dk)
    d.set("lin_k_heads", hk, "op.ssm_conv's channels")
    d.set("lin_k_dim", dk, "op.gated_delta_net's q")
    d.set("lin_v_heads", hv, "op.gated_delta_net's v")
    d.set("lin_v_dim", dv, "op.gated_delta_net's v")
    xn = _norm(em, B.RmsNormOp, blk, "input_norm", p["attention_norm"], h)
    qkvz = _linear(em, blk, "qkvz", "qkvz", xn, list(_qkv_z(g, p)), "qkvz",
                   "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2")
    gates_point = {"gate": "softplus", "decay": "head" if shape(net.operands[3])[-1] == 1 else "channel"}
    if "attention.in_proj_ba" in p:
        # llama.cpp's ssm_ba holds [b | a] per key head; the node reads all b rows, then all a rows.
        r = hv // hk
        name = p["attention.in_proj_ba"].tensor_name.data
        d.check("lin_v_heads*2", shape(p["attention.in_proj_ba"].result)[0], name)
        g.mul_mat_of(p["attention.in_proj_ba"])
        (ba,) = em.node(B.LinearOp, blk, "ba", [xn], [("ba", "n", "lin_v_heads*2", _f32())],
                        param=em.weight(name, "ungroup_rows", [hk, 0, 2, r, r]), role="ba")
    else:
        ba = _linear(em, blk, "ba", "ba", xn, [p["attention.in_proj_b"], p["attention.in_proj_a"]], "ba",
                     "lin_v_heads*2", _f32())
    decay, beta = em.node(B.GdnGatesOp, blk, "gates", [ba],
                          [("decay", "n", "lin_v_heads", _f32()), ("beta", "n", "lin_v_heads", _f32())],
                          weights=_strings([em.weight(p["attention", "A_log"].tensor_name.data).data,
                                            em.weight(p["attention", "dt_bias"].tensor_name.data).data]),
                          point=gates_point)
    conv_op = g.user(p["attention", "conv1d"].result, O.SsmConvOp, "op.ssm_conv")
    concat = root(conv_op.operands[0]).owner
    if not isinstance(concat, O.ConcatOp):
        raise ConversionError(f"convert-op-to-blueprint: {blk}'s op.ssm_conv does not read [state | rows]")
    conv_slot = _state_of(em, concat.operands[0], f"{blk}'s op.ssm_conv")
    conv_dim = d.check("lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", shape(conv_op.results[0])[-1],
                       f"{blk}.conv")
    (conv,) = em.node(B.Conv1dUpdateOp, blk, "conv", [qkvz], [("conv", "n", conv_dim, _f32())],
                      param=em.weight(p["attention", "conv1d"].tensor_name.data),
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
    _, norm = g.normed(p["attention.norm"])
    (gated,) = em.node(B.GatedRmsNormOp, blk, "out_norm", [qkvz, core],
                       [("gated", "n", "lin_v_heads*lin_v_dim", None)],
                       param=em.weight(p["attention.norm"].tensor_name.data), eps=float_attr(norm, "eps"))
    o = _linear(em, blk, "out", "gdn_out", gated, [p["attention.out_proj"]], "o", "hidden")
    o = reduced(em, blk, g.mul_mat_of(p["attention.out_proj"]), o, "o_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, o], [("y", "n", "hidden", None)])
    return y


def _qkv_z(g: OpGraph, p: Members) -> tuple[O.ParamOp, O.ParamOp]:
    """The qkv and z projections' weights: their own Linears, or the two pieces llama.cpp's
    converter makes of one `in_proj_qkvz` (qkv: the piece whose product the conv reads)."""
    if "attention.in_proj_qkvz" not in p:
        return p["attention.in_proj_qkv"], p["attention.in_proj_z"]
    pieces = p.all("attention.in_proj_qkvz")
    conv_reads = [w for w in pieces if g.users(g.mul_mat_of(w).results[0], O.ConcatOp)]
    if len(pieces) != 2 or len(conv_reads) != 1:
        raise ConversionError("convert-op-to-blueprint: in_proj_qkvz is not read as two pieces, qkv (into the "
                              "conv) and z")
    qkv = conv_reads[0]
    return qkv, next(w for w in pieces if w is not qkv)


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


def attention(em: Emitter, layer: int, p: Members, h: SSAValue) -> SSAValue:
    """An attention block: input norm, q (with its gate), k, v, q/k norms, rope, KV write,
    attention over the cache, the output gate, o, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.attn"
    q_mm, k_mm, v_mm = (g.mul_mat_of(p[f"attention.{w}_proj"]) for w in "qkv")
    q_rope, k_rope = _rope_of(g, q_mm.results[0]), _rope_of(g, k_mm.results[0])
    _, heads, hd = shape(q_rope.operands[0])
    _, kv_heads, _ = shape(k_rope.operands[0])
    d.set("q_heads", heads, f"{blk}'s q rope")
    d.set("kv_heads", kv_heads, f"{blk}'s k rope")
    d.set("head_dim", hd, f"{blk}'s q rope")
    gated = shape(p["attention.q_proj"].result)[0] == 2 * heads * hd
    xn = _norm(em, B.RmsNormOp, blk, "input_norm", p["attention_norm"], h)
    q_dim = "q_heads*head_dim*2" if gated else "q_heads*head_dim"
    q = _linear(em, blk, "q", "q", xn, [p["attention.q_proj"]], "qg" if gated else "q", q_dim)
    gate = None
    if gated:
        q, gate = em.node(B.SplitOp, blk, "q_split", [q], [("q", "n", "q_heads*head_dim", None),
                                                            ("gate", "n", "q_heads*head_dim", None)],
                          point={"layout": "interleaved"})
    k = _linear(em, blk, "k", "k", xn, [p["attention.k_proj"]], "k", "kv_heads*head_dim")
    v = _linear(em, blk, "v", "v", xn, [p["attention.v_proj"]], "v", "kv_heads*head_dim")
    if "attention.q_norm" in p:
        q = _norm_heads(em, blk, "q_norm", p["attention.q_norm"], q, "qn", "q_heads*head_dim")
        k = _norm_heads(em, blk, "k_norm", p["attention.k_norm"], k, "kn", "kv_heads*head_dim")
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
    o = _linear(em, blk, "o", "o", a, [p["attention.o_proj"]], "o", "hidden")
    o = reduced(em, blk, g.mul_mat_of(p["attention.o_proj"]), o, "o_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, o], [("y", "n", "hidden", None)])
    return y


def _norm_heads(em: Emitter, blk: str, name: str, param: O.ParamOp, x: SSAValue, out: str, dim: str) -> SSAValue:
    _, rms = em.graph.normed(param)
    (y,) = em.node(B.QkNormOp, blk, name, [x], [(out, "n", dim, None)],
                   param=em.weight(param.tensor_name.data), eps=float_attr(rms, "eps"))
    return y


def _post_norm(em: Emitter, blk: str, p: Members, h: SSAValue) -> SSAValue:
    return _norm(em, B.RmsNormOp, blk, "post_norm", p["mlp_norm"], h)


def moe(em: Emitter, layer: int, p: Members, h: SSAValue) -> SSAValue:
    """A sparse MoE block: post norm, router, top-k, routed experts (gate-up, SiLU, down),
    the shared expert and its gate when there is one, the blend, residual add."""
    g, d, blk = em.graph, em.dims, f"l{layer}.moe_ffn"
    _, inter, _ = shape(p["mlp", "gate_exps"].result)
    # the router's experts: all of them (a rank's expert weights hold fewer with whole experts per rank)
    d.set("experts", shape(p["mlp.router"].result)[0], p["mlp.router"].tensor_name.data)
    d.set("moe_inter", inter, p["mlp", "gate_exps"].tensor_name.data)
    whole_experts = bool(g.users(p["mlp", "gate_exps"].result, O.MulMatIdShardedOp))
    by_rank = sharded_attrs(em) if whole_experts else {}
    gate_id = g.user(p["mlp", "gate_exps"].result, (O.MulMatIdOp, O.MulMatIdShardedOp), "op.mul_mat_id")
    d.set("top_k", shape(gate_id.operands[2])[-1], f"{blk}'s expert ids")
    logits_mm = g.mul_mat_of(p["mlp.router"])
    norm_topk = _normalises(g, logits_mm)
    xn = _post_norm(em, blk, p, h)
    (logits,) = em.node(B.RouterOp, blk, "router", [xn], [("router_logits", "n", "experts", None)],
                        param=em.weight(p["mlp.router"].tensor_name.data))
    topk_w, topk_id = em.node(B.TopKOp, blk, "top_k", [logits], [("topk_w", "n", "top_k", _f32()),
                                                                   ("topk_id", "n", "top_k", i32)],
                              norm=norm_topk)
    shared = p.kind("mlp.shared_expert") is not None
    (egu,) = em.node(B.ExpertGateUpOp, blk, "experts_gate_up", [xn, topk_id],
                     [("egu", "n*top_k", "moe_inter*2", None)],
                     param=em.weight(p["mlp", "gate_exps"].tensor_name.data),
                     concat=_strings([em.weight(p["mlp", "up_exps"].tensor_name.data).data]), **by_rank)
    sgu = None
    if shared:
        d.set("shared_inter", shape(p["mlp.shared_expert.gate"].result)[0],
              p["mlp.shared_expert.gate"].tensor_name.data)
        sgu = _linear(em, blk, "shared_gate_up", "shared_gate_up", xn,
                      [p["mlp.shared_expert.gate"], p["mlp.shared_expert.up"]], "sgu", "shared_inter*2")
    (eact,) = em.node(B.SiluMulOp, blk, "experts_act", [egu], [("eact", "n*top_k", "moe_inter", _f32())])
    (edown,) = em.node(B.ExpertDownOp, blk, "experts_down", [eact, topk_id], [("edown", "n*top_k", "hidden", None)],
                       param=em.weight(p["mlp", "down_exps"].tensor_name.data), **by_rank)
    blend_in = [topk_w, edown]
    point = None
    if sgu is not None:
        (sact,) = em.node(B.SiluMulOp, blk, "shared_act", [sgu], [("sact", "n", "shared_inter", _f32())])
        sdown = _linear(em, blk, "shared_down", "shared_down", sact, [p["mlp.shared_expert.down"]], "sdown", "hidden")
        sg = _linear(em, blk, "shared_gate", "shared_gate", xn, [p["mlp.shared_expert_gate"]], "sg", "1", _f32())
        blend_in += [sdown, sg]
        point = {"shared_gate": "sigmoid"}
    (f,) = em.node(B.BlendOp, blk, "blend", blend_in, [("f", "n", "hidden", None)], point=point)
    down_id = g.user(p["mlp", "down_exps"].result, (O.MulMatIdOp, O.MulMatIdShardedOp), "op.mul_mat_id")
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


def ffn(em: Emitter, layer: int, p: Members, h: SSAValue) -> SSAValue:
    """A dense SwiGLU FFN block: post norm, merged gate-up projection, SiLU, down, residual add."""
    d, blk = em.dims, f"l{layer}.ffn"
    d.set("inter", shape(p["mlp.gate"].result)[0], p["mlp.gate"].tensor_name.data)
    xn = _post_norm(em, blk, p, h)
    gu = _linear(em, blk, "gate_up", "gate_up", xn, [p["mlp.gate"], p["mlp.up"]], "gu", "inter*2")
    (act,) = em.node(B.SiluMulOp, blk, "act", [gu], [("act", "n", "inter", _f32())])
    dn = _linear(em, blk, "down", "down", act, [p["mlp.down"]], "d", "hidden")
    dn = reduced(em, blk, em.graph.mul_mat_of(p["mlp.down"]), dn, "d_sum")
    (y,) = em.node(B.ResidualAddOp, blk, "add", [h, dn], [("y", "n", "hidden", None)])
    return y


def head(em: Emitter, h: SSAValue) -> tuple[SSAValue, SSAValue]:
    """Final norm, LM head (its own weight or the tied embedding), greedy argmax."""
    g = em.graph
    norm_w = g.param("norm", "weight")
    mul, rms = g.normed(norm_w)
    (xn,) = em.node(B.FinalNormOp, "head", "final_norm", [h], [("xn", "n", "hidden", None)],
                    param=em.weight(norm_w), eps=float_attr(rms, "eps"))
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


def mixer_kind(p: Members) -> str:
    """The layer kind of a layer's mixer (its `attention` sub), by the mixer's block kind."""
    kind = p.kind("attention")
    if kind not in MIXERS:
        raise ConversionError(f"convert-op-to-blueprint: {p.path}.attention is a {kind or 'missing'} block, neither "
                              "attention nor a Gated DeltaNet")
    return MIXERS[kind]


def ffn_kind(p: Members) -> str:
    """The blueprint block of a layer's FFN (its `mlp` sub), by the FFN's block kind."""
    kind = p.kind("mlp")
    if kind not in FFNS:
        raise ConversionError(f"convert-op-to-blueprint: {p.path}.mlp is a {kind or 'missing'} block, not an FFN "
                              f"({', '.join(FFNS)})")
    return FFNS[kind]
