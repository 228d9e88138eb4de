"""`strata-opt`: parse Strata IR, run a pass pipeline, print IR or a target's output.

An `xDSLOptMain` subclass, so `-p`, `-t`, `--split-input-file`,
`--verify-diagnostics`, `--disable-verify` and the rest come from xDSL. Errors
are diagnostics with the file, line and column, and exit code 1; Ctrl-C is exit
code 130; never a traceback.

Importing this module loads no xDSL: `main` imports it inside its error handler,
so that a Ctrl-C while it loads is handled like any other, and
`StrataOptMain` is built on first use.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from io import StringIO
from pathlib import Path

from strata.errors import StrataError, run_tool
from strata.artifacts.files import check_not_an_input, write_output

# typing.TYPE_CHECKING without importing typing: every module imported here is
# start-up time in which a Ctrl-C would escape the handler.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import ArgSpecParseError
    from xdsl.xdsl_opt_main import xDSLOptMain

PROG = "strata-opt"


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        from xdsl.utils.exceptions import ArgSpecParseError

        try:
            tool = strata_opt_main_class()(description="Strata modular optimizer driver", args=argv)
        except ArgSpecParseError as e:  # -t or -f; a bad -p is reported by setup_pipeline
            raise StrataError(spec_syntax_error(e)) from None
        tool.run()
        return 0

    # Called without arguments, main is the program (console script, python -m).
    return run_tool(PROG, body, owns_process=argv is None)


def __getattr__(name: str):
    # `from strata.cli.opt import StrataOptMain` builds the class on first use (it imports xDSL).
    if name == "StrataOptMain":
        return strata_opt_main_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _strata_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strata")
    except PackageNotFoundError:  # a source tree on PYTHONPATH that was never installed
        return "unknown"


_SPEC_LOCATION = re.compile(r":\d+:(\d+)$")


def spec_syntax_error(e: ArgSpecParseError) -> str:
    """xDSL's five-line report on a bad `-p`/`-t`/`-f` spec, as `'SPEC': column N: MESSAGE`."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    # "Error parsing ...", "pass-pipeline:1:COL", the spec, the carets, the message.
    for i, line in enumerate(lines[:-3]):
        location = _SPEC_LOCATION.search(line)
        if location:
            return f"{lines[i + 1]!r}: column {location.group(1)}: {lines[-1].strip()}"
    return " ".join(line.strip() for line in lines)


class _HeldOutput(StringIO):
    """Collects `-o` output; xDSL closes it even on error, so closing keeps the text."""

    def close(self) -> None:
        pass


