"""A blueprint function as a table of its kernel groups, one line each (`strata inspect`).

    group  rule                       nodes  node ids                                  weight            act   out       state
    0      embed_row_copy             1      embed.embed                               -                 -     bf16      -
    4      gdn_conv_l2_f32_per_row    3      l0.gdn.{conv,conv_ckpt,l2}                -                 bf16  f32       conv:update,conv:snapshot

Node ids sharing their block are abbreviated as `block.{a,b}`; a list longer than `IDS_WIDTH`
is cut with `...`. The precision columns list the distinct formats of the group's nodes (weight
and activation of all of them, output of those whose output leaves the group), `-` for none.

One rank's blueprint of a tensor-parallel program (every rank runs the same groups, each on its
piece of the weights) adds a column `per rank`: what one rank sends in a collective's group
(`all_reduce tp ranks=2: 64 B/call, 64 B/row`), the rank's piece of a split weight (`weight
axis 0 / 2`: the weight table's split), `rank piece` for a node that reads the rank without
exchanging anything (a vocabulary-split embed, whole experts); and a last line summing the
collectives (`tensor_parallel_line`).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import StringAttr

from strata.dialects.blueprint import NodeOp, WeightRead, function_weights
from strata.dialects.blueprint_graph import read_graph, tensor_parallel_summary

COLUMNS = ("group", "rule", "nodes", "node ids", "weight", "act", "out", "state")
TP_COLUMN = "per rank"
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


def byte_text(n: int | None) -> str:
    """`64 B`, `1.5 KiB`, `2.0 MiB`; `?` when unknown."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MiB"


def _per_rank(nodes: list[dict], ops: list[NodeOp], weights: dict[str, WeightRead]) -> str:
    """A group's `per rank` cell (see the module's docstring)."""
    cells: list[str] = []
    for n in nodes:
        c = n.get("collective")
        param = ops[n["order"]].attributes.get("param")
        read = weights.get(param.data) if isinstance(param, StringAttr) else None
        if c is not None:
            cell = (f"{c['kind']} {c['group']} ranks={c['ranks']}: {byte_text(c['bytes_per_call'])}/call, "
                    f"{byte_text(c['bytes_per_row'])}/row")
        elif read is not None and read.split:
            cell = f"weight axis {read.split[0]} / {read.split[1]}"
        elif "ranks" in n:
            cell = "rank piece"
        else:
            continue
        if cell not in cells:
            cells.append(cell)
    return "; ".join(cells) or "-"


def tensor_parallel_line(summary: dict) -> str:
    """`tensor parallel: 2 ranks (group tp), the same groups on each rank's piece of the weights;
    6 collectives (5 all_reduce, 1 all_gather); each rank sends 368 B per call (368 B per row)`."""
    kinds = ", ".join(f"{n} {k}" for k, n in summary["kinds"].items())
    return (f"tensor parallel: {summary['ranks']} ranks (group {summary['group']}), the same groups on each rank's "
            f"piece of the weights; {summary['collectives']} collectives ({kinds or 'none'}); each rank sends "
            f"{byte_text(summary['bytes_per_call'])} per call ({byte_text(summary['bytes_per_row'])} per row)")


def inspect_table(fn: func.FuncOp) -> str:
    """The group table of a blueprint function (see the module's docstring)."""
    graph = read_graph(fn)
    tp = tensor_parallel_summary(graph)
    leaving = {e["from"] for e in graph.edges if not e["fused"]}
    columns = COLUMNS + ((TP_COLUMN,) if tp is not None else ())
    weights = function_weights(fn) if tp is not None else {}
    rows = [columns]
    for g in graph.groups:
        nodes = [graph.nodes[i] for i in g["nodes"]]
        outs = [n for n in nodes if n["order"] in leaving] or nodes[-1:]
        rows.append((
            str(g["id"]), g["rule"], str(len(nodes)), abbreviate([n["id"] for n in nodes]),
            _distinct(n["precision"]["weight"] for n in nodes),
            _distinct(n["precision"]["activation"] for n in nodes),
            _distinct(n["precision"]["output"] for n in outs),
            _distinct(n["state"] for n in nodes),
        ) + ((_per_rank(nodes, graph.ops, weights),) if tp is not None else ()))
    widths = [max(len(r[c]) for r in rows) for c in range(len(columns))]
    text = "".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() + "\n" for r in rows)
    return text + (tensor_parallel_line(tp) + "\n" if tp is not None else "")
