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


# ---------------------------------------------------------------------------------------------
# Malformed documents, generated: every one is refused in one line


def _mutations(doc: dict, rng: np.random.Generator, count: int):
    """(what was done, the document) for `count` mutations of `doc` drawn by `rng`, of four kinds:
    a field dropped, a field of the wrong type, a reference to nothing, and a cycle."""
    sem = doc["document"]["semantic"]
    wrong = [None, 7, -1, True, "x", [], {}, 1.5, ["x"], {"a": [1]}]
    groups = [i for i, n in enumerate(sem["nodes"]) if n["kind"] == "module"]

    def field_of(kind: str) -> tuple[list, str]:
        """(the path to an object in the document, one of its keys), drawn."""
        if kind == "node":
            i = int(rng.integers(len(sem["nodes"])))
            where = [["document", "semantic", "nodes", i], ["document", "semantic", "nodes", i, "metadata"],
                     ["document", "semantic", "nodes", i, "metadata", "layerType"]][int(rng.integers(3))]
        elif kind == "edge":
            where = ["document", "semantic", "edges", int(rng.integers(len(sem["edges"])))]
        else:
            where = [[], ["document"], ["document", "semantic"]][int(rng.integers(3))]
        obj = _at(doc, where)
        keys = sorted(obj)
        return where, keys[int(rng.integers(len(keys)))]

    for k in range(count):
        d = copy.deepcopy(doc)
        s = d["document"]["semantic"]
        kind = ("drop", "type", "dangling", "cycle")[k % 4]
        if kind in ("drop", "type"):
            where, key = field_of(("node", "edge", "file")[int(rng.integers(3))])
            if kind == "drop":
                del _at(d, where)[key]
            else:
                value = wrong[int(rng.integers(len(wrong)))]
                if type(value) is type(_at(d, where)[key]) and value == _at(d, where)[key]:
                    continue
                _at(d, where)[key] = value
            yield f"{kind} {'.'.join(map(str, where))}.{key}", d
        elif kind == "dangling":
            choice = int(rng.integers(4))
            if choice == 0:
                e = s["edges"][int(rng.integers(len(s["edges"])))]
                e[("source_node_id", "target_node_id")[int(rng.integers(2))]] = "nowhere"
            elif choice == 1:
                e = s["edges"][int(rng.integers(len(s["edges"])))]
                e[("source_port", "target_port")[int(rng.integers(2))]] = "no-port"
            elif choice == 2:
                s["nodes"][int(rng.integers(len(s["nodes"])))]["metadata"]["parentId"] = "nowhere"
            else:
                s["nodes"][groups[int(rng.integers(len(groups)))]]["metadata"]["moduleMembers"].append("nowhere")
            yield f"dangling reference #{choice}", d
        else:
            g = s["nodes"][groups[int(rng.integers(len(groups)))]]
            member = next((m for m in g["metadata"]["moduleMembers"]
                           if next(n for n in s["nodes"] if n["node_id"] == m)["kind"] == "module"), None)
            if member is None or int(rng.integers(2)):
                # an edge back from the output to the first node: the top-level chain is a cycle
                first, last = s["edges"][0], s["edges"][-1]
                s["edges"].append({**last, "edge_id": "back", "source_node_id": last["target_node_id"],
                                   "target_node_id": first["source_node_id"], "source_port": "y",
                                   "target_port": "x"})
                yield "top-level cycle", d
            else:
                # a group made a member of its own member: their parentIds form a cycle
                m = next(n for n in s["nodes"] if n["node_id"] == member)
                g["metadata"]["parentId"] = member
                m["metadata"]["moduleMembers"].append(g["node_id"])
                yield "parent cycle", d


def _at(doc: dict, path: list):
    for key in path:
        doc = doc[key]
    return doc


def test_every_malformed_document_is_refused_in_one_line(tmp_path):
    """A property of the importer over generated documents: each mutation of a valid document
    that seed 002's schema (tests/tensorviz_schema.py) finds wrong is refused with one line
    naming the file, never accepted and never another exception."""
    from tensorviz_schema import check

    from strata.frontends.tensorviz import read_document

    doc = export_tensorviz(build_module(dataclasses.replace(TINY["llama"], num_layers=2)))
    assert check(doc) == []
    rng = np.random.default_rng(0)
    f = tmp_path / "m.json"
    tried = {}
    for what, bad in _mutations(doc, rng, 400):
        try:
            valid = not check(bad)
        except (RecursionError, TypeError, KeyError):  # too broken for the checker itself (a cycle, a list as an id)
            valid = False
        if valid:
            continue  # still a valid document (a wrong value of the same type the schema allows)
        kind = what.split()[0]
        tried[kind] = tried.get(kind, 0) + 1
        f.write_text(json.dumps(bad))
        with pytest.raises(TensorvizError) as info:
            hf_config_of(read_document(f), str(f))
        assert str(info.value).startswith(f"{f}: ") and "\n" not in str(info.value), what
    assert set(tried) >= {"drop", "type", "dangling", "top-level", "parent"} and sum(tried.values()) > 300, tried


def test_the_two_kinds_of_malformed_document_exit_1(tmp_path):
    """Through the command: a field of the wrong shape, and a reference that holds nothing."""
    doc = export_tensorviz(build_module(TINY["llama"]))
    sem = doc["document"]["semantic"]
    wrong_kind = copy.deepcopy(doc)
    wrong_kind["document"]["semantic"]["nodes"][1]["kind"] = "weird"
    unhashable = copy.deepcopy(doc)
    unhashable["document"]["semantic"]["edges"][0]["source_node_id"] = ["a", "list"]
    group = next(n["node_id"] for n in sem["nodes"] if n["kind"] == "module")
    miscounted = copy.deepcopy(doc)
    next(n for n in miscounted["document"]["semantic"]["nodes"] if n["node_id"] == group)["metadata"][
        "moduleLayerCount"] += 1
    for bad, words in ((wrong_kind, "field 'kind' is 'weird', expected one of input, layer, module, output"),
                       (unhashable, "field 'source_node_id' is [\"a\", \"list\"], expected a string"),
                       (miscounted, "moduleLayerCount")):
        f = tmp_path / "m.json"
        f.write_text(json.dumps(bad))
        r = run_tool("import", str(f), "--format", "tensorviz", "-o", str(tmp_path / "m.mlir"))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith(f"strata: error: {f}: ") and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
        assert not (tmp_path / "m.mlir").exists()
