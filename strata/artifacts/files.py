"""Writing a user's output file without losing anything: check the path before the work,
write atomically over a regular file, and write through anything else (a symlink keeps
pointing where it did; a FIFO or a device is written, never replaced). Every command that
writes one file (`-o FILE`, `--dump-logits`) writes this way."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path

from strata.errors import StrataError


class OutputError(StrataError):
    """An output file that cannot be written."""


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
    """Write `data` to the user's output PATH, leaving PATH the kind of thing it was.

    A regular file, or nothing yet, is replaced atomically: a temporary file in
    the same directory, fsync, rename. A symlink's target is replaced that way
    and the link stays a link. A FIFO or a device is opened and written through,
    as renaming over it would destroy it. On error PATH keeps what it had, no
    temporary file is left, and the message names PATH.
    """
    try:
        try:
            existing = os.stat(path)  # follows symlinks: the kind of thing the data goes to
        except FileNotFoundError:
            existing = None  # nothing there yet, or a symlink to nothing yet
        if existing is None or stat.S_ISREG(existing.st_mode):
            mode = None if existing is None else stat.S_IMODE(existing.st_mode)
            _replace_atomically(os.path.realpath(path), data, mode)
        elif stat.S_ISDIR(existing.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        else:
            with open(path, "wb") as stream:
                stream.write(data)
    except OSError as e:
        hint = " (disk full?)" if e.errno == errno.ENOSPC else ""
        raise OutputError(f"{path}: cannot write output: {e.strerror or e}{hint}") from None


def _replace_atomically(target: str, data: bytes, mode: int | None) -> None:
    directory, name = os.path.split(target)
    # A random name that os.open creates only if it is new (O_EXCL), so a file by
    # that name is ours: the cleanup below removes it even when a Ctrl-C lands
    # as os.open returns, before its descriptor is in hand.
    temporary = os.path.join(directory, f".{name}.{os.urandom(8).hex()}.tmp")
    try:
        # 0o666 less the umask, as `open` would create the output itself
        # (tempfile.mkstemp would make it 0o600).
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            if mode is not None:  # the replacement keeps the permissions of what it replaces
                os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except FileExistsError:  # someone else's file: 64 random bits make this a never
        raise
    except BaseException:  # Ctrl-C included: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    # The rename is durable only once the directory is on disk; the output is
    # complete either way, so a directory that cannot be synced is no error.
    with contextlib.suppress(OSError):
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)


def emit_text(text: str, output: str | Path | None) -> None:
    """`text` to standard output, or to the file `output` (written as `write_output` does)."""
    if output is None:
        sys.stdout.write(text)
    else:
        write_output(output, text.encode())
