"""blueprint-place-state: placement of every node (options embed/sample), the KV layout, state
effects from the node kind (slots kept), snapshots inserted only in verify/draft; values and
state unchanged when the step runs (verify mode adds the snapshots' copies, nothing else)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

from strata.dialects import parse_ir, strata_context
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint.gdn import StateSnapshotOp
from strata.errors import StrataError
from strata.passes import strata_passes
from strata.passes.blueprint_assign_precision import BlueprintAssignPrecisionPass
from strata.passes.blueprint_place_state import BlueprintPlaceStatePass, PlaceStateError
from strata.semantics.blueprint_interp import run_blueprint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from blueprint_fixture import blueprint_text  # noqa: E402
from blueprint_step import DIMS, _decode_text, _tiny_state, _tiny_weights  # noqa: E402


def place(text: str, **opts) -> ModuleOp:
    m = parse_ir(text)
    BlueprintPlaceStatePass(**opts).apply(strata_context(), m)
    m.verify()
    return m


def by_id(m: ModuleOp) -> dict[str, NodeOp]:
    return {op.node.data: op for op in m.walk() if isinstance(op, NodeOp) and op.node is not None}


def effects(op: NodeOp) -> list[str]:
    return [f"{e.state.data}:{e.effect.data}" for e in op.effects.data] if op.effects is not None else []


def test_registered():
    assert strata_passes()["blueprint-place-state"]() is BlueprintPlaceStatePass


def test_defaults_are_the_kbp_graph_plans():
    nodes = by_id(place(blueprint_text(["linear_attention", "full_attention"])))
    where = {k: n.placement.value for k, n in nodes.items()}
    assert where.pop("embed.embed") == "host" and where.pop("head.argmax") == "host"
    assert set(where.values()) == {"device"}
    assert nodes["l1.attn.kv_write"].attributes["kv_layout"] == StringAttr("paged")
    assert nodes["l1.attn.attend"].attributes["kv_layout"] == StringAttr("paged")
    assert "kv_layout" not in nodes["l1.attn.q"].attributes


def test_options():
    nodes = by_id(place(blueprint_text(["full_attention"]), kv="contiguous", embed="device", sample="device"))
    assert {n.placement.value for n in nodes.values()} == {"device"}
    assert nodes["l0.attn.attend"].attributes["kv_layout"] == StringAttr("contiguous")
    with pytest.raises(PlaceStateError, match="kv=.ring. is not one of paged, contiguous"):
        place(blueprint_text(["full_attention"]), kv="ring")


def test_effects_set_from_kind_and_slots_kept():
    bare = by_id(place(blueprint_text(["linear_attention", "full_attention"], effects=False)))
    assert effects(bare["l0.gdn.conv"]) == ["conv:update"]
    assert effects(bare["l0.gdn.conv_ckpt"]) == ["conv:snapshot"]
    assert effects(bare["l0.gdn.recur"]) == ["h:update"]
    assert effects(bare["l1.attn.kv_write"]) == ["k:write", "v:write"]
    assert effects(bare["l1.attn.attend"]) == ["k:read", "v:read"]
    assert bare["l0.gdn.conv"].slots is None
    given = by_id(place(blueprint_text(["linear_attention", "full_attention"])))
    assert [s.data for s in given["l0.gdn.conv"].slots.data] == ["conv_l0"]
    assert [s.data for s in given["l1.attn.kv_write"].slots.data] == ["k_l1", "v_l1"]


def test_effects_that_do_not_fit_the_kind():
    text = blueprint_text(["full_attention"]).replace(
        "effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>], slots = [\"k_l0\", \"v_l0\"]",
        "effects = [#blueprint.effect<k:write>], slots = [\"k_l0\"]")
    with pytest.raises(PlaceStateError, match="'l0.attn.kv_write' has effects \\[k:write\\]"):
        place(text)


@pytest.mark.parametrize("mode, inserted", [("decode", 0), ("multi_seq", 0), ("prefill", 0), ("verify", 2),
                                            ("draft", 2)])
def test_snapshots_by_mode(mode, inserted):
    m = place(blueprint_text(["linear_attention", "linear_attention"], mode=mode))
    snaps = [op for op in m.walk() if isinstance(op, StateSnapshotOp)]
    new = [s for s in snaps if "inserted" in s.attributes]
    assert len(snaps) == 2 + inserted and len(new) == inserted
    for s in new:  # an h snapshot right after its recurrence, on the recurrence's slot
        rec = s.src.owner
        assert rec.name == "blueprint.gdn_recurrence" and rec.next_op is s
        assert effects(s) == ["h:snapshot"] and s.slots == rec.slots
        assert s.node.data == rec.node.data + "_ckpt"
    again = m.clone()
    BlueprintPlaceStatePass().apply(strata_context(), again)
    assert str(again) == str(m)  # nothing inserted twice


def test_unknown_mode():
    with pytest.raises(StrataError, match="blueprint-place-state: @decode: unknown mode 'train'"):
        place(blueprint_text(["linear_attention"], mode="train"))


def _run(m: ModuleOp):
    fn = next(op for op in m.walk() if isinstance(op, func.FuncOp))
    state = _tiny_state()
    out = run_blueprint(fn, _tiny_weights(), state, [np.array([[5]], dtype=np.int32)], dims=DIMS, pos=1)
    return out, state


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_execution_before_and_after(mode):
    before = parse_ir(_decode_text(None))
    BlueprintAssignPrecisionPass(recipe="fp8-bf16head").apply(strata_context(), before)
    fn = next(op for op in before.walk() if isinstance(op, func.FuncOp))
    fn.attributes["blueprint.mode"] = StringAttr(mode)
    after = before.clone()
    BlueprintPlaceStatePass().apply(strata_context(), after)
    after.verify()
    out_b, st_b = _run(before)
    out_a, st_a = _run(after)
    for x, y in zip(out_b, out_a, strict=True):
        np.testing.assert_array_equal(x, y)
    extra = set(st_a) - set(st_b)
    assert extra == (set() if mode == "decode" else {"conv.snapshot", "h.snapshot"})
    for k in st_b:
        np.testing.assert_array_equal(st_b[k], st_a[k])
    for k in extra:  # a snapshot holds the state right after its update, which nothing changes later
        np.testing.assert_array_equal(st_a[k], st_a[k.removesuffix(".snapshot")])
