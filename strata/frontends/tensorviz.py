"""Read a `tensorviz.graph` document (format `tensorviz.graph`, version 3: a PyTorch capture) as a model.

A tensorviz document is a semantic graph of a torch module: nodes with ports (`in_ports`,
`out_ports`), params (`Linear {in_features, out_features, bias}`, `Embedding {num_embeddings,
embedding_dim}`), module groups (`kind: module`, `metadata.moduleTemplateId`,
`moduleMembers`, children pointing back by `metadata.parentId`) and edges between ports.
This frontend recognises a Llama-style causal LM in it and gives its HF config (a dict the
llama family reads: Llama's, or Qwen2's when only the query, key and value Linears have a
bias), and from that the module level:

    input -> Embedding -> DecoderBlock x L -> RMSNorm -> Linear (lm_head) -> output
    DecoderBlock = RMSNorm, Attention (query/key/value/project Linears, two Rotary groups,
                   div, Softmax), add, RMSNorm, SwiGLU (gate/up/down Linears, SiLU, mul), add

Everything is derived from the document: vocab and hidden size from the Embedding, head
dims from the attention's Linears, the FFN width from the SwiGLU's, the layer count from
the DecoderBlock groups (ordered along the top-level edges). What a torch graph does not
say is read from `document.semantic.metadata.strata` when the document has it (strata's
exporter writes it: head counts, eps, rope theta, context, dtype, tying); otherwise the head
count comes from the Input's 4-d shape `batch,heads,seq,head_dim` (a TinyLlama capture's `1,4,6,4`), and
the rest takes the llama defaults (eps 1e-5, rope theta 10000, 2048 positions, f32, untied).
The Rotary groups rotate interleaved pairs (Meta's layout); strata's llama family rotates
halves (HF's), which is the same attention up to a fixed permutation of the query/key rows
(what HF's conversion script applies), so the imported model uses HF's layout.

The document is checked whole before it is read: every field the format defines has its shape
(a field missing or of the wrong type), and every reference holds (an edge's nodes and ports, a
node's parentId and a group's moduleMembers, with no cycle of parents, and a group's
moduleInstanceId, isGroup and moduleLayerCount). Anything else (an op the recognised structure
does not have, a Linear whose role is not known, dims that disagree) is a one-line error naming
the node too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr

from strata.errors import StrataError

FORMAT = "tensorviz.graph"
VERSION = 3

#: The defaults for what a torch graph does not say (TinyLlama's).
DEFAULTS: dict[str, Any] = {"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 2048,
                            "dtype": "float32", "tie_word_embeddings": False}
#: The keys of `semantic.metadata.strata` the importer reads (all optional).
META_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", *DEFAULTS)

#: Linear roles by their local name (a TinyLlama capture's first, then Meta's, HF's and others).
ATTN_ROLES = {"q": ("query", "wq", "q_proj", "q"), "k": ("key", "wk", "k_proj", "k"),
              "v": ("value", "wv", "v_proj", "v"), "o": ("project", "wo", "o_proj", "out_proj", "o", "output")}
MLP_ROLES = {"gate": ("gate", "w1", "gate_proj"), "up": ("up", "w3", "up_proj"), "down": ("down", "w2", "down_proj")}
#: The ops a group of each template may hold besides its Linears and subgroups.
NORM_OPS = {"Parameter", "torch.mul", "torch.rsqrt", "torch.mean", "torch.pow", "torch.add", "Python"}
ATTN_OPS = {"Python", "torch.div", "torch.mul", "torch.matmul", "Softmax", "torch.softmax"}
ROTARY_OPS = {"Python", "torch.mul", "torch.add", "torch.sub", "torch.stack", "Flatten", "torch.cat"}
MLP_OPS = {"SiLU", "torch.mul"}
#: Recognised templates (moduleTemplateId without its `prefix::`).
DECODER, NORM, ATTENTION, ROTARY, MLP = "DecoderBlock", "RMSNorm", "Attention", "Rotary", "SwiGLU"


class TensorvizError(StrataError):
    """A tensorviz document that is not one strata reads."""


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_document(path: str | Path) -> dict:
    """The parsed document at `path`, checked to be a tensorviz.graph of version 3."""
    from strata.ir.inputs import MiB, read_text

    p = Path(path)
    text = read_text(p, "tensorviz document", 256 * MiB, TensorvizError)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise TensorvizError(f"{p}: not JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = _show(doc.get("format")) if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise TensorvizError(f"{p}: not a tensorviz document (field 'format' is {got}, expected '{FORMAT}')")
    if doc.get("version") != VERSION:
        raise TensorvizError(f"{p}: field 'version' is {_show(doc.get('version'))}; only version {VERSION} is read")
    _check_fields(doc, (("document", "object", True),), str(p))
    _check_fields(doc["document"], (("semantic", "object", True),), str(p), "document.")
    _check_fields(doc["document"]["semantic"], SEMANTIC_FIELDS, str(p), "document.semantic.")
    _check_fields(doc["document"], DOCUMENT_FIELDS, str(p), "document.")
    _check_fields(doc, FILE_FIELDS, str(p))
    _check_fields(doc["document"]["view"], VIEW_FIELDS, str(p), "document.view.")
    if "collaboration" in doc:
        _check_fields(doc["collaboration"], COLLABORATION_FIELDS, str(p), "collaboration.")
    return doc


#: A node's kinds, and the fields of a node, of its metadata and of an edge: (key, what its value
#: must be, whether the field is required). Every field is checked, read here or not: a document
#: with a field of the wrong shape is malformed, whatever the importer would make of the rest.
KINDS = ("input", "layer", "module", "output")
NODE_FIELDS = (("kind", "string", True), ("op", "string", True), ("params", "object of scalars", True),
               ("in_ports", "list of strings", True), ("out_ports", "list of strings", True),
               ("metadata", "object", True))
NODE_METADATA = (("layerType", "object", True), ("parentId", "string", False), ("moduleInstanceId", "string", False),
                 ("moduleTemplateId", "string", False), ("isGroup", "boolean", False),
                 ("moduleMembers", "list of strings", False), ("moduleLayerCount", "integer", False))
LAYER_TYPE_FIELDS = (("id", "string", True), ("name", "string", True), ("displayName", "string", True),
                     ("description", "string", True), ("icon", "string", True), ("category", "string", True),
                     ("parameters", "list of objects", True))
EDGE_FIELDS = (("edge_id", "string", True), ("source_node_id", "string", True), ("target_node_id", "string", True),
               ("source_port", "string", True), ("target_port", "string", True), ("metadata", "object", True))
#: The fields around the graph: of the file, of `document`, of `document.semantic`.
FILE_FIELDS = (("exportedAt", "string", True), ("status", "string", True), ("warningCount", "integer", True),
               ("snapshotId", "string", True), ("document", "object", True), ("collaboration", "object", False))
DOCUMENT_FIELDS = (("schemaVersion", "integer", True), ("semantic", "object", True), ("view", "object", True))
VIEW_FIELDS = (("graph_id", "string", True), ("node_positions", "object", True),
               ("collapsed_modules", "list of strings", True), ("selection", "list of strings", True),
               ("layout", "object", True))
COLLABORATION_FIELDS = (("walkthrough", "object", True), ("threads", "list", True), ("savedViews", "list of objects", True),
                        ("openingViewId", "string", True))
SEMANTIC_FIELDS = (("nodes", "list", True), ("edges", "list", True), ("graph_id", "string", True),
                   ("name", "string", True), ("revision", "integer", True), ("inputs", "list", True),
                   ("modules", "list", True), ("operations", "list", True), ("metadata", "object", True))


def _is(value: Any, what: str) -> bool:
    if what == "string":
        return isinstance(value, str)
    if what == "boolean":
        return isinstance(value, bool)
    if what == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if what == "object":
        return isinstance(value, dict)
    if what == "list":
        return isinstance(value, list)
    if what == "object of scalars":
        return isinstance(value, dict) and all(v is None or isinstance(v, (str, int, float, bool)) for v in value.values())
    if what == "list of objects":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    assert what == "list of strings", what
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_fields(obj: dict, fields: tuple, where: str, prefix: str = "") -> None:
    """Refuse the first of `fields` that `obj` lacks (if required) or holds with the wrong shape;
    messages name it as `where: field 'PREFIXKEY'`."""
    for key, what, required in fields:
        if key not in obj:
            if required:
                raise TensorvizError(f"{where}: field '{prefix}{key}' is missing")
        elif not _is(obj[key], what):
            raise TensorvizError(f"{where}: field '{prefix}{key}' is {_show(obj[key])}, expected a {what}")


class _Graph:
    """The semantic graph, indexed and checked whole (each field's shape, the references between
    nodes, ports and groups), with errors that name the file and the node."""

    def __init__(self, sem: dict, file: str):
        self.file = file
        self.nodes: dict[str, dict] = {}
        for i, n in enumerate(sem["nodes"]):
            where = f"{file}: document.semantic.nodes[{i}]"
            if not isinstance(n, dict) or not isinstance(n.get("node_id"), str):
                raise TensorvizError(f"{where}: not a node (an object with a string 'node_id')")
            where += f" '{n['node_id']}'"
            _check_fields(n, NODE_FIELDS, where)
            _check_fields(n["metadata"], NODE_METADATA, where, "metadata.")
            _check_fields(n["metadata"]["layerType"], LAYER_TYPE_FIELDS, where, "metadata.layerType.")
            if n["kind"] not in KINDS:
                raise TensorvizError(f"{where}: field 'kind' is {_show(n['kind'])}, expected one of {', '.join(KINDS)}")
            if n["node_id"] in self.nodes:
                raise TensorvizError(f"{where}: node id '{n['node_id']}' is not unique")
            self.nodes[n["node_id"]] = n
        self.children: dict[str | None, list[str]] = {}
        for nid, n in self.nodes.items():
            parent = n["metadata"].get("parentId")
            if parent is not None and (parent not in self.nodes or self.nodes[parent]["kind"] != "module"):
                raise self.error(nid, f"its parentId '{parent}' is not a group (a node of kind 'module')")
            self.children.setdefault(parent, []).append(nid)
        for nid in self.nodes:
            self._check_ancestry(nid)
        self.edges: list[tuple[str, str]] = []
        for i, e in enumerate(sem["edges"]):
            if not isinstance(e, dict):
                raise TensorvizError(f"{file}: document.semantic.edges[{i}]: not an object")
            _check_fields(e, EDGE_FIELDS, f"{file}: document.semantic.edges[{i}]")
            src, dst = e.get("source_node_id"), e.get("target_node_id")
            for end, port_key, ports in ((src, "source_port", "out_ports"), (dst, "target_port", "in_ports")):
                if end not in self.nodes:
                    raise TensorvizError(f"{file}: document.semantic.edges[{i}] ({e.get('edge_id')}): "
                                         f"node {_show(end)} does not exist")
                if e.get(port_key) not in self.nodes[end][ports]:
                    raise TensorvizError(f"{file}: document.semantic.edges[{i}] ({e.get('edge_id')}): "
                                         f"'{end}' has no port {_show(e.get(port_key))} in its {ports}")
            self.edges.append((src, dst))
        for nid, n in self.nodes.items():
            meta = n["metadata"]
            if self.is_group(nid):
                members = meta.get("moduleMembers")
                if not isinstance(members, list) or sorted(members) != sorted(self.children.get(nid, [])):
                    raise self.error(nid, "its moduleMembers are not the nodes whose parentId it is")
                if meta.get("isGroup") is not True or meta.get("moduleInstanceId") != nid \
                        or "moduleTemplateId" not in meta:
                    raise self.error(nid, "a group (kind 'module') needs isGroup true, its own id as "
                                          "moduleInstanceId, and a moduleTemplateId")
                if meta.get("moduleLayerCount") != self.leaves(nid):
                    raise self.error(nid, f"its moduleLayerCount is {_show(meta.get('moduleLayerCount'))}, but "
                                          f"{self.leaves(nid)} layers lie under it")
            else:
                group_keys = sorted(k for k in ("isGroup", "moduleMembers", "moduleLayerCount") if k in meta)
                if group_keys and not (meta.get("isGroup") is False and group_keys == ["isGroup"]):
                    raise self.error(nid, f"a node of kind '{n['kind']}' with a group's {', '.join(group_keys)}")

    def _check_ancestry(self, nid: str) -> None:
        """Refuse a node whose chain of parentIds comes back to itself (groups in a cycle)."""
        seen = {nid}
        parent = self.nodes[nid]["metadata"].get("parentId")
        while parent is not None:
            if parent in seen:
                raise self.error(nid, f"its parentIds form a cycle (through '{parent}')")
            seen.add(parent)
            parent = self.nodes[parent]["metadata"].get("parentId")

    def leaves(self, group: str) -> int:
        """The nodes that are not groups under `group`, at any depth."""
        return sum(self.leaves(m) if self.is_group(m) else 1 for m in self.children.get(group, []))

    def error(self, nid: str, text: str) -> TensorvizError:
        return TensorvizError(f"{self.file}: node '{nid}': {text}")

    def is_group(self, nid: str) -> bool:
        return self.nodes[nid]["kind"] == "module"

    def template(self, nid: str) -> str | None:
        t = self.nodes[nid]["metadata"].get("moduleTemplateId")
        return t.rpartition("::")[2] if isinstance(t, str) else None

    def members(self, nid: str) -> list[str]:
        return list(self.nodes[nid]["metadata"].get("moduleMembers") or [])

    def local(self, nid: str, group: str) -> str:
        return nid[len(group) + 1:] if nid.startswith(group + ".") else nid

    def param(self, nid: str, name: str, kind: type = int) -> Any:
        v = self.nodes[nid]["params"].get(name)
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool)) and (kind is not int or v >= 1)
        if not ok:
            raise self.error(nid, f"params.{name} is {_show(v)}, expected a positive integer"
                             if kind is int else f"params.{name} is {_show(v)}, expected a {kind.__name__}")
        return v

    def linear(self, nid: str) -> tuple[int, int, bool]:
        if self.nodes[nid]["op"] != "Linear":
            raise self.error(nid, f"op '{self.nodes[nid]['op']}' where a Linear was expected")
        bias = self.nodes[nid]["params"].get("bias", False)
        if not isinstance(bias, bool):
            raise self.error(nid, f"params.bias is {_show(bias)}, expected true or false")
        return self.param(nid, "in_features"), self.param(nid, "out_features"), bias

    def expect_group(self, nid: str, template: str) -> None:
        if not self.is_group(nid) or self.template(nid) != template:
            got = f"group of template '{self.template(nid)}'" if self.is_group(nid) else f"op '{self.nodes[nid]['op']}'"
            raise self.error(nid, f"is a {got}; expected a {template} group")

    def check_ops(self, group: str, allowed: set[str], what: str) -> None:
        for m in self.members(group):
            if not self.is_group(m) and self.nodes[m]["op"] not in allowed:
                raise self.error(m, f"op '{self.nodes[m]['op']}' is not part of a {what} "
                                    f"(known: {', '.join(sorted(allowed))})")

    def roles(self, group: str, table: dict[str, tuple[str, ...]], what: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for m in self.members(group):
            if self.nodes[m]["op"] != "Linear":
                continue
            local = self.local(m, group)
            role = next((r for r, names in table.items() if local in names), None)
            if role is None:
                known = ", ".join(names[0] for names in table.values())
                raise self.error(m, f"a Linear whose role in the {what} is not known (its name is '{local}'; "
                                    f"known: {known})")
            if role in found:
                raise self.error(m, f"a second {role} projection in the {what} (the first is '{found[role]}')")
            found[role] = m
        for role, names in table.items():
            if role not in found:
                raise self.error(group, f"the {what} has no '{names[0]}' Linear")
        return found


def _top_chain(g: _Graph) -> list[str]:
    """The top-level nodes in order along the edges between them, from the Input."""
    top = set(g.children.get(None, []))
    nxt: dict[str, list[str]] = {}
    for s, d in g.edges:
        if s in top and d in top and d not in nxt.setdefault(s, []):
            nxt[s].append(d)
    inputs = [n for n in top if g.nodes[n]["kind"] == "input"]
    if len(inputs) != 1:
        raise TensorvizError(f"{g.file}: expected one top-level input node, found {len(inputs)}")
    chain = [inputs[0]]
    while nxt.get(chain[-1]):
        if len(nxt[chain[-1]]) != 1:
            raise g.error(chain[-1], f"feeds {len(nxt[chain[-1]])} top-level nodes "
                                     f"({', '.join(nxt[chain[-1]])}); a causal LM is a chain")
        chain.append(nxt[chain[-1]][0])
        if chain[-1] in chain[:-1]:
            raise g.error(chain[-1], "the top-level edges form a cycle")
    for n in sorted(top - set(chain)):
        raise g.error(n, "a top-level node off the chain from the input to the output")
    return chain


def _layer(g: _Graph, b: str) -> dict[str, Any]:
    """The dims of one DecoderBlock group."""
    kids = g.members(b)
    groups = [m for m in kids if g.is_group(m)]
    adds = [m for m in kids if not g.is_group(m)]
    for m in adds:
        if g.nodes[m]["op"] != "torch.add":
            raise g.error(m, f"op '{g.nodes[m]['op']}' is not part of a DecoderBlock (known: torch.add)")
    if len(groups) != 4 or len(adds) != 2:
        raise g.error(b, f"a DecoderBlock holds {len(groups)} groups and {len(adds)} adds; expected RMSNorm, "
                         "Attention, add, RMSNorm, SwiGLU, add")
    for m, t in zip(groups, (NORM, ATTENTION, NORM, MLP)):
        g.expect_group(m, t)
    norm1, attn, norm2, mlp = groups
    for n in (norm1, norm2):
        g.check_ops(n, NORM_OPS, "RMSNorm")
    g.check_ops(attn, ATTN_OPS | {"Linear"}, "Attention")
    rotary = [m for m in g.members(attn) if g.is_group(m)]
    for r in rotary:
        g.expect_group(r, ROTARY)
        g.check_ops(r, ROTARY_OPS, "Rotary")
    if len(rotary) != 2:
        raise g.error(attn, f"the Attention holds {len(rotary)} Rotary groups; expected 2 (query and key)")
    if not any(g.nodes[m]["op"] in ("Softmax", "torch.softmax") for m in g.members(attn)):
        raise g.error(attn, "the Attention has no Softmax")
    r = g.roles(attn, ATTN_ROLES, "Attention")
    (qi, qo, qb), (ki, ko, kb), (vi, vo, vb), (oi, oo, ob) = (g.linear(r[k]) for k in "qkvo")
    g.check_ops(mlp, MLP_OPS | {"Linear"}, "SwiGLU")
    for m in g.members(mlp):
        if g.is_group(m):
            raise g.error(m, "a group inside a SwiGLU")
    f = g.roles(mlp, MLP_ROLES, "SwiGLU")
    (gi, go, gb), (ui, uo, ub), (di, do, db) = (g.linear(f[k]) for k in ("gate", "up", "down"))
    hidden = qi
    for nid, dim, want, what in ((r["k"], ki, hidden, "in_features"), (r["v"], vi, hidden, "in_features"),
                                 (r["v"], vo, ko, "out_features (the key's)"), (r["o"], oi, qo, "in_features (the query's out)"),
                                 (r["o"], oo, hidden, "out_features"), (f["gate"], gi, hidden, "in_features"),
                                 (f["up"], ui, hidden, "in_features"), (f["up"], uo, go, "out_features (the gate's)"),
                                 (f["down"], di, go, "in_features (the gate's out)"), (f["down"], do, hidden, "out_features")):
        if dim != want:
            raise g.error(nid, f"{what.split()[0]} is {dim}, expected {want} ({what}; hidden size {hidden})")
    for nid, bias in ((f["gate"], gb), (f["up"], ub), (f["down"], db)):
        if bias:
            raise g.error(nid, "has a bias; SwiGLU biases are not supported")
    if len({qb, kb, vb}) != 1 or (ob and not qb):
        raise g.error(r["q"], "some attention Linears have a bias and some not; supported: none, all (Llama's "
                              "attention_bias) or query, key and value (Qwen2's)")
    return {"hidden": hidden, "q_out": qo, "kv_out": ko, "inner": go, "bias": (qb, ob), "attn": attn}


def _metadata(sem: dict, file: str) -> dict[str, Any]:
    meta = sem.get("metadata") or {}
    if not isinstance(meta, dict):
        raise TensorvizError(f"{file}: field 'document.semantic.metadata' is not an object")
    ours = meta.get("strata", {})
    if not isinstance(ours, dict):
        raise TensorvizError(f"{file}: field 'document.semantic.metadata.strata' is not an object")
    for key in ours:
        if key not in META_KEYS:
            raise TensorvizError(f"{file}: field 'document.semantic.metadata.strata.{key}' is not known "
                                 f"(known: {', '.join(META_KEYS)})")
    return ours


def hf_config_of(doc: dict, file: str) -> tuple[dict[str, Any], str | None]:
    """(the HF config dict of the document's model, the Input's shape when it says more than
    strata's exporter would write back); errors name the node."""
    sem = doc["document"]["semantic"]
    g = _Graph(sem, file)
    meta = _metadata(sem, file)
    chain = _top_chain(g)
    if len(chain) < 6:
        raise g.error(chain[-1], f"the top-level chain ends here after {len(chain)} nodes; expected input -> "
                                 "Embedding -> DecoderBlock groups -> RMSNorm group -> Linear -> output")
    for nid, want, ok in ((chain[1], "the Embedding", g.nodes[chain[1]]["op"] == "Embedding"),
                          (chain[-3], "the final RMSNorm group", g.is_group(chain[-3]) and g.template(chain[-3]) == NORM),
                          (chain[-2], "the lm_head Linear", g.nodes[chain[-2]]["op"] == "Linear"),
                          (chain[-1], "the output", g.nodes[chain[-1]]["kind"] == "output")):
        if not ok:
            got = f"template '{g.template(nid)}'" if g.is_group(nid) else f"op '{g.nodes[nid]['op']}'"
            raise g.error(nid, f"is a {got} where the top-level chain has {want}")
    blocks = chain[2:-3]
    for b in blocks:
        if not g.is_group(b) or g.template(b) != DECODER:
            g.expect_group(b, DECODER)
    emb, final, head = chain[1], chain[-3], chain[-2]
    vocab, hidden = g.param(emb, "num_embeddings"), g.param(emb, "embedding_dim")
    max_norm = g.nodes[emb]["params"].get("max_norm")
    if max_norm not in (None, 0):
        raise g.error(emb, f"params.max_norm is {_show(max_norm)}; re-normalized embeddings are not supported")
    g.check_ops(final, NORM_OPS, "RMSNorm")
    hi, ho, hb = g.linear(head)
    if (hi, ho) != (hidden, vocab) or hb:
        raise g.error(head, f"the lm_head Linear is {hi} -> {ho}{' with bias' if hb else ''}; expected "
                            f"{hidden} -> {vocab} (hidden -> vocab) without bias")
    layers = [_layer(g, b) for b in blocks]
    first = layers[0]
    for b, lay in zip(blocks, layers):
        if lay["hidden"] != hidden:
            raise g.error(b, f"its hidden size is {lay['hidden']}, the Embedding's is {hidden}")
        diff = [k for k in ("q_out", "kv_out", "inner", "bias") if lay[k] != first[k]]
        if diff:
            raise g.error(b, f"differs from '{blocks[0]}' in {', '.join(diff)}; the layers must be identical")
    shape = g.nodes[chain[0]]["params"].get("shape")
    heads = meta.get("num_attention_heads")
    head_dim = meta.get("head_dim")
    if heads is None:
        dims = _shape_dims(shape)
        if dims is None or len(dims) != 4 or dims[1] * dims[3] != first["q_out"]:
            raise g.error(first["attn"], f"the head count is not in the document: neither "
                                         f"semantic.metadata.strata.num_attention_heads nor an Input shape "
                                         f"batch,heads,seq,head_dim whose heads*head_dim is {first['q_out']} "
                                         f"(the query's out_features); the Input's shape is {_show(shape)}")
        heads, head_dim = dims[1], dims[3]
    if not isinstance(heads, int) or heads < 1 or first["q_out"] % heads:
        raise g.error(first["attn"], f"{heads} heads do not divide the query's {first['q_out']} out_features")
    head_dim = head_dim if head_dim is not None else first["q_out"] // heads
    if not isinstance(head_dim, int) or head_dim < 1 or head_dim * heads != first["q_out"] or first["kv_out"] % head_dim:
        raise g.error(first["attn"], f"head_dim {head_dim} with {heads} heads does not fit the query's "
                                     f"{first['q_out']} and the key's {first['kv_out']} out_features")
    kv_heads = first["kv_out"] // head_dim
    if meta.get("num_key_value_heads", kv_heads) != kv_heads:
        raise TensorvizError(f"{file}: semantic.metadata.strata.num_key_value_heads is "
                             f"{meta['num_key_value_heads']}, the key Linear gives {kv_heads}")
    qwen2 = first["bias"] == (True, False)  # biased q, k, v and an unbiased output: Qwen2's attention
    cfg = {"architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
           "model_type": "qwen2" if qwen2 else "llama", "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": first["inner"], "num_hidden_layers": len(blocks),
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
           "hidden_act": "silu", "attention_bias": first["bias"][0]}
    cfg.update({"use_sliding_window": False} if qwen2 else {"mlp_bias": False})
    cfg.update({k: meta.get(k, v) for k, v in DEFAULTS.items()})
    cfg["torch_dtype"] = cfg.pop("dtype")
    from strata.exporters.tensorviz import default_input_shape

    default = default_input_shape(heads, head_dim, cfg["max_position_embeddings"])
    return cfg, (shape if isinstance(shape, str) and shape != default else None)


def _shape_dims(shape: Any) -> list[int] | None:
    if not isinstance(shape, str):
        return None
    try:
        dims = [int(t, 10) for t in shape.split(",")]
    except ValueError:
        return None
    return dims if all(d >= 1 for d in dims) else None


#: The module-level attribute that keeps the Input's shape when it is not the default one.
INPUT_ATTR = "tensorviz_input"


def import_tensorviz(path: str | Path, build: Callable[[dict[str, Any], str, str], tuple[Any, ModuleOp]]
                     ) -> tuple[Any, ModuleOp]:
    """(the family's config, the module level) of the tensorviz document at `path`;
    `build(config.json fields, file for errors, model name)` reads the fields and builds the
    module (the pipeline passes its family reader and builder)."""
    from strata.frontends.hf_config import ConfigError

    doc = read_document(path)
    data, shape = hf_config_of(doc, str(path))
    name = doc["document"]["semantic"].get("name")
    name = name if isinstance(name, str) and name else Path(path).stem
    try:
        cfg, module = build(data, f"{path}: the model it describes", name)
    except ConfigError as e:
        raise TensorvizError(str(e)) from None
    if shape is not None:
        module.body.block.first_op.attributes[INPUT_ATTR] = StringAttr(shape)
    module.verify()
    return cfg, module


def random_weights_std(hidden: int) -> float:
    """The std of random matrices: logits of std ~1 for a tiny model, smaller for wide ones."""
    return min(0.12, 0.5 / hidden**0.5)
