"""Op-level expansion of the sparse mixture of experts, as llama.cpp's build_moe_ffn with
softmax gating builds it (src/llama-graph.cpp), plus the sigmoid-gated shared expert of
qwen35moe.cpp / qwen3next.cpp.

Routing: SOFT_MAX of the router logits, ARGSORT (descending) and a VIEW of its first TopK
columns (ggml_argsort_top_k), GET_ROWS of the chosen probabilities, then SUM_ROWS, CLAMP and
DIV to renormalise them; the experts are MUL_MAT_IDs (gate, up, SWIGLU, down) that compute
only the routed experts, weighted by MUL and summed over the TopK slots with views and ADDs.

llama.cpp's builders for these families always renormalise; HF's Qwen3-MoE and Qwen3-Next
do so only with `norm_topk_prob`. Without it the graph stays llama.cpp's, with the CLAMP's
bounds both 1: the DIV divides by 1 and the weights are HF's softmax probabilities.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import FloatAttr, StringAttr, f64, i32
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering, flag, tensor

#: llama.cpp clamps the weights' sum to the smallest normal f16 before dividing by it.
SUM_MIN = 6.103515625e-5


@EXPANSIONS.register("std.moe.sparse")
class SparseMoe:
    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue) -> SSAValue:
        g, sfx = lo.g, lo.suffix(inst)
        S, hidden = O.shape_of(x)  # the rows: the call's tokens, or the output rows in a pruned last layer
        n_expert, k = inst.dim("Experts"), inst.dim("TopK")
        selected, weights = _route(lo, inst, x, n_expert, k)
        g.expand(weights)  # llama.cpp expands the weights early (for its fused top-k MoE)

        rows = g.reshape(x, (S, 1, hidden))  # one row per token, shared by its TopK experts

        # Expert parallel (`tp_experts`): each rank holds whole experts and computes only the
        # slots routed to them; the rest are zeros until the layer's all-reduce.
        sharded = lo.ranks > 1 and inst.knob("tp_experts") is not None

        def experts(name: str, b: SSAValue, label: str) -> SSAValue:
            w = lo.param(inst, name)
            shape = (S, k, O.shape_of(w)[1])
            if sharded:
                op = O.MulMatIdShardedOp.create(operands=[w, b, selected], result_types=[tensor(shape)],
                                                attributes=O.group_attrs(lo.ranks))
            else:
                op = O.MulMatIdOp.create(operands=[w, b, selected], result_types=[tensor(shape)],
                                         attributes=g.activation_quant(w))
            return g.add(op, label)

        up = experts("up_exps", rows, f"ffn_moe_up{sfx}")
        gate = experts("gate_exps", rows, f"ffn_moe_gate{sfx}")
        act = g.binary(O.SwigluOp, gate, up, O.shape_of(gate), f"ffn_moe_swiglu{sfx}")
        down = experts("down_exps", act, f"ffn_moe_down{sfx}")
        down = g.expand(g.binary(O.MulOp, down, weights, O.shape_of(down), f"ffn_moe_weighted{sfx}"))
        # The TopK slots' views first, then their sum (llama.cpp orders the views before the adds).
        slots = [g.expand(g.view(down, (S, hidden), None, j * hidden, (k * hidden, 1))) for j in range(k)]
        out = slots[0]
        for slot in slots[1:]:
            out = g.expand(g.binary(O.AddOp, out, slot, (S, hidden)))
        if k == 1:  # a view is not contiguous
            out = g.unary(O.ContOp, out, (S, hidden))
        out = g.rename(out, f"ffn_moe_out{sfx}")
        # Tensor parallel (`tp_reduce`): each rank's experts (a piece of each expert's intermediate
        # dim, or whole experts of its own) and shared expert hold a part of the sum; one
        # all-reduce joins the routed and shared parts.
        reduce = lo.ranks > 1 and inst.knob("tp_reduce") is not None
        if "shared_expert" not in inst.children:
            return lo.all_reduce(out, f"ffn_moe_out{sfx}") if reduce else out
        shared = lo.call(inst.child("shared_expert"), "forward", x, label=f"ffn_shexp{sfx}")
        sgate = lo.call(inst.child("shared_expert_gate"), "forward", x, label=f"shared_expert_gate{sfx}")
        sgate = g.unary(O.SigmoidOp, sgate, O.shape_of(sgate), f"shared_expert_gate_sigmoid{sfx}")
        shared = g.binary(O.MulOp, shared, sgate, O.shape_of(shared), f"ffn_shexp_gated{sfx}")
        out = g.binary(O.AddOp, out, shared, (S, hidden), f"ffn_out{sfx}")
        return lo.all_reduce(out, f"ffn_out{sfx}") if reduce else out


def _route(lo: Lowering, inst: BlockInstance, x: SSAValue, n_expert: int, k: int) -> tuple[SSAValue, SSAValue]:
    """The experts of each token [S, TopK] (i32) and their weights [S, TopK, 1]."""
    g, S, sfx = lo.g, O.shape_of(x)[0], lo.suffix(inst)
    logits = lo.call(inst.child("router"), "forward", x, label=f"ffn_moe_logits{sfx}")
    probs = g.add(O.SoftMaxOp.create(operands=[logits], result_types=[logits.type],
                                     attributes={"scale": FloatAttr(1.0, f64)}), f"ffn_moe_probs{sfx}")
    order = g.unary(O.ArgsortOp, probs, (S, n_expert), f"ffn_moe_argsort{sfx}", elem=i32, order=StringAttr("desc"))
    selected = g.view(order, (S, k), f"ffn_moe_topk{sfx}", 0, (n_expert, 1))
    weights = g.binary(O.GetRowsOp, g.reshape(probs, (S, n_expert, 1)), selected, (S, k, 1), f"ffn_moe_weights{sfx}")
    weights = g.reshape(weights, (S, k))
    total = g.unary(O.SumRowsOp, weights, (S, 1), f"ffn_moe_weights_sum{sfx}")
    lo_, hi = (SUM_MIN, math.inf) if flag(inst, "norm_topk_prob") else (1.0, 1.0)
    total = g.unary(O.ClampOp, total, (S, 1), f"ffn_moe_weights_sum_clamped{sfx}", min=FloatAttr(lo_, f64),
                    max=FloatAttr(hi, f64))
    weights = g.binary(O.DivOp, weights, total, (S, k), f"ffn_moe_weights_norm{sfx}")
    return selected, g.reshape(weights, (S, k, 1))
