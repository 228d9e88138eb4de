"""The runtime and the CLI ask a target what it can do (`strata.targets.target.Target`'s
capabilities), never which one it is: no comparison in strata/runtime or strata/cli holds a
target's name as a string literal (`target == "cpu"`, `name in ("cpu", "cuda")`,
`"epu" != target_name`)."""

from __future__ import annotations

import ast

from support import ROOT

from strata.targets import EXPORTED, TARGETS

NAMES = set(TARGETS) | set(EXPORTED)
SCANNED = ("runtime", "cli")


def _literals(node: ast.AST) -> set[str]:
    """The string literals a comparison operand is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def name_comparisons(source: str, filename: str = "<source>") -> list[str]:
    """Each comparison of `source` that holds a target's name, as FILE:LINE: CODE."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            named = set().union(*(_literals(x) for x in [node.left, *node.comparators])) & NAMES
            if named:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_what_it_looks_for():
    code = ('if target == "cpu": pass\nok = name in ("cuda", "x")\nno = "epu" != t\n'
            'fine = kind == "text"\nalso = tgt.compiles_entries\n')
    assert [line.split(": ", 1)[1] for line in name_comparisons(code)] == [
        "target == 'cpu'", "name in ('cuda', 'x')", "'epu' != t"]


def test_runtime_and_cli_never_compare_a_target_name():
    found = []
    for layer in SCANNED:
        for path in sorted((ROOT / "strata" / layer).rglob("*.py")):
            found += name_comparisons(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "ask the Target what it can do instead:\n" + "\n".join(found)
