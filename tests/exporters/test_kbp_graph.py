"""kbp-graph/v1 export of a hand-written blueprint shaped like the Qwen3.6-35B-A3B plan (tests/blueprint_graph_ir.py:
embed, two Gated DeltaNet + MoE layers, one gated-attention + MoE layer, head)."""

from __future__ import annotations

import json

import pytest
from xdsl.context import Context
from xdsl.dialects import func

from blueprint_graph_ir import KINDS, TEXT, blueprint_fn, blueprint_text
from strata.dialects import parse_ir
from strata.exporters.kbp_graph import export_kbp_graph, kbp_graph_json
from strata.errors import StrataError
from strata.passes.blueprint_collapse import BlueprintCollapsePass
from support import SEEDS

PROV = {"model_config_sha256": "0" * 64, "recipe": "fp8-bf16head", "mode": "decode", "rows": 1, "strata": "test"}


@pytest.fixture(scope="module")
def doc() -> dict:
    return export_kbp_graph(blueprint_fn(), provenance=PROV)


@pytest.fixture(scope="module")
def seed() -> dict:
    found = sorted(SEEDS.glob("001_*.txt")) if SEEDS.is_dir() else []
    if not found:
        pytest.skip("no ../shared/seeds/001_*.txt beside the checkout")
    return json.loads(found[0].read_text())


def test_keys_and_counts(doc, seed):
    assert list(doc) == list(seed)
    assert doc["schema"] == "kbp-graph/v1" and doc["revision"] == 0 and doc["exported_by"] == "strata blueprint"
    assert (len(doc["nodes"]), len(doc["edges"]), len(doc["groups"])) == (75, 106, 49)
    assert list(doc["arm"]) == ["mode", "rows", "digest"] and doc["arm"]["mode"] == "decode" and doc["arm"]["rows"] == 1
    for ours, theirs in ((doc["nodes"][0], seed["nodes"][0]), (doc["edges"][0], seed["edges"][0]),
                         (doc["groups"][0], seed["groups"][0]), (doc["layers"][0], seed["layers"][0])):
        assert list(ours) == list(theirs)


def test_embed_and_the_first_two_layers_are_the_kbp_graph_plans_rows(doc, seed):
    # Our layers 0 and 1 are the seed's layers 0 and 1, node for node, edge for edge.
    assert doc["nodes"][:47] == seed["nodes"][:47]
    assert [e for e in doc["edges"] if e["from"] < 46] == [e for e in seed["edges"] if e["from"] < 46]
    assert doc["groups"][:27] == seed["groups"][:27]
    assert doc["layers"][:2] == seed["layers"][:2]


def test_the_attention_layer_is_the_kbp_graph_plans_layer_3(doc, seed):
    ours = [n for n in doc["nodes"] if n["layer"] == 2][:-1]  # the last add: ours ends the model
    theirs = [n for n in seed["nodes"] if n["layer"] == 3][:-1]
    shift = theirs[0]["order"] - ours[0]["order"], theirs[1]["group"] - ours[1]["group"]
    for a, b in zip(ours, theirs, strict=True):
        moved = dict(a, id=a["id"].replace("l2.", "l3.", 1), block=a["block"].replace("l2.", "l3.", 1), layer=3,
                     order=a["order"] + shift[0], group=a["group"] + shift[1])
        assert moved == b


def test_fused_edges(doc):
    fused = {(doc["nodes"][e["from"]]["id"], doc["nodes"][e["to"]]["id"]) for e in doc["edges"] if e["fused"]}
    assert ("l0.gdn.ba", "l0.gdn.gates") in fused and ("l0.gdn.conv", "l0.gdn.conv_ckpt") in fused
    assert ("l2.moe_ffn.shared_gate", "l2.moe_ffn.blend") in fused
    # In one group, but the value also leaves it: not fused.
    by_id = {n["id"]: n for n in doc["nodes"]}
    add, norm = by_id["l0.moe_ffn.add"], by_id["l1.gdn.input_norm"]
    assert add["group"] == norm["group"]
    assert not any(e["fused"] for e in doc["edges"] if e["from"] == add["order"])
    # Per GDN + MoE layer: ba, conv (twice), eact, sact, sg; per attention + MoE layer: eact, sact, sg.
    assert len(fused) == 2 * 6 + 3


def test_the_cross_layer_group(doc):
    cross = [g for g in doc["groups"] if g["rule"] == "cross_layer_add_norm"]
    assert [[doc["nodes"][i]["id"] for i in g["nodes"]] for g in cross] == [
        ["l0.moe_ffn.add", "l1.gdn.input_norm"], ["l1.moe_ffn.add", "l2.attn.input_norm"]]
    assert cross[0]["numerics"] == "bit_identical(residual_add_rms_norm_exact_microtest)"


