"""The kernels' source for the CPU target: each kernel of `strata.semantics.kernels` (and of its
companions `kernels_seq`, the many-sequence ops, `kernels_ggml`, ggml-cpu's quantized and float16
numerics, `host_inputs`, the entries' host inputs, and `sampling`, the sampler) as text, and the
other kernels it calls, so that a generated module carries just the kernels it uses."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

from strata.semantics import host_inputs, kernels_ggml, kernels_seq
from strata.semantics import kernels as K
from strata.semantics import sampling as S
from strata.targets.codegen import CodegenError
import strata.targets.cpu.native_calls as native_calls
from strata.targets.cpu.native import loader

#: The modules whose functions a generated CPU module may carry: the op kernels, the many-sequence
#: kernels, ggml-cpu's quantized numerics, the entries' host inputs, the sampler, the native
#: kernels' ctypes binding and the op-level kernels on packed weights that call it.
CPU_KERNEL_MODULES: tuple[ModuleType, ...] = (K, kernels_seq, kernels_ggml, host_inputs, S, loader, native_calls)


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
        sources = [source] if source is not None else [inspect.getsource(m) for m in CPU_KERNEL_MODULES]
        self.functions: dict[str, tuple[int, str]] = {}
        nodes = []
        for n_file, text in enumerate(sources):
            lines = text.splitlines()
            for node in ast.parse(text).body:
                if not isinstance(node, ast.FunctionDef):
                    continue
                if node.name in self.functions:
                    raise CodegenError(f"cpu target: two kernels named {node.name!r}")
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                # Ordered by file, then line: the generated module lists them as the files do.
                self.functions[node.name] = (n_file * 1_000_000 + first, "\n".join(lines[first - 1:node.end_lineno]))
                nodes.append(node)
        self.dependencies: dict[str, list[str]] = {
            node.name: sorted(_free_names(node) & set(self.functions) - {node.name}) for node in nodes
        }

    @classmethod
    def of(cls, *modules: ModuleType) -> KernelLibrary:
        """The functions of `modules` (their names must differ), each module's in file order."""
        return cls("\n".join(inspect.getsource(m) for m in modules))

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
