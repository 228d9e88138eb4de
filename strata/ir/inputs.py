"""Reading a user's input file with a bound on how much is read: /dev/zero, an endless FIFO or a
huge file given as a prompts file, a ranges file, a log or a config is a one-line error naming
the file and the limit, never an out-of-memory.

    text = read_text(path, "ranges file", RANGES_LIMIT, CalibrationError)
    for number, line in text_lines(path, "llama-eval-callback log", LOG_LIMIT, VerifyError): ...
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from strata.errors import StrataError

MiB = 1 << 20
GiB = 1 << 30
#: The longest line `text_lines` reads (a log's lines are short; one without an end is not text).
LINE_LIMIT = 1 * MiB


def size_text(n: int) -> str:
    return f"{n // GiB} GiB" if n >= GiB and n % GiB == 0 else f"{n // MiB} MiB" if n >= MiB else f"{n} bytes"


def _open(path: Path, what: str, error: type[StrataError], missing: str | None):
    try:
        return open(path, "rb")  # noqa: SIM115 - the callers close it
    except FileNotFoundError:
        raise error(missing or f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read the {what} ({e.strerror or e})") from None


def _too_large(path: Path, what: str, limit: int) -> str:
    return f"{path}: the {what} is larger than {size_text(limit)}, the most strata reads of one; is it the right file?"


def read_bytes(path: str | Path, what: str, limit: int, error: type[StrataError] = StrataError,
               missing: str | None = None) -> bytes:
    """At most `limit` bytes of the file: all of it, or a one-line `error` (`missing`: the message
    when there is no such file)."""
    p = Path(path)
    with _open(p, what, error, missing) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as e:
            raise error(f"{p}: cannot read the {what} ({e.strerror or e})") from None
    if len(data) > limit:
        raise error(_too_large(p, what, limit))
    return data


def _decode(data: bytes, path: Path, what: str, error: type[StrataError], line: int | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"{path}:{line}" if line is not None else str(path)
        raise error(f"{where}: the {what} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_text(path: str | Path, what: str, limit: int, error: type[StrataError] = StrataError,
              missing: str | None = None) -> str:
    """The file as UTF-8 text, at most `limit` bytes of it (see `read_bytes`)."""
    return _decode(read_bytes(path, what, limit, error, missing), Path(path), what, error)


def text_lines(path: str | Path, what: str, limit: int, error: type[StrataError] = StrataError,
               line_limit: int = LINE_LIMIT, missing: str | None = None) -> Iterator[tuple[int, str]]:
    """(1-based number, line without its end) of each line, read as it goes: at most `limit`
    bytes in all and `line_limit` in a line, else a one-line `error`. Bytes that are not UTF-8
    become U+FFFD (a log may hold binary tensor names)."""
    p = Path(path)
    total = 0
    with _open(p, what, error, missing) as fh:
        number = 0
        while True:
            try:
                raw = fh.readline(line_limit + 1)
            except OSError as e:
                raise error(f"{p}: cannot read the {what} ({e.strerror or e})") from None
            if not raw:
                return
            number += 1
            total += len(raw)
            if total > limit:
                raise error(_too_large(p, what, limit))
            if len(raw) > line_limit and not raw.endswith(b"\n"):
                raise error(f"{p}:{number}: a line longer than {size_text(line_limit)}: not a {what}")
            yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")
