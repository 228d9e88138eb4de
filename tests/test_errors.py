"""The drivers' error handler (strata/errors.py): what the user caused is one line, a bug in
strata keeps its traceback, and `--debug` shows the traceback of a user error too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strata.errors import StrataError, debug_requested, run_tool, user_error_message

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "qwen3-8b"

#: `strata inspect EXAMPLE` run as the console script runs it, with the listing made to fail
#: as a bug would: a bare ValueError from deep inside strata.
BUGGY_INSPECT = f"""
import sys
import strata.pipeline.views as views

def listing(model):
    raise ValueError("an index strata computed wrong")

views.listing = listing
sys.argv = ["strata", *sys.argv[1:]]
from strata.cli import main
sys.exit(main())
"""


def _strata(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "strata.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_bare_value_error_is_a_bug_and_keeps_its_traceback():
    r = _strata("inspect", str(EXAMPLE), code=BUGGY_INSPECT)
    assert r.returncode == 1, r.stderr
    assert "Traceback (most recent call last)" in r.stderr
    assert "ValueError: an index strata computed wrong" in r.stderr
    assert "strata: error:" not in r.stderr  # not dressed up as a mistake of the user's


def test_the_same_listing_unpatched_succeeds():
    # The bug above is the patch's: the command itself lists the model.
    r = _strata("inspect", str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    assert r.stdout


def test_a_user_error_is_one_line(tmp_path):
    r = _strata("inspect", str(tmp_path / "missing"))
    assert r.returncode == 1
    assert r.stderr.startswith("strata: error:") and len(r.stderr.splitlines()) == 1, r.stderr


def test_debug_shows_a_user_error_s_traceback(tmp_path):
    r = _strata("--debug", "inspect", str(tmp_path / "missing"))
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("strata: error:"), r.stderr


def test_strata_debug_in_the_environment_does_the_same(capsys, monkeypatch):
    def body() -> int:
        raise StrataError("config.json: field 'x' is missing")

    assert run_tool("tool", body) == 1
    assert capsys.readouterr().err == "tool: error: config.json: field 'x' is missing\n"
    monkeypatch.setenv("STRATA_DEBUG", "1")
    assert run_tool("tool", body) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("tool: error: config.json: field 'x' is missing\n")


@pytest.mark.parametrize("error", [ValueError("bad"), KeyError("k"), TypeError("t"), IndexError("i")])
def test_errors_of_python_s_own_types_are_bugs(error):
    assert user_error_message(error) is None
    with pytest.raises(type(error)):
        run_tool("tool", lambda: (_ for _ in ()).throw(error))


def test_the_serving_and_cuda_errors_are_user_errors():
    from strata.ir.fp8 import Fp8Error
    from strata.runtime.serve.requests import ApiError
    from strata.runtime.serve.scheduler import SchedulerError

    for error in (SchedulerError("the prompt is empty"), ApiError("n must be >= 1", param="n"),
                  Fp8Error("fp8 block quantization takes a 2-D weight")):
        assert isinstance(error, StrataError)
        assert user_error_message(error) == str(error)
    pytest.importorskip("torch", reason="no torch (the cuda runtime's host imports it)")
    from strata.targets.cuda.program import CudaProgram, CudaProgramError
    from strata.targets.cuda.runtime import ModelError as GeneratedModelError

    # The generated model imports nothing from strata: the program turns its ModelError into a
    # user error at the boundary.
    class Refusing:
        ModelError = GeneratedModelError

        class Model:
            def __init__(self, *args, **kwargs):
                raise GeneratedModelError("no CUDA device")

    with pytest.raises(CudaProgramError, match="no CUDA device") as caught:
        CudaProgram(Refusing, {}, interpret=False)
    assert isinstance(caught.value, StrataError)


@pytest.mark.parametrize("argv, wanted", [(["--debug", "inspect", "m"], True), (["inspect", "m"], False),
                                          (["generate", "m", "--prompt", "--debug"], False),
                                          (["--help"], False)])
def test_debug_is_an_option_of_the_driver_not_of_a_command(argv, wanted):
    assert debug_requested(argv) is wanted
