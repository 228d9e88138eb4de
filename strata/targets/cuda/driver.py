"""Load a compiled CUDA model (`OUT/model.py`, which loads `OUT/kernels.py` beside it)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from strata.errors import StrataError

MODEL_PY = "model.py"


class CudaDriverError(StrataError):
    """A compiled CUDA model that cannot be loaded."""


def load_model_py(out_dir: str | Path):
    """Import `out_dir/model.py` by path (a module name of its own per directory)."""
    path = Path(out_dir) / MODEL_PY
    if not path.is_file() or not (path.parent / "kernels.py").is_file():
        raise CudaDriverError(f"{path.parent}: no model.py and kernels.py; compile the model for cuda first")
    name = "strata_cuda_model_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CudaDriverError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
