"""`strata call`: a list of calls run in order on one compiled program's state, results in an
.npz; the library (strata.runtime.commands.call) and the command, its one-line errors naming the call and
the argument, and nothing written when a call fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from strata.pipeline import load_model
from strata.runtime.commands.call import CallError, Call, call_model, check_calls, read_calls
from strata.runtime.opener import open_program
from support import TINY, run_tool, write_checkpoint

CALLS = [
    {"entry": "prefill_slots", "inputs": {"tokens": [[3, 17, 42], [7, 2, 0]], "slots": [1, 0], "lengths": [3, 2]}},
    {"entry": "decode_rows", "inputs": {"tokens": [[11], [5]], "positions": [2, 3]}},
    {"entry": "generate_until", "inputs": {"token": [[9], [1]], "pos": 4, "eos": 9}},
    {"entry": "prefill", "inputs": {"tokens": [[1, 2], [3, 4]], "pos": 0}},
]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_checkpoint(TINY["qwen3"], tmp_path_factory.mktemp("call") / "tiny")


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One compile of every entry for the bad calls (the ones that reach it)."""
    return tmp_path_factory.mktemp("call-cache")


def write(path: Path, calls) -> Path:
    path.write_text(json.dumps(calls) if not isinstance(calls, str) else calls)
    return path


def test_calls_share_one_state_and_each_result_is_saved(model, tmp_path):
    knobs = {"Batch": 2, "MaxNew": 3, "ctx": 32}
    out = call_model(model, write(tmp_path / "c.json", CALLS), tmp_path / "o.npz", knobs=knobs,
                     cache_dir=tmp_path / "cache")
    saved = np.load(tmp_path / "o.npz")
    assert sorted(saved) == ["call0", "call1", "call2_0", "call2_1", "call3"]
    assert saved["call0"].shape == (2, 48) and saved["call2_0"].shape == (2, 3) and saved["call2_1"].shape == ()
    for k in saved:
        np.testing.assert_array_equal(saved[k], out[k])
    # The same calls one by one on a program of the same knobs: decode_rows saw prefill_slots' cache.
    program = open_program(load_model(model), "cpu", {**knobs, "entries": "prefill,decode,prefill_slots,decode_rows"},
                           cache_dir=tmp_path / "cache2")
    program.call("prefill_slots", **CALLS[0]["inputs"])
    (rows,) = program.call("decode_rows", **CALLS[1]["inputs"])
    np.testing.assert_array_equal(rows, saved["call1"])
    fresh = open_program(load_model(model), "cpu", {**knobs, "entries": "decode_rows"}, cache_dir=tmp_path / "cache3")
    (alone,) = fresh.call("decode_rows", **CALLS[1]["inputs"])  # no prompt before it: other logits
    assert np.abs(alone - rows).max() > 1e-3


