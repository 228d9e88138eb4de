"""blueprint-collapse: it records the templates of tests/blueprint_graph_ir.py's blueprint as the
exporter computes them, changes nothing else, and the interpreter's decode step gives the same
values and state before and after it."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, StringAttr, UnitAttr

from blueprint_graph_ir import TEXT
from strata.dialects import parse_ir
from strata.dialects.blueprint import NodeOp
from strata.dialects.blueprint_graph import COLLAPSED_ATTR, collapsed_summary, read_graph, recorded_collapsed
from strata.dialects.blueprint_templates import collapse
from strata.errors import StrataError
from strata.passes import PASSES, strata_passes
from strata.passes.blueprint_collapse import BlueprintCollapsePass


def _fn(module) -> func.FuncOp:
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


def test_registered():
    assert "blueprint-collapse" in PASSES and strata_passes()["blueprint-collapse"]() is BlueprintCollapsePass


def test_records_what_the_exporter_computes():
    module = parse_ir(TEXT)
    BlueprintCollapsePass().apply(Context(), module)
    fn = _fn(module)
    graph = read_graph(fn)
    assert recorded_collapsed(fn) == collapsed_summary(collapse(graph.nodes, graph.edges))
    assert recorded_collapsed(fn) == {
        "prologue": ["embed"], "layout": ["gdn+moe_ffn", "gdn+moe_ffn", "attn+moe_ffn"], "epilogue": ["head"],
        "templates": {
            "embed": {"instances": [], "ports": {"in": [], "out": [0]}},
            "gdn+moe_ffn": {"instances": [0, 1], "ports": {"in": [0, 10], "out": [22]}},
            "attn+moe_ffn": {"instances": [2], "ports": {"in": [0, 12], "out": [24]}},
            "head": {"instances": [], "ports": {"in": [0], "out": []}},
        }}


def test_changes_nothing_else_and_round_trips():
    before = parse_ir(TEXT)
    after = parse_ir(TEXT)
    BlueprintCollapsePass().apply(Context(), after)
    assert str(parse_ir(str(after))) == str(after)
    del _fn(after).attributes[COLLAPSED_ATTR]
    assert str(after) == str(before)


def test_rerun_after_a_change_updates_the_record():
    module = parse_ir(TEXT)
    BlueprintCollapsePass().apply(Context(), module)
    fn = _fn(module)
    node = next(op for op in fn.walk() if isinstance(op, NodeOp) and op.node.data == "l0.gdn.recur")
    node.attributes["inserted"] = UnitAttr()
    BlueprintCollapsePass().apply(Context(), module)
    assert recorded_collapsed(fn)["layout"] == ["gdn+moe_ffn", "gdn+moe_ffn#2", "attn+moe_ffn"]
    assert recorded_collapsed(fn)["templates"]["gdn+moe_ffn#2"]["instances"] == [1]


def test_a_node_without_an_id_is_an_error():
    text = TEXT.replace('node = "l1.gdn.l2", ', "")
    with pytest.raises(StrataError, match="a blueprint.l2_norm node has no 'node' id"):
        BlueprintCollapsePass().apply(Context(), parse_ir(text))


# Executed before and after: the interpreter tests' decode step, given node ids and layers.

STEP_IDS = [
    "embed.embed", "l0.gdn.input_norm", "l0.gdn.qkvz", "l0.gdn.ba", "l0.gdn.conv", "l0.gdn.l2", "l0.gdn.gates",
    "l0.gdn.recur", "l0.gdn.out_norm", "l0.gdn.out", "l0.gdn.add", "l0.moe_ffn.post_norm", "l0.moe_ffn.router",
    "l0.moe_ffn.top_k", "l0.moe_ffn.experts_gate_up", "l0.moe_ffn.experts_act", "l0.moe_ffn.experts_down",
    "l0.moe_ffn.shared_gate_up", "l0.moe_ffn.shared_act", "l0.moe_ffn.shared_down", "l0.moe_ffn.shared_gate",
    "l0.moe_ffn.blend", "l0.moe_ffn.add", "head.final_norm", "head.lm_head", "head.argmax",
]


def _run_step(collapse_first: bool):
    import blueprint_step as step
    from strata.semantics.blueprint_interp import run_blueprint

    module = parse_ir(step._decode_text(None))
    fn = _fn(module)
    nodes = [op for op in fn.walk() if isinstance(op, NodeOp)]
    assert len(nodes) == len(STEP_IDS)
    for op, nid in zip(nodes, STEP_IDS):
        op.attributes["node"] = StringAttr(nid)
        op.attributes["edges"] = ArrayAttr([StringAttr(f"{nid}.{k}") for k in range(len(op.results))])
    fn.attributes["blueprint.layers"] = ArrayAttr([StringAttr("linear_attention")])
    if collapse_first:
        BlueprintCollapsePass().apply(Context(), module)
        assert recorded_collapsed(fn)["layout"] == ["gdn+moe_ffn"]
    state = step._tiny_state()
    outs = run_blueprint(fn, step._tiny_weights(), state, [np.array([[7]], np.int32)], dims=step.DIMS)
    return outs, state


def test_the_decode_step_computes_the_same_before_and_after():
    (next0, logits0), state0 = _run_step(False)
    (next1, logits1), state1 = _run_step(True)
    np.testing.assert_array_equal(logits1, logits0)
    np.testing.assert_array_equal(next1, next0)
    for name in state0:
        np.testing.assert_array_equal(state1[name], state0[name])
