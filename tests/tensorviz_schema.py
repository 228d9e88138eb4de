"""The schema of `tensorviz.graph` version 3, read off a TinyLlama capture, and a checker for it.

The schema is data in a small JSON-schema-like language: `{"type": "object", "required": {...},
"optional": {...}}`, `{"type": "map", "values": S}` (an object used as a dictionary, e.g.
node_positions), `{"type": "array", "items": S}`, `{"type": "string", "enum": [...]}`,
`{"const": v}`, and the scalar types string, integer, number, boolean, scalar (any JSON
scalar), any. `check` returns the list of violations as `path: what`; besides the shapes it
checks what the format's structure implies: edges join existing ports, a group's members are the
nodes naming it as parent, moduleLayerCount counts the leaves under a group, every node has a
position, and collapsed modules are groups.
"""

from __future__ import annotations

from typing import Any

STR, INT, NUM, BOOL, ANY = ({"type": t} for t in ("string", "integer", "number", "boolean", "any"))
SCALAR = {"type": "scalar"}


def obj(required: dict, optional: dict | None = None) -> dict:
    return {"type": "object", "required": required, "optional": optional or {}}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


POINT = obj({"x": NUM, "y": NUM})
LAYER_PARAM = obj({"name": STR, "type": {"type": "string", "enum": ["string", "number", "boolean"]},
                   "defaultValue": SCALAR, "required": BOOL, "description": STR}, {"min": NUM, "max": NUM})
LAYER_TYPE = obj({"id": STR, "name": STR, "displayName": STR, "description": STR, "icon": STR, "category": STR,
                  "parameters": arr(LAYER_PARAM)})
NODE = obj({
    "node_id": STR, "kind": {"type": "string", "enum": ["input", "layer", "module", "output"]}, "op": STR,
    "params": {"type": "map", "values": SCALAR}, "in_ports": arr(STR), "out_ports": arr(STR),
    "metadata": obj({"layerType": LAYER_TYPE}, {"parentId": STR, "moduleInstanceId": STR, "moduleTemplateId": STR,
                                                "isGroup": BOOL, "moduleMembers": arr(STR), "moduleLayerCount": INT}),
})
EDGE = obj({"edge_id": STR, "source_node_id": STR, "target_node_id": STR, "source_port": STR, "target_port": STR,
            "metadata": {"type": "map", "values": ANY}})
VIEW_STATE = obj({"camera": obj({"x": NUM, "y": NUM, "z": NUM}), "nodePositions": {"type": "map", "values": POINT},
                  "expandedModuleIds": arr(STR), "selectedNodeIds": arr(STR),
                  "viewport": obj({"width": NUM, "height": NUM})})
STEP = obj({"id": STR, "title": STR, "note": STR, "view": VIEW_STATE}, {"anchors": ANY})
SCHEMA = obj({
    "format": {"const": "tensorviz.graph"},
    "version": {"const": 3},
    "exportedAt": STR,
    "status": STR,
    "warningCount": INT,
    "document": obj({
        "schemaVersion": {"const": 2},
        "semantic": obj({"graph_id": STR, "name": STR, "revision": INT, "nodes": arr(NODE), "edges": arr(EDGE),
                         "inputs": arr(ANY), "modules": arr(ANY), "operations": arr(ANY),
                         "metadata": {"type": "map", "values": ANY}}),
        "view": obj({"graph_id": STR, "node_positions": {"type": "map", "values": POINT},
                     "collapsed_modules": arr(STR), "selection": arr(STR), "layout": {"type": "map", "values": ANY}}),
    }),
    "snapshotId": STR,
}, {
    "collaboration": obj({"walkthrough": obj({"title": STR, "steps": arr(STEP)}), "threads": arr(ANY),
                          "savedViews": arr(STEP), "openingViewId": STR}),
})


