"""A blueprint function as a table of its kernel groups, one line each (`strata inspect`).

    group  rule                       nodes  node ids                                  weight            act   out       state
    0      embed_row_copy             1      embed.embed                               -                 -     bf16      -
    4      gdn_conv_l2_f32_per_row    3      l0.gdn.{conv,conv_ckpt,l2}                -                 bf16  f32       conv:update,conv:snapshot

Node ids sharing their block are abbreviated as `block.{a,b}`; a list longer than `IDS_WIDTH`
is cut with `...`. The precision columns list the distinct formats of the group's nodes (weight
and activation of all of them, output of those whose output leaves the group), `-` for none.
"""

from __future__ import annotations

from xdsl.dialects import func

from strata.dialects.blueprint_graph import read_graph

COLUMNS = ("group", "rule", "nodes", "node ids", "weight", "act", "out", "state")
IDS_WIDTH = 48


def abbreviate(ids: list[str], width: int = IDS_WIDTH) -> str:
    """`["l0.gdn.conv", "l0.gdn.l2", "l1.gdn.input_norm"]` -> `l0.gdn.{conv,l2} l1.gdn.input_norm`."""
    runs: list[tuple[str, list[str]]] = []
    for i in ids:
        block, _, leaf = i.rpartition(".")
        if runs and runs[-1][0] == block:
            runs[-1][1].append(leaf)
        else:
            runs.append((block, [leaf]))
    parts = []
    for block, leaves in runs:
        inner = leaves[0] if len(leaves) == 1 else "{" + ",".join(leaves) + "}"
        parts.append(f"{block}.{inner}" if block else inner)
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 3] + "..."


def _distinct(values) -> str:
    out: list[str] = []
    for v in values:
        for part in (v.split(",") if v else []):
            if part not in out:
                out.append(part)
    return ",".join(out) or "-"


def inspect_table(fn: func.FuncOp) -> str:
    """The group table of a blueprint function (see the module's docstring)."""
    graph = read_graph(fn)
    leaving = {e["from"] for e in graph.edges if not e["fused"]}
    rows = [COLUMNS]
    for g in graph.groups:
        nodes = [graph.nodes[i] for i in g["nodes"]]
        outs = [n for n in nodes if n["order"] in leaving] or nodes[-1:]
        rows.append((
            str(g["id"]), g["rule"], str(len(nodes)), abbreviate([n["id"] for n in nodes]),
            _distinct(n["precision"]["weight"] for n in nodes),
            _distinct(n["precision"]["activation"] for n in nodes),
            _distinct(n["precision"]["output"] for n in outs),
            _distinct(n["state"] for n in nodes),
        ))
    widths = [max(len(r[c]) for r in rows) for c in range(len(COLUMNS))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() + "\n" for r in rows)
