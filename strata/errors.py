"""User-facing error types and messages shared by every part of strata, and the drivers'
error handler.

This module is imported while a driver starts up, before its handler is in place:
it imports only small standard-library modules, never xDSL or numpy.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
#: Set to 1, every driver (strata, strata-opt, a rank worker) shows a user error's traceback too.
DEBUG_VARIABLE = "STRATA_DEBUG"


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


def run_tool(prog: str, body: Callable[[], int], *, owns_process: bool = False, debug: bool = False) -> int:
    """Run a driver's `body`; what the user caused is a message on stderr and an exit code.

    `prog: error: MESSAGE` and 1 for bad input (see `user_error_message`; an
    xDSL parse error goes on to show the source line and a caret), `prog:
    interrupted` and 130 for Ctrl-C. Anything else is a bug in strata and keeps
    its traceback: it propagates, and Python prints it and exits 1.

    `debug` (or STRATA_DEBUG=1 in the environment): a user error prints its
    traceback before its line, to find where it was raised.

    `owns_process`: the caller exits with the result (a console script,
    `python -m`), so the process may be shaped so that no Ctrl-C, whenever it
    comes, ends in a traceback.
    """
    debug = debug or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
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
            if debug:
                import traceback

                traceback.print_exception(e)
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


def debug_requested(argv: list[str]) -> bool:
    """Whether `--debug` is among a driver's own options, the ones before its command."""
    for arg in argv:
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False
    return False


def user_error_message(e: BaseException) -> str | None:
    """The message for an error the user caused; None for a bug in strata.

    The user's errors are a StrataError (each part of strata turns what it finds wrong in a
    file, a flag or a request into one), an xDSL diagnostic on the user's IR, an OSError (a
    path that is missing or unwritable, a full disk) and running out of stack or memory. A bare
    ValueError, KeyError or TypeError is strata's own mistake: its traceback is what fixes it."""
    if isinstance(e, StrataError) or _is_xdsl_diagnostic(e):
        fill_xdsl_placeholder(e)
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
    return None


def _is_xdsl_diagnostic(e: BaseException) -> bool:
    # Looked up, never imported: an xDSL exception exists only once xDSL is loaded,
    # and loading it here would slow every start-up and could itself be interrupted.
    exceptions = sys.modules.get("xdsl.utils.exceptions")
    if exceptions is None:
        return False
    return isinstance(e, (exceptions.ParseError, exceptions.DiagnosticException, exceptions.ArgSpecParseError))


def fill_xdsl_placeholder(e: BaseException) -> None:
    # xDSL's lexer says "Expected suffix identifier after {first_char}" (a message that lost its
    # f-prefix); the character is the first of the error's span.
    msg, span = getattr(e, "msg", None), getattr(e, "span", None)
    if isinstance(msg, str) and "{first_char}" in msg and span is not None:
        try:
            first = str(span.text)[:1]
        except Exception:  # noqa: BLE001 - a span of another shape: keep the words, drop the braces
            first = ""
        e.msg = msg.replace("{first_char}", repr(first) if first else "a sigil")


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
