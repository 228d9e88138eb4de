"""IR text I/O: parse a file with diagnostics that name it, print deterministically."""

from __future__ import annotations

from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException
from io import StringIO

from strata.errors import StrataError
from strata.ir.context import strata_context


def parse_ir(text: str, filename: str = "<input>") -> ModuleOp:
    """Parse and verify IR text; errors name the file, line and column."""
    try:
        module = Parser(strata_context(), text, filename).parse_module()
    except ParseError as e:
        raise StrataError(str(e).strip()) from None
    try:
        module.verify()
    except VerifyException as e:
        raise StrataError(f"{filename}: invalid IR: {e}") from None
    return module


def read_ir(path: str | Path) -> ModuleOp:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise StrataError(f"{p}: cannot read IR: {e}") from None
    return parse_ir(text, str(p))


def print_ir(module: ModuleOp) -> str:
    out = StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue() + "\n"
