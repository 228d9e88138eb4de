"""Strata's dialects, one file per IR level, and the context that loads them all.

Adding a dialect: write `strata/dialects/<name>.py` ending in `Name = Dialect(...)`
and list it in :data:`DIALECTS`.
"""

from __future__ import annotations

from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Dialect

from strata.ir import text


def strata_dialects() -> list[Dialect]:
    """Every dialect a Strata IR file may use, builtin ones first."""
    from strata.dialects.module import Module
    from strata.dialects.op import Op
    from strata.dialects.blueprint import Blueprint
    from strata.dialects.fixed import Fixed

    return [Builtin, Func, Arith, Module, Op, Blueprint, Fixed]


def strata_context() -> Context:
    """A context that can parse every level of Strata IR."""
    ctx = Context()
    for dialect in strata_dialects():
        ctx.load_dialect(dialect)
    return ctx


def parse_ir(source: str, filename: str = "<input>") -> ModuleOp:
    """Parse and verify Strata IR text; errors name the file, line and column."""
    return text.parse_ir(source, filename, strata_context())


def read_ir(path: str | Path) -> ModuleOp:
    """Parse and verify a Strata IR file."""
    return text.read_ir(path, strata_context())
