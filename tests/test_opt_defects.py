"""strata-opt and strata at their edges, run as a user runs them.

Each test starts the tool in a fresh interpreter and checks what the user sees:
stderr, the exit code and the files left behind.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT
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
        [sys.executable, "-m", "strata.opt", *map(str, args)],
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


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_output_into_a_read_only_directory_names_the_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        r = opt(OP_LEVEL, "-o", locked / "out.mlir")
    finally:
        locked.chmod(0o755)
    assert_one_line_error(r, str(locked / "out.mlir"), "Permission denied")
    assert ".tmp" not in r.stderr and list(locked.iterdir()) == []
