"""IR text I/O: parse a file with diagnostics that name it, print deterministically."""

from __future__ import annotations

from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException
from io import StringIO

from strata.errors import StrataError, fill_xdsl_placeholder


class LocatingParser(Parser):
    """A parser that remembers where each operation starts, for verifier messages."""

    def __init__(self, ctx, text: str, name: str = "<input>"):
        super().__init__(ctx, text, name)
        self.text = text
        self.name = name
        self.starts: dict[Operation, int] = {}
        self.line_offset = 0  # lines before this text (--split-input-file chunks)

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # A custom syntax checks operand constraints while parsing: locate it like a parse error.
            self.raise_error(f"{str(e).strip()}", start, self._current_token.span.start)
        self.starts[op] = start
        return op

    def location(self, op: Operation) -> str:
        start = self.starts.get(op)
        if start is None:
            return self.name
        line = self.text.count("\n", 0, start) + 1 + self.line_offset
        col = start - (self.text.rfind("\n", 0, start) + 1) + 1
        return f"{self.name}:{line}:{col}"


def verify_located(module: ModuleOp, parser: LocatingParser) -> None:
    """Verify op by op, nested ops before their parent, so the error names the failing op's line."""
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            raise VerifyException(f"{parser.location(op)}: {e}") from None


def parse_located(text: str, filename: str, ctx: Context) -> ModuleOp:
    """Parse and verify; a ParseError or VerifyException carries file:line:col."""
    parser = LocatingParser(ctx, text, filename)
    module = parser.parse_module()
    verify_located(module, parser)
    return module


def parse_ir(text: str, filename: str, ctx: Context) -> ModuleOp:
    """Parse and verify IR text; errors name the file, line and column.

    `strata.dialects.parse_ir` calls this with every Strata dialect loaded."""
    try:
        return parse_located(text, filename, ctx)
    except (ParseError, VerifyException) as e:
        fill_xdsl_placeholder(e)
        raise StrataError(str(e).strip()) from None


#: The largest IR file read (a module level is kilobytes; the op level of a large model megabytes).
IR_LIMIT = 256 << 20


def read_ir(path: str | Path, ctx: Context) -> ModuleOp:
    from strata.ir.inputs import read_text

    p = Path(path)
    return parse_ir(read_text(p, "IR file", IR_LIMIT), str(p), ctx)


def print_ir(module: ModuleOp) -> str:
    out = StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue() + "\n"
