"""convert-op-to-blueprint{mode=decode rows=1}: the op level's ggml graph -> blueprint nodes.

Each op-level function becomes a blueprint function of the same name whose nodes are
kbp-graph/v1's semantic nodes (embed, rms_norm, `linear` with its role, gdn_gates, conv1d_update, ...),
found from the op level's subgraphs by the recognisers of `blocks.py`, one per kind of block.
Each op records the module-level block instance it was expanded from (`op.block`), and the
nodes are grouped by it: the model's `embedding` makes the embed block, each layer
(`layers.<i>`) its mixer and FFN blocks, chosen by the kinds of its `attention` sub
(`std.attn.gated_delta_net` a Gated DeltaNet, `std.attn.grouped_query` and `std.attn.gated`
attention) and of its `mlp` sub (`std.moe.sparse` a sparse MoE, `std.nn.mlp` a dense FFN),
and the model's `norm` and `lm_head` the head. The params' tensor names (the family's) only
name the weights the nodes read. Sibling projections of one input are merged as kbp-graph/v1
merges them (qkv + z -> `qkvz`, b + a -> `ba`, gate + up -> `gate_up`): a linear's `concat`
lists the weights whose rows follow its `param`'s.

The function is `(tokens: !blueprint.edge<"n", "1", i32>) -> (next ids, logits)` with
attributes `blueprint.mode`, `blueprint.rows` (0: a prefill of any length), `blueprint.layers` (each layer's kind),
`blueprint.dims` (the symbols of the edges' dims and their sizes, read off the op level) and
`blueprint.weights` (the op level's stored name and conversion of each weight that has one),
`blueprint.stored_formats` (a GGUF's: the block type of each weight read whole and as stored)
and `blueprint.state` (the type of each op-level state buffer the nodes' `slots` name); a
tensor-parallel op level (`op.ranks`) gives `blueprint.ranks`, its collectives become
`blueprint.all_reduce` / `all_gather` nodes, its vocabulary-split lookup and whole-experts
nodes carry `group` and `ranks`, and the weight table names each param's piece (`split`).
Nodes carry their hyperparameters (`eps`, the rope's `mode`/`n_dims`/`freq_base`/`sections`,
attention's `scale`, top-k's `norm`) and the op-level state buffers their effects touch
(`slots`). Outside `prefill`, the conv state is snapshotted after its update (`conv_ckpt`).

The program's sampler (`@sample_logits`, from add-sampler) becomes a function of one
`blueprint.sample` node over the same arguments (`sampler.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i32, i64
from xdsl.ir import Block, Region

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.facts import DimsAttr, WeightsAttr
from strata.dialects.blueprint_graph import MODES, check_mode_rows
from strata.passes.convert_op_to_blueprint import blocks
from strata.passes.convert_op_to_blueprint.sampler import convert_sampler, is_sampler
from strata.passes.convert_op_to_blueprint.graph import ConversionError, Dims, OpGraph
from strata.errors import StrataError
from strata.passes.options import StrataPass

__all__ = ["ConvertOpToBlueprintPass", "ConversionError", "MODES", "convert_function"]

_MIXERS = {"linear_attention": blocks.gdn, "full_attention": blocks.attention}
_FFNS = {"moe_ffn": blocks.moe, "ffn": blocks.ffn}


def _element(graph: OpGraph):
    return blocks.embedding_table(graph).result.type.get_element_type()  # type: ignore[attr-defined]


def convert_function(fn: func.FuncOp, mode: str = "decode", rows: int = 1) -> func.FuncOp:
    """The blueprint function of the op-level function `fn`."""
    try:
        check_mode_rows(mode, rows, "convert-op-to-blueprint")
    except StrataError as e:
        raise ConversionError(str(e)) from None
    graph = OpGraph.of(fn)
    tok_type = EdgeType("n", "1", i32)
    block = Block(arg_types=[tok_type])
    block.args[0].name_hint = "tokens"
    em = blocks.Emitter(block, graph, Dims(), _element(graph), mode)
    h = blocks.embed(em, block.args[0])
    kinds = []
    layers = graph.layers()
    if [i for i, _ in layers] != list(range(len(layers))):
        raise ConversionError(f"convert-op-to-blueprint: layers {[i for i, _ in layers]} are not 0..{len(layers) - 1}")
    for layer, path in layers:
        params = blocks.Members(graph, path)
        kind = blocks.mixer_kind(params)
        kinds.append(kind)
        h = _MIXERS[kind](em, layer, params, h)
        h = _FFNS[blocks.ffn_kind(params)](em, layer, params, h)
    nxt, logits = blocks.head(em, h)
    block.add_op(func.ReturnOp(nxt, logits))
    out = func.FuncOp(fn.sym_name.data, (block.arg_types, [nxt.type, logits.type]), Region(block))
    out.attributes.update({
        "blueprint.mode": StringAttr(mode),
        "blueprint.rows": IntegerAttr(rows, i64),
        "blueprint.layers": ArrayAttr([StringAttr(k) for k in kinds]),
        "blueprint.dims": DimsAttr(dict(sorted(em.dims.values.items()))),
        "blueprint.weights": WeightsAttr([em.weights[name] for name in sorted(em.weights)]),
        "blueprint.state": DictionaryAttr(dict(sorted(em.states.items()))),
    })
    if em.formats:  # a GGUF's weights stored in block types (what recipe gguf keeps them in)
        out.attributes["blueprint.stored_formats"] = DictionaryAttr(
            {n: StringAttr(f) for n, f in sorted(em.formats.items())})
    if "op.ranks" in fn.attributes:  # one rank's program of a tensor-parallel model
        out.attributes["blueprint.ranks"] = fn.attributes["op.ranks"]
    return out


def _token_rows(fn: func.FuncOp) -> int:
    """The number of tokens an op-level entry takes (0: any, a dynamic prefill)."""
    from strata.dialects import op as O

    for op in fn.body.block.ops:
        if isinstance(op, O.InputOp) and op.kind.data == "tokens":
            n = op.result.type.get_shape()[0]  # type: ignore[attr-defined]
            return n if n >= 0 else 0
    return 0


@dataclass(frozen=True)
class ConvertOpToBlueprintPass(StrataPass):
    """Replace each op-level function by its blueprint function (`mode=auto`: @prefill in mode
    prefill, every other entry in mode decode with one row)."""

    name = "convert-op-to-blueprint"

    mode: str = "decode"
    rows: int = 1

    def check(self) -> None:
        if self.mode != "auto":
            try:
                check_mode_rows(self.mode, self.rows, self.name)
            except StrataError as e:
                raise ConversionError(str(e)) from None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check()
        fns = [f for f in op.body.block.ops if isinstance(f, func.FuncOp)]
        if not fns:
            raise ConversionError("convert-op-to-blueprint: the module holds no op-level function "
                                  "(lower it with convert-module-to-op first)")
        for fn in fns:
            if is_sampler(fn):  # the program's sampler (add-sampler): one node, whatever the mode
                op.body.block.insert_op_before(convert_sampler(fn), fn)
                fn.detach()
                fn.erase()
                continue
            mode, rows = self.mode, self.rows
            if mode == "auto":  # each entry its own mode: @prefill prefills, any other decodes one row
                mode = "prefill" if fn.sym_name.data == "prefill" else "decode"
                rows = _token_rows(fn) if mode == "prefill" else 1
            new = convert_function(fn, mode, rows)
            op.body.block.insert_op_before(new, fn)
            fn.detach()
            fn.erase()
