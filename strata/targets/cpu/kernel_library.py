"""The kernels' source for the CPU target: each kernel of `strata.semantics.kernels` (and of
`strata.semantics.kernels_ggml`, ggml-cpu's quantized and float16 numerics) as text, and the
other kernels it calls, so that a generated module carries just the kernels it uses."""

from __future__ import annotations

import ast
import inspect

from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG
from strata.targets.codegen import CodegenError


def _free_names(fn: ast.FunctionDef) -> set[str]:
    """The names a function reads but does not bind (its arguments and assignments bind)."""
    nodes = list(ast.walk(fn))
    loads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for a in nodes if isinstance(a, ast.arg)}
    return loads - bound


class KernelLibrary:
    """The kernels' source, from one read of :mod:`strata.semantics.kernels` and
    :mod:`strata.semantics.kernels_ggml` (one namespace: their function names are distinct):
    each top-level function's text (with its decorators), and the other top-level functions it
    refers to, read off its syntax tree (so no table of dependencies can fall out of date)."""

    def __init__(self, source: str | None = None):
        self.source = source if source is not None else inspect.getsource(K) + "\n\n" + inspect.getsource(KG)
        tree = ast.parse(self.source)
        lines = self.source.splitlines()
        self.functions: dict[str, tuple[int, str]] = {}
        nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        for node in nodes:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            self.functions[node.name] = (first, "\n".join(lines[first - 1:node.end_lineno]))
        self.dependencies: dict[str, list[str]] = {
            node.name: sorted(_free_names(node) & set(self.functions) - {node.name}) for node in nodes
        }

    def closure(self, names: set[str]) -> list[str]:
        """``names`` and the helpers they call, in file order."""
        seen: set[str] = set()
        stack = sorted(names)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            if n not in self.functions:
                raise CodegenError(f"cpu target: strata.semantics.kernels has no function {n!r}")
            seen.add(n)
            stack.extend(self.dependencies.get(n, []))
        return sorted(seen, key=lambda n: self.functions[n][0])

    def text(self, name: str) -> str:
        return self.functions[name][1]
