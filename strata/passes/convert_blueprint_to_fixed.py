"""convert-blueprint-to-fixed{ranges=FILE}: a dense Llama prefill blueprint as a `fixed` function.

    module = blueprint_of(model, "prefill", n, "w4a16", collapse=False)
    fixed = convert_blueprint_to_fixed(module, read_tensor_ranges(RANGES), weights=model.open_weights())
    run_pipeline(fixed, 'assign-frac-bits{headroom=2 ranges="RANGES"}')

The blueprint function (one, prefill from position 0, groups or not) becomes `@<entry>(%tokens:
tensor<n x i32>, %cos, %sin: tensor<n x head_dim/2 x !fixed.fp32<30>>) -> logits`, node by node,
each kind by its own rewrite pattern (groups are inlined first, in program order):

    embed                 fixed.param (table) + fixed.embed                     node embd
    rms_norm, final_norm  fixed.param (weight) + fixed.rms_norm                 attn_norm-L, ffn_norm-L, result_norm
    linear (int4 weight)  fixed.param int4 parts + fixed.matmul_w4a16           Qcur-L, Kcur-L, Vcur-L (their
                          (gate_up: one op per weight, gate then up)            mul_mat), the attention
                                                                                output's, ffn_gate-L, ffn_up-L,
                                                                                ffn_out-L
    linear / lm_head      fixed.param + fixed.matmul                            result_output
      (float weight)
    rope (neox)           fixed.rope for q and for k                            Qcur-L, Kcur-L (their rope)
    kv_write              dropped: attention reads this prefill's k and v rows (no cache)
    paged_attention       fixed.attention (causal, grouped heads)               kqv_out-L
    residual_add          fixed.add                                             ffn_inp-L, l_out-L
    silu_mul              fixed.silu (gate) + fixed.mul (by up)                 ffn_swiglu-L
    argmax                dropped: the function returns the logits

A gate_up projection is two values where the blueprint has one edge: its pattern hands both to
silu_mul through a `builtin.unrealized_conversion_cast`, which silu_mul's pattern consumes.

With `ctx` > 0 (a persistent int8 KV cache of ctx positions, Chimera's decode; `strata.dialects.
fixed_kv`) the function is `@<entry>(%tokens, %pos: tensor<1xi32>, %cos, %sin)`: the rows are
at positions pos.., and each layer's attention becomes

    k, v rows             fixed.quant_int8 (one scale per head: max|k| / 127 of the calibrated
                          `Kcur-L` rope range, max|v| / 127 of `Vcur-L`; a fixed.const each)
                          + fixed.cache_write into fixed.kv_state "cache_k_lL" / "cache_v_lL"
                          [ctx, kv_heads*head_dim] i8
    paged_attention       fixed.dequant_int8 of each whole cache (k at the frac of max|k|, v of
                          max|v|) + fixed.cache_attention (query row i sees keys 0..pos+i)

(the ranges have one range per tensor, so every head of a layer gets that tensor's scale).

`node` is the op's key in the ranges file (`strata calibrate`'s `tensors`): the last tensor of
that llama.cpp name (and op kind where the name has several: `op.mul_mat` for a projection,
`op.rope` for its rope); the attention's output projection, unnamed at the op level, is the
first `op.mul_mat` after `kqv_out-L`. A missing one is an error naming it. Result formats are
Chimera's (frac = 31 - ceil(log2 max|y|)) without headroom; `assign-frac-bits` then sets the
node'd ones with it. Formats decided here: silu(gate) from the gate's range, whose silu lies in
[-0.2785, max(0, max gate)]; attention scores (sfrac) from max|q| * max|k| * head_dim (Cauchy-
Schwarz); weights, given `weights` (an object with `.get(name)`), from their own max|w| (norm
weights, the embedding table, float projections), int4 scales from their max, the dequantized
int4 weights (`wfrac`) from max|w| * 16/15 (a dequantized value exceeds |w| by at most half a
step); without weights: norm weights FixedPoint32<24>, the table at `embd`'s frac, scales and
int4 weights 31, float projections 31 (the interpreter refuses a weight its format cannot hold).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    Signedness,
    StringAttr,
    TensorType,
    UnrealizedConversionCastOp,
    f64,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from strata.dialects import blueprint as B
from strata.dialects import fixed as FX
from strata.dialects import fixed_kv as KV
from strata.errors import StrataError, one_line_errors
from strata.ir.checks import shape_of
from strata.ir.int4 import dequantize_int4_block, quantize_int4_block
from strata.passes.assign_frac_bits import frac_bits, read_tensor_ranges
from strata.passes.options import StrataPass

U8 = IntegerType(8, Signedness.UNSIGNED)
I8 = IntegerType(8)
SILU_MIN = -0.27846454276  # min over x of x * sigmoid(x)


class ConvertFixedError(StrataError):
    """A blueprint the fixed level cannot take."""


def _t(shape, frac: int) -> TensorType:
    return FX.fixed_tensor(list(shape), max(0, min(31, frac)))


@dataclass
class FixedConversion:
    """What the node patterns of one function share: the ranges, the weights, the function's
    dims and rows, the fixed function's arguments, and what the conversion collects (the first
    rope's theta, the logits)."""

    tensors: Mapping[str, Any]
    weights: Any
    dims: dict[str, int]
    rows: int
    ctx: int
    tokens: SSAValue
    pos: SSAValue | None
    cos: SSAValue
    sin: SSAValue
    theta: list[float] = field(default_factory=list)
    logits: list[SSAValue] = field(default_factory=list)

    # ranges -----------------------------------------------------------------------------------

    def key(self, name: str, op: str | None = None, node: str = "") -> str:
        found = [k for k, r in self.tensors.items() if r.get("name") == name and (op is None or r.get("op") == op)]
        if not found:
            what = f"tensor named '{name}'" + (f" ({op})" if op else "")
            raise ConvertFixedError(f"convert-blueprint-to-fixed: the ranges have no {what} for blueprint node '{node}'")
        return found[-1]

    def after(self, name: str, op: str, node: str) -> str:
        keys = list(self.tensors)
        start = keys.index(self.key(name, node=node))
        for k in keys[start + 1:]:
            if self.tensors[k].get("op") == op:
                return k
        raise ConvertFixedError(f"convert-blueprint-to-fixed: the ranges have no {op} after '{name}' for blueprint node '{node}'")

    def span(self, key: str) -> tuple[float, float]:
        r = self.tensors[key]
        return float(r["min"]), float(r["max"])

    def frac(self, key: str) -> int:
        return frac_bits(*self.span(key))

    def dim(self, name: str) -> int:
        if name not in self.dims:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: the blueprint has no dim '{name}'")
        return self.dims[name]

    # weights ----------------------------------------------------------------------------------

    def weight(self, name: str) -> np.ndarray | None:
        if self.weights is None:
            return None
        w = self.weights[name] if isinstance(self.weights, Mapping) else self.weights.get(name)
        return None if w is None else np.asarray(w, np.float32)

    def param(self, rw: PatternRewriter, name: str, shape, frac: int) -> SSAValue:
        return _add(rw, FX.ParamOp.create(attributes={"param": StringAttr(name)}, result_types=[_t(shape, frac)]))

    def value_param(self, rw: PatternRewriter, name: str, shape, default: int) -> SSAValue:
        w = self.weight(name)
        return self.param(rw, name, shape, default if w is None else frac_bits(-float(np.abs(w).max()), 0.0))

    def int4(self, rw: PatternRewriter, name: str, n: int, k: int, block: int) -> tuple[list[SSAValue], int]:
        nb = -(-k // block)
        w = self.weight(name)
        sfrac, wfrac = 31, 31
        if w is not None:
            q, scale, zp = quantize_int4_block(w, block)
            sfrac = frac_bits(0.0, float(scale.max()))
            wfrac = frac_bits(0.0, float(np.abs(dequantize_int4_block(q, scale, zp, block)).max()) * 16 / 15)
        parts = []
        for part, ty in (("int4_b", TensorType(U8, [n, nb, block // 2])), ("int4_scales", _t((n, nb), sfrac)),
                         ("int4_zp", TensorType(U8, [n, -(-nb // 2)]))):
            parts.append(_add(rw, FX.ParamOp.create(
                attributes={"param": StringAttr(name), "part": StringAttr(part), "block": IntegerAttr(block, i64)},
                result_types=[ty])))
        return parts, wfrac

    # ops --------------------------------------------------------------------------------------

    def projection(self, rw: PatternRewriter, x: SSAValue, name: str, n: int, fmt, key: str) -> SSAValue:
        k = shape_of(x)[1]
        attrs = {"node": StringAttr(key)}
        out = _t((self.rows, n), self.frac(key))
        if fmt is not None and fmt.elem.data == "int4":
            block = fmt.block_sizes[0] if fmt.block_sizes else 128
            parts, wfrac = self.int4(rw, name, n, k, block)
            return _add(rw, FX.MatmulW4A16Op.create(operands=[x, *parts], result_types=[out],
                                                     attributes=attrs | {"wfrac": IntegerAttr(wfrac, i64)}))
        w = self.value_param(rw, name, (n, k), 31)
        return _add(rw, FX.MatmulOp.create(operands=[x, w], result_types=[out], attributes=attrs))

    def cached(self, rw: PatternRewriter, x: SSAValue, state: str, top: float) -> SSAValue:
        """x's rows quantized to int8 into the state at pos, and the whole state read back."""
        hd = self.dims.get("head_dim", 0)
        width = shape_of(x)[1]
        scale = max(top, 2.0 ** -24) / 127.0
        sfrac = max(0, frac_bits(0.0, scale))
        s = min(int(np.floor(scale * 2.0 ** sfrac + 0.5)), 2 ** 31 - 1)  # rounded half away from zero (scale > 0)
        consts = _add(rw, KV.ConstOp.create(attributes={"value": DenseArrayBase.from_list(i64, [s] * (width // hd))},
                                            result_types=[_t((width // hd,), sfrac)]))
        hd_attr = {"head_dim": IntegerAttr(hd, i64)}
        q8 = _add(rw, FX.QuantInt8Op.create(operands=[x, consts], result_types=[TensorType(I8, shape_of(x))],
                                            attributes=hd_attr))
        cache = _add(rw, KV.KvStateOp.create(attributes={"state": StringAttr(state)},
                                             result_types=[TensorType(I8, [self.ctx, width])]))
        rw.insert(KV.CacheWriteOp.create(operands=[cache, q8, self.pos]))
        return _add(rw, FX.DequantInt8Op.create(operands=[cache, consts],
                                                result_types=[_t((self.ctx, width), frac_bits(0.0, 127 * scale))],
                                                attributes=hd_attr))


def _add(rw: PatternRewriter, op: Operation) -> SSAValue:
    """`op` inserted before the node being rewritten; its result."""
    rw.insert(op)
    return op.results[0]


def _node_id(op: Operation) -> str:
    return op.attributes["node"].data if "node" in op.attributes else op.name  # type: ignore[attr-defined]


def _layer(node: str) -> str:
    m = re.match(r"l(\d+)\.", node)
    return m.group(1) if m else ""


def _fmt(op: Operation, field: str):
    p = op.attributes.get("precision")
    return p.fields().get(field) if p is not None else None  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# The patterns: one per node kind


@dataclass
class NodeLowering(RewritePattern):
    """A pattern of one function's conversion (`conv`)."""

    conv: FixedConversion


class InlineGroup(RewritePattern):
    """A kernel group's nodes in its place; its results are what it yields."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.GroupOp, rewriter: PatternRewriter) -> None:
        body = op.body.block
        yielded = list(body.last_op.operands) if isinstance(body.last_op, B.YieldOp) else []
        if isinstance(body.last_op, B.YieldOp):
            rewriter.erase(body.last_op)
        rewriter.inline_block(body, InsertPoint.before(op))
        rewriter.replace(op, [], yielded)


class DropKvWrite(RewritePattern):
    """A prefill's attention reads this call's k and v rows: no cache write."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.KvWriteOp, rewriter: PatternRewriter) -> None:
        rewriter.erase(op)


class DropArgmax(RewritePattern):
    """The function returns the logits, not the next token."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.ArgmaxOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, [], [op.operands[0]])


class EmbedLowering(NodeLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.EmbedOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        key = c.key("embd", node=nid)
        hidden = c.dim("hidden")
        table = c.value_param(rewriter, op.param.data, (c.dim("vocab"), hidden), c.frac(key))
        rewriter.replace(op, FX.EmbedOp.create(operands=[op.operands[0], table],
                                               result_types=[_t((c.rows, hidden), c.frac(key))],
                                               attributes={"node": StringAttr(key)}))


class RmsNormLowering(NodeLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.RmsNormOp | B.FinalNormOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        L = _layer(nid)
        name = "result_norm" if isinstance(op, B.FinalNormOp) else ("ffn_norm-" if ".ffn." in nid else "attn_norm-") + L
        key = c.key(name, node=nid)
        x = op.operands[0]
        shape = shape_of(x)
        w = c.value_param(rewriter, op.param.data, shape[1:], 24)
        eps = op.attributes.get("eps")
        rewriter.replace(op, FX.RmsNormOp.create(operands=[x, w], result_types=[_t(shape, c.frac(key))], attributes={
            "node": StringAttr(key), "eps": FloatAttr(float(eps.value.data) if eps is not None else 1e-6, f64)}))  # type: ignore[attr-defined]


class GateUpLowering(NodeLowering):
    """A merged gate_up projection: one op per weight, gate then up, handed on as a pair."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.LinearOp, rewriter: PatternRewriter) -> None:
        if op.role.data != "gate_up":
            return
        c, nid = self.conv, _node_id(op)
        L = _layer(nid)
        names = [op.param.data] + [n.data for n in (op.concat.data if op.concat else ())]
        if len(names) != 2:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: gate_up reads two weights, got {len(names)}")
        fmt, inter = _fmt(op, "weight"), c.dims.get("inter", 0)
        halves = [c.projection(rewriter, op.operands[0], w, inter, fmt, c.key(f"ffn_{part}-{L}", "op.mul_mat", nid))
                  for w, part in zip(names, ("gate", "up"))]
        rewriter.replace(op, UnrealizedConversionCastOp.get(halves, [op.results[0].type]))


class ProjectionLowering(NodeLowering):
    """q, k, v, the attention's output, down, and the head: one projection each."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.LinearOp | B.LmHeadOp, rewriter: PatternRewriter) -> None:
        role = op.role.data if isinstance(op, B.LinearOp) else "head"
        if role == "gate_up":
            return
        c, nid = self.conv, _node_id(op)
        L = _layer(nid)
        hd, hq, hkv = (c.dims.get(k, 0) for k in ("head_dim", "q_heads", "kv_heads"))
        table = {"q": (f"Qcur-{L}", hq * hd), "k": (f"Kcur-{L}", hkv * hd), "v": (f"Vcur-{L}", hkv * hd),
                 "down": (f"ffn_out-{L}", c.dim("hidden")), "head": ("result_output", c.dim("vocab")),
                 "o": (None, c.dim("hidden"))}
        if role not in table or op.concat is not None or "bias" in op.attributes:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: a '{role}' projection"
                                    + (" with a bias or merged weights" if role in table else "") + " is not supported")
        name, n = table[role]
        key = c.after(f"kqv_out-{L}", "op.mul_mat", nid) if role == "o" else c.key(name, "op.mul_mat", nid)
        out = c.projection(rewriter, op.operands[0], op.param.data, n, _fmt(op, "weight"), key)
        if isinstance(op, B.LmHeadOp):
            c.logits.append(out)
        rewriter.replace(op, [], [out])


class RopeLowering(NodeLowering):
    """A full-width NeoX rope of q and of k, on the host's cos and sin tables."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.RopeOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        L, hd = _layer(nid), c.dims.get("head_dim", 0)
        mode, nd = op.attributes.get("mode"), op.attributes.get("n_dims")
        if mode is None or mode.data != "neox" or nd is None or int(nd.value.data) != hd:  # type: ignore[attr-defined]
            raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: only a full-width neox rope is supported")
        c.theta.append(float(op.attributes["freq_base"].value.data))  # type: ignore[attr-defined]
        outs = []
        for x, name in zip(op.operands, (f"Qcur-{L}", f"Kcur-{L}")):
            key = c.key(name, "op.rope", nid)
            outs.append(_add(rewriter, FX.RopeOp.create(
                operands=[x, c.cos, c.sin], result_types=[_t(shape_of(x), c.frac(key))],
                attributes={"node": StringAttr(key), "head_dim": IntegerAttr(hd, i64)})))
        rewriter.replace(op, [], outs)


class AttentionLowering(NodeLowering):
    """Causal attention over this prefill's rows, or (ctx > 0) over the int8 KV cache."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.PagedAttentionOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        L, hd = _layer(nid), c.dims.get("head_dim", 0)
        q, k, v = op.operands[:3]
        key = c.key(f"kqv_out-{L}", node=nid)
        qk = [max(map(abs, c.span(c.key(n, "op.rope", nid)))) for n in (f"Qcur-{L}", f"Kcur-{L}")]
        attrs = {"node": StringAttr(key), "head_dim": IntegerAttr(hd, i64),
                 "scale": FloatAttr(float(op.attributes["scale"].value.data), f64),  # type: ignore[attr-defined]
                 "sfrac": IntegerAttr(max(0, frac_bits(0.0, qk[0] * qk[1] * hd)), i64)}
        out_t = _t(shape_of(q), c.frac(key))
        if not c.ctx:
            rewriter.replace(op, FX.AttentionOp.create(operands=[q, k, v], result_types=[out_t], attributes=attrs))
            return
        vmax = max(map(abs, c.span(c.key(f"Vcur-{L}", "op.mul_mat", nid))))
        kc, vc = (c.cached(rewriter, x, f"cache_{kv}_l{L}", top) for x, kv, top in ((k, "k", qk[1]), (v, "v", vmax)))
        rewriter.replace(op, KV.CacheAttentionOp.create(operands=[q, kc, vc, c.pos], result_types=[out_t],
                                                        attributes=attrs))


class ResidualAddLowering(NodeLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.ResidualAddOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        key = c.key(("l_out-" if ".ffn." in nid else "ffn_inp-") + _layer(nid), node=nid)
        x, y = op.operands[:2]
        rewriter.replace(op, FX.AddOp.create(operands=[x, y], result_types=[_t(shape_of(x), c.frac(key))],
                                             attributes={"node": StringAttr(key)}))


class SiluMulLowering(NodeLowering):
    """silu(gate) * up, the pair a gate_up projection handed on."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: B.SiluMulOp, rewriter: PatternRewriter) -> None:
        c, nid = self.conv, _node_id(op)
        pair = op.operands[0].owner
        if not isinstance(pair, UnrealizedConversionCastOp) or len(pair.inputs) != 2:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: silu_mul reads a gate_up projection")
        gate, up = pair.inputs
        lo, hi = c.span(gate.owner.node.data)  # type: ignore[union-attr]
        s = _add(rewriter, FX.SiluOp.create(operands=[gate], result_types=[_t(shape_of(gate), frac_bits(SILU_MIN, max(hi, 0.0)))]))
        key = c.key(f"ffn_swiglu-{_layer(nid)}", node=nid)
        rewriter.replace(op, FX.MulOp.create(operands=[s, up], result_types=[_t(shape_of(up), c.frac(key))],
                                             attributes={"node": StringAttr(key)}))
        if not pair.results[0].uses:
            rewriter.erase(pair)


class RejectNode(RewritePattern):
    """Any other op of the blueprint function (the last pattern of the list) has no fixed-level
    form; its `func.return` is the conversion's to rewrite, once the logits are known."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, func.ReturnOp):
            raise ConvertFixedError(f"convert-blueprint-to-fixed: blueprint node '{_node_id(op)}' ({op.name}) "
                                    "has no fixed-level form")


def _patterns(conv: FixedConversion) -> list[RewritePattern]:
    return [InlineGroup(), DropKvWrite(), DropArgmax(), EmbedLowering(conv), RmsNormLowering(conv),
            GateUpLowering(conv), ProjectionLowering(conv), RopeLowering(conv), AttentionLowering(conv),
            ResidualAddLowering(conv), SiluMulLowering(conv), RejectNode()]


def convert_function(fn: func.FuncOp, tensors: Mapping[str, Any], weights: Any = None, ctx: int = 0) -> func.FuncOp:
    """The fixed function of one prefill blueprint function (see the module docstring); with
    `ctx` > 0 a decode step over a persistent int8 KV cache of ctx positions. `fn` is left as it is."""
    dims = B.function_dims(fn)
    rows_attr = fn.attributes.get("blueprint.rows")
    mode = fn.attributes.get("blueprint.mode")
    if rows_attr is None or mode is None or mode.data != "prefill":  # type: ignore[attr-defined]
        raise ConvertFixedError(f"convert-blueprint-to-fixed: @{fn.sym_name.data} is not a prefill blueprint "
                                "(blueprint.mode = \"prefill\" with blueprint.rows)")
    rows = int(rows_attr.value.data)  # type: ignore[attr-defined]
    hd = dims.get("head_dim", 0)
    if ctx and (isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < rows):
        raise ConvertFixedError(f"convert-blueprint-to-fixed: ctx must be an integer >= the {rows} rows, got {ctx!r}")
    pos_t = [TensorType(i32, [1])] if ctx else []
    block = Block(arg_types=[TensorType(i32, [rows]), *pos_t, _t((rows, hd // 2), 30), _t((rows, hd // 2), 30)])
    # The blueprint's nodes move into the fixed function's body, where each is rewritten in place.
    nodes = fn.clone().body.block
    if any(arg.uses for arg in nodes.args[1:]):
        raise ConvertFixedError(f"convert-blueprint-to-fixed: @{fn.sym_name.data} reads more than its tokens")
    for op in list(nodes.ops):
        op.detach()
        block.add_op(op)
    nodes.args[0].replace_all_uses_with(block.args[0])
    body = Region(block)
    conv = FixedConversion(tensors, weights, dims, rows, ctx, block.args[0], block.args[1] if ctx else None,
                           block.args[-2], block.args[-1])
    walker = PatternRewriteWalker(GreedyRewritePatternApplier(_patterns(conv), dce_enabled=False),
                                  apply_recursively=False)
    with one_line_errors():
        walker.rewrite_region(body)
    if not conv.logits:
        raise ConvertFixedError(f"convert-blueprint-to-fixed: @{fn.sym_name.data} has no lm_head")
    for op in block.ops:
        if isinstance(op, UnrealizedConversionCastOp):
            raise ConvertFixedError("convert-blueprint-to-fixed: a gate_up projection is read by a node other than silu_mul")
    old_return = block.last_op
    assert isinstance(old_return, func.ReturnOp)
    block.erase_op(old_return)
    block.add_op(func.ReturnOp(conv.logits[0]))
    for value in block.args:  # the blueprint's edge names stay with the blueprint
        value.name_hint = None
    for op in block.ops:
        for value in op.results:
            value.name_hint = None
    out_fn = func.FuncOp(fn.sym_name.data, func.FunctionType.from_lists(block.arg_types, [conv.logits[0].type]), body)
    out_fn.attributes["fixed.rope_theta"] = FloatAttr(conv.theta[0] if conv.theta else 10000.0, f64)
    out_fn.attributes["fixed.rows"] = IntegerAttr(rows, i64)
    if ctx:
        out_fn.attributes["fixed.ctx"] = IntegerAttr(ctx, i64)
    return out_fn


def convert_blueprint_to_fixed(module: ModuleOp, tensors: Mapping[str, Any], weights: Any = None,
                               ctx: int = 0) -> ModuleOp:
    """A new module with the fixed function of each blueprint function of `module` (a decode
    step over an int8 KV cache of `ctx` positions when ctx > 0)."""
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if not fns:
        raise ConvertFixedError("convert-blueprint-to-fixed: no function")
    return ModuleOp([convert_function(fn, tensors, weights, ctx) for fn in fns])


#: The largest KV cache the fixed level describes (int64 products stay safe).
MAX_KV_CTX = 2**31 - 1


@dataclass(frozen=True)
class ConvertBlueprintToFixedPass(StrataPass):
    """The blueprint functions of the module replaced by their fixed functions (no weights:
    default weight formats, see the module docstring)."""

    name = "convert-blueprint-to-fixed"

    ranges: str = ""
    #: The int8 KV cache's positions (a decode step); left out, the prefill form without a cache.
    kv_ctx: int | None = None

    def check(self) -> None:
        if not self.ranges:
            raise ConvertFixedError("convert-blueprint-to-fixed: needs ranges=FILE (from `strata calibrate`)")
        if self.kv_ctx is not None and not 1 <= self.kv_ctx <= MAX_KV_CTX:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: kv_ctx must be 1 to {MAX_KV_CTX} positions (leave "
                                    f"it out for the prefill form without a cache), got {self.kv_ctx}")

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        self.check()
        new = convert_blueprint_to_fixed(module, read_tensor_ranges(self.ranges), ctx=self.kv_ctx or 0)
        for op in list(module.ops):
            op.detach()
            op.erase()
        for op in list(new.ops):
            op.detach()
            module.body.block.add_op(op)
