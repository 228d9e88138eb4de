"""blueprint-fuse: every node in exactly one group; the Qwen3.6-35B-A3B kbp-graph/v1 plan's grouping and rule names for its
model under fp8-bf16head; the same membership under every recipe; points spread over a group;
dense families; pre-existing groups unwrapped; values unchanged when the step runs."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from strata.dialects import parse_ir, strata_context
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint.group import GroupOp
from strata.passes import strata_passes
from strata.passes.blueprint_assign_precision import BlueprintAssignPrecisionPass
from strata.passes.blueprint_fuse import BlueprintFusePass, FuseError, load_rules, parse_rules, rule_set_names
from strata.passes.blueprint_place_state import BlueprintPlaceStatePass
from strata.semantics.blueprint_interp import run_blueprint

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from blueprint_fixture import SEED_GROUPS_OUTSIDE, SEED_GROUPS_PER_LAYER, blueprint_text  # noqa: E402
from blueprint_step import DIMS, _decode_text, _tiny_state, _tiny_weights  # noqa: E402

SEED = sorted(glob.glob(str(TESTS.parents[1] / "shared" / "seeds" / "001_*.txt")))


def pipeline(text: str, recipe: str = "fp8-bf16head", **place) -> ModuleOp:
    m = parse_ir(text)
    ctx = strata_context()
    for p in (BlueprintAssignPrecisionPass(recipe=recipe), BlueprintPlaceStatePass(**place), BlueprintFusePass()):
        p.apply(ctx, m)
    m.verify()
    return m


def groups(m: ModuleOp) -> list[GroupOp]:
    return [op for op in m.walk() if isinstance(op, GroupOp)]


def members(g: GroupOp) -> list[str]:
    return [op.node.data for op in g.body.block.ops if isinstance(op, NodeOp) and op.node is not None]


def table(m: ModuleOp) -> list[tuple[str, list[str]]]:
    return [(g.rule.data, members(g)) for g in groups(m)]


def test_registered_and_rules_are_package_data():
    assert strata_passes()["blueprint-fuse"]() is BlueprintFusePass
    assert rule_set_names() == ["rules"] and load_rules("rules").rules
    assert '"strata.passes.fusion" = ["*.json"]' in (TESTS.parent / "pyproject.toml").read_text()


@pytest.mark.parametrize("layers", [["linear_attention"], ["linear_attention", "full_attention"],
                                    ["full_attention", "linear_attention", "linear_attention", "full_attention"]])
def test_every_node_in_exactly_one_group_and_group_counts(layers):
    m = pipeline(blueprint_text(layers))
    fn = next(op for op in m.walk() if isinstance(op, func.FuncOp))
    top = list(fn.body.block.ops)
    assert all(isinstance(op, (GroupOp, func.ReturnOp)) for op in top)
    nodes = [op for op in m.walk() if isinstance(op, NodeOp)]
    assert len(nodes) == sum(len(members(g)) for g in groups(m))
    assert all(isinstance(n.parent_op(), GroupOp) for n in nodes)
    expected = sum(SEED_GROUPS_PER_LAYER[k] for k in layers) + len(SEED_GROUPS_OUTSIDE)
    # the last layer's final add is a group of its own (ffn_residual_add), not a cross-layer one
    assert len(groups(m)) == expected
    assert [g.rule.data for g in groups(m)][:2] == SEED_GROUPS_OUTSIDE[:2]
    assert [g.rule.data for g in groups(m)][-4:] == ["ffn_residual_add", *SEED_GROUPS_OUTSIDE[2:]]


@pytest.mark.skipif(not SEED, reason="the kbp-graph/v1 plan of Qwen3.6-35B-A3B is not in ../shared/seeds (001_*.txt)")
def test_kbp_graph_plan_grouping_and_rule_names():
    seed = json.loads(Path(SEED[0]).read_text())
    nodes = seed["nodes"]
    want = [(g["rule"], [nodes[i]["id"] for i in g["nodes"]]) for g in seed["groups"]]
    m = pipeline(blueprint_text([layer["kind"] for layer in seed["layers"]]))
    assert table(m) == want
    where = {g["rule"]: g["where"] for g in seed["groups"]}
    assert all(g.placement.value == where[g.rule.data] for g in groups(m))
    # the plan's points after fusion: every member carries its group's union
    points = {n["id"]: n["point"] or {} for n in nodes}
    for op in m.walk():
        if isinstance(op, NodeOp) and op.node is not None and op.node.data in points and op.name != "blueprint.rope":
            have = {k: v.data for k, v in op.point.data.items()} if op.point is not None else {}
            assert have == points[op.node.data], op.node.data


def test_points_spread_within_groups():
    m = pipeline(blueprint_text(["linear_attention"]))
    by_id = {op.node.data: op for op in m.walk() if isinstance(op, NodeOp)}
    assert {k: v.data for k, v in by_id["l0.gdn.ba"].point.data.items()} == {"gate": "softplus", "decay": "head"}
    assert {k: v.data for k, v in by_id["l0.moe_ffn.shared_gate"].point.data.items()} == {"shared_gate": "sigmoid"}
    assert by_id["l0.gdn.qkvz"].point is None


@pytest.mark.parametrize("recipe, gemm, elem", [("bf16", "bf16", "bf16"), ("f32", "f32", "f32"),
                                                ("w4a16", "w4a16", "int4")])
def test_membership_is_the_same_under_every_recipe(recipe, gemm, elem):
    text = blueprint_text(["linear_attention", "full_attention"])
    ref = table(pipeline(text))
    got = table(pipeline(text, recipe))
    assert [mem for _, mem in got] == [mem for _, mem in ref]
    rename = {r: g for (r, _), (g, _) in zip(ref, got, strict=True)}
    assert rename["w8a16_m32"] == f"{gemm}_m32"
    assert rename["moe_gate_up_shared_fp8"] == f"moe_gate_up_shared_{elem}"
    assert rename["moe_silu_down_shared_fp8"] == f"moe_silu_down_shared_{elem}"


def test_group_attributes_and_yields():
    m = pipeline(blueprint_text(["linear_attention"]))
    g = next(g for g in groups(m) if g.rule.data == "w8a16_m32")
    assert {k: g.attributes[k].data for k in ("kernel", "family", "compute", "numerics")} == {
        "kernel": "strata::w8a16_gemm", "family": "w8a16_gemm", "compute": "tensor_core", "numerics": "reference"}
    cross = next(g for g in groups(m) if g.rule.data == "residual_add_post_norm")
    assert len(cross.outs) == 2  # the residual (read by the layer's last add) and the norm
    conv = next(g for g in groups(m) if g.rule.data.startswith("gdn_conv_l2"))
    assert len(conv.outs) == 1  # conv's result stays inside (snapshot and l2 read it)


def test_dense_family_and_options():
    m = pipeline(blueprint_text(["attention", "attention"], ffn="dense", rope_mode="neox"), kv="contiguous",
                 sample="device")
    rules = [r for r, _ in table(m)]
    assert rules.count("ffn_gate_up_silu_w8a16") == 2 and "rope_neox" in rules
    assert "contiguous_attention_bf16" in rules and rules[-1] == "argmax_device"
    assert len(rules) == 2 * 13 + 5


def test_qwen3_moe_without_shared_expert():
    rules = [r for r, _ in table(pipeline(blueprint_text(["attention"], ffn="moe", qk_norm=False)))]
    assert "moe_gate_up_fp8" in rules and "moe_silu_down_fp8" in rules


def test_idempotent_and_needs_placement():
    m = pipeline(blueprint_text(["full_attention"]))
    before = str(m)
    BlueprintFusePass().apply(strata_context(), m)
    assert str(m) == before
    bare = parse_ir(blueprint_text(["full_attention"]))
    with pytest.raises(FuseError, match="no placement"):
        BlueprintFusePass().apply(strata_context(), bare)


def test_needs_precision_for_format_names():
    m = parse_ir(blueprint_text(["linear_attention"]))
    BlueprintPlaceStatePass().apply(strata_context(), m)
    with pytest.raises(FuseError, match="run blueprint-assign-precision first"):
        BlueprintFusePass().apply(strata_context(), m)


def test_unknown_and_malformed_rules(tmp_path):
    with pytest.raises(FuseError, match=r"unknown rule set 'nope' \(known: rules\)"):
        load_rules("nope")
    bad = {"rules": [{"rule": "x", "members": [{"op": "linear"}, {"op": "silu_mul"}], "kernel": "k",
                      "family": "f", "compute": "c"}]}
    with pytest.raises(FuseError, match="member 1: needs a relation"):
        parse_rules("t", tmp_path / "t.json", json.dumps(bad))
    with pytest.raises(FuseError, match="not JSON"):
        parse_rules("t", tmp_path / "t.json", "{")


def _run(fn_mod: ModuleOp):
    fn = next(op for op in fn_mod.walk() if isinstance(op, func.FuncOp))
    state = _tiny_state()
    tok = np.array([[3]], dtype=np.int32)
    out = run_blueprint(fn, _tiny_weights(), state, [tok], dims=DIMS, pos=2)
    return out, state


@pytest.mark.parametrize("recipe", ["f32", "fp8-bf16head"])
def test_execution_before_and_after(recipe):
    """The tiny GDN + MoE step (tests/blueprint_step.py; it already holds a group, which the pass
    unwraps) gives the same outputs and state before and after place-state and fuse."""
    before = parse_ir(_decode_text(None))
    BlueprintAssignPrecisionPass(recipe=recipe).apply(strata_context(), before)
    after = before.clone()
    BlueprintPlaceStatePass().apply(strata_context(), after)
    BlueprintFusePass().apply(strata_context(), after)
    after.verify()
    assert [g.rule.data for g in groups(after)].count("residual_add_norm") == 1
    out_b, st_b = _run(before)
    out_a, st_a = _run(after)
    for x, y in zip(out_b, out_a, strict=True):
        np.testing.assert_array_equal(x, y)
    assert st_b.keys() == st_a.keys()
    for k in st_b:
        np.testing.assert_array_equal(st_b[k], st_a[k])


def test_verify_mode_groups_the_inserted_h_snapshot_with_its_recurrence():
    m = pipeline(blueprint_text(["linear_attention"], mode="verify"))
    g = next(g for g in groups(m) if g.rule.data.startswith("gdn_recurrence"))
    assert g.rule.data == "gdn_recurrence_ckpt_f32_per_row"
    assert [op.name for op in g.body.block.ops] == ["blueprint.gdn_recurrence", "blueprint.state_snapshot",
                                                    "blueprint.yield"]


_H = '!blueprint.edge<"n", "hidden", bf16>'
_ADDS = {"rules": [{"rule": "two_adds", "members": [{"op": "residual_add"}, {"op": "residual_add", "uses": 0}],
                    "kernel": "k", "family": "f", "compute": "memory"}]}


def _two_adds(between_reads: str) -> func.FuncOp:
    text = f'''func.func @f(%h: {_H}) -> {_H} {{
  %y = blueprint.residual_add %h, %h {{placement = #blueprint.placement<device>}} : {_H}, {_H} -> {_H}
  %o = blueprint.linear %{between_reads} weight "w" role "o" {{placement = #blueprint.placement<device>}} : {_H} -> {_H}
  %y2 = blueprint.residual_add %y, %o {{placement = #blueprint.placement<device>}} : {_H}, {_H} -> {_H}
  func.return %y2 : {_H}
}}'''
    return next(op for op in parse_ir(text).walk() if isinstance(op, func.FuncOp))


def test_a_group_stands_at_its_last_member_when_a_member_reads_a_value_from_between(tmp_path):
    from strata.passes.blueprint_fuse import fuse_function

    fn = _two_adds("h")  # %o (between the adds) reads %h: the group can stand where %y2 stood
    fuse_function(parse_rules("t", tmp_path / "t.json", json.dumps(_ADDS)), fn)
    fn.verify()
    assert [op.attributes["rule"].data for op in fn.body.block.ops if isinstance(op, GroupOp)] == \
        ["single_linear", "two_adds"]


def test_a_match_that_would_break_dominance_is_refused(tmp_path):
    from strata.passes.blueprint_fuse import fuse_function

    fn = _two_adds("y")  # %o reads %y and %y2 reads %o: grouping the adds would make a cycle
    fuse_function(parse_rules("t", tmp_path / "t.json", json.dumps(_ADDS)), fn)
    fn.verify()
    assert [op.attributes["rule"].data for op in fn.body.block.ops if isinstance(op, GroupOp)] == \
        ["single_residual_add", "single_linear", "single_residual_add"]
