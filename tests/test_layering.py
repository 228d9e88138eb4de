"""The import layering of strata/ (DESIGN.md, "How the pieces register"), read off the source.

    ir <- dialects <- passes, semantics <- targets <- pipeline <- cli;  families (strata/models) from the side

Every .py file under strata/ is parsed with `ast` and every import it can make is collected:
top-level and nested (inside functions, methods, `if TYPE_CHECKING:`), absolute and relative,
`from strata import x` (x a submodule), and the module names it hands to
`importlib.import_module` / `__import__` or keeps as strings naming a strata module (the pass
registry imports its passes that way).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import ROOT

PKG = ROOT / "strata"

#: Layer (the first component under strata/) -> the other layers it may import (a layer may
#: always import itself). Every folder and root module of the package is a layer here; a new
#: one fails `test_every_layer_has_rules` until it is given its place.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "ir": {"errors"},
    "artifacts": {"errors"},
    "dialects": {"errors", "ir"},
    "passes": {"errors", "ir", "dialects"},
    "semantics": {"errors", "ir", "dialects"},
    "quant": {"errors", "ir", "artifacts", "dialects", "passes", "semantics"},
    "exporters": {"errors", "ir", "artifacts", "dialects", "passes", "semantics"},
    "targets": {"errors", "ir", "artifacts", "dialects", "passes", "semantics", "quant", "exporters"},
    "frontends": {"errors", "ir", "artifacts", "dialects", "passes", "semantics", "exporters"},
    "models": {"errors", "ir", "artifacts", "dialects", "frontends", "quant"},
}
ALLOWED["pipeline"] = set(ALLOWED) | {"targets", "frontends", "models"}
ALLOWED["runtime"] = ALLOWED["pipeline"] | {"pipeline"}
ALLOWED["verify"] = ALLOWED["runtime"] | {"runtime"}
ALLOWED["cli"] = ALLOWED["verify"] | {"verify"}
ALLOWED["__main__"] = {"cli"}
for _layer, _allowed in ALLOWED.items():
    _allowed.discard(_layer)
#: The required rule: these never import a model family.
NO_FAMILIES = ("ir", "artifacts", "dialects", "passes", "semantics", "quant", "exporters", "targets", "frontends")


# ---------------------------------------------------------------------------------------------
# The checker


def module_name(path: Path, pkg: Path = PKG) -> tuple[str, bool]:
    """(dotted module name, is a package __init__) of a file under the package directory."""
    rel = path.relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join(parts), is_pkg


def known_modules(pkg: Path = PKG) -> set[str]:
    out = set()
    for path in pkg.rglob("*.py"):
        if "__pycache__" not in path.parts:
            out.add(module_name(path, pkg)[0])
    return out


def _resolve_relative(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    package = module if is_pkg else module.rpartition(".")[0]
    parts = package.split(".")
    if level - 1 > len(parts) - 1:
        raise ValueError(f"{module}: relative import beyond the top-level package")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def imports_of(source: str, module: str, is_pkg: bool = False, known: set[str] | None = None) -> list[tuple[int, str]]:
    """(line, imported module) for every import that `source` (the module `module`) can make."""
    known = known_modules() if known is None else known
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(module, is_pkg, node.level, node.module) if node.level else node.module or "")
            found.append((node.lineno, base))
            # `from strata import models`: the name is a submodule, so that is what is imported.
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if f"{base}.{a.name}" in known]
        elif isinstance(node, ast.Call):
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if called in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            # A registry keeping module names to import later.
            found.append((node.lineno, node.value))
    return [(line, name) for line, name in found if name == "strata" or name.startswith("strata.")]


def layer_of(module: str) -> str | None:
    """`strata.passes.convert_module_to_op.nn` -> `passes`; `strata` -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "strata" else None


def violations(source: str, module: str, is_pkg: bool = False, known: set[str] | None = None) -> list[str]:
    """What `source` imports that its layer may not import, as `module:line imports X`."""
    here = layer_of(module)
    out = []
    for line, name in imports_of(source, module, is_pkg, known):
        there = layer_of(name)
        if there is None or there == here:
            continue
        if there not in ALLOWED.get(here, set()):
            out.append(f"{module}:{line} imports {name}")
    return out