def test_the_command(model, tmp_path):
    calls = write(tmp_path / "c.json", CALLS[:2])
    r = run_tool("call", str(model), "--calls", str(calls), "--set", "Batch=2", "--ctx", "32",
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    assert sorted(np.load(tmp_path / "o.npz")) == ["call0", "call1"]


@pytest.mark.parametrize("calls, message", [
    ([{"entry": "decode_rowz", "inputs": {}}], "call 0: unknown entry 'decode_rowz'"),
    ([CALLS[0], {"entry": "decode_rows", "inputs": {"tokens": [[1], [2]]}}],
     "call 1: decode_rows: missing argument 'positions'"),
    ([CALLS[0], {"entry": "decode_rows", "inputs": {"tokens": [[1], [2]], "positions": [1, 2], "pos": 1}}],
     "call 1: decode_rows: no argument 'pos'"),
    ([{"entry": "decode_rows", "inputs": {"tokens": [[1], [2]], "positions": ["1", 2]}}],
     "call 0: decode_rows: argument 'positions' must hold integers, got text"),
    ([{"entry": "decode_rows", "inputs": {"tokens": [[1, 2]], "positions": [1, 2]}}],
     r"call 0: decode_rows: argument 'tokens' must have shape \[2, 1\], got \[1, 2\]"),
    ([{"entry": "decode_rows", "inputs": {"tokens": [[1], [2]], "positions": [1, 32]}}],
     r"call 0: decode_rows: positions\[1\] = 32 is not in \[0, 31\] \(the context, MaxSeq = 32\)"),
    ([{"entry": "hidden_packed", "inputs": {"tokens": [1, 2], "positions": [0, 0], "segments": [1, 0]}}],
     "call 0: hidden_packed: segments out of order"),
    ([{"entry": "decode_paged", "inputs": {"tokens": [[1], [2]], "positions": [0, 0], "table": [[0, 90], [1, 2]]}}],
     r"call 0: decode_paged: table\[0, 1\] = 90 points at a page that does not exist"),
    ([{"entry": "sample", "inputs": {"token": [[1], [2]], "pos": 0, "key": [1, 2, 3], "temperature": 1}}],
     r"call 0: sample: argument 'key' must have shape \[2\], got \[3\]"),
    ([{"entry": "sample", "inputs": {"token": [[1], [2]], "pos": 0, "key": [1, 2], "temperature": -1}}],
     r"call 0: sample: argument 'temperature' must be >= 0, got -1.0"),
    ("[{", "line 1 column 3: not JSON"),
    ([], "expected a non-empty list of calls"),
    ([{"entry": "decode_rows", "input": {}}], "call 0: unknown field 'input'"),
])
def test_bad_calls_are_one_line_errors_and_write_nothing(model, tmp_path, shared_cache, calls, message):
    out = tmp_path / "o.npz"
    out.write_bytes(b"before")
    r = run_tool("call", str(model), "--calls", str(write(tmp_path / "bad.json", calls)), "--set", "Batch=2",
                 "--set", "PageSize=16", "--set", "Pages=2", "--set", "entries=all", "--ctx", "32",
                 "--cache-dir", str(shared_cache), "-o", str(out))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and re.search(message, errors[0]), r.stderr
    assert out.read_bytes() == b"before"


def test_checks_need_no_program():
    entries = {"decode_rows": ((("tokens", (2, 1), "int32"), ("positions", (2,), "int32")), ())}
    (args,) = check_calls([Call("decode_rows", {"tokens": [[1], [2]], "positions": [3, 4]})], entries)
    assert args["positions"].dtype == np.int32
    with pytest.raises(CallError, match="call 0: unknown entry 'prefill_slots': an entry this program was not "
                                        "compiled with"):
        check_calls([Call("prefill_slots", {})], entries)


def test_read_calls_names_the_file(tmp_path):
    with pytest.raises(CallError, match="no such file"):
        read_calls(tmp_path / "none.json")
    with pytest.raises(CallError, match="/dev/zero: the calls file is larger than 256 MiB"):
        read_calls("/dev/zero")  # a bound, not an out-of-memory
    assert read_calls(write(tmp_path / "c.json", CALLS))[1] == Call("decode_rows", CALLS[1]["inputs"])


def test_only_a_target_that_compiles_entries_runs_calls(model, tmp_path):
    with pytest.raises(CallError, match="strata call runs entries on --target cpu, --target cuda; the epu target"):
        call_model(model, write(tmp_path / "c.json", CALLS), tmp_path / "o.npz", target_name="epu")


def test_the_cuda_target_runs_the_calls_as_the_cpu_target(model, tmp_path):
    """The batched calls (not the device loop; the cuda target's prefill is one sequence's), on
    the cuda target in Triton's interpreter (f32): the cpu target's results, within 1e-4 of the largest."""
    pytest.importorskip("triton", reason="the cuda target needs triton (the `test` extra)")
    calls = write(tmp_path / "c.json", [c for c in CALLS if c["entry"] in ("prefill_slots", "decode_rows")])
    knobs = {"Batch": 2, "ctx": 32}
    want = call_model(model, calls, tmp_path / "cpu.npz", knobs={**knobs, "kernels": "numpy"},
                      cache_dir=tmp_path / "cpu")
    got = call_model(model, calls, tmp_path / "cuda.npz", knobs={**knobs, "recipe": "f32"}, target_name="cuda",
                     cache_dir=tmp_path / "cuda", interpret=True)
    assert sorted(got) == sorted(want) == ["call0", "call1"]
    for k in want:
        assert got[k].shape == want[k].shape
        assert float(np.abs(got[k] - want[k]).max()) <= 1e-4 * max(1.0, float(np.abs(want[k]).max())), k
