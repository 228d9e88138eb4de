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


def test_collectives_are_hexagons_with_their_cost():
    from support import TINY, module_of

    from strata.passes.pipelines import blueprint_pipeline
    from strata.pipeline import run_pipeline
    from strata.semantics.op_interp import find_function

    cfg = TINY["qwen3"]
    fn = find_function(run_pipeline(module_of(cfg), blueprint_pipeline("decode", 1, "bf16", tp=2)))
    dot = blueprint_dot(fn)
    hexagons = re.findall(r'\[label="([^"]*)", shape=hexagon\]', dot)
    row = 2 * cfg.hidden_size * 2 // 2
    assert hexagons[0] == f"embed.all_reduce\\nall_reduce\\na bf16 o bf16\\ntp ranks=2 sends {row} B/row"
    assert len(hexagons) == 2 + 2 * cfg.num_layers
    assert re.search(r'label="embed.embed\\nembed\\n[^"]*\\nrank piece of 2"', dot)
    assert re.search(r'^  label="tensor parallel: 2 ranks \(group tp\)', dot, re.M)
    assert "hexagon" not in blueprint_dot(blueprint_fn()) and "tensor parallel" not in blueprint_dot(blueprint_fn())
