"""Compile the native kernels (the C++ sources next to this file) into a shared library.

    path = build_library(stage_dir)                 # -O3 -march=native, or None (one warning line)
    path = build_library(stage_dir, portable=True)  # no instruction-set extensions: the same numbers

The compiler is `$CXX` if set, else the machine's `g++` or `clang++`, else the `ziglang` wheel's
(`python -m ziglang c++`) when it is importable. The file is named by a hash of the sources,
the flags, the compiler's version and, for a native build, the CPU that `-march=native` stands
for here (`libstrata_kernels-<hash>.so`), written to a temporary
file and renamed into place, so concurrent builds and a rebuild with the same inputs leave one
whole file. `-ffp-contract=off` on every build: the kernels spell each fused multiply-add out
(fmaf), and no other product may be fused, or the portable and native builds would differ.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
MAIN_SOURCE = "strata_kernels.cpp"
COMMON_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-pthread", "-ffp-contract=off", "-fno-strict-aliasing")
NATIVE_FLAGS = ("-O3", "-march=native")
PORTABLE_FLAGS = ("-O2", "-DSTRATA_PORTABLE")
LIBRARY_STEM = "libstrata_kernels"
ENTRY_STEM = "libstrata_entry"


def sources() -> list[Path]:
    """The kernel sources (the .cpp and its headers), in name order."""
    return sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in (".cpp", ".h"))


def find_compiler() -> tuple[list[str], str] | None:
    """(the command that runs the C++ compiler, where it came from), or None when there is none."""
    env = os.environ.get("CXX", "").strip()
    if env:
        cmd = shlex.split(env)
        if shutil.which(cmd[0]):
            return cmd, f"$CXX ({env})"
    for name in ("g++", "clang++"):
        found = shutil.which(name)
        if found:
            return [found], name
    try:
        import ziglang  # noqa: F401  (the optional `native` extra)
    except ImportError:
        return None
    return [sys.executable, "-m", "ziglang", "c++"], "ziglang"


def compiler_version(cmd: list[str]) -> str:
    """The first line the compiler prints for --version (part of the library's name hash)."""
    try:
        done = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def native_target(cmd: list[str]) -> str:
    """What `-march=native` means on this machine: the compiler's predefined macros under it
    (__AVX2__, __AVX512F__, ...: what the kernels' #ifs read), hashed, so that a library built
    for one CPU is not reused on another."""
    try:
        done = subprocess.run([*cmd, "-march=native", "-dM", "-E", "-x", "c++", os.devnull],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    macros = sorted(line for line in done.stdout.splitlines() if line.startswith("#define"))
    return hashlib.sha256("\n".join(macros).encode()).hexdigest()[:16] if macros else "unknown"


def library_flags(portable: bool) -> list[str]:
    return [*COMMON_FLAGS, *(PORTABLE_FLAGS if portable else NATIVE_FLAGS)]


def library_name(flags: list[str], version: str, entry: str | None = None) -> str:
    """`libstrata_kernels-<hash>.so`, the hash of the sources, the flags and the compiler version
    (`libstrata_entry-<hash>.so` with a printed entry's source, which the hash covers too)."""
    h = hashlib.sha256()
    for path in sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update("\0".join(flags).encode() + b"\0" + version.encode())
    if entry is not None:
        h.update(b"\0entry\0" + entry.encode())
    return f"{ENTRY_STEM if entry is not None else LIBRARY_STEM}-{h.hexdigest()[:20]}.so"


def _warn(message: str) -> None:
    print(f"strata: {message}", file=sys.stderr)


def build_library(out_dir: str | os.PathLike, portable: bool = False, extra_flags: tuple[str, ...] = (),
                  entry: str | None = None) -> Path | None:
    """Compile the kernels into `out_dir` (created if missing) -> the library's path, reused when
    one with the same name is there; None, with one line on stderr saying why, when no compiler is
    found or it fails. `entry`: the C++ source of a printed entry (it includes the kernels), compiled
    instead of the kernels alone."""
    found = find_compiler()
    if found is None:
        _warn("no C++ compiler found (set CXX, or install g++, clang++ or the ziglang package): "
              "the numpy kernels run")
        return None
    cmd, origin = found
    flags = [*library_flags(portable), *extra_flags]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    version = compiler_version(cmd) if portable else f"{compiler_version(cmd)} for {native_target(cmd)}"
    target = out / library_name(flags, version, entry)
    if target.is_file():
        return target
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{target.stem}-", suffix=".so.tmp")
    os.close(fd)
    source = SOURCE_DIR / MAIN_SOURCE
    if entry is not None:
        fd, source = tempfile.mkstemp(dir=out, prefix=f".{target.stem}-", suffix=".cpp")
        with os.fdopen(fd, "w") as f:
            f.write(entry)
        flags = [*flags, "-I", str(SOURCE_DIR)]
    try:
        done = subprocess.run([*cmd, *flags, "-o", tmp, str(source)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if "error" in ln] or done.stderr.splitlines() or ["?"]
            _warn(f"the native kernels did not compile with {origin}: {errors[0].strip()}")
            return None
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except (OSError, subprocess.TimeoutExpired) as err:
        _warn(f"the native kernels did not compile with {origin}: {err}")
        return None
    finally:
        for path in (tmp, source) if entry is not None else (tmp,):
            if os.path.exists(path):
                os.unlink(path)
    return target
