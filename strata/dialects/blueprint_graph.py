"""A blueprint function read as kbp-graph/v1 rows: nodes, edges and groups as plain
dicts, in kbp-graph/v1's key order. The kbp-graph exporter writes them, the `blueprint-collapse` pass
collapses their layers (`strata.dialects.blueprint_templates`), the Graphviz and table printers
draw them.

The function's body holds blueprint nodes, each inside one `blueprint.group`; a node still at top
level (before fusion) is its own group, whose rule is its op's name. Numbering follows the body:
`order` is a node's pre-order index, a group's `id` its index among the groups. A node's edges are
its results: one row per result and consumer node, where a value a group yields is followed to the
uses of the group's result (`func.return` is no consumer), ordered by (producer, result, consumer).
An edge is `fused` when its value never leaves its group (all its uses are nodes of that group).

The function's attributes give the rest: `blueprint.mode`, `blueprint.rows`, `blueprint.layers`
(each layer's kind), `blueprint.dims`, `blueprint.model`, `blueprint.recipe`.

A tensor-parallel blueprint (`blueprint.ranks`) adds to kbp-graph/v1's fields: each rank-dependent
node's row gets `ranks`, and each collective's `collective` ({kind, group, ranks, bytes_per_row,
bytes_per_call: the bytes one rank sends per call, null when the rows are not fixed});
`tensor_parallel` sums them (`tensor_parallel_summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, UnitAttr
from xdsl.ir import Attribute, Operation, SSAValue

from strata.dialects.blueprint import COLLECTIVE_NODES, EdgeType, FormatAttr, GroupOp, LinearOp, NodeOp, YieldOp, rank_sharded
from strata.dialects.blueprint.attrs import format_text
from strata.dialects.blueprint_templates import layer_of
from strata.errors import StrataError

#: The node fields, in kbp-graph/v1's order.
NODE_FIELDS = ("id", "order", "layer", "block", "block_type", "kind", "op", "roles", "inserted", "precision",
               "steps", "group", "kernel", "family", "point", "compute", "numerics", "where", "state")
#: The group attributes copied to the group's rows and its nodes' (absent: null).
GROUP_STRINGS = ("kernel", "family", "compute", "numerics")


def element_text(t: Attribute) -> str:
    """An edge element type as kbp-graph/v1 writes it (`bf16`, `f32`, `i32`)."""
    return str(t)


@dataclass
class Graph:
    """A blueprint function's rows and the attributes they were read with."""

    fn: func.FuncOp
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    #: The node ops, by order.
    ops: list[NodeOp] = field(default_factory=list)


def _str_attr(op: Operation, name: str) -> str | None:
    a = op.attributes.get(name)
    if a is None:
        return None
    if not isinstance(a, StringAttr):
        raise StrataError(f"blueprint: attribute '{name}' of {op.name} must be a string, got {a}")
    return a.data


#: The blueprint's modes (kbp-graph/v1's arms); a prefill's rows may be 0 (any length), a draft's are 1.
MODES = ("decode", "multi_seq", "verify", "draft", "prefill")
#: The most rows a blueprint function may take (the IR's int64 products stay safe).
MAX_ROWS = 2**31 - 1


def check_mode_rows(mode: str, rows: int, where: str) -> None:
    """The one rule for a blueprint's mode and rows, whoever gives them (a pass option, a CLI flag,
    a function's attributes): a one-line error naming `where`."""
    if mode not in MODES:
        raise StrataError(f"{where}: unknown mode '{mode}' (known: {', '.join(MODES)})")
    low = 0 if mode == "prefill" else 1
    if isinstance(rows, bool) or not isinstance(rows, int) or not low <= rows <= MAX_ROWS \
            or (mode == "draft" and rows != 1):
        allowed = "exactly 1 row" if mode == "draft" else f"{low} to {MAX_ROWS} rows"
        raise StrataError(f"{where}: mode {mode} takes {allowed}, got {rows}")