def sources(layer: str | None = None) -> list[tuple[Path, str, bool]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        module, is_pkg = module_name(path)
        if layer is None or layer_of(module) == layer:
            out.append((path, module, is_pkg))
    return out


def layer_violations(layer: str) -> list[str]:
    known = known_modules()
    out = []
    for path, module, is_pkg in sources(layer):
        out += violations(path.read_text(encoding="utf-8"), module, is_pkg, known)
    return out


# ---------------------------------------------------------------------------------------------
# The rules on today's code


def test_the_checker_sees_the_tree():
    """Every layer the rules name exists and has files, so no rule passes on nothing."""
    layers = {layer_of(m) for _, m, _ in sources()}
    assert set(ALLOWED) <= layers | {"__main__"}
    # and it finds the imports that are there (the pass registry's string, a nested import)
    known = known_modules()
    passes_init = PKG / "passes" / "__init__.py"
    names = {n for _, n in imports_of(passes_init.read_text(), "strata.passes", True, known)}
    assert "strata.passes.convert_module_to_op" in names  # a module name kept as a string
    model = (PKG / "pipeline" / "model.py").read_text()
    assert "strata.frontends.gguf" in {n for _, n in imports_of(model, "strata.pipeline.model", False, known)}  # nested


def test_every_layer_has_rules():
    """No folder or root module of the package is exempt: each has its place in ALLOWED."""
    layers = {layer_of(m) for _, m, _ in sources()} - {None}
    assert layers <= set(ALLOWED), sorted(layers - set(ALLOWED))


def test_every_folder_is_a_package():
    """A folder of modules without an __init__.py is left out of a non-editable install."""
    folders = {p.parent for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(str(f.relative_to(PKG)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_at_most_one_module_at_the_root():
    """Besides __init__, __main__ and errors, at most one module sits at the package root."""
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py", "errors.py"))
    assert len(loose) <= 1, loose


@pytest.mark.parametrize("layer", NO_FAMILIES)
def test_no_layer_below_the_pipeline_imports_a_family(layer):
    """The required rule: nothing under ir, dialects, passes, semantics, targets, frontends imports strata.models."""
    known = known_modules()
    bad = []
    for path, module, is_pkg in sources(layer):
        bad += [f"{module}:{line} imports {name}" for line, name in imports_of(path.read_text(), module, is_pkg, known)
                if layer_of(name) == "models"]
    assert bad == []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    assert layer_violations(layer) == []


def import_graph(known: set[str] | None = None) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (nested imports too), most specific names only."""
    known = known_modules() if known is None else known
    graph: dict[str, set[str]] = {}
    for path, module, is_pkg in sources():
        targets = {name for _, name in imports_of(path.read_text(encoding="utf-8"), module, is_pkg, known)}
        graph[module] = {t for t in targets if t in known and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle_of_files():
    assert circles(import_graph()) == []


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# ---------------------------------------------------------------------------------------------
# The checker catches what it should


KNOWN = {"strata", "strata.errors", "strata.ir", "strata.ir.dtypes", "strata.dialects", "strata.dialects.op",
         "strata.models", "strata.models.llama", "strata.semantics", "strata.semantics.kernels",
         "strata.passes", "strata.passes.foo", "strata.passes.foo.nn", "strata.pipeline", "strata.cli",
         "strata.targets", "strata.targets.cpu", "strata.targets.cpu.emit", "strata.exporters", "strata.frontends",
         "strata.frontends.gguf", "strata.frontends.hf_config", "strata.runtime", "strata.runtime.engine"}


@pytest.mark.parametrize("module, is_pkg, source, expected", [
    # a plain top-level import
    ("strata.passes.foo.nn", False, "from strata.models.llama import build_llama\n", "strata.models.llama"),
    # nested inside a function, as lazy imports are
    ("strata.semantics.kernels", False, "def f():\n    import strata.models\n    return 1\n", "strata.models"),
    # `from strata import models`: the name is a submodule
    ("strata.targets.cpu.emit", False, "from strata import models as M\n", "strata.models"),
    # relative imports, from a module and from a package __init__
    ("strata.passes.foo.nn", False, "from ...models import llama\n", "strata.models"),
    ("strata.passes.foo", True, "from ...models.llama import x\n", "strata.models.llama"),
    # importlib with a literal name, and a registry keeping the name as a string
    ("strata.ir.dtypes", False, "import importlib\nm = importlib.import_module('strata.dialects.op')\n",
     "strata.dialects.op"),
    ("strata.passes", True, "PASSES = {'x': ('strata.semantics.kernels', 'K')}\n", "strata.semantics.kernels"),
    # the stricter order
    ("strata.passes.foo", True, "from strata.semantics import kernels\n", "strata.semantics"),
    ("strata.semantics.kernels", False, "from strata.passes import foo\n", "strata.passes"),
    ("strata.targets.cpu.emit", False, "from strata.pipeline import lower\n", "strata.pipeline"),
    ("strata.exporters", True, "import strata.cli\n", "strata.cli"),
    ("strata.models.llama", False, "if True:\n    from strata.pipeline import load_model\n", "strata.pipeline"),
    ("strata.errors", False, "from strata.ir import dtypes\n", "strata.ir"),
    ("strata.frontends.gguf", False, "from strata.models import read_config_dict\n", "strata.models"),
    ("strata.pipeline", True, "from strata.runtime import engine\n", "strata.runtime"),
])
def test_checker_reports_a_violation(module, is_pkg, source, expected):
    found = violations(source, module, is_pkg, KNOWN)
    assert any(f.endswith(f" imports {expected}") for f in found), found


@pytest.mark.parametrize("module, source", [
    ("strata.targets.cpu.emit", "from strata.semantics import kernels as K\nfrom strata.targets.cpu import x\n"),
    ("strata.models.llama", "from strata.dialects import op\nfrom strata.frontends import hf_config\n"),
    ("strata.passes.foo.nn", "from . import lowering\nfrom ..foo import nn\nimport numpy\n"),
    ("strata.pipeline", "from strata.models import llama\n"),  # the pipeline wires the families in
    ("strata.ir.dtypes", "'strata.models is mentioned in a message, which imports nothing'\n"),
])
def test_checker_accepts_what_is_allowed(module, source):
    assert violations(source, module, False, KNOWN) == []
