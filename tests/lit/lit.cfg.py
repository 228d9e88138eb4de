"""lit configuration of Strata's FileCheck tests.

Run from the repository root with the project's environment:

    .venv/bin/lit -v tests/lit

`strata-opt` and `filecheck` resolve to the executables installed next to the
Python interpreter that runs lit (the virtual environment's `bin/`), falling back
to the PATH, so that the tests never pick up another installation by accident.
"""

import os
import shutil
import sys

import lit.formats

config.name = "strata"
config.test_format = lit.formats.ShTest(False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)

_bin = os.path.dirname(sys.executable)


def _tool(name: str) -> str:
    for candidate in (os.path.join(_bin, name), shutil.which(name)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    lit_config.fatal(f"cannot find '{name}' next to {sys.executable} or on the PATH")


# lit applies substitutions as regular expressions, in order, each to the line
# the previous ones left: match the tool names only as whole words, never inside
# a path (`.venv/bin/strata-opt`, `tools/strata-opt-errors.mlir`, a checkout
# under a folder called `filecheck`).
def _word(name: str) -> str:
    return r"(?<![\w/.-])" + name.replace("-", r"\-") + r"(?![\w.-])"


# The tests run against the code of the checkout they are in (the environment's editable
# install may point at another one, a worktree's main checkout), then whatever PYTHONPATH
# adds. The path goes on each tool's command line: lit's internal shell resets PYTHONPATH for
# the rest of a test once it runs one of its own out-of-process commands (cat, diff).
_checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_python_path = os.pathsep.join([_checkout, *filter(None, [os.environ.get("PYTHONPATH")])])


def _strata_tool(name: str) -> str:
    return f"env PYTHONPATH={_python_path} {_tool(name)}"


config.substitutions.append((_word("strata-opt"), _strata_tool("strata-opt")))
config.substitutions.append((_word("filecheck"), _tool("filecheck")))
config.substitutions.append((_word("strata"), _strata_tool("strata")))
