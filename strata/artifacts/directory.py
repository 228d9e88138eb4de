"""The one way strata writes an output directory: atomically, under a lock, never touching
what is not its own.

    with locked(out):                       # writers of one directory take turns
        with new_directory(out) as tmp:      # an empty, marked sibling of `out`
            (tmp / "model.py").write_text(code)
    # `out` now holds exactly what was written, or (on any error) what it held before

The new contents are built in a temporary sibling (`.NAME.tmp-XXXX`) that is renamed into
place; the previous directory is first moved aside (`.NAME.old-XXXX`) and removed once the
new one stands, so a reader sees the old output, nothing, or the new one. Each such sibling
has a marker file beside it (`.NAME.tmp-XXXX.strata-partial`) while it exists: the leftovers
of a killed writer are recognised by it and removed by the next writer, and a folder of the
same shape that someone else made (no marker) is left alone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from strata.errors import StrataError

#: The suffix of the file that marks a temporary sibling as strata's own while it exists.
MARKER = ".strata-partial"


class StageError(StrataError):
    """An output directory (a stage) that cannot be read or written."""


def _parent(out: Path) -> Path:
    return out.parent if str(out.parent) else Path(".")


def _marker(path: Path) -> Path:
    return path.with_name(path.name + MARKER)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    try:
        _marker(path).unlink()
    except OSError:
        pass


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on `out`'s parent directory (created if needed), so that writers
    of directories there take turns; removes what killed writers of `out` left behind (only
    siblings carrying strata's marker)."""
    out = Path(out)
    parent = _parent(out)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(parent, os.O_RDONLY)
    except OSError as e:
        raise StageError(f"{out}: cannot create the output directory: {why(e)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        remove_leftovers(out)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def remove_leftovers(out: Path) -> None:
    """Remove what killed writers of `out` left beside it: only the temporary siblings that carry
    strata's marker. The caller holds the lock on `out`'s parent (`locked`)."""
    out = Path(out)
    parent = _parent(out)
    for pattern in (f".{out.name}.tmp-*{MARKER}", f".{out.name}.old-*{MARKER}"):
        for marker in parent.glob(pattern):
            leftover = marker.with_name(marker.name[: -len(MARKER)])
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            if not leftover.exists():
                marker.unlink(missing_ok=True)


def _marked_sibling(out: Path, kind: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f".{out.name}.{kind}-", dir=_parent(out)))
    _marker(path).touch()
    return path


@contextmanager
def new_directory(out: Path, check: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield an empty temporary directory to fill; when the block ends without an error, put
    it at `out` atomically (`check()`, if given, runs right before anything is replaced and may
    refuse by raising). On an error nothing at `out` changes and the temporary is removed.
    The caller holds `locked(out)`."""
    out = Path(out)
    try:
        tmp = _marked_sibling(out, "tmp")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; outputs are not secrets
    except OSError as e:
        raise StageError(f"{out}: cannot create the output directory: {why(e)}") from None
    old = None
    try:
        yield tmp
        if check is not None:
            check()
        try:
            if out.exists() or out.is_symlink():
                old = _marked_sibling(out, "old")
                os.rename(out, old / "out")
            os.rename(tmp, out)
        except OSError as e:
            raise StageError(f"{out}: cannot write the output: {why(e)}") from None
    finally:
        _remove(tmp)
        if old is not None:
            _remove(old)


def write_directory(out: Path, files: dict[str, bytes], check: Callable[[], None] | None = None) -> None:
    """Put `files` (name -> bytes, each fsynced) at `out` atomically; see `new_directory`."""
    with new_directory(out, check) as tmp:
        try:
            for name, data in files.items():
                with open(tmp / name, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
        except OSError as e:
            raise StageError(f"{out}: cannot write the output: {why(e)}") from None


def why(e: OSError) -> str:
    """An OSError's reason for a message, with a hint for the usual cause of refusal."""
    text = e.strerror or str(e)
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        text += " (a read-only location? choose another output path)"
    return text
