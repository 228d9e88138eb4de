"""`kbp-graph/v1`: a blueprint function as a kbp-graph/v1 JSON document (nodes, precision, steps, state effects, groups).

    {"schema":"kbp-graph/v1","blueprint_id":...,"lineage":...,"revision":0,"exported_by":...,
     "arm":{"mode":...,"rows":...,"digest":...},"layers":[...],"nodes":[...],"edges":[...],
     "groups":[...],"collapsed":{...},"provenance":{...}}

The rows (`nodes`, `edges`, `groups`) are `strata.dialects.blueprint_graph.read_graph`'s, the
`collapsed` section and `layers` are `strata.dialects.blueprint_templates`' (the one algorithm the
`blueprint-collapse` pass runs too; where the function carries that pass's `blueprint.collapsed`,
the two must agree). The identities:

- `blueprint_id`: `strata:` + sha256 of the function's printed IR;
- `lineage`: `sha256:` + sha256 of the canonical JSON of `provenance` (what the blueprint was
  derived from: model config hash, recipe, mode, rows, Strata version);
- `arm.digest`: sha256 of the canonical JSON of `{"nodes", "edges", "groups"}`.

A tensor-parallel blueprint (one rank's program of N) adds `tensor_parallel` before
`provenance`: the ranks, the collectives by kind and the bytes one rank sends per row and per
call (its collective nodes' rows carry each one's, see `strata.dialects.blueprint_graph`).

Canonical JSON is `json.dumps(x, sort_keys=True, separators=(",", ":"))`. The document is
written compact, in kbp-graph/v1's key order (`kbp_graph_json`): the same IR gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from typing import Any

from xdsl.dialects import func
from xdsl.printer import Printer

from strata.dialects.blueprint_graph import (check_collapsed, fn_int, fn_string, layer_kinds, read_graph,
                                            tensor_parallel_summary)
from strata.dialects.blueprint_templates import collapse, layer_rows
from strata.errors import StrataError

SCHEMA = "kbp-graph/v1"
EXPORTED_BY = "strata blueprint"


def canonical_json(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def printed_ir(fn: func.FuncOp) -> str:
    out = StringIO()
    Printer(stream=out).print_op(fn)
    return out.getvalue()


def export_kbp_graph(fn: func.FuncOp, *, provenance: dict[str, Any]) -> dict[str, Any]:
    """The kbp-graph/v1 document of a blueprint function (see the module's docstring)."""
    graph = read_graph(fn)
    collapsed = collapse(graph.nodes, graph.edges)
    check_collapsed(fn, collapsed)
    digest = sha256_text(canonical_json({"nodes": graph.nodes, "edges": graph.edges, "groups": graph.groups}))
    try:
        lineage = sha256_text(canonical_json(provenance))
    except TypeError as e:
        raise StrataError(f"kbp-graph: provenance must be plain JSON data ({e})") from None
    doc = {
        "schema": SCHEMA,
        "blueprint_id": "strata:" + sha256_text(printed_ir(fn)),
        "lineage": "sha256:" + lineage,
        "revision": 0,
        "exported_by": EXPORTED_BY,
        "arm": {"mode": fn_string(fn, "blueprint.mode"), "rows": fn_int(fn, "blueprint.rows"), "digest": digest},
        "layers": layer_rows(graph.nodes, collapsed, layer_kinds(fn)),
        "nodes": graph.nodes,
        "edges": graph.edges,
        "groups": graph.groups,
        "collapsed": collapsed,
        "provenance": provenance,
    }
    tp = tensor_parallel_summary(graph)
    if tp is not None:  # one rank's program of N: its collectives and what they move
        doc = {**{k: v for k, v in doc.items() if k != "provenance"}, "tensor_parallel": tp,
               "provenance": provenance}
    return doc


def kbp_graph_json(doc: dict[str, Any]) -> str:
    """The document as kbp-graph/v1 writes it: compact, keys in order, no trailing newline."""
    return json.dumps(doc, separators=(",", ":"))
