"""Op-level expansions of the decoder layer and of a causal LM's entries (prefill and decode of one
sequence as llama.cpp builds them; every other entry by its plan, `CausalLM.run_plan`).

llama.cpp's builders differ in a few names and in where they gather the rows whose logits
are returned; the family stamps those facts on its blocks (absent, llama.cpp's llm_build_llama):

* the root's `ggml_names` (`embd`: the embedding's output name), `ggml_inputs` (the graph
  inputs' names, see `Lowering.input_names`) and `ggml_output_rows`: absent, the last
  layer of a multi-token prefill keeps the output rows (llama.cpp's graph); `last_layer`, it does
  for every call (this llama.cpp's llama-style builders); `after_norm`, the rows are
  gathered after the final norm, named `h_nextn` (llama.cpp's Qwen3.5 and Qwen3-Next);
* a layer's `ggml_names`: `residual` (default `ffn_inp`), `mlp_norm` (default
  `ffn_norm`), and `attn_out` and `mlp_out`: the attention's and the FFN's outputs,
  renamed as llama.cpp's `cb` does (llama.cpp's llama names its o_proj `attn_out`; absent,
  the block's own name stays, `node_N` where it has none).
"""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, FloatAttr, StringAttr, f32, f64, i32, i64
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering, LoweringError, string_dict, tensor

#: The values of a root's `ggml_output_rows`.
OUTPUT_ROWS = ("last_layer", "after_norm")


def keep_output_rows(lo: Lowering, x: SSAValue, label: str | None = None) -> SSAValue:
    """GET_ROWS of the rows whose logits the call returns (llama.cpp's `inp_out_ids`)."""
    out_ids = lo.input("out_ids", (1,), i32, "inp_out_ids", label=lo.input_name("out_ids"))
    return lo.g.binary(O.GetRowsOp, x, out_ids, (1, O.shape_of(x)[-1]), label)


@EXPANSIONS.register("std.layer.decoder")
class DecoderLayer:
    """Pre-norm residual layer: x + attention(norm(x)), then h + mlp(norm(h))."""

    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue, last: bool = False) -> SSAValue:
        sfx, names = lo.suffix(inst), string_dict(inst, "ggml_names")
        residual = x
        cur = lo.call(inst.child("attention_norm"), "forward", x, label=f"attn_norm{sfx}")
        lo.g.expand(cur)  # llama.cpp's hybrids expand it here, before any state is read
        cur = lo.call(inst.child("attention"), "forward", cur)
        if "attn_out" in names:
            lo.g.rename(cur, names["attn_out"] + sfx)
        if last and lo.prune:
            cur, residual = keep_output_rows(lo, cur), keep_output_rows(lo, residual)
        h = lo.g.binary(O.AddOp, cur, residual, O.shape_of(cur), names.get("residual", "ffn_inp") + sfx)
        cur = lo.call(inst.child("mlp_norm"), "forward", h, label=names.get("mlp_norm", "ffn_norm") + sfx)
        cur = lo.call(inst.child("mlp"), "forward", cur)
        if "mlp_out" in names:
            lo.g.rename(cur, names["mlp_out"] + sfx)
        return lo.g.binary(O.AddOp, cur, h, O.shape_of(cur), f"l_out{sfx}")


