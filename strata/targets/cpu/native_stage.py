"""The cpu target's native kernels in a compile: the `kernels` knob, and the library a stage
ships beside model.py.

`kernels=native` (the default) compiles the library of `strata.targets.cpu.native` with the
machine's C++ compiler (once per source and compiler: a content-addressed file) and puts it in
the stage under that name, so that a model.py never loads another compile's library; the
stage's manifest records it with its sha256 like every output. Where no compiler is found the
build says so in one line and the knob falls back to `numpy` (today's kernels, the portable
reference).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from strata.targets.target import TargetError

KERNELS = ("native", "numpy")


@functools.cache
def built_library() -> Path | None:
    """The native library, built or reused (None: no compiler; the build said so in one line)."""
    from strata.targets.cpu.native import build_library

    path = build_library()
    return Path(path) if path is not None else None


def check_kernels(knobs: dict[str, Any]) -> dict[str, Any]:
    """`kernels` checked; native without a compiler becomes numpy (the build's one line said why)."""
    kind = knobs.get("kernels")
    if kind not in KERNELS:
        raise TargetError(f"kernels: {str(kind)[:40]!r} is not one of {', '.join(KERNELS)}")
    if kind == "native" and (knobs.get("tp", 1) > 1 or built_library() is None):
        knobs["kernels"] = "numpy"  # a tensor-parallel program binds pieces, which the native path does not read
    return knobs


def library_outputs(knobs: dict[str, Any]) -> tuple[str, ...]:
    """The stage's library file, by its content-addressed name, when the knobs ask for it."""
    if knobs.get("kernels") != "native":
        return ()
    lib = built_library()
    return (lib.name,) if lib is not None else ()


def library_file(knobs: dict[str, Any]) -> tuple[str, bytes] | None:
    """(file name, bytes) of the library a native stage ships, or None."""
    names = library_outputs(knobs)
    if not names:
        return None
    lib = built_library()
    assert lib is not None
    return lib.name, lib.read_bytes()
