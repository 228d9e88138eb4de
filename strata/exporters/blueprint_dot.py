"""A blueprint function as a Graphviz digraph: one cluster per kernel group.

    digraph "decode" {
      subgraph "cluster_g2" {
        label="#2 w8a16_m32";
        "n2" [label="l0.gdn.qkvz\\nlinear:qkvz\\nw fp8/block128x128 a bf16 o bf16"];
      }
      "n1" -> "n2" [label="bf16 n x hidden"];
      "n3" -> "n4" [label="f32 n x lin_v_heads*2", style=bold];
    }

Nodes are `n<order>`, clusters `cluster_g<group>`; labels are the rows of
`strata.dialects.blueprint_graph.read_graph` (node id, op, precision; group id and rule; edge
format, rows x dim), quoted and escaped. A fused edge (its value never leaves its group) is bold;
host nodes are boxes, device nodes ellipses. In one rank's blueprint of a tensor-parallel program
a collective is a hexagon whose label adds its group, ranks and the bytes one rank sends
(`tp ranks=2 sends 64 B/row`), a node that reads the rank adds `rank piece of 2`, and the graph's
label sums the collectives.
"""

from __future__ import annotations

from xdsl.dialects import func

from strata.dialects.blueprint_graph import read_graph, tensor_parallel_summary
from strata.exporters.blueprint_table import tensor_parallel_line


def quote(text: str) -> str:
    """A Graphviz quoted string (`"` and `\\` escaped, newlines as `\\n`)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def precision_text(p: dict) -> str:
    """`w fp8/block128x128 a bf16 o bf16`, leaving out what is null."""
    parts = [f"{k} {p[f]}" for k, f in (("w", "weight"), ("a", "activation"), ("o", "output")) if p.get(f)]
    return " ".join(parts)


def node_label(n: dict) -> str:
    """A node row's label: id, op, precision, and what it has of tensor parallelism."""
    c = n.get("collective")
    tp = (f"{c['group']} ranks={c['ranks']} sends {c['bytes_per_row']} B/row" if c is not None
          else f"rank piece of {n['ranks']}" if "ranks" in n else None)
    return "\n".join(x for x in (n["id"], n["op"], precision_text(n["precision"]), tp) if x)


def node_shape(n: dict) -> str:
    return "hexagon" if "collective" in n else "box" if n["where"] == "host" else "ellipse"


def blueprint_dot(fn: func.FuncOp) -> str:
    """The Graphviz text of a blueprint function (see the module's docstring)."""
    graph = read_graph(fn)
    lines = [f"digraph {quote(fn.sym_name.data)} {{", "  compound=true;", "  node [fontsize=10];",
             "  edge [fontsize=9];"]
    tp = tensor_parallel_summary(graph)
    if tp is not None:
        lines.append(f"  label={quote(tensor_parallel_line(tp))};")
    for g in graph.groups:
        lines.append(f"  subgraph {quote('cluster_g' + str(g['id']))} {{")
        lines.append(f"    label={quote('#' + str(g['id']) + ' ' + g['rule'])};")
        for i in g["nodes"]:
            n = graph.nodes[i]
            lines.append(f"    {quote('n' + str(i))} [label={quote(node_label(n))}, shape={node_shape(n)}];")
        lines.append("  }")
    for e in graph.edges:
        style = ", style=bold" if e["fused"] else ""
        label = f"{e['format']} {e['rows']} x {e['dim']}"
        lines.append(f"  {quote('n' + str(e['from']))} -> {quote('n' + str(e['to']))} [label={quote(label)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