@EXPANSIONS.register("std.model.causal_lm")
class CausalLM:
    """Tokens -> embedding -> layers -> final norm -> lm_head logits."""

    @staticmethod
    def prefill(lo: Lowering, inst: BlockInstance) -> SSAValue:
        if lo.plan is not None:  # prefill or decode of several rows
            return CausalLM.run_plan(lo, inst)
        rows = _configure(lo, inst)
        tokens = lo.input("tokens", (lo.S,), i32, "inp_tokens", label="inp_tokens")
        x = lo.call(inst.child("embedding"), "forward", tokens,
                    label=string_dict(inst, "ggml_names").get("embd", "embd"))
        layers = inst.array("layers")
        for i, layer in enumerate(layers):
            x = lo.call(layer, "forward", x, last=i == len(layers) - 1)
        if rows == "after_norm":
            x = keep_output_rows(lo, lo.call(inst.child("norm"), "forward", x, label="h_nextn"), "result_norm")
        else:
            x = lo.call(inst.child("norm"), "forward", x, label="result_norm")
        return lo.call(inst.child("lm_head"), "forward", x, label="result_output")

    decode = prefill  # one token: the same graph

    @staticmethod
    def run_plan(lo: Lowering, inst: BlockInstance) -> list[SSAValue]:
        """An entry that runs by a plan (`lo.plan`): the N tokens through the layers, then
        what the entry returns: the logits of every token (forward) or of the output rows
        (`out_ids`; -1 gives a row of zeros), the final hidden states (hidden_packed), the
        targets' log-probabilities (log_probs_packed) or their weighted mean negative
        (loss_packed)."""
        plan, g = lo.plan, lo.g
        assert plan is not None
        _configure(lo, inst)
        N = lo.S
        tokens = lo.input("tokens", (N,), i32, "inp_tokens", label="inp_tokens")
        x = lo.call(inst.child("embedding"), "forward", tokens,
                    label=string_dict(inst, "ggml_names").get("embd", "embd"))
        for layer in inst.array("layers"):
            x = lo.call(layer, "forward", x)
        if plan.entry in ("hidden_packed", "log_probs_packed", "loss_packed"):
            h = lo.call(inst.child("norm"), "forward", x, label="result_norm")
            if plan.entry == "hidden_packed":
                return [h]
            return [_scores(lo, inst, h)]
        if plan.outputs is not None:
            out_ids = lo.input("out_ids", (plan.outputs,), i32, "inp_out_ids", label=lo.input_name("out_ids"))
            x = g.binary(O.GetRowsOp, x, out_ids, (plan.outputs, O.shape_of(x)[-1]))
        x = lo.call(inst.child("norm"), "forward", x, label="result_norm")
        logits = lo.call(inst.child("lm_head"), "forward", x, label="result_output")
        if plan.entry == "forward":  # [B, S, Vocab]
            rows = plan.batch  # forward's B is Batch
            logits = g.reshape(logits, (rows, DYNAMIC_INDEX if N == DYNAMIC_INDEX else N // rows,
                                        O.shape_of(logits)[-1]))
        return [logits]

    # Every other entry is the same builder: the plan says how its tokens meet (entries.py).
    forward = next_token = decode_rows = prefill_slots = loss_packed = log_probs_packed = hidden_packed = run_plan
    prefill_packed = step_packed = decode_paged = prefill_paged = step_paged = run_plan


def _scores(lo: Lowering, inst: BlockInstance, h: SSAValue) -> SSAValue:
    """log_probs_packed's targets' log-probabilities [P] (fused with the output projection, so
    that no [P, Vocab] logits exist), or loss_packed's weighted mean of their negatives."""
    g, N = lo.g, lo.S
    head = inst.child("lm_head")
    if "bias" in head.params or inst.dim("Shards") != 1:
        raise LoweringError(f"convert-module-to-op: {lo.entry}: the log-probabilities take an unsharded lm_head "
                            "without a bias")
    targets = lo.input("targets", (N,), i64, "targets")
    weight = lo.param(head, "weight")
    lp = g.add(O.TargetLogProbsOp.create(operands=[h, weight, targets], result_types=[tensor((N,))]), "result_log_probs")
    if lo.entry == "log_probs_packed":
        return lp
    weights = lo.input("weights", (N,), f32, "weights")
    total = g.unary(O.SumRowsOp, g.binary(O.MulOp, lp, weights, (N,)), (1,))
    mean = g.binary(O.DivOp, total, g.unary(O.SumRowsOp, weights, (1,)), (1,))
    loss = g.unary(O.ScaleOp, mean, (1,), scale=FloatAttr(-1.0, f64))
    return g.reshape(loss, (), "result_loss")


def _configure(lo: Lowering, inst: BlockInstance) -> str | None:
    """Read the root's llama.cpp facts into `lo`; returns its `ggml_output_rows`."""
    lo.input_names = string_dict(inst, "ggml_inputs")
    attr = inst.attr("ggml_output_rows")
    rows = attr.data if isinstance(attr, StringAttr) else None
    if attr is not None and rows not in OUTPUT_ROWS:
        raise LoweringError(f"convert-module-to-op: {inst.name}: ggml_output_rows must be one of "
                            f"{', '.join(OUTPUT_ROWS)}, got {attr}")
    if rows is not None:
        lo.prune = rows == "last_layer"
    return rows
