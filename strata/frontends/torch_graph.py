"""Reading a `torch.export` graph as blocks: which submodule is an embedding, an RMSNorm, a
linear, an attention, a SwiGLU MLP or a decoder layer, and which ATen nodes each one owns.

`torch.export` records on every node the stack of modules that produced it
(`nn_module_stack`); a node belongs to the innermost recognised block on its stack. Only the
*data* nodes (those that depend on the token ids) are read as computation: what depends on
no token (positions, causal masks, RoPE tables, weight casts) is the model's constant
machinery, and the capture's numeric check (`strata.frontends.torch`) confirms that the
blocks chosen reproduce it.

Block kinds are recognised from what a submodule holds and does:

* embedding: an `nn.Embedding` whose `aten.embedding` reads the token ids;
* linear: an `nn.Linear`;
* norm: a module with one 1-D parameter whose nodes take a mean and an rsqrt, or `aten.rms_norm`
  (`nn.RMSNorm`);
* attention: the innermost module holding four linears and a softmax (or SDPA);
* mlp: the innermost module holding three linears and a SiLU (SwiGLU);
* layer: the innermost module holding one attention, one MLP and two norms.

Each kind admits a set of ATen ops (`ALLOWED`); a data node whose op its block does not
admit is an unsupported op, reported with its module path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from strata.errors import StrataError


class CaptureError(StrataError):
    """A torch module that strata cannot capture."""


#: Ops that move, cast or alias data without computing (every block admits them).
VIEWLIKE = frozenset({
    "view", "reshape", "_unsafe_view", "transpose", "t", "permute", "contiguous", "clone", "to", "_to_copy",
    "_assert_tensor_metadata", "alias", "detach", "dropout", "expand", "unsqueeze", "squeeze", "flatten",
    "unflatten", "type_as", "lift_fresh_copy", "slice", "select",
})
#: block kind -> the ATen ops (besides VIEWLIKE) its data nodes may use.
ALLOWED: dict[str, frozenset[str]] = {
    "embedding": frozenset({"embedding"}),
    "linear": frozenset({"linear", "mm", "addmm", "matmul", "add"}),
    "norm": frozenset({"pow", "mul", "mean", "add", "rsqrt", "sqrt", "div", "reciprocal", "rms_norm"}),
    "attention": frozenset({"matmul", "bmm", "mul", "div", "add", "sub", "neg", "cat", "stack", "softmax",
                            "_softmax", "masked_fill", "where", "scaled_dot_product_attention",
                            "repeat_interleave", "repeat"}),
    "mlp": frozenset({"silu", "mul"}),
    "layer": frozenset({"add"}),
    "model": frozenset(),
}


def op_name(node: Any) -> str:
    """`linear` for `aten.linear.default`."""
    return str(getattr(node.target, "_opname", getattr(node.target, "__name__", node.target)))


def full_op_name(node: Any) -> str:
    """`aten.linear.default`."""
    return str(node.target)


def shape(node: Any) -> tuple[int, ...]:
    val = node.meta.get("val")
    return tuple(int(d) for d in val.shape) if hasattr(val, "shape") else ()


def _norm_path(path: str) -> str:
    # strict export spells the root `L['self']`; non-strict, the plain attribute path
    for prefix in ("L['self'].", "L['self']"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def module_stack(node: Any) -> list[str]:
    """The module paths of `node`, outermost first ("" is the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    return [_norm_path(str(v[0])) for v in stack.values()]


@dataclass
class Block:
    kind: str
    path: str
    module: Any
    nodes: list[Any] = field(default_factory=list)  # the data nodes it owns (not its sub-blocks')
    children: list[Block] = field(default_factory=list)

    def all_nodes(self) -> list[Any]:
        out = list(self.nodes)
        for c in self.children:
            out += c.all_nodes()
        return out

    def output(self) -> Any:
        """The block's output node: the last of its nodes used outside it."""
        mine = set(self.all_nodes())
        outs = [n for n in self.all_nodes() if any(u not in mine for u in n.users)]
        if not outs:
            raise CaptureError(f"module '{self.path}': its result is not used")
        return max(outs, key=lambda n: n.meta["_index"])

    def kids(self, kind: str) -> list[Block]:
        return [c for c in self.children if c.kind == kind]


class Graph:
    """The export's graph with its data nodes and the module tree's blocks."""

    def __init__(self, ep: Any, module: Any):
        self.ep, self.module = ep, module
        self.modules = dict(module.named_modules())
        nodes = list(ep.graph.nodes)
        for i, n in enumerate(nodes):
            n.meta["_index"] = i
        sig = ep.graph_signature
        user = [n for n in nodes if n.op == "placeholder" and n.name in sig.user_inputs]
        if len(user) != 1:
            raise CaptureError(f"the module must take one input (the token ids [batch, seq]); it takes {len(user)}")
        self.tokens = user[0]
        self.params = dict(sig.inputs_to_parameters)  # placeholder name -> state_dict key
        self.buffers = dict(sig.inputs_to_buffers)
        self.constants = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
        self.data = self._descendants([self.tokens])
        self.calls = [n for n in nodes if n.op == "call_function" and n in self.data]
        outs = [n for n in nodes if n.op == "output"]
        results = [a for a in outs[0].args[0] if hasattr(a, "op")] if outs else []
        if len(results) != 1:
            raise CaptureError(f"the module must return one tensor (the logits); it returns {len(results)}")
        self.result = results[0]

    @staticmethod
    def _descendants(roots: Iterable[Any]) -> set[Any]:
        seen: set[Any] = set()
        todo = list(roots)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo.extend(n.users)
        return seen

    @staticmethod
    def ancestors(node: Any) -> set[Any]:
        seen: set[Any] = set()
        todo = [node]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo.extend(n.all_input_nodes)
        return seen

    def source(self, node: Any) -> Any:
        """The node a chain of view-like ops starts from."""
        while node.op == "call_function" and op_name(node) in VIEWLIKE and node.all_input_nodes:
            node = node.args[0]
        return node

    # -- the blocks -----------------------------------------------------------------------

    def _subtree_ops(self, path: str) -> set[str]:
        return {op_name(n) for n in self.calls if path in module_stack(n)}

    def _classify(self, path: str, sub: dict[str, str]) -> str | None:
        """The block kind of the module at `path` given its sub-blocks' kinds (path -> kind)."""
        import torch

        mod = self.modules[path]
        if isinstance(mod, torch.nn.Embedding):
            return "embedding"
        if isinstance(mod, torch.nn.Linear):
            return "linear"
        kinds = list(sub.values())
        ops = self._subtree_ops(path)
        params = list(mod.parameters())
        if len(params) == 1 and params[0].dim() == 1 and ({"rsqrt", "mean"} <= ops or "rms_norm" in ops):
            return "norm"
        if kinds.count("attention") == 1 and kinds.count("mlp") == 1 and kinds.count("norm") == 2:
            return "layer"
        if {"attention", "mlp", "layer"} & set(kinds):
            return None  # a container of blocks (the root, a ModuleList)
        if kinds.count("linear") >= 4 and ops & {"softmax", "_softmax", "scaled_dot_product_attention"}:
            return "attention"
        if kinds.count("linear") == 3 and "silu" in ops:
            return "mlp"
        return None

    def blocks(self) -> Block:
        """The root block (kind `model`) with its recognised sub-blocks."""
        used = {p for n in self.calls for p in module_stack(n)}

        def visit(path: str) -> tuple[Block | None, list[Block]]:
            """(this module's block or None, the blocks found below it)."""
            prefix = f"{path}." if path else ""
            direct = [name for name in self.modules if name.startswith(prefix) and name != path
                      and "." not in name[len(prefix):]]
            found: list[Block] = []
            for name in direct:
                if name in used or any(u.startswith(name + ".") for u in used):
                    blk, below = visit(name)
                    found += [blk] if blk is not None else below
            kind = self._classify(path, {b.path: b.kind for b in found}) if path else None
            if kind is None:
                return None, found
            return Block(kind, path, self.modules[path], children=found), []

        _, top = visit("")
        root = Block("model", "", self.module, children=top)
        by_path = {}

        def index(b: Block) -> None:
            by_path[b.path] = b
            for c in b.children:
                index(c)

        index(root)
        for n in self.calls:
            owner = next((p for p in reversed(module_stack(n)) if p in by_path), "")
            by_path[owner].nodes.append(n)
        for b in by_path.values():
            for n in b.nodes:
                if op_name(n) not in VIEWLIKE and op_name(n) not in ALLOWED[b.kind]:
                    raise CaptureError(self.unsupported(n, b))
        return root

    def unsupported(self, node: Any, block: Block) -> str:
        where = f"module '{block.path}' ({type(block.module).__name__})" if block.path else "the root module"
        if block.kind in ("model", "layer"):
            what = "outside the blocks strata recognises (embedding, RMSNorm, linear, attention, SwiGLU)"
        else:
            what = f"in a {block.kind} block (which may use {', '.join(sorted(ALLOWED[block.kind]))} and views)"
        return f"torch capture: unsupported op {full_op_name(node)} in {where}, {what}"
