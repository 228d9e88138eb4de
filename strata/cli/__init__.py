"""The `strata` driver: one module per command, each parsing its arguments and making one call
into the library (`strata.pipeline`, `strata.runtime`, `strata.quant`, `strata.verify`).

MODEL is a directory holding an HF `config.json` (and safetensors for compile and run), or the
path of the config file itself, or a llama.cpp GGUF file. User errors print one line and exit
1 (`strata --debug COMMAND` adds their traceback); a bug in strata prints its traceback;
`strata-opt` is `strata.cli.opt`.

Importing this package loads neither xDSL nor numpy: the commands import the library inside
`main`'s error handler, so that a Ctrl-C while it loads is handled like any other.
"""

from __future__ import annotations

import argparse

#: The commands, in the order `strata --help` lists them: modules of this package.
COMMANDS = ("inspect", "ir", "blueprint", "trace", "compile", "run", "call", "generate", "chat", "serve", "tokenize",
            "perplexity", "bench", "import_model", "export_model", "view", "verify", "score", "calibrate", "quantize",
            "demo")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="strata", description="Strata: a multi-level compiler for LLM inference")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error in the input too (a bug in strata always shows it)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"strata.cli.{name}").add(sub)
    for command in sub.choices.values():  # what `refuse_unused` compares a flag's value with
        command.set_defaults(command_parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    import sys

    from strata.errors import debug_requested, run_tool

    def body() -> int:
        from strata.cli.args import apply_threads

        args = build_parser().parse_args(argv)
        apply_threads(args)
        return args.func(args)

    # Called without arguments, main is the program (console script, python -m).
    debug = debug_requested(sys.argv[1:] if argv is None else argv)
    return run_tool("strata", body, owns_process=argv is None, debug=debug)
