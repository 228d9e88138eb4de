"""The module level as a `tensorviz.graph` document (format version 3).

A llama-family model (std.model.causal_lm of std.layer.decoder layers with
std.attn.grouped_query attention and a std.nn.mlp SwiGLU) is written as a PyTorch capture writes a
TinyLlama: the torch-level nodes of each module (Linears, the Rotary's muls and stack,
Softmax, SiLU, ...) with their ports, params and layer-type metadata
(`tensorviz_layer_types.json`, the catalogue tensorviz.graph carries), grouped into modules
(`model::DecoderBlock`, `model::RMSNorm`, `model::Attention`, `model::Rotary`,
`model::SwiGLU`) and joined by tensorviz.graph's edges, both between leaves and between groups.
One layer is `block` (a PyTorch capture's name); L layers are `blocks.0` ... `blocks.{L-1}`.

What the torch graph cannot say goes into `document.semantic.metadata.strata` (head counts,
eps, rope theta, context, dtype, tying), which `strata.frontends.tensorviz` reads back; the
module-level attribute `tensorviz_input` (kept by the importer) restores the Input's shape.
The output is deterministic: `exportedAt` is the epoch (or SOURCE_DATE_EPOCH) and the
snapshot id a hash of the semantic graph.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr

from strata.dialects.instances import BlockInstance, find_model, instantiate
from strata.errors import StrataError

FORMAT, VERSION, SCHEMA_VERSION = "tensorviz.graph", 3, 2
DTYPE_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
#: The kinds a llama layer is made of; anything else has no tensorviz form here.
KINDS = {"std.model.causal_lm", "std.nn.embedding", "std.layer.decoder", "std.nn.norm", "std.attn.grouped_query",
         "std.nn.mlp", "std.nn.linear"}
ROTARY_MEMBERS = ["python#2", "python#1", "python#0", "mul#0", "mul#1", "mul#2", "add#0", "mul#3", "mul#4", "sub#0",
                  "stack#0", "flatten#0"]
ROTARY_EDGES = [("python#0", "mul#0"), ("python#1", "mul#0"), ("python#2", "mul#4"), ("mul#0", "mul#4"),
                ("python#2", "mul#3"), ("mul#0", "mul#3"), ("mul#4", "sub#0"), ("mul#3", "sub#0"),
                ("python#2", "mul#2"), ("mul#0", "mul#2"), ("python#2", "mul#1"), ("mul#0", "mul#1"),
                ("mul#2", "add#0"), ("mul#1", "add#0"), ("sub#0", "stack#0"), ("add#0", "stack#0"),
                ("stack#0", "flatten#0")]
_OPS = {"python": "Python", "mul": "torch.mul", "add": "torch.add", "sub": "torch.sub", "stack": "torch.stack",
        "flatten": "Flatten", "div": "torch.div"}
_PARAMS = {"torch.stack": {"dim": -1}, "Flatten": {"start_dim": -2}}


class TensorvizExportError(StrataError):
    """A model without a tensorviz form."""


@lru_cache(maxsize=1)
def layer_types() -> dict[str, Any]:
    return json.loads((Path(__file__).parent / "tensorviz_layer_types.json").read_text(encoding="utf-8"))


def _anon(kind: str, group: str, i: int) -> str:
    """A tensorviz capture's names of unnamed torch ops: `mul@block.ffn#0`."""
    return f"{kind}@{group}#{i}"


class _Doc:
    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.edges: list[tuple[str, str]] = []
        self.groups: list[str] = []

    def leaf(self, nid: str, op: str, parent: str | None, params: dict | None = None, kind: str = "layer") -> str:
        meta: dict[str, Any] = {"layerType": layer_types()[op]}
        if parent is not None:
            meta["parentId"] = parent
        self.nodes[nid] = {"node_id": nid, "kind": kind, "op": op, "params": params or {},
                           "in_ports": [] if kind == "input" else ["x"], "out_ports": [] if kind == "output" else ["y"],
                           "metadata": meta}
        return nid

    def group(self, nid: str, template: str, parent: str | None, members: list[str]) -> str:
        self.leaf(nid, "Module", parent, kind="module")
        meta = self.nodes[nid]["metadata"]
        meta.update(moduleInstanceId=nid, moduleTemplateId=f"model::{template}", isGroup=True, moduleMembers=members)
        self.groups.append(nid)
        return nid

    def edge(self, src: str, dst: str) -> None:
        self.edges.append((src, dst))