def check_function(fn: func.FuncOp, where: str = "blueprint") -> None:
    """Check the mode and rows a blueprint function records (where it records them), before a
    pass or a printer relies on them."""
    if "blueprint.mode" not in fn.attributes and "blueprint.rows" not in fn.attributes:
        return
    mode = fn_string(fn, "blueprint.mode", required=False) or "decode"
    rows = fn_int(fn, "blueprint.rows") if "blueprint.rows" in fn.attributes else 1
    check_mode_rows(mode, rows, f"{where}: @{fn.sym_name.data}")


def check_functions(module: Operation, where: str) -> None:
    """`check_function` on every function of `module`."""
    for fn in module.walk():
        if isinstance(fn, func.FuncOp):
            check_function(fn, where)


def fn_attr(fn: func.FuncOp, name: str) -> Attribute | None:
    return fn.attributes.get(name)


def fn_string(fn: func.FuncOp, name: str, required: bool = True) -> str | None:
    a = fn_attr(fn, name)
    if a is None and not required:
        return None
    if not isinstance(a, StringAttr):
        raise StrataError(f"blueprint: @{fn.sym_name.data} needs a string attribute '{name}'" + (f", got {a}" if a else ""))
    return a.data


def fn_int(fn: func.FuncOp, name: str) -> int:
    a = fn_attr(fn, name)
    if not isinstance(a, IntegerAttr):
        raise StrataError(f"blueprint: @{fn.sym_name.data} needs an integer attribute '{name}'" + (f", got {a}" if a else ""))
    return a.value.data


def layer_kinds(fn: func.FuncOp) -> list[str]:
    a = fn_attr(fn, "blueprint.layers")
    if not isinstance(a, ArrayAttr) or not all(isinstance(k, StringAttr) for k in a.data):
        raise StrataError(f"blueprint: @{fn.sym_name.data} needs 'blueprint.layers', an array of layer kinds"
                          + (f", got {a}" if a else ""))
    return [k.data for k in a.data]


def _precision(op: NodeOp) -> dict[str, str | None]:
    p = op.precision.fields() if op.precision is not None else {}
    out: str | None
    if "output" in p and len(op.results) == 1:
        out = format_text(p["output"])
    elif op.results:
        out = ",".join(element_text(_edge_type(op, r).element) for r in op.results)
    else:
        out = None
    return {"weight": format_text(p["weight"]) if "weight" in p else None,
            "activation": format_text(p["activation"]) if "activation" in p else None,
            "output": out}


def _edge_type(op: Operation, v: SSAValue) -> EdgeType:
    if not isinstance(v.type, EdgeType):
        raise StrataError(f"blueprint: {op.name} has a result of type {v.type}, not a !blueprint.edge")
    return v.type


def _node_row(op: NodeOp, order: int, group: int, g: GroupOp | None, kinds: list[str]) -> dict[str, Any]:
    nid = op.node.data if op.node is not None else None
    if nid is None:
        raise StrataError(f"blueprint: a {op.name} node has no 'node' id")
    layer = layer_of(nid)
    if layer is not None and layer >= len(kinds):
        raise StrataError(f"blueprint: node '{nid}' is in layer {layer}, but 'blueprint.layers' lists {len(kinds)}")
    block = nid.rpartition(".")[0]
    short = op.name.removeprefix("blueprint.")
    is_linear = isinstance(op, LinearOp)
    where = op.placement.value if op.placement is not None else (g.placement.value if g is not None else None)
    gs = {k: (_str_attr(g, k) if g is not None else None) for k in GROUP_STRINGS}
    row = {
        "id": nid, "order": order, "layer": layer, "block": block,
        "block_type": block.split(".", 1)[1] if layer is not None else block,
        "kind": kinds[layer] if layer is not None else None,
        "op": f"linear:{op.role.data}" if is_linear else short,
        "roles": [op.role.data] if is_linear else [],
        "inserted": isinstance(op.attributes.get("inserted"), UnitAttr),
        "precision": _precision(op),
        "steps": [f"{s.kind.data} {s.detail.data}" for s in op.steps.data] if op.steps is not None else [],
        "group": group,
        "kernel": gs["kernel"], "family": gs["family"],
        "point": {k: v.data for k, v in op.point.data.items() if isinstance(v, StringAttr)} if op.point is not None else None,
        "compute": gs["compute"], "numerics": gs["numerics"], "where": where,
        "state": ",".join(f"{e.state.data}:{e.effect.data}" for e in op.effects.data) if op.effects else None,
    }
    out = {k: row[k] for k in NODE_FIELDS}
    ranks = rank_sharded(op)
    if ranks is not None:
        out["ranks"] = ranks
    if isinstance(op, COLLECTIVE_NODES):
        out["collective"] = collective_row(op)
    return out


