"""Pieces every target's printer shares: an indentation-aware output buffer, and the
sanitizers that keep model-supplied names from reaching generated code unchecked."""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.dialects import func
from xdsl.ir import SSAValue

from strata.errors import StrataError


class CodegenError(StrataError):
    """IR that a target cannot print (an unsafe name, an unsupported type)."""


# ---------------------------------------------------------------------------------------------
# Names


_SAFE_LITERAL = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


def literal_name(name: str, what: str = "name") -> str:
    """``repr(name)`` for a string literal in generated code; refuses odd characters."""
    if not _SAFE_LITERAL.fullmatch(name):
        raise CodegenError(
            f"codegen: {what} {name!r} has characters outside [A-Za-z0-9_.-] "
            "(or is empty or longer than 200); refusing to put it in generated code")
    return repr(name)


def sanitize_label(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_`` (at most
    200 characters): safe in a comment, a docstring or a string literal."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)[:200] or "_"


def sanitize_identifier(name: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A Python identifier for ``name``: only ``[A-Za-z0-9_]``, not starting with a digit
    or an underscore, not a keyword or builtin, and not in ``taken``."""
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    if not s or s[0].isdigit():
        s = "v" + ("_" + s if s else "")
    if keyword.iskeyword(s) or keyword.issoftkeyword(s) or hasattr(builtins, s):
        s += "_"
    base, n = s, 1
    while s in taken:
        n += 1
        s = f"{base}_{n}"
    return s


class Namer:
    """Gives each SSA value a unique, sanitized Python name (a scope of locals)."""

    def __init__(self, reserved: set[str]):
        self.taken = set(reserved)

    def fresh(self, hint: str) -> str:
        name = sanitize_identifier(hint, self.taken)
        self.taken.add(name)
        return name


def value_labels(fn: func.FuncOp) -> dict[SSAValue, str]:
    """The names xDSL's printer gives the results in ``fn`` (hint, hint_1, ..., or 0, 1, ...),
    so that generated locals can be matched with the op-level IR text."""
    labels: dict[SSAValue, str] = {}
    counts: dict[str, int] = {}
    number = 0
    for op in fn.body.walk():
        for res in op.results:
            if res.name_hint:
                k = counts.get(res.name_hint, 0)
                labels[res] = res.name_hint + (f"_{k}" if k else "")
                counts[res.name_hint] = k + 1
            else:
                labels[res] = f"v{number}"
                number += 1
    return labels


# ---------------------------------------------------------------------------------------------
# Output buffer


class IndentedWriter:
    """Lines of text with a current indentation level."""

    def __init__(self, unit: str = "    "):
        self.unit = unit
        self.level = 0
        self.lines: list[str] = []

    def line(self, text: str = "") -> None:
        self.lines.append(self.unit * self.level + text if text else "")

    def block(self, text: str) -> None:
        """Several lines (e.g. a copied function), each indented to the current level."""
        for ln in text.rstrip("\n").split("\n"):
            self.line(ln)

    @contextmanager
    def indented(self) -> Iterator[None]:
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"