def _is(kind: str, v: Any) -> bool:
    if kind == "string":
        return isinstance(v, str)
    if kind == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "boolean":
        return isinstance(v, bool)
    if kind == "scalar":
        return v is None or isinstance(v, (str, int, float, bool))
    return kind == "any"


def shape_errors(v: Any, s: dict, path: str = "$") -> list[str]:
    if "const" in s:
        return [] if v == s["const"] and type(v) is type(s["const"]) else [f"{path}: {v!r} is not {s['const']!r}"]
    t = s["type"]
    if t == "object":
        if not isinstance(v, dict):
            return [f"{path}: not an object"]
        out = [f"{path}: missing '{k}'" for k in s["required"] if k not in v]
        for k, x in v.items():
            sub = s["required"].get(k) or s["optional"].get(k)
            out += shape_errors(x, sub, f"{path}.{k}") if sub else [f"{path}: unknown key '{k}'"]
        return out
    if t == "map":
        if not isinstance(v, dict):
            return [f"{path}: not an object"]
        return [e for k, x in v.items() for e in shape_errors(x, s["values"], f"{path}.{k}")]
    if t == "array":
        if not isinstance(v, list):
            return [f"{path}: not an array"]
        return [e for i, x in enumerate(v) for e in shape_errors(x, s["items"], f"{path}[{i}]")]
    if not _is(t, v):
        return [f"{path}: {v!r:.40} is not a {t}"]
    if "enum" in s and v not in s["enum"]:
        return [f"{path}: {v!r} is not one of {s['enum']}"]
    return []


def graph_errors(doc: dict) -> list[str]:
    sem = doc["document"]["semantic"]
    nodes = {n["node_id"]: n for n in sem["nodes"]}
    out = [f"node '{i}' is not unique" for i in {n["node_id"] for n in sem["nodes"]} if
           sum(n["node_id"] == i for n in sem["nodes"]) > 1]
    for e in sem["edges"]:
        for end, port, side in (("source_node_id", "source_port", "out_ports"), ("target_node_id", "target_port", "in_ports")):
            n = nodes.get(e[end])
            if n is None:
                out.append(f"{e['edge_id']}: {end} '{e[end]}' is not a node")
            elif e[port] not in n[side]:
                out.append(f"{e['edge_id']}: '{e[end]}' has no {side[:-1]} '{e[port]}'")
    children: dict[str, list[str]] = {}
    for nid, n in nodes.items():
        p = n["metadata"].get("parentId")
        if p is not None:
            if p not in nodes or nodes[p]["kind"] != "module":
                out.append(f"node '{nid}': parent '{p}' is not a group")
            children.setdefault(p, []).append(nid)

    def leaves(g: str) -> int:
        return sum(leaves(m) if nodes[m]["kind"] == "module" else 1 for m in children.get(g, []))

    for nid, n in nodes.items():
        m = n["metadata"]
        if n["kind"] == "module":
            if not m.get("isGroup") or m.get("moduleInstanceId") != nid or "moduleTemplateId" not in m:
                out.append(f"group '{nid}': isGroup, moduleInstanceId or moduleTemplateId wrong")
            if sorted(m.get("moduleMembers", [])) != sorted(children.get(nid, [])):
                out.append(f"group '{nid}': moduleMembers are not its children")
            elif m.get("moduleLayerCount") != leaves(nid):
                out.append(f"group '{nid}': moduleLayerCount {m.get('moduleLayerCount')} is not {leaves(nid)}")
    view = doc["document"]["view"]
    if set(view["node_positions"]) != set(nodes):
        out.append("view.node_positions: not one position per node")
    out += [f"view.collapsed_modules: '{g}' is not a group" for g in view["collapsed_modules"]
            if nodes.get(g, {}).get("kind") != "module"]
    return out


def check(doc: Any) -> list[str]:
    """Every way `doc` departs from tensorviz.graph's schema (empty when it conforms)."""
    errors = shape_errors(doc, SCHEMA)
    return errors or graph_errors(doc)
