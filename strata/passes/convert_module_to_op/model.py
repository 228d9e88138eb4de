"""Op-level expansions of the decoder layer and of a causal LM's entries (prefill, decode)."""

from __future__ import annotations

from xdsl.dialects.builtin import i32
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering


def keep_output_rows(lo: Lowering, x: SSAValue) -> SSAValue:
    """GET_ROWS of the rows whose logits the call returns (llama.cpp's `inp_out_ids`)."""
    out_ids = lo.input("out_ids", (1,), i32, "inp_out_ids", label=lo.input_name("out_ids"))
    return lo.g.binary(O.GetRowsOp, x, out_ids, (1, O.shape_of(x)[-1]))


@EXPANSIONS.register("std.layer.decoder")
class DecoderLayer:
    """Pre-norm residual layer: x + attention(norm(x)), then h + mlp(norm(h))."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, last: bool = False) -> SSAValue:
        sfx = lo.suffix(inst)
        residual = x
        cur = lo.call(inst.child("attention_norm"), "forward", x, label=f"attn_norm{sfx}")
        cur = lo.call(inst.child("attention"), "forward", cur)
        if last and lo.prune:
            cur, residual = keep_output_rows(lo, cur), keep_output_rows(lo, residual)
        ffn_inp = lo.g.binary(O.AddOp, cur, residual, O.shape_of(cur), f"ffn_inp{sfx}")
        cur = lo.call(inst.child("mlp_norm"), "forward", ffn_inp, label=f"ffn_norm{sfx}")
        cur = lo.call(inst.child("mlp"), "forward", cur)
        return lo.g.binary(O.AddOp, cur, ffn_inp, O.shape_of(cur), f"l_out{sfx}")


@EXPANSIONS.register("std.model.causal_lm")
class CausalLM:
    """Tokens -> embedding -> layers -> final norm -> lm_head logits."""

    @staticmethod
    def prefill(lo: Lowering, inst: BlockInstance) -> SSAValue:
        tokens = lo.input("tokens", (lo.S,), i32, "inp_tokens", label="inp_tokens")
        x = lo.call(inst.child("embedding"), "forward", tokens, label="embd")
        layers = inst.array("layers")
        for i, layer in enumerate(layers):
            x = lo.call(layer, "forward", x, last=i == len(layers) - 1)
        x = lo.call(inst.child("norm"), "forward", x, label="result_norm")
        return lo.call(inst.child("lm_head"), "forward", x, label="result_output")

    decode = prefill  # one token: the same graph, with nothing to prune
