"""Layer templates of a blueprint, computed on its kbp-graph/v1 rows (kbp-graph/v1's `collapsed`).

The rows are plain data, as `kbp-graph/v1` writes them: node dicts (`id`, `order`, `layer`,
`block`, `block_type`, `kind`, `op`, `precision`, `group`, `kernel`, `family`, `compute`, `where`,
`inserted`) and edge dicts (`from`, `to`, `format`, `fused`). One algorithm serves the
`blueprint-collapse` pass (which records the result in the IR) and the kbp-graph exporter (which
writes it out), and it runs unchanged on the rows of a kbp-graph/v1 plan exported elsewhere.

- The nodes before the first layer are the prologue, those after the last the epilogue; each of
  their blocks is one template named after its block type, with no instances.
- Each layer is an instance of a template named `"+".join(block types)`. The first layer showing
  a structure is the template; a later layer is an instance of it when its nodes (id without the
  `lN.` prefix, op, kind, block type, precision, placement, local group, inserted) and its
  internal edges (local from/to, format, fused) are equal. A layer equal to none of the templates
  of its name makes a new one, `name#2`, `name#3`, ... Kernels, families and compute units are
  the template's (its first instance's): they do not split templates.
- A template's nodes are numbered from 0 in order; `group` is the rank of the node's group among
  the distinct groups of the instance; `edges` are the instance's internal edges; `ports.in` are
  the nodes an outside node feeds, `ports.out` the nodes that feed an outside node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from strata.errors import StrataError

_LAYER = re.compile(r"^l(\d+)\.")
#: The fields of a template's node, in kbp-graph/v1's order.
TEMPLATE_NODE_FIELDS = ("id", "op", "kind", "block_type", "precision", "kernel", "family", "compute",
                        "where", "group", "inserted")
#: What a template's structure is: the fields that must agree for a layer to be an instance.
STRUCTURAL_FIELDS = ("id", "op", "kind", "block_type", "precision", "where", "group", "inserted")


def layer_of(node_id: str) -> int | None:
    """`l12.gdn.qkvz` -> 12; `embed.embed` -> None."""
    m = _LAYER.match(node_id)
    return int(m.group(1)) if m else None


def strip_layer(node_id: str) -> str:
    """`l12.gdn.qkvz` -> `gdn.qkvz` (ids outside layers unchanged)."""
    return _LAYER.sub("", node_id, count=1)


def _distinct(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _instance(members: list[dict], edges: Sequence[dict]) -> dict:
    """The template an instance (its nodes, in order) would make, before naming."""
    local = {n["order"]: i for i, n in enumerate(members)}
    group_rank = {g: i for i, g in enumerate(_distinct([n["group"] for n in members]))}
    nodes = []
    for n in members:
        row = {k: n[k] for k in TEMPLATE_NODE_FIELDS if k not in ("id", "group", "precision")}
        row["precision"] = dict(n["precision"]) if isinstance(n["precision"], dict) else n["precision"]
        row = {"id": strip_layer(n["id"]), **row, "group": group_rank[n["group"]]}
        nodes.append({k: row[k] for k in TEMPLATE_NODE_FIELDS})
    inner, ins, outs = [], set(), set()
    for e in edges:
        src, dst = local.get(e["from"]), local.get(e["to"])
        if src is not None and dst is not None:
            inner.append({"from": src, "to": dst, "format": e["format"], "fused": e["fused"]})
        elif dst is not None:
            ins.add(dst)
        elif src is not None:
            outs.add(src)
    return {"blocks": _distinct([n["block_type"] for n in members]), "nodes": nodes, "edges": inner,
            "ports": {"in": sorted(ins), "out": sorted(outs)}, "instances": []}


def _shape(template: dict) -> tuple:
    """What two instances must share to be one template."""
    nodes = tuple(tuple(repr(n[k]) for k in STRUCTURAL_FIELDS) for n in template["nodes"])
    edges = tuple((e["from"], e["to"], e["format"], e["fused"]) for e in template["edges"])
    return nodes, edges, tuple(template["ports"]["in"]), tuple(template["ports"]["out"])


def _by_block(members: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for n in members:
        if out and out[-1][0]["block"] == n["block"]:
            out[-1].append(n)
        else:
            out.append([n])
    return out


def collapse(nodes: Sequence[dict], edges: Sequence[dict]) -> dict:
    """kbp-graph/v1's `collapsed` section of a blueprint's rows: prologue, layout, epilogue, templates."""
    nodes = sorted(nodes, key=lambda n: n["order"])
    layered = [i for i, n in enumerate(nodes) if n["layer"] is not None]
    first, last = (layered[0], layered[-1]) if layered else (len(nodes), len(nodes) - 1)
    for n in nodes[first:last + 1]:
        if n["layer"] is None:
            raise StrataError(f"blueprint: node '{n['id']}' lies between layers but belongs to none")
    layers: dict[int, list[dict]] = {}
    for n in nodes[first:last + 1]:
        layers.setdefault(n["layer"], []).append(n)
    if list(layers) != sorted(layers):
        raise StrataError(f"blueprint: layers appear out of order ({', '.join(map(str, layers))})")

    templates: dict[str, dict] = {}
    shapes: dict[str, tuple] = {}

    def place(base: str, t: dict) -> str:
        shape = _shape(t)
        for k in range(1, len(templates) + 2):
            name = base if k == 1 else f"{base}#{k}"
            if name not in templates:
                templates[name], shapes[name] = t, shape
                return name
            if shapes[name] == shape:
                return name
        raise AssertionError("unreachable")

    def edge_block(members: list[dict]) -> list[str]:
        return [place(m[0]["block_type"], _instance(m, edges)) for m in _by_block(members)]

    prologue = edge_block(nodes[:first])
    layout = []
    for index, members in layers.items():
        t = _instance(members, edges)
        name = place("+".join(t["blocks"]), t)
        templates[name]["instances"].append(index)
        layout.append(name)
    epilogue = edge_block(nodes[last + 1:])
    return {"prologue": prologue, "layout": layout, "epilogue": epilogue, "templates": templates}


def layer_rows(nodes: Sequence[dict], collapsed: dict, kinds: Sequence[str] | None = None) -> list[dict]:
    """kbp-graph's `layers`: index, kind, template, blocks of each layer that has nodes."""
    blocks: dict[int, list[str]] = {}
    kind: dict[int, Any] = {}
    for n in sorted(nodes, key=lambda n: n["order"]):
        if n["layer"] is not None:
            blocks.setdefault(n["layer"], [])
            if n["block"] not in blocks[n["layer"]]:
                blocks[n["layer"]].append(n["block"])
            kind.setdefault(n["layer"], n["kind"])
    if len(blocks) != len(collapsed["layout"]):
        raise StrataError(f"blueprint: {len(blocks)} layers but a layout of {len(collapsed['layout'])}")
    return [{"index": i, "kind": kinds[i] if kinds is not None else kind[i], "template": t, "blocks": b}
            for (i, b), t in zip(blocks.items(), collapsed["layout"])]
