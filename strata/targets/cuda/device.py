"""What the cuda target needs of the process before Triton or torch is imported: Triton's
interpreter switched on (`--interpret`, the kernels run on the CPU), or a CUDA GPU."""

from __future__ import annotations

import os
import sys

from strata.targets.target import TargetError

NO_GPU = ("--target cuda needs a CUDA GPU (torch.cuda.is_available() is false); without one, run the same "
          "generated kernels in Triton's interpreter on the CPU: strata run MODEL --target cuda --interpret")


def start_triton_interpreter() -> None:
    """Put Triton in its interpreter (TRITON_INTERPRET=1) before it is imported."""
    triton = sys.modules.get("triton")
    if triton is not None and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise TargetError("--interpret: Triton was imported before TRITON_INTERPRET=1 could be set; "
                          "run with TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"


def check_gpu() -> None:
    try:
        import torch
    except ImportError:
        raise TargetError("--target cuda needs torch and triton (pip install 'strata[cuda]')") from None
    if not torch.cuda.is_available():
        raise TargetError(NO_GPU)


def prepare(interpret: bool) -> None:
    """Triton's interpreter, or a GPU."""
    start_triton_interpreter() if interpret else check_gpu()