@cache
def strata_opt_main_class() -> type[xDSLOptMain]:
    """The `xDSLOptMain` subclass behind `strata-opt`, defined on first use (it imports xDSL)."""
    from xdsl.utils.arg_spec import parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError
    from xdsl.xdsl_opt_main import xDSLOptMain

    from strata.dialects import strata_context
    from strata.ir.text import LocatingParser, verify_located
    from strata.passes import strata_passes
    from strata.passes.options import PassOptionError

    class StrataOptMain(xDSLOptMain):
        held: _HeldOutput | None = None
        #: The files the passes of -p read (their `ranges=` options): inputs that -o may not replace.
        read_by_passes: dict[str, str] = {}

        # What --version prints; xDSL fills in its own version.
        version_format = f"{PROG} {_strata_version()} (xdsl {{xdsl_version}})"

        def prepare_output(self) -> IO[str]:
            if self.args.output_file is None:
                return sys.stdout
            self.held = _HeldOutput()
            return self.held

        def run(self) -> None:
            """Run; with `-o PATH`, write PATH only once everything succeeded (never onto an input)."""
            if self.args.output_file is not None:
                inputs = dict(self.read_by_passes)
                if self.args.input_file is not None:
                    inputs[self.args.input_file] = "the input file"
                check_not_an_input(self.args.output_file, inputs, "-o")
            try:
                super().run()
            except RecursionError:  # verifying, a pass or printing; parse_chunk reports the line
                raise StrataError(f"{self.get_input_name()}: IR nested too deeply (over Python's recursion limit)") from None
            if self.held is not None:
                write_output(self.args.output_file, self.held.getvalue().encode("utf-8"))

        def get_input_stream(self):
            """The input, read whole but never more than the IR limit (/dev/zero is refused)."""
            from io import BytesIO

            from strata.ir.inputs import read_bytes, size_text
            from strata.ir.text import IR_LIMIT

            stream, extension = super().get_input_stream() if self.args.input_file is None else (None, None)
            if stream is not None:  # standard input
                data = stream.read(IR_LIMIT + 1)
                if len(data) > IR_LIMIT:
                    raise StrataError(f"stdin: the input is larger than {size_text(IR_LIMIT)}, the most strata-opt "
                                      "reads")
                return BytesIO(data), extension
            path = self.args.input_file
            return BytesIO(read_bytes(path, "input file", IR_LIMIT)), Path(path).suffix.replace(".", "")

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
            try:
                module = parser.parse_module(not self.args.no_implicit_module)
            except RecursionError:
                import dataclasses

                where = dataclasses.replace(parser._current_token.span, line_offset=start_offset).get_location()
                raise StrataError(f"{where}: operations nested too deeply (over Python's recursion limit)") from None
            if not self.args.disable_verify:
                verify_located(module, parser)
            return module

        def setup_pipeline(self) -> None:
            """Check `-p` pass by pass first, so that a bad one is one line naming it."""
            try:
                specs = list(parse_pipeline(self.args.passes))
            except ArgSpecParseError as e:
                raise StrataError(f"-p {spec_syntax_error(e)}") from None
            for spec in specs:
                pass_class = self.available_passes.get(spec.name)
                if pass_class is None:
                    raise StrataError(f"-p: unknown pass '{spec.name}' (strata-opt --help lists the passes)")
                try:
                    configured = pass_class().from_pass_spec(spec)
                except PassOptionError as e:  # names the pass itself
                    raise StrataError(f"-p: {e}") from None
                except ValueError as e:
                    raise StrataError(f"-p: {spec.name}: {e}") from None
                ranges = getattr(configured, "ranges", "")
                if isinstance(ranges, str) and ranges:
                    self.read_by_passes = {**self.read_by_passes, ranges: f"the ranges file of {spec.name}"}
            super().setup_pipeline()

        def register_all_passes(self) -> None:
            super().register_all_passes()
            for name, factory in strata_passes().items():
                self.register_pass(name, factory)

        def register_all_targets(self) -> None:
            from strata.targets import TARGETS

            super().register_all_targets()
            self.available_targets["trace"] = self.trace_target
            # The blueprint level's exporters: kbp-graph/v1 JSON, Graphviz, the group table.
            for name in ("kbp-graph", "blueprint-dot", "blueprint-table"):
                self.available_targets[name] = self.blueprint_target(name)
            # The fixed level's range table (op, range, frac), as assign-frac-bits left it.
            self.available_targets["fixed-range-table"] = self.fixed_range_table
            # Every code target prints its output files from op-level IR: run its pipeline
            # (`strata compile --print-pipeline`) with -p first.
            for name in TARGETS:
                self.available_targets[name] = self.code_target(name)

        @staticmethod
        def code_target(name: str):
            def emit(module: ModuleOp, out: IO[str]) -> None:
                from strata.targets import target

                for text in target(name).emit(module, None, None).values():
                    if isinstance(text, str):  # a binary output (weights) is not text to print
                        out.write(text)

            return emit

        def blueprint_target(self, name: str):
            def emit(module: ModuleOp, out: IO[str]) -> None:
                from strata.dialects.blueprint_graph import blueprint_functions, fn_int, fn_string

                functions = blueprint_functions(module)
                if len(functions) != 1:
                    raise StrataError(f"{name}: {self.get_input_name()}: expected one function of blueprint "
                                      f"nodes, found {len(functions)}")
                fn = functions[0]
                if name == "kbp-graph":
                    from strata.exporters.kbp_graph import export_kbp_graph, kbp_graph_json

                    provenance = {"kind": "strata-opt", "model": fn_string(fn, "blueprint.model", required=False),
                                  "recipe": fn_string(fn, "blueprint.recipe", required=False),
                                  "mode": fn_string(fn, "blueprint.mode"), "rows": fn_int(fn, "blueprint.rows"),
                                  "strata": _strata_version()}
                    out.write(kbp_graph_json(export_kbp_graph(fn, provenance=provenance)) + "\n")
                elif name == "blueprint-dot":
                    from strata.exporters.blueprint_dot import blueprint_dot

                    out.write(blueprint_dot(fn))
                else:
                    from strata.exporters.blueprint_table import inspect_table

                    out.write(inspect_table(fn))

            return emit

        @staticmethod
        def fixed_range_table(module: ModuleOp, out: IO[str]) -> None:
            from strata.passes.assign_frac_bits import range_table

            out.write(range_table(module))

        def trace_target(self, module: ModuleOp, out: IO[str]) -> None:
            from xdsl.dialects import func

            from strata.exporters.trace import trace_table

            functions = [op for op in module.ops if isinstance(op, func.FuncOp)]
            # trace_table names each value after the op that makes it: an entry as
            # convert-module-to-op emits it takes no arguments, its inputs are op.input.
            if len(functions) == 1:
                fn = functions[0]
                where = f"trace: {self.get_input_name()}: @{fn.sym_name.data}"
                if not fn.body.blocks:
                    raise StrataError(f"{where} has no body")
                if fn.body.block.args:
                    raise StrataError(
                        f"{where} takes {len(fn.body.block.args)} argument(s); the trace target reads "
                        "op-level entries without arguments, whose inputs are op.input ops"
                    )
            out.write(trace_table(module))

    return StrataOptMain


if __name__ == "__main__":
    sys.exit(main())
