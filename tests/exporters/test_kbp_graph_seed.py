"""examples/qwen3.6-35b-a3b exported through the whole blueprint pipeline equals the
kbp-graph/v1 plan (the kbp-graph/v1 export of Qwen3.6-35B-A3B, decode, 1 row, fp8-bf16head) on every field the
seed and Strata share; other layer patterns, dense families and recipes give the structure they
imply; the `strata blueprint` CLI writes it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support import EXAMPLES, HYBRID_FAMILIES, TINY, module_of, run_tool, seed_file
from xdsl.dialects import func

from strata.exporters.kbp_graph import export_kbp_graph
from strata.pipeline import blueprint_pipeline, load_model, run_pipeline

NODE_FIELDS = ("id", "order", "layer", "block", "block_type", "kind", "op", "roles", "inserted", "precision",
               "steps", "point", "where", "state", "group")
EDGE_FIELDS = ("id", "from", "to", "format", "rows", "dim", "fused")
GROUP_FIELDS = ("id", "rule", "where", "nodes")
#: Template node fields that are Strata's own (its kernels), not the seed planner's.
OWN = {"kernel", "family", "compute"}


def _fn(module):
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


def _export(module_or_model, mode="decode", rows=1, recipe="fp8-bf16head"):
    module = module_or_model.module if hasattr(module_or_model, "module") else module_or_model
    return export_kbp_graph(_fn(run_pipeline(module.clone(), blueprint_pipeline(mode, rows, recipe))), provenance={})


@pytest.fixture(scope="module")
def seed():
    path = seed_file("001")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def ours():
    return _export(load_model(EXAMPLES / "qwen3.6-35b-a3b"))


def test_counts_and_layers(ours, seed):
    assert (len(ours["nodes"]), len(ours["edges"]), len(ours["groups"])) == (944, 1363, 575)
    assert ours["layers"] == seed["layers"]
    assert list(ours) == list(seed)
    assert ours["arm"]["mode"] == seed["arm"]["mode"] and ours["arm"]["rows"] == seed["arm"]["rows"]


@pytest.mark.parametrize("part,fields", [("nodes", NODE_FIELDS), ("edges", EDGE_FIELDS), ("groups", GROUP_FIELDS)])
def test_every_row_equals_the_seed(ours, seed, part, fields):
    assert len(ours[part]) == len(seed[part])
    for mine, theirs in zip(ours[part], seed[part]):
        assert {k: mine[k] for k in fields} == {k: theirs[k] for k in fields}


def test_collapsed_equals_the_seed(ours, seed):
    mine, theirs = ours["collapsed"], seed["collapsed"]
    for key in ("prologue", "layout", "epilogue"):
        assert mine[key] == theirs[key]
    assert list(mine["templates"]) == list(theirs["templates"])
    for name, t in theirs["templates"].items():
        m = mine["templates"][name]
        assert (m["blocks"], m["edges"], m["ports"], m["instances"]) == (t["blocks"], t["edges"], t["ports"],
                                                                         t["instances"]), name
        assert [{k: v for k, v in n.items() if k not in OWN} for n in m["nodes"]] == \
               [{k: v for k, v in n.items() if k not in OWN} for n in t["nodes"]], name


def test_another_layer_pattern_gives_its_own_layout():
    pattern = ("full_attention", "linear_attention", "linear_attention", "full_attention", "full_attention")
    cfg = dataclasses.replace(HYBRID_FAMILIES["qwen3_5_moe"], num_layers=5, layer_types=pattern,
                              moe_layers=(True,) * 5)
    doc = _export(module_of(cfg))
    names = {"full_attention": "attn+moe_ffn", "linear_attention": "gdn+moe_ffn"}
    assert doc["collapsed"]["layout"] == [names[k] for k in pattern]
    assert doc["collapsed"]["templates"]["attn+moe_ffn"]["instances"] == [0, 3, 4]
    assert doc["collapsed"]["templates"]["gdn+moe_ffn"]["instances"] == [1, 2]
    rules = [g["rule"] for g in doc["groups"]]
    assert rules.count("cross_layer_add_norm") == 4 and rules.count("ffn_residual_add") == 1
    assert rules.count("paged_attention_bf16") == 3 and rules.count("gdn_recurrence_f32_per_row") == 2
    # per layer: GDN+MoE 13 groups, attention+MoE 18; embed, the first input norm, final norm, head, argmax
    assert len(doc["groups"]) == 1 + 1 + 13 * 2 + 18 * 3 + 3


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_dense_families_export_with_their_own_rules(family):
    doc = _export(module_of(TINY[family]))
    assert doc["collapsed"]["layout"] == ["attn+ffn"] * TINY[family].num_layers
    rules = {g["rule"] for g in doc["groups"]}
    assert {"embed_row_copy", "kv_write_bf16", "paged_attention_bf16", "lm_head_bf16_gemv"} <= rules
    assert not any(r.startswith("single_") for r in rules), rules


@pytest.mark.parametrize("recipe", ["bf16", "f32", "w4a16"])
def test_recipes_change_only_precision_and_steps(recipe):
    module = module_of(HYBRID_FAMILIES["qwen3_5_moe"])
    base, other = _export(module), _export(module, recipe=recipe)
    # a group's kernel follows its precision (w8a16 vs w4a16 GEMM); which nodes it holds does not
    strip = lambda n: {k: v for k, v in n.items() if k not in ("precision", "steps", "kernel", "family", "compute")}  # noqa: E731
    assert [strip(n) for n in base["nodes"]] == [strip(n) for n in other["nodes"]]
    assert [(e["id"], e["from"], e["to"], e["rows"], e["dim"], e["fused"]) for e in base["edges"]] == \
           [(e["id"], e["from"], e["to"], e["rows"], e["dim"], e["fused"]) for e in other["edges"]]
    assert [g["nodes"] for g in base["groups"]] == [g["nodes"] for g in other["groups"]]
    assert base["nodes"] != other["nodes"]


@pytest.mark.parametrize("mode,rows", [("multi_seq", 4), ("verify", 3), ("draft", 1), ("prefill", 8)])
def test_modes_export(mode, rows):
    doc = _export(module_of(HYBRID_FAMILIES["qwen3_next"]), mode, rows)
    assert doc["arm"]["mode"] == mode and doc["arm"]["rows"] == rows
    inserted = [n["id"] for n in doc["nodes"] if n["inserted"]]
    assert bool(inserted) == (mode in ("verify", "draft"))
    assert all(n["where"] in ("host", "device") for n in doc["nodes"])


def test_cli_writes_the_export_deterministically(tmp_path):
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    for out in (out1, out2):
        r = run_tool("blueprint", str(EXAMPLES / "qwen3.6-35b-a3b"), "--mode", "decode", "--rows", "1",
                     "--recipe", "fp8-bf16head", "--format", "kbp-graph", "-o", str(out))
        assert r.returncode == 0, r.stderr
    assert out1.read_bytes() == out2.read_bytes()
    doc = json.loads(out1.read_text())
    assert doc["schema"] == "kbp-graph/v1" and len(doc["nodes"]) == 944
    dot = run_tool("blueprint", str(EXAMPLES / "qwen3.6-35b-a3b"), "--format", "dot")
    assert dot.returncode == 0 and dot.stdout.count("subgraph") == 575
    table = run_tool("inspect", str(EXAMPLES / "qwen3.6-35b-a3b"), "--level", "blueprint")
    assert table.returncode == 0 and "cross_layer_add_norm" in table.stdout


def test_cli_errors_are_one_line(tmp_path):
    r = run_tool("blueprint", str(EXAMPLES / "qwen3-8b"), "--mode", "draft", "--rows", "2")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "draft" in r.stderr
    keep = tmp_path / "mine.json"
    keep.write_text("user data")
    r = run_tool("blueprint", str(tmp_path / "missing"), "-o", str(keep))
    assert r.returncode != 0 and keep.read_text() == "user data"
