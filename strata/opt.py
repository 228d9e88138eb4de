"""`strata-opt`: parse Strata IR, run a pass pipeline, print IR or a target's output.

An `xDSLOptMain` subclass, so `-p`, `-t`, `--split-input-file`,
`--verify-diagnostics` and the rest come from xDSL. Errors are diagnostics with
the file, line and column, and exit code 1; never a traceback.
"""

from __future__ import annotations

import os
import sys
from io import StringIO
from pathlib import Path
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException, ParseError, PassFailedException, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from strata.errors import StrataError
from strata.dialects import strata_context
from strata.passes import strata_passes
from strata.ir.text import LocatingParser, verify_located


def _trace_target(module: ModuleOp, out: IO[str]) -> None:
    from strata.exporters.trace import trace_table

    out.write(trace_table(module))


class _HeldOutput(StringIO):
    """Collects `-o` output; xDSL closes it even on error, so closing keeps the text."""

    def close(self) -> None:
        pass


class StrataOptMain(xDSLOptMain):
    held: _HeldOutput | None = None

    def prepare_output(self) -> IO[str]:
        if self.args.output_file is None:
            return sys.stdout
        self.held = _HeldOutput()
        return self.held

    def run(self) -> None:
        """Run; with `-o FILE`, replace FILE only once everything succeeded."""
        super().run()
        if self.held is not None:
            target = Path(self.args.output_file)
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(self.held.getvalue())
            os.replace(tmp, target)

    def register_all_dialects(self) -> None:
        self.ctx = strata_context()

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        """Parse with op locations, so verifier errors name file:line:col."""
        if self.args.frontend or file_extension != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        name = self.get_input_name()
        raw = chunk.read()
        try:
            text = raw.decode() if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as e:
            raise StrataError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        parser = LocatingParser(self.ctx, text, name)
        parser.line_offset = start_offset
        module = parser.parse_module(not self.args.no_implicit_module)
        verify_located(module, parser)
        return module

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in strata_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["trace"] = _trace_target


def main(argv: list[str] | None = None) -> int:
    try:
        StrataOptMain(description="Strata modular optimizer driver", args=argv).run()
    except (ParseError, VerifyException, DiagnosticException, PassFailedException, StrataError) as e:
        print(f"strata-opt: error: {str(e).strip()}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"strata-opt: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