def _linear(doc: _Doc, nid: str, parent: str, inst: BlockInstance) -> str:
    bias = inst.knob("bias") is not None
    return doc.leaf(nid, "Linear", parent, {"in_features": inst.dim("In"), "out_features": inst.dim("Out"), "bias": bias})


def _norm(doc: _Doc, g: str, parent: str | None) -> tuple[str, str]:
    """An RMSNorm group: (its group id, its output leaf)."""
    gain, mul = f"{g}.gain", _anon("mul", g, 0)
    doc.group(g, "RMSNorm", parent, [gain, mul])
    return g, mul


def _layer(doc: _Doc, b: str, lay: BlockInstance, src_leaf: str, src_group: str, parent_edges: list) -> tuple[str, str]:
    """One DecoderBlock; returns (its output leaf, its group id). Nodes in a PyTorch capture's order."""
    a, f = f"{b}.attention", f"{b}.ffn"
    qr, kr = f"{a}.query_rope", f"{a}.key_rope"
    add0, add1 = _anon("add", b, 0), _anon("add", b, 1)
    attn, mlp = lay.child("attention"), lay.child("mlp")
    doc.group(b, "DecoderBlock", None, [f"{b}.attention_norm", a, add0, f"{b}.ffn_norm", f, add1])
    _, n1 = _norm(doc, f"{b}.attention_norm", b)
    q, k, v, o = (f"{a}.{n}" for n in ("query", "key", "value", "project"))
    pa0, pa1, div, soft = _anon("python", a, 0), _anon("python", a, 1), _anon("div", a, 0), f"{a}.softmax"
    doc.group(a, "Attention", b, [pa1, q, k, v, pa0, qr, kr, div, soft, o])
    doc.leaf(add0, "torch.add", b)
    _, n2 = _norm(doc, f"{b}.ffn_norm", b)
    gate, up, silu, fmul, down = f"{f}.gate", f"{f}.up", f"{f}.silu", _anon("mul", f, 0), f"{f}.down"
    doc.group(f, "SwiGLU", b, [gate, up, silu, fmul, down])
    doc.leaf(add1, "torch.add", b)
    # the groups' members, group by group
    doc.leaf(f"{b}.attention_norm.gain", "Parameter", f"{b}.attention_norm")
    doc.leaf(n1, "torch.mul", f"{b}.attention_norm")
    doc.leaf(pa1, "Python", a)
    for nid, sub in ((q, "q_proj"), (k, "k_proj"), (v, "v_proj")):
        _linear(doc, nid, a, attn.child(sub))
    doc.leaf(pa0, "Python", a)
    for r in (qr, kr):
        doc.group(r, "Rotary", a, [_rot(r, m) for m in ROTARY_MEMBERS])
    doc.leaf(div, "torch.div", a)
    doc.leaf(soft, "Softmax", a)
    _linear(doc, o, a, attn.child("o_proj"))
    for r in (qr, kr):
        for m in ROTARY_MEMBERS:
            op = _OPS[m.partition("#")[0]]
            doc.leaf(_rot(r, m), op, r, dict(_PARAMS.get(op, {})))
    doc.leaf(f"{b}.ffn_norm.gain", "Parameter", f"{b}.ffn_norm")
    doc.leaf(n2, "torch.mul", f"{b}.ffn_norm")
    _linear(doc, gate, f, mlp.child("gate"))
    _linear(doc, up, f, mlp.child("up"))
    doc.leaf(silu, "SiLU", f)
    doc.leaf(fmul, "torch.mul", f)
    _linear(doc, down, f, mlp.child("down"))
    # edges, in a PyTorch capture's order
    e = doc.edge
    e(f"{b}.attention_norm.gain", n1)
    for r in (qr, kr):
        for s, d in ROTARY_EDGES:
            e(_rot(r, s), _rot(r, d))
    for lin, r in ((q, qr), (k, kr)):
        for i in range(3):
            e(lin, _rot(r, f"python#{i}"))
        e(lin, r)
    e(v, pa0)
    for r in (qr, kr):
        e(_rot(r, "flatten#0"), div)
        e(r, div)
    for s, d in ((div, soft), (pa1, soft), (soft, o), (pa0, o), (f"{b}.ffn_norm.gain", n2), (gate, silu),
                 (silu, fmul), (up, fmul), (fmul, down)):
        e(s, d)
    for d in (q, _rot(qr, "python#0"), _rot(qr, "python#1"), _rot(qr, "python#2"), k, _rot(kr, "python#0"),
              _rot(kr, "python#1"), _rot(kr, "python#2"), v, pa0, pa1, o):
        e(n1, d)
    for s, d in ((f"{b}.attention_norm", a), (o, add0), (a, add0), (add0, n2), (add0, f"{b}.ffn_norm"), (n2, gate),
                 (n2, up), (f"{b}.ffn_norm", f), (add0, add1), (down, add1), (f, add1)):
        e(s, d)
    parent_edges += [(src_leaf, n1), (src_leaf, add0), (src_group, b)]
    return add1, b


