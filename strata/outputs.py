"""Writing a user's output file without losing anything: check the path before the work,
write atomically over a regular file, and write through anything else (a symlink keeps
pointing where it did; a FIFO or a device is written, never replaced)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from strata.errors import StrataError


class OutputError(StrataError):
    """An output file that cannot be written."""


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def check_output_path(path: str | Path) -> Path:
    """Refuse, before any work, a path that cannot take an output file; returns it."""
    p = Path(path)
    target = Path(os.path.realpath(p))
    if target.is_dir():
        raise OutputError(f"{p}: is a directory; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"{p}: the directory {parent} does not exist")
    if target.exists():
        if not os.access(target, os.W_OK):
            raise OutputError(f"{p}: cannot write: permission denied")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{p}: cannot create a file in {parent}: permission denied")
    return p


def write_output(path: str | Path, data: bytes) -> None:
    """Write `data` to `path`: atomically (a temporary file renamed over it) when the path is
    a regular file or does not exist, else through it. Errors name `path`, and a failed
    atomic write leaves the old file as it was."""
    p = Path(path)
    target = Path(os.path.realpath(p))  # a symlink stays a link: its target is replaced
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise OutputError(f"{p}: cannot write: {_why(e)}") from None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(target, "wb") as fh:
                fh.write(data)
        except OSError as e:
            raise OutputError(f"{p}: cannot write: {_why(e)}") from None
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        hint = " (disk full?)" if e.errno == errno.ENOSPC else ""
        raise OutputError(f"{p}: cannot write: {_why(e)}{hint}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
