"""strata-opt and strata at their edges, run as a user runs them.

Each test starts the tool in a fresh interpreter and checks what the user sees:
stderr, the exit code and the files left behind.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from support import EXAMPLES, ROOT
from strata.errors import StrataError

INPUTS = ROOT / "tests" / "lit" / "tools" / "Inputs"
OP_LEVEL = INPUTS / "op-level.mlir"
INVALID_OP = INPUTS / "invalid-op.mlir"
MODULE_LEVEL = ROOT / "tests" / "lit" / "passes" / "Inputs" / "llama2l.mlir"
BAD_IR = 'func.func @f() {\n  %0 = op.input "tokens" : tensor<5x2xi32>\n  func.return\n}\n'

# The tools import the package from this checkout, not from wherever the
# interpreter's environment installed it.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def opt(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata.cli.opt", *map(str, args)],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout,
    )


def assert_one_line_error(r: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("strata-opt: error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, r.stderr)
    assert r.stdout == ""


@pytest.fixture(scope="module")
def op_level_ir() -> str:
    r = opt(OP_LEVEL)
    assert r.returncode == 0, r.stderr
    return r.stdout


# 1. -o leaves links, FIFOs and devices what they are.


def test_output_through_a_symlink_keeps_the_link(tmp_path, op_level_ir):
    (tmp_path / "results").mkdir()
    target = tmp_path / "results" / "real.mlir"
    target.write_text("previous result\n")
    link = tmp_path / "out.mlir"
    link.symlink_to(Path("results") / "real.mlir")

    r = opt(OP_LEVEL, "-o", link)

    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("results") / "real.mlir")
    assert target.read_text() == op_level_ir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mlir", "results"]
    assert [p.name for p in target.parent.iterdir()] == ["real.mlir"]


def test_output_through_a_dangling_symlink_creates_its_target(tmp_path, op_level_ir):
    link = tmp_path / "out.mlir"
    link.symlink_to("real.mlir")

    r = opt(OP_LEVEL, "-o", link)

    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and (tmp_path / "real.mlir").read_text() == op_level_ir


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_output_into_a_fifo_writes_through_it(tmp_path, op_level_ir):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    # Holding a write end ourselves lets the reader open at once and read to
    # EOF only after we let go, whether or not strata-opt ever opened the FIFO.
    held_write_end = os.open(fifo, os.O_RDWR)
    received: list[bytes] = []

    def read_all() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    try:
        r = opt(OP_LEVEL, "-o", fifo)
    finally:
        os.close(held_write_end)
        reader.join(timeout=30)

    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received == [op_level_ir.encode()]


def test_output_replaces_a_regular_file_keeping_its_mode(tmp_path, op_level_ir):
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")
    out.chmod(0o640)

    r = opt(OP_LEVEL, "-o", out)

    assert r.returncode == 0, r.stderr
    assert out.read_text() == op_level_ir
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.mlir"]


def test_failed_run_keeps_the_output_and_leaves_no_temporary_file(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text(BAD_IR)
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")

    r = opt(bad, "-o", out)

    assert r.returncode == 1
    assert out.read_text() == "previous result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.mlir", "out.mlir"]


# 2. -o errors name the user's path.


def test_output_into_a_missing_directory_names_the_path():
    r = opt(OP_LEVEL, "-o", "/nonexistent-dir/out.mlir")
    assert_one_line_error(r, "/nonexistent-dir/out.mlir", "No such file or directory")
    assert ".tmp" not in r.stderr


def test_output_onto_a_directory_names_the_path(tmp_path):
    (tmp_path / "out").mkdir()
    r = opt(OP_LEVEL, "-o", tmp_path / "out")
    assert_one_line_error(r, str(tmp_path / "out"), "directory")
    assert ".tmp" not in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list((tmp_path / "out").iterdir()) == []


def test_output_into_a_read_only_directory_names_the_path(tmp_path, monkeypatch, capsys):
    # Root (CI's user) may write into a read-only directory, so the refusal a user gets from the
    # kernel is made at the write boundary instead: creating any file in `locked` is EACCES.
    # The tool runs in this process for that, through the same driver as the console script.
    from strata.cli.opt import main

    locked = tmp_path / "locked"
    locked.mkdir()
    real_open = os.open

    def open_as_a_user(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.path.realpath(path)) == os.path.realpath(locked):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_as_a_user)
    code = main([str(OP_LEVEL), "-o", str(locked / "out.mlir")])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    r = subprocess.CompletedProcess(["strata-opt"], code, out, err)
    assert_one_line_error(r, str(locked / "out.mlir"), "Permission denied")
    assert ".tmp" not in r.stderr and list(locked.iterdir()) == []


# 3. Ctrl-C at any time, and the one error handler of both drivers.


def test_strata_opt_imports_no_xdsl_before_main():
    # Ctrl-C during an import at module level would escape every handler.
    probe = "import sys, strata.cli.opt; assert 'xdsl' not in sys.modules; print(strata.cli.opt.StrataOptMain.__name__)"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "StrataOptMain\n"


# Ctrl-C at named moments of the tool's work, from loading xDSL to writing the output. An audit
# hook, installed in the child by a sitecustomize module on its path, stops the tool at the
# moment: it says so on a pipe and waits there until the Ctrl-C arrives, which the test sends
# once it has read that. So the interrupt lands exactly there, however fast or loaded the
# machine. Moments: "import:MODULE" (an import starts), "create:DIR" (a file is created in DIR:
# the output's temporary file), "replace:DIR" (a file in DIR is renamed over another: the output).
STOP_AT_A_MOMENT = """\
import os, sys

