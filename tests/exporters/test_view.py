"""strata view: the module, op and blueprint levels as Graphviz (clusters per group, shapes and
precisions on the edges), SVG and a self-contained HTML page; repeated layers collapsed."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from xdsl.dialects import func

from strata.exporters import view as V
from strata.exporters import view_render as R
from strata.pipeline import import_tensorviz
from strata.models import build_module
from strata.models import save_random_checkpoint
from strata.pipeline import blueprint_of, entry_pipeline, load_model, run_pipeline
from support import EXAMPLES, TINY, run_tool, seed_file

DOT = shutil.which("dot")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def seed_module():
    path = seed_file("002")
    return import_tensorviz(path)[1]


def _balanced(text: str) -> bool:
    depth = 0
    for line in text.splitlines():  # labels are quoted; braces outside quotes only
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
        depth += bare.count("{") - bare.count("}")
        if depth < 0:
            return False
    return depth == 0


def _clusters(text: str) -> list[str]:
    return re.findall(r'subgraph "cluster_([^"]+)"', text)


def test_module_level_dot_has_a_cluster_per_group_and_shapes_on_edges(seed_module):
    text = V.to_dot(V.module_graph(seed_module))
    assert text.startswith('digraph "TinyLlama" {') and _balanced(text)
    assert _clusters(text) == ["layers.0", "layers.0.attention", "layers.0.mlp"]
    assert '"embedding" -> "layers.0.attention_norm" [label="S x 16 f32"]' in text
    assert '"layers.0.mlp.up" -> "layers.0.mlp.silu_mul" [label="S x 40 f32"]' in text
    assert '"lm_head" -> "logits" [label="S x 32 f32"]' in text
    assert "weight 40x16 f32" in text  # the params' shapes and precisions on the nodes


def _lowered(cfg, entry="prefill", tokens=5):
    return run_pipeline(build_module(cfg), entry_pipeline(entry, tokens=tokens, start=0, ctx=64))


def test_op_level_dot_clusters_layers_with_tensor_shapes():
    g = V.op_graph(_lowered(TINY["llama"]))
    text = V.to_dot(g)
    assert _balanced(text) and _clusters(text) == ["layer0", "layer1"]
    assert '[label="5x32 f32"]' in text  # the hidden state of 5 tokens
    assert re.search(r'label="mul_mat\\nQcur-0"', text)
    assert '[label="32x32 f32"]' in text  # a weight on its way to mul_mat


def test_identical_layers_collapse_at_the_module_and_op_levels():
    cfg = dataclasses.replace(TINY["llama"], num_layers=6)
    g = V.module_graph(build_module(cfg))
    c = V.collapse_layers(g, V.layer_keys(g))
    assert len(c.nodes) < len(g.nodes) / 3
    assert [n.label for n in c.nodes.values() if n.id.endswith(".collapsed")] == \
        [f"layer {i}\n= layer 0" for i in range(1, 6)]
    assert _clusters(V.to_dot(c)) == ["layers.0", "layers.0.attention", "layers.0.mlp"]
    assert _balanced(V.to_dot(c))
    # the chain is unbroken: layer 0's last add feeds layer 1, layer 5 feeds the final norm
    edges = {(e.src, e.dst) for e in c.edges}
    assert ("layers.0.add3", "layer1.collapsed") in edges and ("layer5.collapsed", "norm") in edges
    op = V.op_graph(_lowered(cfg))
    keys = V.layer_keys(op)
    # the last layer keeps only the last row (llama.cpp's pruning): a structure of its own
    assert keys[0] == keys[1] == keys[2] == keys[3] == keys[4] != keys[5]
    collapsed = V.collapse_layers(op, keys)
    assert sorted(collapsed.clusters) == ["layer0", "layer5"] and len(collapsed.nodes) < len(op.nodes) / 2


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_random_checkpoint(dataclasses.replace(TINY["llama"], num_layers=4), tmp_path_factory.mktemp("m") / "t",
                                  seed=2)


def test_blueprint_level_reuses_the_blueprint_labels_and_templates(tiny_dir):
    module = blueprint_of(load_model(tiny_dir), "decode", 1, "fp8-bf16head")
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    g, keys = V.blueprint_graph(fn)
    text = V.to_dot(g)
    assert _balanced(text) and len(_clusters(text)) >= 8
    assert "w fp8/block128x128" in text and re.search(r'label="bf16 [^"]* x ', text)
    assert set(keys) == {0, 1, 2, 3} and len(set(keys.values())) <= 2
    c = V.collapse_layers(g, keys)
    assert len(c.nodes) < len(g.nodes)
    assert any("(template " in n.label for n in c.nodes.values())


def test_own_svg_layout_is_xml_with_every_node(seed_module):
    g = V.module_graph(seed_module)
    svg = R.layout_svg(g)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    nodes = [e for e in root.iter() if e.get("class") == "node"]
    assert len(nodes) == len(g.nodes)
    assert len([e for e in root.iter() if e.get("class") == "cluster"]) == len(g.clusters)


def _check_html(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</svg>" in page
    assert not re.search(r"https?://", page)
    assert "<script" not in page and "<link" not in page and "@import" not in page


def test_html_is_self_contained_with_either_renderer(seed_module, monkeypatch):
    g = V.module_graph(seed_module)
    _check_html(R.html_page("t", R.layout_svg(g), "own layout"))
    if DOT is not None:
        _check_html(R.html_page("t", R.svg_via_dot(V.to_dot(g), DOT), "graphviz"))


@pytest.mark.skipif(DOT is None, reason="Graphviz's dot is not installed")
def test_dot_output_goes_through_graphviz(seed_module):
    for g in (V.module_graph(seed_module), V.op_graph(_lowered(TINY["llama"]))):
        done = subprocess.run([DOT, "-Tsvg"], input=V.to_dot(g).encode(), capture_output=True, timeout=120)
        assert done.returncode == 0 and b"<svg" in done.stdout, done.stderr


def test_cli_view_formats(tmp_path, seed_module):
    from strata.ir.text import print_ir

    mlir = tmp_path / "seed.mlir"
    mlir.write_text(print_ir(seed_module))
    r = run_tool("view", str(mlir), "--format", "dot")
    assert r.returncode == 0 and _balanced(r.stdout) and 'subgraph "cluster_layers.0"' in r.stdout
    out = tmp_path / "v.html"
    r = run_tool("view", str(mlir), "--format", "html", "-o", str(out))
    assert r.returncode == 0, r.stderr
    _check_html(out.read_text())
    r = run_tool("view", str(tmp_path / "missing"), "--format", "svg")
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_cli_svg_without_graphviz(tmp_path, seed_module):
    """No `dot` on PATH: strata's own layout, or with --require-dot a one-line error naming dot."""
    import os

    from strata.ir.text import print_ir

    mlir = tmp_path / "seed.mlir"
    mlir.write_text(print_ir(seed_module))
    env = {**os.environ, "PATH": str(tmp_path)}
    r = run_tool("view", str(mlir), "--format", "svg", env=env)
    assert r.returncode == 0, r.stderr
    root = ET.fromstring(r.stdout)
    assert len([e for e in root.iter() if e.get("class") == "node"]) == 18
    r = run_tool("view", str(mlir), "--format", "svg", "--require-dot", env=env)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "'dot' is not on PATH" in r.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium to render the page")