def test_templates(doc):
    c = doc["collapsed"]
    assert c["prologue"] == ["embed"] and c["epilogue"] == ["head"]
    assert c["layout"] == ["gdn+moe_ffn", "gdn+moe_ffn", "attn+moe_ffn"]
    t = c["templates"]
    assert list(t) == ["embed", "gdn+moe_ffn", "attn+moe_ffn", "head"]
    assert t["gdn+moe_ffn"]["instances"] == [0, 1] and t["attn+moe_ffn"]["instances"] == [2]
    assert t["gdn+moe_ffn"]["ports"] == {"in": [0, 10], "out": [22]}
    assert t["attn+moe_ffn"]["ports"] == {"in": [0, 12], "out": [24]}
    assert t["head"]["ports"] == {"in": [0], "out": []} and t["embed"]["instances"] == []
    assert [layer["template"] for layer in doc["layers"]] == c["layout"]


def test_templates_with_the_seeds_shapes(doc, seed):
    for name in ("embed", "gdn+moe_ffn"):
        assert doc["collapsed"]["templates"][name] == dict(seed["collapsed"]["templates"][name],
                                                           instances=doc["collapsed"]["templates"][name]["instances"])


def test_deterministic_and_compact(doc):
    again = export_kbp_graph(blueprint_fn(), provenance=dict(PROV))
    text = kbp_graph_json(doc)
    assert kbp_graph_json(again) == text
    assert text.startswith('{"schema":"kbp-graph/v1","blueprint_id":"strata:') and not text.endswith("\n")
    assert json.loads(text) == doc


def test_identities_follow_their_inputs(doc):
    other = export_kbp_graph(blueprint_fn(), provenance=dict(PROV, recipe="bf16"))
    assert other["lineage"] != doc["lineage"] and other["blueprint_id"] == doc["blueprint_id"]
    assert other["arm"]["digest"] == doc["arm"]["digest"]
    changed = export_kbp_graph(blueprint_fn(TEXT.replace('node = "l1.gdn.recur"', 'node = "l1.gdn.recur", inserted')), provenance=PROV)
    assert changed["blueprint_id"] != doc["blueprint_id"] and changed["arm"]["digest"] != doc["arm"]["digest"]
    assert [n["id"] for n in changed["nodes"] if n["inserted"]] == ["l1.gdn.recur"]


def test_nodes_before_fusion_are_their_own_groups():
    fn = blueprint_fn()
    # Unwrap the first group holding l0.gdn.qkvz: move its node to top level.
    from strata.dialects.blueprint import GroupOp, YieldOp

    g = next(op for op in fn.walk() if isinstance(op, GroupOp) and op.rule.data == "w8a16_m32")
    node = next(op for op in g.body.block.ops if not isinstance(op, YieldOp))
    node.detach()
    fn.body.block.insert_op_before(node, g)
    g.outs[0].replace_all_uses_with(node.results[0])
    g.detach()
    g.erase()
    doc = export_kbp_graph(fn, provenance=PROV)
    row = doc["nodes"][2]
    assert row["id"] == "l0.gdn.qkvz" and row["kernel"] is None and row["where"] is None
    assert doc["groups"][2] == {"id": 2, "rule": "linear", "kernels": [], "where": None, "numerics": None,
                                "compute": None, "nodes": [2]}


def test_recorded_collapse_must_be_current():
    module = parse_ir(TEXT)
    BlueprintCollapsePass().apply(Context(), module)
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    export_kbp_graph(fn, provenance=PROV)  # agrees
    stale = parse_ir(str(module).replace('"gdn+moe_ffn", "gdn+moe_ffn", "attn+moe_ffn"]',
                                         '"gdn+moe_ffn", "attn+moe_ffn", "attn+moe_ffn"]'))
    fn = next(op for op in stale.walk() if isinstance(op, func.FuncOp))
    with pytest.raises(StrataError, match="'blueprint.collapsed' is stale \\(layout differs"):
        export_kbp_graph(fn, provenance=PROV)


def test_missing_function_attributes_are_one_line_errors():
    with pytest.raises(StrataError, match="needs 'blueprint.layers'"):
        export_kbp_graph(blueprint_fn(TEXT.replace("blueprint.layers", "blueprint.kinds")), provenance=PROV)
    with pytest.raises(StrataError, match="node 'l2.attn.input_norm' is in layer 2, but 'blueprint.layers' lists 2"):
        export_kbp_graph(blueprint_fn(blueprint_text(KINDS).replace(', "full_attention"]', "]")), provenance=PROV)
    with pytest.raises(StrataError, match="needs a string attribute 'blueprint.mode'"):
        export_kbp_graph(blueprint_fn(TEXT.replace('blueprint.mode = "decode", ', "")), provenance=PROV)