_moment = os.environ.get("STRATA_TEST_CTRL_C_AT")
if _moment:
    _kind, _, _what = _moment.partition(":")
    _said, _waited = (int(fd) for fd in os.environ["STRATA_TEST_CTRL_C_FDS"].split(","))
    _stopped = []

    def _is_the_moment(event, args):
        if _kind == "import":
            return event == "import" and args[0] == _what
        if _kind == "create":
            return (event == "open" and isinstance(args[2], int) and bool(args[2] & os.O_CREAT)
                    and os.path.dirname(os.fspath(args[0])) == _what)
        return _kind == "replace" and event == "os.rename" and os.path.dirname(os.fspath(args[1])) == _what

    def _stop_for_ctrl_c(event, args):
        if not _stopped and _is_the_moment(event, args):
            _stopped.append(event)
            os.write(_said, b"!")
            os.read(_waited, 1)  # never written: only the Ctrl-C ends this wait

    sys.addaudithook(_stop_for_ctrl_c)
"""


def interrupt_at_moments(tmp_path_factory, command: list[str], moments: list[str], message: str,
                         check_after=lambda: None) -> None:
    """Ctrl-C `command` at each moment: exit 130, `message` alone on stderr, never a traceback."""
    hooks = tmp_path_factory.mktemp("ctrl-c-hook")
    (hooks / "sitecustomize.py").write_text(STOP_AT_A_MOMENT)
    for moment in moments:
        said_r, said_w = os.pipe()
        waited_r, waited_w = os.pipe()
        env = {**ENV, "PYTHONPATH": os.pathsep.join([str(hooks), ENV["PYTHONPATH"]]),
               "STRATA_TEST_CTRL_C_AT": moment, "STRATA_TEST_CTRL_C_FDS": f"{said_w},{waited_r}"}
        with tempfile.TemporaryFile("w+") as stderr:
            # The child gets Ctrl-C's default action even where this test runs with SIGINT
            # ignored (a background job), or the signal would test nothing.
            proc = subprocess.Popen(
                [sys.executable, *command], stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=ROOT,
                pass_fds=(said_w, waited_r), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            try:
                os.close(said_w)
                os.close(waited_r)
                # The child says "!" at the moment, or closes the pipe by exiting without reaching it.
                ready, _, _ = select.select([said_r], [], [], 120)
                reached = bool(ready) and os.read(said_r, 1) == b"!"
                if reached:
                    proc.send_signal(signal.SIGINT)
                code = proc.wait(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                os.close(said_r)
                os.close(waited_w)
            stderr.seek(0)
            text = stderr.read()
        assert reached, (moment, "the tool never reached this moment", code, text)
        assert "Traceback" not in text and "Exception ignored" not in text, (moment, text)
        assert (code, text.strip()) == (130, message), (moment, code, text)
        check_after()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_strata_opt_is_exit_130_without_traceback(tmp_path, tmp_path_factory):
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")

    def output_is_whole_and_alone() -> None:
        # Interrupted before its rename, the output is what it was, and no temporary file is left.
        assert [p.name for p in tmp_path.iterdir()] == ["out.mlir"]
        assert out.read_text() == "previous result\n"

    moments = ["import:xdsl", "import:xdsl.dialects.builtin", "import:xdsl.parser.core", "import:strata.dialects.op",
               "import:strata.dialects.fixed", "import:xdsl.syntax_printer", f"create:{tmp_path}", f"replace:{tmp_path}"]
    interrupt_at_moments(tmp_path_factory, ["-m", "strata.cli.opt", str(OP_LEVEL), "-o", str(out)], moments,
                         "strata-opt: interrupted", output_is_whole_and_alone)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_strata_is_exit_130_without_traceback(tmp_path_factory):
    moments = ["import:xdsl", "import:xdsl.irdl", "import:strata.dialects", "import:strata.models",
               "import:strata.pipeline", "import:strata.exporters"]
    interrupt_at_moments(tmp_path_factory, ["-m", "strata.cli", "inspect", str(EXAMPLES / "qwen3-8b")], moments,
                         "strata: interrupted")


def _raise(error: BaseException):
    def body() -> int:
        raise error

    return body


@pytest.mark.parametrize(
    "error, line, code",
    [
        (StrataError("model.json: field 'x' is missing"),
         "tool: error: model.json: field 'x' is missing", 1),
        (FileNotFoundError(2, "No such file or directory", "in.mlir"), "tool: error: in.mlir: No such file or directory", 1),
        (RecursionError("maximum recursion depth exceeded"), "tool: error: input nested too deeply", 1),
        (MemoryError(), "tool: error: out of memory", 1),
        (KeyboardInterrupt(), "tool: interrupted", 130),
    ],
)
def test_run_tool_maps_errors_to_one_line(capsys, error, line, code):
    from strata.errors import run_tool

    assert run_tool("tool", _raise(error)) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(line) and len(captured.err.splitlines()) == 1, captured.err


def test_run_tool_leaves_programming_errors_alone():
    from strata.errors import run_tool

    with pytest.raises(AssertionError):
        run_tool("tool", _raise(AssertionError("a bug")))


def test_run_tool_maps_xdsl_diagnostics(capsys):
    from xdsl.utils.exceptions import PassFailedException, VerifyException

    from strata.errors import run_tool

    assert run_tool("tool", _raise(VerifyException("f.mlir:2:3: op.mul: bad"))) == 1
    assert run_tool("tool", _raise(PassFailedException("a pass failed"))) == 1
    assert capsys.readouterr().err == "tool: error: f.mlir:2:3: op.mul: bad\ntool: error: a pass failed\n"


def test_run_tool_sees_ctrl_c_inside_another_error(capsys):
    from strata.errors import run_tool

    def body() -> int:
        # What Python 3.11 makes of a Ctrl-C while a class body's descriptors are set up.
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from e

    assert run_tool("tool", body) == 130
    assert capsys.readouterr().err == "tool: interrupted\n"


def test_ctrl_c_swallowed_by_a_finalizer_still_interrupts():
    # Python prints an exception raised in __del__ or a weakref callback as
    # "Exception ignored" and carries on; a Ctrl-C landing there must still stop the tool.
    program = """if True:
        import sys, time
        from strata.errors import run_tool

        class LandsInAFinalizer:
            def __del__(self):
                raise KeyboardInterrupt

        def body():
            LandsInAFinalizer()
            # Wait for the interrupt itself, however late it comes: only a Ctrl-C ends this
            # loop (each short sleep returns to Python code, where a pending one is raised).
            while True:
                time.sleep(0.05)

        sys.exit(run_tool("tool", body, owns_process=True))
    """
    # The child gets Ctrl-C's default action even where this test runs with SIGINT ignored (a
    # background job): Python installs no handler for a signal ignored at its start.
    try:
        r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=ENV, timeout=60,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed the child
        pytest.fail(f"the Ctrl-C swallowed by the finalizer was never delivered again; stderr: {e.stderr!r}")
    assert (r.returncode, r.stderr) == (130, "tool: interrupted\n")


# 4. Tracebacks that are one-line errors.


def test_deep_nesting_is_a_one_line_error(tmp_path):
    deep = tmp_path / "deep.mlir"
    deep.write_text("builtin.module {" * 3000 + "}" * 3000 + "\n")
    r = opt(deep)
    assert_one_line_error(r, "deep.mlir", "nested too deeply")


def test_trace_target_on_a_function_with_arguments_is_a_one_line_error():
    r = opt(OP_LEVEL, "-t", "trace")
    assert_one_line_error(r, "trace:", "op-level.mlir", "@f", "op.input")


@pytest.mark.parametrize(
    "pipeline, fragments",
    [
        ("convert-module-to-op{entry=prefill", ["-p", "column 35", "`}`"]),
        ("convert-module-to-op{entry=prefill}}", ["-p", "column 36"]),
        ("convert-module-to-op{tokens=}", ["-p", "column 29"]),
        ("a,,b", ["-p", "column 3", "pass name"]),
        ("no-such-pass", ["-p", "unknown pass 'no-such-pass'"]),
        ("convert-module-to-op{no-such-option=1}", ["-p", "convert-module-to-op", "no_such_option"]),
        ("convert-module-to-op{tokens=abc}", ["-p", "convert-module-to-op", "abc"]),
        ("convert-module-to-op{flash_attn=maybe}", ["-p", "convert-module-to-op", "maybe"]),
    ],
)
def test_malformed_pipeline_is_a_one_line_error(pipeline, fragments):
    r = opt(MODULE_LEVEL, "-p", pipeline)
    assert_one_line_error(r, *fragments)


def test_malformed_target_spec_is_a_one_line_error():
    r = opt(OP_LEVEL, "-t", "mlir{")
    assert_one_line_error(r, "'mlir{'", "column 6")


# 5. --version


def test_version_names_strata_and_xdsl():
    from importlib.metadata import version

    r = opt("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"strata-opt {version('strata')} (xdsl {version('xdsl')})"


# 6. --disable-verify


def test_disable_verify_prints_invalid_ir(tmp_path):
    checked = opt(INVALID_OP)
    assert checked.returncode == 1 and "cannot be broadcast" in checked.stderr

    r = opt(INVALID_OP, "--disable-verify")
    assert r.returncode == 0, r.stderr
    assert "op.mul" in r.stdout and r.stderr == ""

    bad = tmp_path / "bad.mlir"
    bad.write_text(BAD_IR)
    r = opt(bad, "--disable-verify")
    assert r.returncode == 0, r.stderr
    assert 'op.input "tokens" : tensor<5x2xi32>' in r.stdout
