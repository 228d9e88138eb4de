"""strata.exporters.tensorviz: documents tensorviz.graph's schema accepts; a TinyLlama capture -> import -> export keeps every
node, port, group membership, param and edge of the capture; export -> import gives the same module level."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from strata.exporters.tensorviz import TensorvizExportError, export_tensorviz, tensorviz_json
from strata.pipeline import import_tensorviz
from strata.ir.text import print_ir
from strata.models import build_module
from strata.models import save_random_checkpoint
from support import HYBRID_FAMILIES, TINY, run_tool, seed_file
from tensorviz_schema import check


@pytest.fixture(scope="module")
def seed_path():
    path = seed_file("002")
    return path


@pytest.fixture(scope="module")
def seed(seed_path):
    return json.loads(seed_path.read_text())


@pytest.fixture(scope="module")
def exported(seed_path):
    return export_tensorviz(import_tensorviz(seed_path)[1])


def test_the_schema_accepts_the_seed_and_rejects_departures(seed):
    assert check(seed) == []
    for path, value, words in [(("format",), "tensorviz", "is not 'tensorviz.graph'"),
                               (("document", "semantic", "nodes", 3, "in_ports"), "x", "not an array"),
                               (("document", "semantic", "nodes", 1, "params", "num_embeddings"), [32], "is not a scalar"),
                               (("document", "semantic", "edges", 0, "source_port"), "z", "has no out_port 'z'"),
                               (("document", "semantic", "nodes", 2, "metadata", "moduleLayerCount"), 42, "is not 43"),
                               (("document", "view", "collapsed_modules", 0), "lm_head", "is not a group")]:
        doc = copy.deepcopy(seed)
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        errors = check(doc)
        assert errors and any(words in e for e in errors), (path, errors)


def test_export_of_the_seed_passes_the_schema(exported):
    assert check(exported) == []


def test_round_trip_keeps_every_node_port_group_param_and_edge(seed, exported):
    ours, theirs = exported["document"]["semantic"], seed["document"]["semantic"]
    assert [n["node_id"] for n in ours["nodes"]] == [n["node_id"] for n in theirs["nodes"]]
    for a, b in zip(ours["nodes"], theirs["nodes"]):
        assert a == b, a["node_id"]  # kind, op, params, ports, layerType, parentId, members, counts
    assert ours["edges"] == theirs["edges"]
    assert exported["document"]["view"] == seed["document"]["view"]
    assert ours["name"] == theirs["name"] == "TinyLlama"


def test_seed_import_export_import_gives_the_same_module_level(seed_path, exported, tmp_path):
    first = print_ir(import_tensorviz(seed_path)[1])
    f = tmp_path / "again.json"
    f.write_text(tensorviz_json(exported))
    assert print_ir(import_tensorviz(f)[1]) == first


@pytest.mark.parametrize("layers", [1, 3])
def test_export_import_of_a_built_llama_is_the_identity(tmp_path, layers):
    """GQA (4 heads over 2 KV heads), 128 positions, eps and theta: all come back through the document."""
    cfg = dataclasses.replace(TINY["llama"], num_layers=layers, rope_theta=5e5, rms_norm_eps=1e-6)
    module = build_module(cfg)
    doc = export_tensorviz(module)
    assert check(doc) == []
    f = tmp_path / "m.json"
    f.write_text(tensorviz_json(doc))
    back_cfg, back = import_tensorviz(f)
    assert print_ir(back) == print_ir(module)
    names = [n["node_id"] for n in doc["document"]["semantic"]["nodes"] if n["metadata"].get("moduleTemplateId") ==
             "model::DecoderBlock"]
    assert names == (["block"] if layers == 1 else [f"blocks.{i}" for i in range(layers)])


def test_export_is_deterministic(exported, seed_path):
    again = export_tensorviz(import_tensorviz(seed_path)[1])
    assert tensorviz_json(again) == tensorviz_json(exported)
    assert exported["snapshotId"].startswith("snapshot-") and exported["exportedAt"].startswith("1970-01-01")


def test_a_qwen2_comes_back_as_a_qwen2(tmp_path):
    """Biased query, key and value Linears and an unbiased output are Qwen2's attention; tied too."""
    module = build_module(TINY["qwen2"])
    f = tmp_path / "q.json"
    f.write_text(tensorviz_json(export_tensorviz(module)))
    cfg, back = import_tensorviz(f)
    assert cfg.arch == "Qwen2ForCausalLM" and cfg.tie_word_embeddings
    assert print_ir(back) == print_ir(module)


@pytest.mark.parametrize("cfg, words", [
    (TINY["qwen3"], "has q/k norms"),
    (HYBRID_FAMILIES["qwen3_moe"], "no tensorviz form"),
])
def test_models_without_a_tensorviz_form_are_refused(cfg, words):
    with pytest.raises(TensorvizExportError, match=words):
        export_tensorviz(build_module(cfg))


def test_cli_exports_a_model_dir_and_an_mlir(tmp_path, seed_path):
    d = save_random_checkpoint(TINY["llama"], tmp_path / "tiny", seed=1)
    out = tmp_path / "t.json"
    r = run_tool("export", str(d), "--format", "tensorviz", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert check(json.loads(out.read_text())) == []
    mlir = tmp_path / "seed.mlir"
    assert run_tool("import", str(seed_path), "--format", "tensorviz", "-o", str(mlir)).returncode == 0
    r = run_tool("export", str(mlir), "--format", "tensorviz")
    assert r.returncode == 0 and json.loads(r.stdout)["document"]["semantic"]["nodes"] == \
        json.loads(seed_path.read_text())["document"]["semantic"]["nodes"]
    hybrid = save_random_checkpoint(HYBRID_FAMILIES["qwen3_moe"], tmp_path / "moe", seed=1)
    keep = tmp_path / "keep.json"
    keep.write_text("mine")
    r = run_tool("export", str(hybrid), "--format", "tensorviz", "-o", str(keep))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no tensorviz form" in r.stderr
    assert keep.read_text() == "mine"
