"""strata.frontends.tensorviz: a TinyLlama captured from PyTorch as a tensorviz.graph as a model that compiles
and runs, and one-line errors for documents it cannot read."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from strata.exporters.tensorviz import export_tensorviz
from strata.frontends.tensorviz import INPUT_ATTR, TensorvizError, hf_config_of
from strata.pipeline import import_tensorviz
from strata.ir.text import print_ir
from strata.models import build_module
from strata.pipeline import load_model
from support import TINY, run_tool, seed_file


@pytest.fixture(scope="module")
def seed_path():
    path = seed_file("002")
    return path


@pytest.fixture(scope="module")
def seed(seed_path):
    return json.loads(seed_path.read_text())


def test_seed_dims_come_from_the_document(seed_path):
    cfg, module = import_tensorviz(seed_path)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.intermediate_size) == (32, 16, 1, 40)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (4, 4, 4)  # from the Input's 1,4,6,4
    assert cfg.name == "TinyLlama" and cfg.arch == "LlamaForCausalLM"
    model = module.body.block.first_op
    assert model.sym_name.data == "TinyLlama"
    assert model.attributes[INPUT_ATTR].data == "1,4,6,4"


def test_layer_count_follows_the_decoder_groups():
    """Three DecoderBlock groups (blocks.0-2, as strata's exporter names them) make three layers;
    without strata's metadata the heads come from the Input's shape and the rest are defaults."""
    cfg = dataclasses.replace(TINY["llama"], num_layers=3)
    doc = export_tensorviz(build_module(cfg))
    got, _ = hf_config_of(doc, "three.json")
    assert (got["num_hidden_layers"], got["num_attention_heads"], got["num_key_value_heads"], got["head_dim"]) == (3, 4, 2, 8)
    assert got["max_position_embeddings"] == 128
    doc["document"]["semantic"]["metadata"] = {}
    got, shape = hf_config_of(doc, "three.json")
    assert (got["num_hidden_layers"], got["num_attention_heads"], got["max_position_embeddings"]) == (3, 4, 2048)
    assert shape == "1,4,128,8"


def test_seed_imports_compiles_and_runs(seed_path, tmp_path):
    """`strata import --random-weights` writes OUT.mlir and the checkpoint OUT/; strata run works on
    it, its logits are finite, and a second import with the same seed gives the same bytes and ids."""
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}" / "tiny.mlir"
        out.parent.mkdir()
        r = run_tool("import", str(seed_path), "--format", "tensorviz", "-o", str(out), "--random-weights", "5")
        assert r.returncode == 0, r.stderr
        ckpt = out.with_suffix("")
        assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
        logits = tmp_path / f"logits{k}.npy"
        r = run_tool("run", str(ckpt), "--prompt-ids", "1,2,3,4,5,6", "--max-new-tokens", "6", "--ctx", "64",
                     "--dump-logits", str(logits))
        assert r.returncode == 0, r.stderr
        ids = r.stdout.strip().splitlines()[-1]
        assert ids.startswith("ids=") and len(ids.split(",")) == 6
        x = np.load(logits)
        assert x.shape == (6, 32) and np.isfinite(x).all() and x.std() > 0.1
        runs.append((out.read_text(), (ckpt / "model.safetensors").read_bytes(), ids, x))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1] and runs[0][2] == runs[1][2]
    np.testing.assert_array_equal(runs[0][3], runs[1][3])
    # The checkpoint directory builds the same module level (bar the model's name and the kept Input shape).
    built = load_model(tmp_path / "run0" / "tiny").module
    model = built.body.block.first_op
    model.attributes[INPUT_ATTR] = import_tensorviz(seed_path)[1].body.block.first_op.attributes[INPUT_ATTR]
    assert print_ir(built).replace("@tiny ", "@TinyLlama ") == runs[0][0]


def _mutate(seed, node_id, **changes):
    doc = copy.deepcopy(seed)
    for n in doc["document"]["semantic"]["nodes"]:
        if n["node_id"] == node_id:
            for k, v in changes.items():
                if k in ("params", "metadata"):
                    n[k].update(v)
                else:
                    n[k] = v
    return doc


@pytest.mark.parametrize("node, changes, words", [
    ("block.attention.softmax", {"op": "torch.einsum"}, ["'block.attention.softmax'", "torch.einsum"]),
    ("block.ffn.silu", {"op": "GELU"}, ["'block.ffn.silu'", "GELU"]),
    ("block.attention.key", {"params": {"in_features": 12}}, ["'block.attention.key'", "in_features is 12"]),
    ("block.ffn.down", {"params": {"out_features": 8}}, ["'block.ffn.down'", "out_features is 8"]),
    ("lm_head", {"params": {"bias": True}}, ["'lm_head'", "bias"]),
    ("input", {"params": {"shape": "1,6"}}, ["'block.attention'", "head count"]),
    ("embedding", {"params": {"num_embeddings": 0}}, ["'embedding'", "num_embeddings"]),
    ("lm_head", {"op": "Conv2d"}, ["'lm_head'", "op 'Conv2d' where the top-level chain has the lm_head Linear"]),
    ("final_norm", {"metadata": {"moduleTemplateId": "model::LayerNorm"}}, ["'final_norm'", "LayerNorm"]),
])
def test_unknown_structure_is_an_error_naming_the_node(seed, node, changes, words):
    with pytest.raises(TensorvizError) as e:
        hf_config_of(_mutate(seed, node, **changes), "doc.json")
    text = str(e.value)
    assert "\n" not in text and text.startswith("doc.json: ")
    for w in words:
        assert w in text, text


def test_a_linear_of_unknown_role_is_named(seed):
    doc = json.dumps(seed).replace("block.attention.value", "block.attention.vee")
    with pytest.raises(TensorvizError, match=r"node 'block\.attention\.vee': a Linear whose role"):
        hf_config_of(json.loads(doc), "doc.json")


def test_edges_and_members_are_checked(seed):
    doc = copy.deepcopy(seed)
    doc["document"]["semantic"]["edges"][3]["target_node_id"] = "nowhere"
    with pytest.raises(TensorvizError, match=r"edges\[3\] \(edge-4\): node 'nowhere' does not exist"):
        hf_config_of(doc, "doc.json")
    doc = _mutate(seed, "block.ffn", metadata={**_node(seed, "block.ffn")["metadata"], "moduleMembers": ["block.ffn.up"]})
    with pytest.raises(TensorvizError, match=r"node 'block.ffn': its moduleMembers"):
        hf_config_of(doc, "doc.json")


def _node(seed, nid):
    return next(n for n in seed["document"]["semantic"]["nodes"] if n["node_id"] == nid)


@pytest.mark.parametrize("text, words", [
    ('{"format": "onnx"}', "not a tensorviz document (field 'format' is 'onnx'"),
    ("[1, 2]", "not a tensorviz document"),
    ("{nope", "not JSON"),
    ('{"format": "tensorviz.graph", "version": 2}', "field 'version' is 2"),
    ('{"format": "tensorviz.graph", "version": 3, "document": {"semantic": {"nodes": []}}}',
     "'document.semantic.edges' is missing"),
])
def test_cli_bad_documents(tmp_path, text, words):
    f = tmp_path / "m.json"
    f.write_text(text)
    out = tmp_path / "keep.mlir"
    out.write_text("mine")
    r = run_tool("import", str(f), "--format", "tensorviz", "-o", str(out))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"strata: error: {f}: ") and r.stderr.count("\n") == 1 and words in r.stderr
    assert out.read_text() == "mine"


def test_cli_refuses_a_weights_dir_holding_other_files(seed_path, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    r = run_tool("import", str(seed_path), "--format", "tensorviz", "--random-weights", "1", "--weights-dir", str(d))
    assert r.returncode == 1 and "not a checkpoint that strata import wrote" in r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]
