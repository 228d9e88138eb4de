"""Stages: output directories that record what made them, written atomically, reused while
their inputs match.

A stage directory holds its files and `manifest.json`: the format, the target, the inputs
(the config's sha256; each weight file's name, size and the sha256 of its safetensors JSON
header, which fixes every tensor name, dtype and shape the code depends on; tensor data is
read at run time and not hashed), the knobs, the tool versions with the sha256 of every
source file of the strata package (an editable install changes them without changing its
version), and the sha256 of each output. No timestamps: the same inputs give byte-identical
directories.

Writes go to a temporary sibling that is renamed into place under a lock on the parent
directory, so a reader sees the old stage, nothing, or the new one; concurrent writers of
one stage wait for each other, and leftovers of killed writers are removed.
"""

from __future__ import annotations

import hashlib
import json
import platform
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strata.artifacts.directory import StageError, locked, write_directory

__all__ = ["MANIFEST", "FORMAT", "StageError", "locked", "write_stage", "check_destination", "is_stage",
           "stage_matches", "manifest_bytes", "read_manifest", "versions", "sha256_file", "file_record"]

MANIFEST = "manifest.json"
#: The manifest's format; a manifest of another format is not reused (the stage is rebuilt).
FORMAT = "strata-stage/2"


# ---------------------------------------------------------------------------------------------
# Hashes of the inputs


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def safetensors_header_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise StageError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        return hashlib.sha256(fh.read(length)).hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    """What a stage depends on in one input file: its name, size and a digest."""
    entry: dict[str, Any] = {"file": path.name, "size": path.stat().st_size}
    if path.name.endswith(".safetensors"):
        entry["header_sha256"] = safetensors_header_sha256(path)
    else:
        entry["sha256"] = sha256_file(path)
    return entry


def sources_sha256() -> str:
    """The sha256 of every source file of the strata package, by relative path: any change to
    the compiler can change an output."""
    root = Path(__file__).resolve().parent.parent  # the strata package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".h", ".hpp", ".cpp") and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def versions() -> dict[str, str]:
    import ml_dtypes
    import numpy as np

    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "unknown"

    return {"strata": of("strata"), "strata_sources_sha256": sources_sha256(), "xdsl": of("xdsl"),
            "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version()}


# ---------------------------------------------------------------------------------------------
# Reading


def read_manifest(out: Path) -> tuple[dict | None, str]:
    """(the manifest, "") or (None, what is wrong with it), for messages that say what was found."""
    path = out / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"it has no {MANIFEST}"
    except UnicodeDecodeError:
        return None, f"its {MANIFEST} is corrupt (not UTF-8 text)"
    except OSError as e:
        return None, f"its {MANIFEST} cannot be read ({e.strerror or e})"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"its {MANIFEST} is corrupt (not valid JSON)"
    if not isinstance(data, dict):
        return None, f"its {MANIFEST} is corrupt (not a JSON object)"
    if data.get("format") != FORMAT:
        return None, f"its {MANIFEST} has format {str(data.get('format'))[:40]!r}, not {FORMAT!r}"
    return data, ""


#: The format of every stage manifest strata has written (this one and earlier ones).
FORMAT_FAMILY = "strata-stage/"


def is_stage(out: Path, files: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether `out` holds nothing but a stage strata wrote, so that strata may replace it: a
    manifest of strata's (this format or an earlier one), and only plain files that are the
    stage's own (the outputs its manifest lists, or `files`, what this strata's stage of that
    kind writes). A file named manifest.json that is not strata's marks nothing; a foreign file
    never is a stage's."""
    if not (out / MANIFEST).is_file() or (out / MANIFEST).is_symlink():
        return False
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith(FORMAT_FAMILY):
        return False
    own = set(files) | {MANIFEST}
    if isinstance(data.get("outputs"), dict):
        own |= {str(name) for name in data["outputs"]}
    try:
        # a directory inside is a stage of its own (the CUDA target's aot/), replaced with it
        return all((e.is_file() and not e.is_symlink() and e.name in own)
                   or (e.is_dir() and not e.is_symlink() and is_stage(e)) for e in out.iterdir())
    except OSError:
        return False


def stage_matches(out: Path, inputs: Mapping[str, Any], files: set[str]) -> tuple[bool, str]:
    """(True, "") when `out` is a complete stage made from `inputs` by this strata, else
    (False, why not)."""
    manifest, problem = read_manifest(out)
    if manifest is None:
        return False, problem
    if manifest.get("inputs") != dict(inputs):
        return False, "its inputs or knobs differ"
    if manifest.get("versions") != versions():
        return False, "it was made by another version of strata or of its tools"
    outputs = manifest.get("outputs")
    if not isinstance(outputs, dict) or set(outputs) != files:
        return False, f"its {MANIFEST} lists other outputs"
    for name, digest in outputs.items():
        try:
            if sha256_file(out / name) != digest:
                return False, f"{name} was changed after it was written"
        except OSError:
            return False, f"{name} is missing"
    return True, ""


# ---------------------------------------------------------------------------------------------
# Writing


def manifest_bytes(kind: str, inputs: Mapping[str, Any], files: Mapping[str, bytes], **extra: Any) -> bytes:
    manifest = {
        "format": FORMAT,
        **extra,
        "target": kind,
        "inputs": dict(inputs),
        "versions": versions(),
        "outputs": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def check_destination(out: Path, files: set[str] | frozenset[str] = frozenset()) -> None:
    """Refuse to replace anything but a strata stage (or an empty directory)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise StageError(f"{out}: exists and is not a directory; refusing to replace it")
    if out.is_dir() and any(out.iterdir()) and not is_stage(out, files):
        _, problem = read_manifest(out)
        raise StageError(f"{out}: exists and is not a strata output directory ({problem}); refusing to "
                         "overwrite it, choose another output path")


def write_stage(out: Path, files: Mapping[str, bytes], *, replace_any: bool = False) -> None:
    """Put `files` at `out` atomically (the caller holds `locked(out)`); an existing `out` is
    checked again right before it is replaced, unless `replace_any`: `out` is a folder of
    strata's own cache, whatever it holds (a stage broken by a kill or by hand, an older
    layout) is strata's to replace."""
    write_directory(out, dict(files), check=None if replace_any else lambda: check_destination(out, set(files)))
