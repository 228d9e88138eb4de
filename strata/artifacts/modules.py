"""Importing the Python module a target wrote (`OUT/model.py`), by path.

    module = import_generated(out / "model.py", requires=("kernels.py",))

Each path gets a module name of its own (a digest of the resolved path), registered in
`sys.modules` (dataclasses and typing look a module up there by name); two outputs never
share a module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from strata.errors import StrataError


class GeneratedModuleError(StrataError):
    """A generated module that is missing or cannot be imported."""


def import_generated(path: str | Path, requires: Sequence[str] = (), what: str = "the model",
                     tag: str = "generated") -> ModuleType:
    """Import the generated file `path`; `requires`: sibling files that must exist beside it; `tag`
    keeps a second import of the same file (another use of it) from replacing the first's module."""
    path = Path(path)
    missing = [name for name in (path.name, *requires) if not (path.parent / name).is_file()]
    if missing:
        raise GeneratedModuleError(f"{path.parent}: no {' and '.join(missing)}; compile {what} first")
    name = f"strata_{tag}_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise GeneratedModuleError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