def test_blueprint_html_of_the_35b_hybrid_renders_in_headless_chromium(tmp_path):
    page, png = tmp_path / "bp.html", tmp_path / "bp.png"
    r = run_tool("view", str(EXAMPLES / "qwen3.6-35b-a3b"), "--level", "blueprint", "--format", "html", "-o", str(page))
    assert r.returncode == 0, r.stderr
    _check_html(page.read_text())
    assert "repeated layers collapsed" in r.stderr
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
                           "--window-size=1400,1000", page.as_uri()], capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 1000)
    assert len(data) > 20_000  # a blank page compresses to a few KB; the graph does not


def test_a_tensor_parallel_blueprint_draws_its_collectives_and_their_cost(tiny_dir, tmp_path):
    """`strata view --level blueprint --tp 2`: the collectives are hexagons labelled with what one
    rank sends, the caption and the summary sum them, and collapsed layers keep the caption."""
    r = run_tool("view", str(tiny_dir), "--level", "blueprint", "--tp", "2", "--recipe", "bf16")
    assert r.returncode == 0, r.stderr
    cfg = TINY["llama"]
    row = 2 * cfg.hidden_size * 2 // 2  # a bf16 hidden row on a ring of 2
    assert f'"l0.attn.all_reduce\\nall_reduce\\na bf16 o bf16\\ntp ranks=2 sends {row} B/row", shape=hexagon' in r.stdout
    assert "layer 1\\n= layer 0" in r.stdout  # the layers collapsed as unsharded
    caption = re.search(r'^  label="(tensor parallel: [^"]*)";$', r.stdout, re.M)
    assert caption and "10 collectives (1 all_gather, 9 all_reduce)" in caption.group(1)
    page = run_tool("view", str(tiny_dir), "--level", "blueprint", "--tp", "2", "--format", "html", "-o",
                    str(tmp_path / "tp.html"))
    assert page.returncode == 0 and "tensor parallel: 2 ranks" in page.stderr
    assert "tensor parallel: 2 ranks" in (tmp_path / "tp.html").read_text()
