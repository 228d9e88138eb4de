"""The Graphviz view of a blueprint (strata.exporters.blueprint_dot) on tests/blueprint_graph_ir.py's
blueprint: one cluster per group labelled with its rule, node and edge labels, quoting."""

from __future__ import annotations

import re

from blueprint_graph_ir import TEXT, blueprint_fn
from strata.exporters.blueprint_dot import blueprint_dot, quote
from strata.exporters.kbp_graph import export_kbp_graph


def test_one_cluster_per_group_with_its_nodes():
    fn = blueprint_fn()
    dot = blueprint_dot(fn)
    doc = export_kbp_graph(fn, provenance={})
    clusters = re.findall(r'subgraph "cluster_g(\d+)" \{\n    label="#\d+ (\w+)";\n((?:    "n\d+" .*\n)*)  \}', dot)
    assert [(int(i), rule) for i, rule, _ in clusters] == [(g["id"], g["rule"]) for g in doc["groups"]]
    for (_, _, body), g in zip(clusters, doc["groups"]):
        assert [int(n) for n in re.findall(r'"n(\d+)" \[', body)] == g["nodes"]
    assert dot.startswith('digraph "decode" {') and dot.endswith("}\n")


def test_node_and_edge_labels():
    dot = blueprint_dot(blueprint_fn())
    assert '"n2" [label="l0.gdn.qkvz\\nlinear:qkvz\\nw fp8/block128x128 a bf16 o bf16", shape=ellipse];' in dot
    assert '"n0" [label="embed.embed\\nembed\\no bf16", shape=box];' in dot
    assert '"n3" -> "n4" [label="f32 n x lin_v_heads*2", style=bold];' in dot
    assert '"n0" -> "n11" [label="bf16 n x hidden"];' in dot
    assert len(re.findall(r" -> ", dot)) == 106


def test_names_are_quoted_and_escaped():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    dot = blueprint_dot(blueprint_fn(TEXT.replace('node = "head.argmax"', 'node = "head.arg\\"max"')))
    assert 'label="head.arg\\"max\\nargmax' in dot
