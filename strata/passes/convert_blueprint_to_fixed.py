"""convert-blueprint-to-fixed{ranges=FILE}: a dense Llama prefill blueprint as a `fixed` function.

    module = blueprint_of(model, "prefill", n, "w4a16", collapse=False)
    fixed = convert_blueprint_to_fixed(module, read_tensor_ranges(RANGES), weights=model.open_weights())
    run_pipeline(fixed, 'assign-frac-bits{headroom=2 ranges="RANGES"}')

The blueprint function (one, prefill from position 0, groups or not) becomes `@<entry>(%tokens:
tensor<n x i32>, %cos, %sin: tensor<n x head_dim/2 x !fixed.fp32<30>>) -> logits`, node by node:

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

With `ctx` > 0 (a persistent int8 KV cache of ctx positions, seed 004's decode; `strata.dialects.
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
seed 004's (frac = 31 - ceil(log2 max|y|)) without headroom; `assign-frac-bits` then sets the
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
from dataclasses import dataclass
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
    f64,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from strata.dialects import blueprint as B
from strata.dialects import fixed as FX
from strata.dialects import fixed_kv as KV
from strata.errors import StrataError
from strata.ir.checks import shape_of
from strata.ir.int4 import dequantize_int4_block, quantize_int4_block
from strata.passes.assign_frac_bits import frac_bits, read_tensor_ranges

U8 = IntegerType(8, Signedness.UNSIGNED)
I8 = IntegerType(8)
SILU_MIN = -0.27846454276  # min over x of x * sigmoid(x)


class ConvertFixedError(StrataError):
    """A blueprint the fixed level cannot take."""


def _t(shape, frac: int) -> TensorType:
    return FX.fixed_tensor(list(shape), max(0, min(31, frac)))


@dataclass
class _Builder:
    tensors: Mapping[str, Any]
    weights: Any
    block: Block
    dims: dict[str, int]
    rows: int

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

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

    # weights ----------------------------------------------------------------------------------

    def weight(self, name: str) -> np.ndarray | None:
        if self.weights is None:
            return None
        w = self.weights[name] if isinstance(self.weights, Mapping) else self.weights.get(name)
        return None if w is None else np.asarray(w, np.float32)

    def param(self, name: str, shape, frac: int) -> SSAValue:
        return self.add(FX.ParamOp.create(attributes={"param": StringAttr(name)}, result_types=[_t(shape, frac)]))

    def value_param(self, name: str, shape, default: int) -> SSAValue:
        w = self.weight(name)
        return self.param(name, shape, default if w is None else frac_bits(-float(np.abs(w).max()), 0.0))

    def int4(self, name: str, n: int, k: int, block: int) -> tuple[list[SSAValue], int]:
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
            parts.append(self.add(FX.ParamOp.create(
                attributes={"param": StringAttr(name), "part": StringAttr(part), "block": IntegerAttr(block, i64)},
                result_types=[ty])))
        return parts, wfrac

    # ops --------------------------------------------------------------------------------------

    def projection(self, x: SSAValue, name: str, n: int, fmt, key: str) -> SSAValue:
        k = shape_of(x)[1]
        attrs = {"node": StringAttr(key)}
        out = _t((self.rows, n), self.frac(key))
        if fmt is not None and fmt.elem.data == "int4":
            block = fmt.block_sizes[0] if fmt.block_sizes else 128
            parts, wfrac = self.int4(name, n, k, block)
            return self.add(FX.MatmulW4A16Op.create(operands=[x, *parts], result_types=[out],
                                                     attributes=attrs | {"wfrac": IntegerAttr(wfrac, i64)}))
        w = self.value_param(name, (n, k), 31)
        return self.add(FX.MatmulOp.create(operands=[x, w], result_types=[out], attributes=attrs))


def _layer(node: str) -> str:
    m = re.match(r"l(\d+)\.", node)
    return m.group(1) if m else ""


def _fmt(op: Operation, field: str):
    p = op.attributes.get("precision")
    return p.fields().get(field) if p is not None else None  # type: ignore[attr-defined]


def _dim(b: _Builder, name: str) -> int:
    if name not in b.dims:
        raise ConvertFixedError(f"convert-blueprint-to-fixed: the blueprint has no dim '{name}'")
    return b.dims[name]


def convert_function(fn: func.FuncOp, tensors: Mapping[str, Any], weights: Any = None, ctx: int = 0) -> func.FuncOp:
    """The fixed function of one prefill blueprint function (see the module docstring); with
    `ctx` > 0 a decode step over a persistent int8 KV cache of ctx positions."""
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
    b = _Builder(tensors, weights, block, dims, rows)
    tokens, cos, sin = block.args[0], block.args[-2], block.args[-1]
    vals: dict[SSAValue, Any] = {fn.body.block.args[0]: tokens}
    theta: list[float] = []
    logits: list[SSAValue] = []

    def visit(ops) -> None:
        for op in ops:
            if isinstance(op, B.GroupOp):
                visit(op.body.block.ops)
                y = op.body.block.last_op
                for r, v in zip(op.results, y.operands if y is not None else ()):
                    vals[r] = vals.get(v)
            elif isinstance(op, (B.YieldOp, B.KvWriteOp, B.ArgmaxOp, func.ReturnOp)):
                continue
            else:
                node(op)

    def node(op: Operation) -> None:
        nid = op.attributes["node"].data if "node" in op.attributes else op.name  # type: ignore[attr-defined]
        L = _layer(nid)
        a = [vals.get(v) for v in op.operands]
        if isinstance(op, B.EmbedOp):
            key = b.key("embd", node=nid)
            hidden = _dim(b, "hidden")
            table = b.value_param(op.param.data, (_dim(b, "vocab"), hidden), b.frac(key))
            out = b.add(FX.EmbedOp.create(operands=[a[0], table], result_types=[_t((rows, hidden), b.frac(key))],
                                          attributes={"node": StringAttr(key)}))
        elif isinstance(op, (B.RmsNormOp, B.FinalNormOp)):
            name = "result_norm" if isinstance(op, B.FinalNormOp) else ("ffn_norm-" if ".ffn." in nid else "attn_norm-") + L
            key = b.key(name, node=nid)
            shape = shape_of(a[0])
            w = b.value_param(op.param.data, shape[1:], 24)
            eps = op.attributes.get("eps")
            out = b.add(FX.RmsNormOp.create(operands=[a[0], w], result_types=[_t(shape, b.frac(key))], attributes={
                "node": StringAttr(key), "eps": FloatAttr(float(eps.value.data) if eps is not None else 1e-6, f64)}))
        elif isinstance(op, (B.LinearOp, B.LmHeadOp)):
            role = op.role.data if isinstance(op, B.LinearOp) else "head"
            fmt = _fmt(op, "weight")
            hd_, hq, hkv, inter = (dims.get(k, 0) for k in ("head_dim", "q_heads", "kv_heads", "inter"))
            if role == "gate_up":
                names = [op.param.data] + [c.data for c in (op.concat.data if op.concat else ())]
                if len(names) != 2:
                    raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: gate_up reads two weights, got {len(names)}")
                out = tuple(b.projection(a[0], w, inter, fmt, b.key(f"ffn_{part}-{L}", "op.mul_mat", nid))
                            for w, part in zip(names, ("gate", "up")))
            else:
                table = {"q": (f"Qcur-{L}", hq * hd_), "k": (f"Kcur-{L}", hkv * hd_), "v": (f"Vcur-{L}", hkv * hd_),
                         "down": (f"ffn_out-{L}", _dim(b, "hidden")), "head": ("result_output", _dim(b, "vocab")),
                         "o": (None, _dim(b, "hidden"))}
                if role not in table or op.concat is not None or "bias" in op.attributes:
                    raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: a '{role}' projection"
                                            + (" with a bias or merged weights" if role in table else "") + " is not supported")
                name, n = table[role]
                key = b.after(f"kqv_out-{L}", "op.mul_mat", nid) if role == "o" else b.key(name, "op.mul_mat", nid)
                out = b.projection(a[0], op.param.data, n, fmt, key)
        elif isinstance(op, B.RopeOp):
            mode = op.attributes.get("mode")
            nd = op.attributes.get("n_dims")
            if mode is None or mode.data != "neox" or nd is None or int(nd.value.data) != hd:  # type: ignore[attr-defined]
                raise ConvertFixedError(f"convert-blueprint-to-fixed: {nid}: only a full-width neox rope is supported")
            theta.append(float(op.attributes["freq_base"].value.data))  # type: ignore[attr-defined]
            outs = []
            for x, name in zip(a, (f"Qcur-{L}", f"Kcur-{L}")):
                key = b.key(name, "op.rope", nid)
                outs.append(b.add(FX.RopeOp.create(operands=[x, cos, sin], result_types=[_t(shape_of(x), b.frac(key))],
                                                   attributes={"node": StringAttr(key), "head_dim": IntegerAttr(hd, i64)})))
            for r, v in zip(op.results, outs):
                vals[r] = v
            return
        elif isinstance(op, B.PagedAttentionOp):
            key = b.key(f"kqv_out-{L}", node=nid)
            qk = [max(map(abs, b.span(b.key(n, "op.rope", nid)))) for n in (f"Qcur-{L}", f"Kcur-{L}")]
            attrs = {"node": StringAttr(key), "head_dim": IntegerAttr(hd, i64),
                     "scale": FloatAttr(float(op.attributes["scale"].value.data), f64),  # type: ignore[attr-defined]
                     "sfrac": IntegerAttr(max(0, frac_bits(0.0, qk[0] * qk[1] * hd)), i64)}
            out_t = _t(shape_of(a[0]), b.frac(key))
            if ctx:
                vmax = max(map(abs, b.span(b.key(f"Vcur-{L}", "op.mul_mat", nid))))
                k, v = (_cached(b, x, f"cache_{kv}_l{L}", top, ctx, hd, block.args[1])
                        for x, kv, top in ((a[1], "k", qk[1]), (a[2], "v", vmax)))
                out = b.add(KV.CacheAttentionOp.create(operands=[a[0], k, v, block.args[1]], result_types=[out_t],
                                                       attributes=attrs))
            else:
                out = b.add(FX.AttentionOp.create(operands=a[:3], result_types=[out_t], attributes=attrs))
        elif isinstance(op, B.ResidualAddOp):
            key = b.key(("l_out-" if ".ffn." in nid else "ffn_inp-") + L, node=nid)
            out = b.add(FX.AddOp.create(operands=a[:2], result_types=[_t(shape_of(a[0]), b.frac(key))],
                                        attributes={"node": StringAttr(key)}))
        elif isinstance(op, B.SiluMulOp):
            gate, up = a[0]
            lo, hi = b.span(gate.owner.node.data)  # type: ignore[union-attr]
            s = b.add(FX.SiluOp.create(operands=[gate], result_types=[_t(shape_of(gate), frac_bits(SILU_MIN, max(hi, 0.0)))]))
            key = b.key(f"ffn_swiglu-{L}", node=nid)
            out = b.add(FX.MulOp.create(operands=[s, up], result_types=[_t(shape_of(up), b.frac(key))],
                                        attributes={"node": StringAttr(key)}))
        else:
            raise ConvertFixedError(f"convert-blueprint-to-fixed: blueprint node '{nid}' ({op.name}) has no fixed-level form")
        if isinstance(op, B.LmHeadOp):
            logits.append(out)
        vals[op.results[0]] = out

    visit(fn.body.block.ops)
    if not logits:
        raise ConvertFixedError(f"convert-blueprint-to-fixed: @{fn.sym_name.data} has no lm_head")
    block.add_op(func.ReturnOp(logits[0]))
    out_fn = func.FuncOp(fn.sym_name.data, func.FunctionType.from_lists(block.arg_types, [logits[0].type]), Region(block))
    out_fn.attributes["fixed.rope_theta"] = FloatAttr(theta[0] if theta else 10000.0, f64)
    out_fn.attributes["fixed.rows"] = IntegerAttr(rows, i64)
    if ctx:
        out_fn.attributes["fixed.ctx"] = IntegerAttr(ctx, i64)
    return out_fn


def _cached(b: _Builder, x: SSAValue, state: str, top: float, ctx: int, hd: int, pos: SSAValue) -> SSAValue:
    """x's rows quantized to int8 into the state at pos, and the whole state read back."""
    width = shape_of(x)[1]
    scale = max(top, 2.0 ** -24) / 127.0
    sfrac = max(0, frac_bits(0.0, scale))
    s = min(int(np.floor(scale * 2.0 ** sfrac + 0.5)), 2 ** 31 - 1)  # rounded half away from zero (scale > 0)
    consts = b.add(KV.ConstOp.create(attributes={"value": DenseArrayBase.from_list(i64, [s] * (width // hd))},
                                     result_types=[_t((width // hd,), sfrac)]))
    hd_attr = {"head_dim": IntegerAttr(hd, i64)}
    q8 = b.add(FX.QuantInt8Op.create(operands=[x, consts], result_types=[TensorType(I8, shape_of(x))],
                                     attributes=hd_attr))
    cache = b.add(KV.KvStateOp.create(attributes={"state": StringAttr(state)}, result_types=[TensorType(I8, [ctx, width])]))
    b.block.add_op(KV.CacheWriteOp.create(operands=[cache, q8, pos]))
    return b.add(FX.DequantInt8Op.create(operands=[cache, consts], result_types=[_t((ctx, width), frac_bits(0.0, 127 * scale))],
                                         attributes=hd_attr))


def convert_blueprint_to_fixed(module: ModuleOp, tensors: Mapping[str, Any], weights: Any = None,
                               ctx: int = 0) -> ModuleOp:
    """A new module with the fixed function of each blueprint function of `module` (a decode
    step over an int8 KV cache of `ctx` positions when ctx > 0)."""
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if not fns:
        raise ConvertFixedError("convert-blueprint-to-fixed: no function")
    return ModuleOp([convert_function(fn, tensors, weights, ctx) for fn in fns])


@dataclass(frozen=True)
class ConvertBlueprintToFixedPass(ModulePass):
    """The blueprint functions of the module replaced by their fixed functions (no weights:
    default weight formats, see the module docstring)."""

    name = "convert-blueprint-to-fixed"

    ranges: str = ""
    kv_ctx: int = 0

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        if not self.ranges:
            raise ConvertFixedError("convert-blueprint-to-fixed: needs ranges=FILE (from `strata calibrate`)")
        new = convert_blueprint_to_fixed(module, read_tensor_ranges(self.ranges), ctx=self.kv_ctx)
        for op in list(module.ops):
            op.detach()
            op.erase()
        for op in list(new.ops):
            op.detach()
            module.body.block.add_op(op)
