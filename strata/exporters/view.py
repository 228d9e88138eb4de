"""Pictures of a model: its module, op or blueprint level as one graph (`strata view`).

Each level becomes a `ViewGraph` (nodes, clusters, edges with labels), written as Graphviz text
by `to_dot` and as SVG or a self-contained HTML page by `strata.exporters.view_render`.

- **module**: the block instances of the model. A block with sub-blocks is a cluster (a
  layer, its attention, its MLP); a block without is a node labelled with its kind, dims and
  params (`w 16x16 f32`). Edges carry the activation `S x dim dtype`. The dataflow inside a
  block follows its kind: a `std.layer.*` adds a residual after each norm-mixer pair, a
  `std.attn.*` feeds its projections from the input into the attention core (which holds the
  state) and its output projection after it, a `std.nn.mlp` runs gate and up side by side; in
  any other kind (a sparse MoE) every sub reads the block's input and feeds one node of the
  block holding its own params (the experts), with dashed edges: how they combine is the
  kind's semantics, not drawn.
- **op**: the ops of one lowered entry; edges carry tensor shapes and element types; ops are
  clustered by layer (the `-N` of llama.cpp's names, `blk.N.` of params, `_lN` of state).
- **blueprint**: the nodes of a blueprint function with `strata.exporters.blueprint_dot`'s
  labels, one cluster per kernel group, edges labelled `format rows x dim`.

`collapse_layers` keeps, for graphs of many layers, the first layer of each structure and
draws every later layer equal to it as one node `layer i = layer k`, as kbp-graph/v1's templates
do (the blueprint level uses those templates, `strata.dialects.blueprint_templates`; the
module and op levels compare each layer's nodes and internal edges with its index removed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue

from strata.dialects.blueprint_graph import read_graph, tensor_parallel_summary
from strata.dialects.blueprint_templates import collapse, layer_of
from strata.dialects.instances import BlockInstance, find_model, instantiate
from strata.exporters.blueprint_dot import node_label, node_shape, quote
from strata.exporters.blueprint_table import tensor_parallel_line


@dataclass
class Node:
    id: str
    label: str
    shape: str = "box"
    cluster: str | None = None
    layer: int | None = None
    style: str | None = None


@dataclass
class Cluster:
    id: str
    label: str
    parent: str | None = None
    layer: int | None = None


@dataclass
class Edge:
    src: str
    dst: str
    label: str = ""
    style: str | None = None


@dataclass
class ViewGraph:
    name: str
    nodes: dict[str, Node] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    #: The picture's caption (a tensor-parallel blueprint's collectives and their cost), or None.
    label: str | None = None

    def node(self, nid: str, label: str, **kw) -> str:
        self.nodes[nid] = Node(nid, label, **kw)
        return nid

    def edge(self, src: str, dst: str, label: str = "", style: str | None = None) -> None:
        self.edges.append(Edge(src, dst, label, style))


# ---------------------------------------------------------------------------------------------
# module level


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


class _ModuleView:
    def __init__(self, module: ModuleOp):
        model = find_model(module)
        self.root = instantiate(model)
        self.t = str(self.root.env.get("T", ""))
        self.g = ViewGraph(model.sym_name.data)

    def act(self, dim: int | str) -> str:
        return f"S x {dim} {self.t}"

    def build(self) -> ViewGraph:
        g = self.g
        src = g.node("tokens", "tokens", shape="ellipse")
        out, label = self.expand(self.root, src, "S i32", None)
        g.edge(out, g.node("logits", "logits", shape="ellipse"), label)
        return g

    def leaf(self, inst: BlockInstance, src: str, label: str, cluster: str | None) -> tuple[str, str]:
        params = [f"{n} {_dims(t.shape)} {t.dtype}" for n, t in inst.params.items()]
        if inst.knob("tied") is not None:
            params.append(f"tied to {inst.knob('tied').data}")
        text = "\n".join([inst.path or inst.name, f"{inst.block.block_name} ({inst.kind})", *params])
        nid = self.g.node(inst.path or inst.name, text, cluster=cluster, layer=inst.layer)
        self.g.edge(src, nid, label)
        out = label
        if "Out" in inst.env:
            out = self.act(inst.env["Out"])
        elif inst.kind == "std.nn.embedding":
            out = self.act(inst.env["H"])
        return nid, out

    def expand(self, inst: BlockInstance, src: str, label: str, cluster: str | None) -> tuple[str, str]:
        if not inst.children:
            return self.leaf(inst, src, label, cluster)
        here = cluster
        if inst.path:  # the root is the whole picture, not a cluster
            here = inst.path
            state = [f"{n} {_dims(t.shape)} {t.dtype}" for n, t in inst.state.items()]
            self.g.clusters[here] = Cluster(here, "\n".join([f"{inst.path}: {inst.block.block_name}", *state]),
                                            cluster, inst.layer)
        kids = [(n, c) for n, c in inst.children.items()]
        kind = inst.kind
        if kind.startswith("std.layer."):
            return self.residual(inst, kids, src, label, here)
        if kind.startswith("std.attn."):
            return self.attention(inst, kids, src, label, here)
        if kind == "std.nn.mlp" and {"gate", "up", "down"} <= set(inst.children):
            a, la = self.expand(inst.children["gate"], src, label, here)
            b, _ = self.expand(inst.children["up"], src, label, here)
            mid = self.g.node(f"{inst.path}.silu_mul", "silu(gate) * up", shape="ellipse", cluster=here, layer=inst.layer)
            self.g.edge(a, mid, la)
            self.g.edge(b, mid, la)
            return self.expand(inst.children["down"], mid, la, here)
        if kind == "std.model.causal_lm":  # the model: its subs in order, layer after layer
            for _, c in kids:
                for sub in c if isinstance(c, list) else [c]:
                    src, label = self.expand(sub, src, label, here)
            return src, label
        # Any other kind: each sub reads the block's input (dashed: how they combine is the kind's
        # semantics, drawn as one node holding the block's own params).
        params = [f"{n} {_dims(t.shape)} {t.dtype}" for n, t in inst.params.items()]
        join = self.g.node(f"{inst.path}.combine", "\n".join([f"{inst.block.block_name} ({kind})", *params]),
                           shape="ellipse", cluster=here, layer=inst.layer)
        for name, c in kids:
            if isinstance(c, list):
                y, ly = self.array(inst, name, c, src, label, here)
            else:
                start = len(self.g.edges)
                y, ly = self.expand(c, src, label, here)
                if start < len(self.g.edges):
                    self.g.edges[start].style = "dashed"
            self.g.edge(y, join, ly, style="dashed")
        return join, label

    def array(self, inst: BlockInstance, name: str, items: list[BlockInstance], src: str, label: str,
              cluster: str | None) -> tuple[str, str]:
        """An array of blocks inside a block (experts): one node."""
        first = items[0]
        nid = self.g.node(f"{inst.path}.{name}", f"{inst.path}.{name}[0..{len(items) - 1}]\n{len(items)} x "
                          f"{first.block.block_name} ({first.kind})", shape="box3d", cluster=cluster, layer=inst.layer)
        self.g.edge(src, nid, label)
        return nid, label

    def residual(self, inst, kids, src, label, here) -> tuple[str, str]:
        stream, pending = src, None
        for i, (name, c) in enumerate(kids):
            if isinstance(c, list):
                return self.array(inst, name, c, stream, label, here)
            if c.kind in ("std.nn.norm", "std.nn.gated_norm") and i + 1 < len(kids) and pending is None:
                pending = c
                continue
            x, lx = (self.expand(pending, stream, label, here) if pending is not None else (stream, label))
            y, ly = self.expand(c, x, lx, here)
            add = self.g.node(f"{inst.path}.add{i}", "+", shape="circle", cluster=here, layer=inst.layer)
            self.g.edge(y, add, ly)
            self.g.edge(stream, add, label, style="dashed")
            stream, pending = add, None
        return stream, label

    def attention(self, inst, kids, src, label, here) -> tuple[str, str]:
        outs = {"o_proj", "out_proj", "o"}
        state = ", ".join(f"{n} {_dims(t.shape)}" for n, t in inst.state.items())
        attrs = [f"rope theta {inst.float_attr('rope_theta', 0.0):g}"] if inst.attr("rope_theta") else []
        core = self.g.node(f"{inst.path}.core", "\n".join(["attention core", *attrs, *([state] if state else [])]),
                           shape="ellipse", cluster=here, layer=inst.layer)
        for name, c in kids:
            if name in outs or isinstance(c, list):
                continue
            y, ly = self.expand(c, src, label, here)
            self.g.edge(y, core, ly)
        out, lo = core, label
        for name, c in kids:
            if name in outs:
                out, lo = self.expand(c, out, lo, here)
        return out, lo


def module_graph(module: ModuleOp) -> ViewGraph:
    """The module level's picture (see the module's docstring)."""
    return _ModuleView(module).build()


# ---------------------------------------------------------------------------------------------
# op level

_LAYER_PATTERNS = (re.compile(r"^blk\.(\d+)\."), re.compile(r"_l(\d+)(?![0-9])"), re.compile(r"-(\d+)(?![0-9])"))
#: The attributes that name an op's tensor: llama.cpp's name, a param's, a state's.
_NAME_ATTRS = ("name", "tensor", "state")


def _op_name(op: Operation) -> str | None:
    for key in _NAME_ATTRS:
        a = op.attributes.get(key) or op.properties.get(key)
        if isinstance(a, StringAttr):
            return a.data
    return None


def _type_text(t) -> str:
    if isinstance(t, TensorType):
        return f"{_dims(tuple(t.get_shape()))} {t.element_type}"
    return str(t)


def _own_layer(name: str | None) -> int | None:
    for pattern in _LAYER_PATTERNS if name else ():
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def _op_layers(ops: list[Operation]) -> dict[Operation, int | None]:
    """Each op's layer: its name's. An unnamed op (a view, a row pick) that reads a layer's value
    joins the layer of the first op reading it (the row pick before the last layer joins the last
    layer), else the layer it reads; one that reads only shared inputs joins none."""
    own = {op: _own_layer(_op_name(op)) for op in ops}
    reads: dict[Operation, int | None] = {}
    for op in ops:
        found = [own.get(v.owner) if own.get(v.owner) is not None else reads.get(v.owner) for v in op.operands]
        reads[op] = next((x for x in found if x is not None), None)
    layer = dict(own)
    for op in reversed(ops):
        if layer[op] is None and reads[op] is not None:
            users = [layer.get(u.operation) for r in op.results for u in r.uses]
            layer[op] = next((x for x in users if x is not None), reads[op])
    return layer


def op_graph(module: ModuleOp) -> ViewGraph:
    """The op level's picture: every function's ops, clustered by layer."""
    fns = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    g = ViewGraph(fns[0].sym_name.data if len(fns) == 1 else "op")
    ids: dict[SSAValue, str] = {}
    for fn in fns:
        for k, arg in enumerate(fn.args):
            ids[arg] = g.node(f"{fn.sym_name.data}.arg{k}", f"arg {k}", shape="ellipse")
        ops = [op for op in fn.walk() if op is not fn and not isinstance(op, func.ReturnOp)]
        layers = _op_layers(ops)
        for i, op in enumerate(ops):
            name, layer = _op_name(op), layers[op]
            text = op.name.removeprefix("op.") + (f"\n{name}" if name else "")
            nid = g.node(f"{fn.sym_name.data}.{i}", text, shape="ellipse" if not op.operands else "box",
                         layer=layer, cluster=None if layer is None else f"layer{layer}")
            if layer is not None and f"layer{layer}" not in g.clusters:
                g.clusters[f"layer{layer}"] = Cluster(f"layer{layer}", f"layer {layer}", None, layer)
            for v in op.operands:
                if v in ids:
                    g.edge(ids[v], nid, _type_text(v.type))
            for r in op.results:
                ids[r] = nid
        for op in fn.walk():
            if isinstance(op, func.ReturnOp):
                out = g.node(f"{fn.sym_name.data}.return", "return", shape="ellipse")
                for v in op.operands:
                    if v in ids:
                        g.edge(ids[v], out, _type_text(v.type))
    return g


# ---------------------------------------------------------------------------------------------
# blueprint level


def blueprint_graph(fn: func.FuncOp) -> tuple[ViewGraph, dict[int, str]]:
    """The blueprint's picture and each layer's template (kbp-graph/v1's `collapsed.layout`)."""
    graph = read_graph(fn)
    tp = tensor_parallel_summary(graph)
    g = ViewGraph(fn.sym_name.data, label=tensor_parallel_line(tp) if tp is not None else None)
    for grp in graph.groups:
        layers = {graph.nodes[i]["layer"] for i in grp["nodes"]}
        layer = layers.pop() if len(layers) == 1 else None
        cid = f"g{grp['id']}"
        g.clusters[cid] = Cluster(cid, f"#{grp['id']} {grp['rule']}", None, layer)
        for i in grp["nodes"]:
            n = graph.nodes[i]
            g.node(f"n{i}", node_label(n), shape=node_shape(n), cluster=cid, layer=layer_of(n["id"]))
    for e in graph.edges:
        g.edge(f"n{e['from']}", f"n{e['to']}", f"{e['format']} {e['rows']} x {e['dim']}", "bold" if e["fused"] else None)
    collapsed = collapse(graph.nodes, graph.edges)
    layers = sorted({n["layer"] for n in graph.nodes if n["layer"] is not None})
    return g, dict(zip(layers, collapsed["layout"]))


# ---------------------------------------------------------------------------------------------
# collapsing repeated layers


def _strip(text: str, layer: int) -> str:
    """A label with its layer number removed where names carry it (layers.N., blk.N., -N, _lN)."""
    return re.sub(rf"((?:layers|blk)\.){layer}(?=\.)|-{layer}(?![0-9])|_l{layer}(?![0-9])", r"\1#", text)


def layer_keys(g: ViewGraph) -> dict[int, object]:
    """Each layer's structure: its nodes' labels and internal edges with the layer number removed."""
    members: dict[int, list[str]] = {}
    for n in g.nodes.values():
        if n.layer is not None:
            members.setdefault(n.layer, []).append(n.id)
    keys: dict[int, object] = {}
    for layer, ids in members.items():
        local = {nid: k for k, nid in enumerate(ids)}
        nodes = tuple((_strip(g.nodes[i].label, layer), g.nodes[i].shape) for i in ids)
        edges = tuple(sorted((local[e.src], local[e.dst], e.label) for e in g.edges if e.src in local and e.dst in local))
        keys[layer] = (nodes, edges)
    return keys


def collapse_layers(g: ViewGraph, keys: dict[int, object]) -> ViewGraph:
    """Every layer whose key an earlier layer has becomes one node `layer i = layer k`."""
    first: dict[object, int] = {}
    same: dict[int, int] = {}
    for layer in sorted(keys):
        k = keys[layer]
        if k in first:
            same[layer] = first[k]
        else:
            first[k] = layer
    if not same:
        return g
    out = ViewGraph(g.name, label=g.label)
    out.clusters = {c.id: c for c in g.clusters.values() if c.layer not in same}
    rep: dict[str, str] = {}
    for n in g.nodes.values():
        if n.layer in same:
            rid = f"layer{n.layer}.collapsed"
            if rid not in out.nodes:
                like = same[n.layer]
                tmpl = f" (template {keys[n.layer]})" if isinstance(keys[n.layer], str) else ""
                out.node(rid, f"layer {n.layer}\n= layer {like}{tmpl}", shape="box3d", layer=n.layer)
            rep[n.id] = rid
        else:
            cluster = n.cluster if n.cluster in out.clusters else None
            out.nodes[n.id] = Node(n.id, n.label, n.shape, cluster, n.layer, n.style)
    seen = set()
    for e in g.edges:
        s, d = rep.get(e.src, e.src), rep.get(e.dst, e.dst)
        if s == d or (s, d, e.label) in seen:
            continue
        seen.add((s, d, e.label))
        out.edges.append(Edge(s, d, e.label, e.style))
    return out


# ---------------------------------------------------------------------------------------------
# Graphviz


def to_dot(g: ViewGraph) -> str:
    """Graphviz text: clusters nest as the graph's clusters do; ids and labels quoted."""
    lines = [f"digraph {quote(g.name)} {{", "  compound=true;", "  rankdir=TB;", "  node [fontsize=10];",
             "  edge [fontsize=9];"] + ([f"  label={quote(g.label)};"] if g.label else [])
    children: dict[str | None, list[str]] = {}
    for c in g.clusters.values():
        children.setdefault(c.parent if c.parent in g.clusters else None, []).append(c.id)
    inside: dict[str | None, list[Node]] = {}
    for n in g.nodes.values():
        inside.setdefault(n.cluster if n.cluster in g.clusters else None, []).append(n)

    def node_line(n: Node, pad: str) -> str:
        style = f", style={n.style}" if n.style else ""
        return f"{pad}{quote(n.id)} [label={quote(n.label)}, shape={n.shape}{style}];"

    def emit(cid: str, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}subgraph {quote('cluster_' + cid)} {{")
        lines.append(f"{pad}  label={quote(g.clusters[cid].label)};")
        for n in inside.get(cid, []):
            lines.append(node_line(n, pad + "  "))
        for sub in children.get(cid, []):
            emit(sub, depth + 1)
        lines.append(f"{pad}}}")

    for cid in children.get(None, []):
        emit(cid, 1)
    for n in inside.get(None, []):
        lines.append(node_line(n, "  "))
    for e in g.edges:
        attrs = [f"label={quote(e.label)}"] if e.label else []
        if e.style:
            attrs.append(f"style={e.style}")
        lines.append(f"  {quote(e.src)} -> {quote(e.dst)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"
