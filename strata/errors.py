"""User-facing error types and messages shared by every part of strata, and the drivers'
error handler.

This module is imported while a driver starts up, before its handler is in place:
it imports only small standard-library modules, never xDSL or numpy.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class StrataError(Exception):
    """An error for the user: printed as one line, no traceback, exit code 1."""


def say(text: str) -> None:
    """A line for the user on standard error (`strata: TEXT`): what was done, how long it took."""
    print(f"strata: {text}", file=sys.stderr, flush=True)


def warn(text: str) -> None:
    """A warning for the user on standard error (`strata: warning: TEXT`)."""
    say(f"warning: {text}")


def counter(verb: str, unit: str) -> Callable[..., None] | None:
    """A one-line progress counter on a terminal (`strata: VERB i/n UNIT`, redrawn in place), to
    be called as `show(i, n, ...)`; None when standard error is piped (nothing to show)."""
    if not sys.stderr.isatty():
        return None

    def show(i: int, n: int, *_: object) -> None:
        print(f"\rstrata: {verb} {i}/{n} {unit}", end="" if i < n else "\n", file=sys.stderr, flush=True)

    return show


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A StrataError raised inside comes out as it was raised. xDSL's interpreter loop and its
    pattern walker attach the whole IR, the failing op underlined, as a note to any error raised
    under them: kept for other errors (a bug), dropped from a StrataError, a message for the user."""
    try:
        yield
    except StrataError as error:
        if hasattr(error, "__notes__"):
            del error.__notes__
        raise


def run_tool(prog: str, body: Callable[[], int], *, owns_process: bool = False) -> int:
    """Run a driver's `body`; what the user caused is a message on stderr and an exit code.

    `prog: error: MESSAGE` and 1 for bad input (see `user_error_message`; an
    xDSL parse error goes on to show the source line and a caret), `prog:
    interrupted` and 130 for Ctrl-C. Anything else is a bug in strata and keeps
    its traceback.

    `owns_process`: the caller exits with the result (a console script,
    `python -m`), so the process may be shaped so that no Ctrl-C, whenever it
    comes, ends in a traceback.
    """
    if owns_process:
        sys.unraisablehook = _redeliver_swallowed_ctrl_c
    try:
        try:
            if owns_process:
                _import_extensions_uninterrupted()
            status = body()
            message = None
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            if _caused_by_ctrl_c(e):
                raise KeyboardInterrupt from e
            message = user_error_message(e)
            if message is None:
                raise
        if owns_process:
            _ignore_ctrl_c_from_now_on()
    except KeyboardInterrupt:
        if owns_process:
            _ignore_ctrl_c_from_now_on()
            _forget_the_interrupt()
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    if message is not None:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 1
    return status


def user_error_message(e: BaseException) -> str | None:
    """The message for an error the user caused; None for a bug in strata."""
    if isinstance(e, StrataError) or _is_xdsl_diagnostic(e):
        return str(e).strip() or type(e).__name__
    if isinstance(e, OSError):
        # Python's own text repeats the errno and quotes the path: "[Errno 2] No such file ...: 'x'".
        if e.filename is not None and e.strerror:
            return f"{e.filename}: {e.strerror}"
        return str(e) or type(e).__name__
    if isinstance(e, RecursionError):
        return "input nested too deeply (Python's recursion limit was reached)"
    if isinstance(e, MemoryError):
        return "out of memory"
    if isinstance(e, ValueError):
        return str(e).strip() or type(e).__name__
    return None


def _is_xdsl_diagnostic(e: BaseException) -> bool:
    # Looked up, never imported: an xDSL exception exists only once xDSL is loaded,
    # and loading it here would slow every start-up and could itself be interrupted.
    exceptions = sys.modules.get("xdsl.utils.exceptions")
    if exceptions is None:
        return False
    return isinstance(e, (exceptions.ParseError, exceptions.DiagnosticException, exceptions.ArgSpecParseError))


def _import_extensions_uninterrupted() -> None:
    """Import the C extensions every command needs with Ctrl-C held back. An extension
    interrupted while it initialises (numpy's) prints its own traceback and raises an
    ImportError that no longer carries the KeyboardInterrupt; a Ctrl-C held back here is
    delivered as soon as the imports are done, where the handler above turns it into exit 130."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        import ml_dtypes  # noqa: F401  (imports numpy too)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _caused_by_ctrl_c(e: BaseException) -> bool:
    # Python wraps some exceptions in others: a Ctrl-C while a class is created
    # (xDSL defines hundreds as it loads) becomes "RuntimeError: Error calling __set_name__".
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _redeliver_swallowed_ctrl_c(unraisable) -> None:
    # A Ctrl-C that lands in a weakref callback or a __del__ (the import system
    # runs such callbacks) cannot propagate: Python prints it as "Exception
    # ignored" and carries on. So the main thread gets SIGINT once more, from
    # another thread a moment later: sent now, it would land in this hook and be
    # swallowed again; later, it lands in the code that runs next, which run_tool
    # guards, and wakes that code from a blocking call as the first one would.
    if issubclass(unraisable.exc_type, KeyboardInterrupt):
        import threading

        threading.Timer(0.01, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
        return
    sys.__unraisablehook__(unraisable)


def _ignore_ctrl_c_from_now_on() -> None:
    # The work is done and the process exits next: a Ctrl-C now would land in
    # the interpreter's shutdown, which prints it as a traceback.
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread, whose signals are not ours to set
        pass


def _forget_the_interrupt() -> None:
    # CPython remembers a KeyboardInterrupt that passed through an exec() of a
    # string (dataclasses and namedtuple build their methods that way) and, under
    # `python -m`, ends the process with SIGINT at exit, handled or not, instead
    # of exit code 130. Running exec() on another string makes it forget.
    exec("pass")