def collective_row(op: NodeOp) -> dict[str, Any]:
    """A collective's kind, group, ranks and cost (bytes one rank sends per row and per call)."""
    per_row = op.attributes.get("bytes_per_row")
    per_row = int(per_row.value.data) if isinstance(per_row, IntegerAttr) else None
    fn = op.parent_op()
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    rows = fn.attributes.get("blueprint.rows") if fn is not None else None
    rows = int(rows.value.data) if isinstance(rows, IntegerAttr) else 0
    group = op.attributes["group"]
    return {"kind": op.name.removeprefix("blueprint."), "group": group.data if isinstance(group, StringAttr) else None,
            "ranks": rank_sharded(op), "bytes_per_row": per_row,
            "bytes_per_call": per_row * rows if per_row is not None and rows > 0 else None}


def tensor_parallel_summary(graph: Graph) -> dict[str, Any] | None:
    """The ranks of a tensor-parallel blueprint and its collectives' cost per row and per call
    (None for a blueprint of one rank)."""
    ranks = graph.fn.attributes.get("blueprint.ranks")
    if not isinstance(ranks, IntegerAttr):
        return None
    rows = [n["collective"] for n in graph.nodes if "collective" in n]
    per_call = [c["bytes_per_call"] for c in rows]
    return {"group": "tp", "ranks": int(ranks.value.data), "collectives": len(rows),
            "kinds": {k: sum(c["kind"] == k for c in rows) for k in sorted({c["kind"] for c in rows})},
            "bytes_per_row": sum(c["bytes_per_row"] or 0 for c in rows),
            "bytes_per_call": sum(per_call) if rows and all(b is not None for b in per_call) else None}


def read_graph(fn: func.FuncOp) -> Graph:
    """The rows of a blueprint function (see the module's docstring)."""
    check_function(fn)
    kinds = layer_kinds(fn)
    graph = Graph(fn)
    if not fn.body.blocks:
        raise StrataError(f"blueprint: @{fn.sym_name.data} has no body")
    home: dict[int, int] = {}  # id(node op) -> group id
    for top in fn.body.block.ops:
        if isinstance(top, GroupOp):
            members = [op for op in top.body.block.ops if not isinstance(op, YieldOp)]
            g: GroupOp | None = top
            rule = top.rule.data
        elif isinstance(top, NodeOp):
            members, g, rule = [top], None, top.name.removeprefix("blueprint.")
        else:
            continue
        gid = len(graph.groups)
        orders = []
        for op in members:
            if not isinstance(op, NodeOp):
                raise StrataError(f"blueprint: group '{rule}' holds {op.name}, not a blueprint node")
            order = len(graph.nodes)
            graph.nodes.append(_node_row(op, order, gid, g, kinds))
            graph.ops.append(op)
            home[id(op)] = gid
            orders.append(order)
        kernel = _str_attr(g, "kernel") if g is not None else None
        where = g.placement.value if g is not None else members[0].placement.value if members[0].placement else None
        graph.groups.append({
            "id": gid, "rule": rule, "kernels": [kernel] if kernel is not None else [], "where": where,
            "numerics": _str_attr(g, "numerics") if g is not None else None,
            "compute": _str_attr(g, "compute") if g is not None else None, "nodes": orders})
    seen = {}
    for n in graph.nodes:
        if n["id"] in seen:
            raise StrataError(f"blueprint: node id '{n['id']}' is used twice (nodes {seen[n['id']]} and {n['order']})")
        seen[n["id"]] = n["order"]
    order_of = {id(op): i for i, op in enumerate(graph.ops)}
    for i, op in enumerate(graph.ops):
        ids = [s.data for s in op.edges.data] if op.edges is not None else None
        if op.results and ids is None:
            raise StrataError(f"blueprint: node '{graph.nodes[i]['id']}' has results but no 'edges' ids")
        for r, value in enumerate(op.results):
            t = _edge_type(op, value)
            consumers, leaves = _consumers(value, order_of)
            fused = not leaves and all(home[id(graph.ops[c])] == home[id(op)] for c in consumers)
            for c in sorted(consumers):
                graph.edges.append({"id": ids[r], "from": i, "to": c, "format": element_text(t.element),
                                    "rows": t.rows.data, "dim": t.dim.data, "fused": fused})
    return graph


