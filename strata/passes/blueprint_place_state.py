"""blueprint-place-state{kv=paged|contiguous embed=host|device sample=host|device}: where each
blueprint node runs, how the KV cache is laid out, and which state each stateful node touches.

  - `placement`: every node gets one: `blueprint.embed` on `embed` (default host, as kbp-graph/v1's
    `embed_row_copy`), `blueprint.argmax` and the sampler `blueprint.sample` on `sample`
    (default host, kbp-graph/v1's `argmax_host`), every other node on the device.
  - `kv_layout`: `kv_write`, `paged_attention` and the dense families' whole `attention` carry
    `kv_layout = "paged"` (default) or `"contiguous"`.
  - `effects`: a stateful node without effects gets its kind's (conv1d_update `conv:update`,
    state_snapshot `conv:snapshot`, gdn_recurrence `h:update`, kv_write `k:write, v:write`,
    paged_attention `k:read, v:read`, attention all four); one with effects must have exactly
    its kind's effect verbs (the state names are the converter's, and `slots` stay as they are).
  - Snapshots, by the function's `blueprint.mode` (absent: decode):
      decode, multi_seq, prefill: nothing is inserted and the converter's snapshots stay (a
        kbp-graph/v1 decode step snapshots the conv state after `conv1d_update`; every row of a
        multi_seq step is its own sequence and nothing is ever rolled back, prefill neither).
      verify, draft: a rejected draft token must roll back every recurrent state to the last
        accepted row, so every `conv1d_update` and every `gdn_recurrence` needs a
        `state_snapshot` of its state right after it. A missing one is inserted after the
        update (src = the update's result, effect `<state>:snapshot`, the update's slot, node id
        `<update id>_ckpt`) and marked with the unit attribute `inserted`. The KV cache needs no
        snapshot: rolling back is forgetting the rejected rows' positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, UnitAttr

from strata.dialects.blueprint.attrs import PlacementAttr, StateEffectAttr
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint.gdn import Conv1dUpdateOp, GdnRecurrenceOp, StateSnapshotOp
from strata.dialects.blueprint_graph import MODES, check_functions
from strata.errors import StrataError
from strata.passes.options import StrataPass

__all__ = ["BlueprintPlaceStatePass", "PlaceStateError", "DEFAULT_EFFECTS", "KV_LAYOUTS", "MODES", "ROLLBACK_MODES"]

KV_LAYOUTS = ("paged", "contiguous")
#: Modes whose steps may be rolled back (speculative decoding): every recurrent state is snapshotted.
ROLLBACK_MODES = ("verify", "draft")

#: op name (without `blueprint.`) -> its kind's state effects (state, verb).
DEFAULT_EFFECTS: dict[str, tuple[tuple[str, str], ...]] = {
    "conv1d_update": (("conv", "update"),),
    "state_snapshot": (("conv", "snapshot"),),
    "gdn_recurrence": (("h", "update"),),
    "kv_write": (("k", "write"), ("v", "write")),
    "paged_attention": (("k", "read"), ("v", "read")),
    "attention": (("k", "write"), ("v", "write"), ("k", "read"), ("v", "read")),
}
_KV_OPS = ("kv_write", "paged_attention", "attention")


class PlaceStateError(StrataError):
    """A bad option, or a node whose state effects do not fit its kind."""


def _kind(op: NodeOp) -> str:
    return op.name.removeprefix("blueprint.")


@dataclass(frozen=True)
class BlueprintPlaceStatePass(StrataPass):
    """Set every node's placement, the KV layout, state effects and (verify/draft) snapshots."""

    name = "blueprint-place-state"

    kv: str = "paged"
    embed: str = "host"
    sample: str = "host"

    def check(self) -> None:
        for key, value, allowed in (("kv", self.kv, KV_LAYOUTS), ("embed", self.embed, ("host", "device")),
                                    ("sample", self.sample, ("host", "device"))):
            if value not in allowed:
                raise PlaceStateError(f"blueprint-place-state: {key}={value!r} is not one of {', '.join(allowed)}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check()
        check_functions(op, self.name)
        for fn in [o for o in op.walk() if isinstance(o, func.FuncOp)]:
            mode_attr = fn.attributes.get("blueprint.mode")
            mode = mode_attr.data if isinstance(mode_attr, StringAttr) else "decode"  # checked above
            nodes = [o for o in fn.walk() if isinstance(o, NodeOp)]
            for node in nodes:
                self._place(node)
                _check_effects(node)
            if mode in ROLLBACK_MODES:
                for node in nodes:
                    if isinstance(node, (Conv1dUpdateOp, GdnRecurrenceOp)):
                        _ensure_snapshot(node)

    def _place(self, node: NodeOp) -> None:
        kind = _kind(node)
        where = self.embed if kind == "embed" else self.sample if kind in ("argmax", "sample") else "device"
        node.attributes["placement"] = PlacementAttr(where)
        if kind in _KV_OPS:
            node.attributes["kv_layout"] = StringAttr(self.kv)


def _check_effects(node: NodeOp) -> None:
    expected = DEFAULT_EFFECTS.get(_kind(node))
    if expected is None:
        if node.effects is not None and node.effects.data:
            raise PlaceStateError(f"blueprint-place-state: {node.name} {_label(node)}touches no state, "
                                  f"but carries effects")
        return
    if node.effects is None:
        if node.slots is not None:
            raise PlaceStateError(f"blueprint-place-state: {node.name} {_label(node)}has slots but no effects")
        node.attributes["effects"] = ArrayAttr([StateEffectAttr(s, v) for s, v in expected])
        return
    have = sorted(e.effect.data for e in node.effects.data)
    want = sorted(v for _, v in expected)
    if have != want:
        shown = ", ".join(f"{e.state.data}:{e.effect.data}" for e in node.effects.data)
        raise PlaceStateError(f"blueprint-place-state: {node.name} {_label(node)}has effects [{shown}]; "
                              f"its kind has {', '.join(f'{s}:{v}' for s, v in expected)}")


def _label(node: NodeOp) -> str:
    return f"'{node.node.data}' " if node.node is not None else ""


def _ensure_snapshot(update: NodeOp) -> None:
    """Insert a `state_snapshot` of `update`'s state right after it, unless one exists."""
    assert update.effects is not None and len(update.results) == 1
    state = update.effects.data[0].state.data
    for use in update.results[0].uses:
        user = use.operation
        if isinstance(user, StateSnapshotOp) and user.effects is not None and \
                any(e.state.data == state for e in user.effects.data):
            return
    attrs: dict = {"effects": ArrayAttr([StateEffectAttr(state, "snapshot")]), "inserted": UnitAttr(),
                   "placement": update.attributes["placement"]}
    if update.slots is not None:
        attrs["slots"] = ArrayAttr([update.slots.data[0]])
    if update.node is not None:
        attrs["node"] = StringAttr(update.node.data + "_ckpt")
    snap = StateSnapshotOp.create(operands=[update.results[0]], attributes=attrs)
    block = update.parent_block()
    assert block is not None
    nxt = update.next_op
    if nxt is None:
        block.add_op(snap)
    else:
        block.insert_op_before(snap, nxt)