def _rot(r: str, member: str) -> str:
    kind, _, i = member.partition("#")
    return _anon(kind, r, int(i))


def _check_kinds(root: BlockInstance) -> None:
    for inst in root.walk():
        if inst.kind not in KINDS:
            raise TensorvizExportError(f"export --format tensorviz: block '{inst.name}' is a {inst.kind}, which has "
                                       f"no tensorviz form (supported: the llama family's {', '.join(sorted(KINDS))})")
    for inst in root.walk():
        if inst.kind == "std.attn.grouped_query" and (inst.has("q_norm") or inst.attr("rope_scaling") is not None
                                                      or inst.attr("rotary_dim") is not None):
            what = "q/k norms" if inst.has("q_norm") else "rope scaling or a partial rotary"
            raise TensorvizExportError(f"export --format tensorviz: '{inst.name}' has {what}, which tensorviz.graph's "
                                       "Attention cannot show")


def export_tensorviz(module: ModuleOp) -> dict:
    """The tensorviz.graph document of a module-level program (see the module's docstring)."""
    model = find_model(module)
    root = instantiate(model)
    if root.kind != "std.model.causal_lm":
        raise TensorvizExportError(f"export --format tensorviz: the root block is a {root.kind}, not a causal LM")
    _check_kinds(root)
    layers = root.array("layers")
    doc = _Doc()
    heads, kv, hd, max_seq = (root.dim(n) for n in ("Heads", "KvHeads", "HeadDim", "MaxSeq"))
    shape_attr = model.attributes.get("tensorviz_input")
    shape = shape_attr.data if isinstance(shape_attr, StringAttr) else default_input_shape(heads, hd, max_seq)
    emb = root.child("embedding")
    names = ["block"] if len(layers) == 1 else [f"blocks.{i}" for i in range(len(layers))]
    top = ["input", "embedding", *names, "final_norm", "lm_head", "output"]
    doc.leaf("input", "Input", None, {"shape": shape}, kind="input")
    doc.leaf("embedding", "Embedding", None, {"num_embeddings": emb.dim("Vocab"), "embedding_dim": emb.dim("H")})
    for b in names:
        doc.nodes[b] = {}  # placeholders keep a capture's order: top-level nodes first
    doc.nodes["final_norm"] = {}
    _linear(doc, "lm_head", None, root.child("lm_head"))
    doc.leaf("output", "Output", None, kind="output")
    cross: list[tuple[str, str]] = []
    leaf, group = "embedding", "embedding"
    for b, lay in zip(names, layers):
        leaf, group = _layer(doc, b, lay, leaf, group, cross)
    _, fmul = _norm(doc, "final_norm", None)
    doc.leaf("final_norm.gain", "Parameter", "final_norm")
    doc.leaf(fmul, "torch.mul", "final_norm")
    doc.edge("final_norm.gain", fmul)
    doc.edge("input", "embedding")
    doc.edges += cross
    for s, d in ((leaf, fmul), (group, "final_norm"), (fmul, "lm_head"), ("final_norm", "lm_head"), ("lm_head", "output")):
        doc.edge(s, d)
    _order(doc, top)
    _count(doc)
    norm = next(i for i in root.walk() if i.kind == "std.nn.norm")
    attn = next(i for i in root.walk() if i.kind == "std.attn.grouped_query")
    meta = {"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
            "rms_norm_eps": norm.float_attr("eps"), "rope_theta": attn.float_attr("rope_theta"),
            "max_position_embeddings": max_seq, "dtype": DTYPE_NAMES.get(str(root.env.get("T")), "float32"),
            "tie_word_embeddings": root.child("lm_head").knob("tied") is not None}
    semantic = {"graph_id": "snapshot", "name": model.sym_name.data, "revision": 0, "nodes": list(doc.nodes.values()),
                "edges": [{"edge_id": f"edge-{i + 1}", "source_node_id": s, "target_node_id": d, "source_port": "y",
                           "target_port": "x", "metadata": {}} for i, (s, d) in enumerate(doc.edges)],
                "inputs": [], "modules": [], "operations": [], "metadata": {"strata": meta}}
    digest = hashlib.sha256(json.dumps(semantic, sort_keys=True).encode()).hexdigest()[:16]
    view = {"graph_id": "snapshot", "node_positions": _positions(doc, top), "collapsed_modules": [n for n in doc.nodes if n in set(doc.groups)],
            "selection": [], "layout": {}}
    return {"format": FORMAT, "version": VERSION, "exportedAt": _timestamp(), "status": "static", "warningCount": 0,
            "document": {"schemaVersion": SCHEMA_VERSION, "semantic": semantic, "view": view},
            "snapshotId": f"snapshot-{digest}",
            "collaboration": {"walkthrough": {"title": "", "steps": []}, "threads": [], "savedViews": [],
                              "openingViewId": ""}}


