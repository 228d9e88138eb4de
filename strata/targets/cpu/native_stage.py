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
import os
from pathlib import Path
from typing import Any

from strata.targets.target import TargetError

KERNELS = ("native", "numpy")


def library_cache() -> Path:
    """Where the libraries are built, one file per source, flags and compiler (their names say which)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "strata" / "native"


@functools.cache
def built_library() -> Path | None:
    """The native library, built or reused (None: no compiler; the build said so in one line)."""
    from strata.targets.cpu.native.build import build_library

    return build_library(library_cache())


HOSTS = ("native", "python")


def check_kernels(model: Any, knobs: dict[str, Any]) -> dict[str, Any]:
    """`kernels` checked and resolved to what runs: native computes on a GGUF's packed weights
    and over a float16 KV cache, so a model with neither (a checkpoint's float weights, the
    model's own KV type) runs numpy's, as does a tensor-parallel program (it binds pieces of
    weights, which the native path does not read), and so does act_quant=false (the library
    rounds the activations as ggml-cpu does); native without a compiler becomes numpy (the build
    said why in one line)."""
    kind = knobs.get("kernels")
    if knobs.get("host", "native") not in HOSTS:
        raise TargetError(f"host: {str(knobs.get('host'))[:40]!r} is not one of {', '.join(HOSTS)}")
    if kind not in KERNELS:
        raise TargetError(f"kernels: {str(kind)[:40]!r} is not one of {', '.join(KERNELS)}")
    uses = getattr(model, "gguf", None) is not None or knobs.get("kv_type") == "f16"
    if kind == "native" and (not uses or knobs.get("tp", 1) > 1 or not knobs.get("act_quant", True)
                             or built_library() is None):
        knobs["kernels"] = "numpy"
    return knobs


def library_outputs(knobs: dict[str, Any]) -> tuple[str, ...]:
    """The stage's library file, by its content-addressed name, when the knobs ask for it."""
    if knobs.get("kernels") != "native":
        return ()
    if knobs.get("host", "native") == "native" and knobs.get("kv_type") == "f16":
        return (ENTRY_LIBRARY,)  # the printed decode entry (its attention is over a float16 cache)
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


#: The stage's library when an entry runs natively (host=native): the kernels with the printed
#: entry compiled in. A fixed name, so that the stage's files are known before its IR is
#: lowered (`library_outputs` predicts it from kv_type; a wrong guess costs a cache miss only):
#: the manifest keeps its sha256, and the build itself is content-addressed in `library_cache()`.
ENTRY_LIBRARY = "libstrata_entry.so"


def native_entries(module: Any) -> dict[str, Any]:
    """The entries printed as C++ (name -> EntrySource) of a natively computed module whose
    host is native; an entry the printer cannot take runs as Python, and the compile says why
    in one line."""
    import sys

    from strata.passes.cpu_native_host import module_host
    from strata.targets.cpu.emit_native_entry import ENTRY_FUNCTIONS, EntryUnsupported, print_entry

    if module_host(module) != "native":
        return {}
    found = {}
    names = [op.sym_name.data for op in module.ops if hasattr(op, "sym_name")]
    for entry in ENTRY_FUNCTIONS:
        if entry not in names:
            continue
        try:
            found[entry] = print_entry(module, entry)
        except EntryUnsupported as err:
            print(f"strata: host=python for @{entry}: {err}", file=sys.stderr)
    return found


def entry_library_file(entries: dict[str, Any]) -> tuple[str, bytes] | None:
    """(ENTRY_LIBRARY, bytes): the kernels with the printed entries compiled in (None: no
    compiler, or it failed; the build said why in one line)."""
    from strata.targets.cpu.native.build import build_library

    if len(entries) != 1:
        raise TargetError("cpu target: one printed entry per library (decode)")
    (entry,) = entries.values()
    lib = build_library(library_cache(), entry=entry.source)
    return (ENTRY_LIBRARY, lib.read_bytes()) if lib is not None else None
