"""Writing a user's output file without losing anything: check the path before the work,
write atomically over a regular file, and write through anything else (a symlink keeps
pointing where it did; a FIFO or a device is written, never replaced). Every command that
writes one file (`-o FILE`, `--dump-logits`) writes this way, and none writes onto one of its
own inputs (the model's files, a prompts or ranges file, the IR it read), by any path to it.

    check_output_path(args.output, inputs)     # inputs: {path: "the model's config.json", ...}
    write_output(args.output, data)
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from strata.errors import StrataError


class OutputError(StrataError):
    """An output file that cannot be written."""


#: What a command reads, for the check that no output lands on it: path -> what it is, for the
#: message ("the model's config.json"). A directory stands for everything inside it.
Inputs = Mapping["str | Path", str]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def input_hit(path: str | Path, inputs: Inputs) -> str | None:
    """Where among `inputs` `path` would land (`on X`: the same file by any path to it, a
    symlink, a hard link, another spelling; `inside X`: in an input directory), or None."""
    target = os.path.realpath(path)
    for given, what in inputs.items():
        real = os.path.realpath(given)
        if target == real or _same_file(target, real):
            return f"on {what}"
        # a directory, or one still to be made (a cache): everything inside it is its own
        if not os.path.isfile(real) and target.startswith(real.rstrip(os.sep) + os.sep):
            return f"inside {what}"
    return None


def check_not_an_input(path: str | Path, inputs: Inputs, flag: str = "the output") -> None:
    """Refuse an output path that lands on one of the command's inputs."""
    what = input_hit(path, inputs)
    if what is not None:
        raise OutputError(f"{path}: {flag} would land {what}, an input of this command; choose another path")


def check_output_path(path: str | Path, inputs: Inputs | None = None, flag: str = "the output") -> Path:
    """Refuse, before any work, a path that cannot take an output file or that lands on one of
    the command's `inputs`; returns it."""
    p = Path(path)
    if inputs:
        check_not_an_input(p, inputs, flag)
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