def _order(doc: _Doc, top: list[str]) -> None:
    """A tensorviz capture's node order: the top level, then each group's members before its subgroups'."""
    out: list[str] = list(top)

    def visit(g: str) -> None:
        members = doc.nodes[g]["metadata"]["moduleMembers"]
        out.extend(members)
        for m in members:
            if doc.nodes[m]["kind"] == "module":
                visit(m)

    for t in top:
        if doc.nodes[t]["kind"] == "module":
            visit(t)
    doc.nodes = {n: doc.nodes[n] for n in out}


def _count(doc: _Doc) -> None:
    """moduleLayerCount: the leaves under each group."""
    def leaves(g: str) -> int:
        return sum(leaves(m) if doc.nodes[m]["kind"] == "module" else 1 for m in doc.nodes[g]["metadata"]["moduleMembers"])

    for g in doc.groups:
        doc.nodes[g]["metadata"]["moduleLayerCount"] = leaves(g)


def _positions(doc: _Doc, top: list[str]) -> dict:
    """A tensorviz capture's layout: the top level in a row, each group's members in a column."""
    pos = {n: {"x": 340 * i, "y": 160} for i, n in enumerate(top)}
    for g in doc.groups:
        for i, m in enumerate(doc.nodes[g]["metadata"]["moduleMembers"]):
            pos[m] = {"x": 24, "y": 214 + 150 * i}
    return {n: pos[n] for n in doc.nodes}


def default_input_shape(heads: int, head_dim: int, max_seq: int) -> str:
    """The Input shape written when the model keeps none: batch, heads, seq, head_dim (a tensorviz capture's layout)."""
    return f"1,{heads},{max_seq},{head_dim}"


def _timestamp() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "0")
    seconds = int(epoch) if epoch.isdigit() else 0
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()


def tensorviz_json(doc: dict) -> str:
    return json.dumps(doc, indent=1) + "\n"