def _consumers(value: SSAValue, order_of: dict[int, int]) -> tuple[set[int], bool]:
    """The orders of the nodes that read `value` (through a group's yield), and whether it is
    yielded out of its group."""
    found: set[int] = set()
    leaves = False
    for use in value.uses:
        user = use.operation
        if isinstance(user, YieldOp):
            leaves = True
            group = user.parent_op()
            assert isinstance(group, GroupOp)
            found |= _consumers(group.outs[use.index], order_of)[0]
        elif id(user) in order_of:
            found.add(order_of[id(user)])
    return found, leaves


def blueprint_functions(module: Operation) -> list[func.FuncOp]:
    """The functions of a module that hold blueprint nodes."""
    return [op for op in module.walk() if isinstance(op, func.FuncOp)
            and any(isinstance(o, NodeOp) for o in op.walk())]


# ---------------------------------------------------------------------------------------------
# blueprint.collapsed: what blueprint-collapse records of the templates, and its check

#: The function attribute blueprint-collapse writes.
COLLAPSED_ATTR = "blueprint.collapsed"


def collapsed_summary(collapsed: dict[str, Any]) -> dict[str, Any]:
    """What the IR records of a `collapse` result: prologue, layout and epilogue (template names),
    and per template its instances (layer indices) and ports."""
    return {
        "prologue": list(collapsed["prologue"]), "layout": list(collapsed["layout"]),
        "epilogue": list(collapsed["epilogue"]),
        "templates": {name: {"instances": list(t["instances"]),
                             "ports": {"in": list(t["ports"]["in"]), "out": list(t["ports"]["out"])}}
                      for name, t in collapsed["templates"].items()},
    }


def _to_attr(x: Any) -> Attribute:
    if isinstance(x, dict):
        return DictionaryAttr({k: _to_attr(v) for k, v in x.items()})
    if isinstance(x, list):
        return ArrayAttr([_to_attr(v) for v in x])
    if isinstance(x, str):
        return StringAttr(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return IntegerAttr(x, 64)
    raise TypeError(f"no attribute for {x!r}")


def _from_attr(a: Attribute) -> Any:
    if isinstance(a, DictionaryAttr):
        return {k: _from_attr(v) for k, v in a.data.items()}
    if isinstance(a, ArrayAttr):
        return [_from_attr(v) for v in a.data]
    if isinstance(a, StringAttr):
        return a.data
    if isinstance(a, IntegerAttr):
        return a.value.data
    raise StrataError(f"blueprint: unexpected {a} in '{COLLAPSED_ATTR}'")


def collapsed_attr(collapsed: dict[str, Any]) -> DictionaryAttr:
    """The `blueprint.collapsed` attribute of a `collapse` result."""
    attr = _to_attr(collapsed_summary(collapsed))
    assert isinstance(attr, DictionaryAttr)
    return attr


def recorded_collapsed(fn: func.FuncOp) -> dict[str, Any] | None:
    """The function's `blueprint.collapsed`, read back as plain data (None: not recorded)."""
    a = fn.attributes.get(COLLAPSED_ATTR)
    return None if a is None else _from_attr(a)


def check_collapsed(fn: func.FuncOp, collapsed: dict[str, Any]) -> None:
    """A recorded `blueprint.collapsed` must be what `collapse` gives for the function now."""
    recorded = recorded_collapsed(fn)
    if recorded is None:
        return
    now = collapsed_summary(collapsed)
    if recorded != now:
        diff = next((k for k in now if recorded.get(k) != now[k]), "its keys")
        raise StrataError(f"blueprint: @{fn.sym_name.data}'s '{COLLAPSED_ATTR}' is stale ({diff} differs from the "
                          "graph's); run blueprint-collapse again")
