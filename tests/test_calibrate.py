"""strata calibrate: per-channel max |x| at each linear's input and every tensor's range, over
prompts on the op level; deterministic; prompts files and their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from strata.quant.calibrate import CalibrationError, calibrate, random_prompts, ranges_bytes, read_prompts, value_names
from strata.dialects import op as O
from strata.pipeline import entry_pipeline, load_model, lower
from strata.semantics.op_interp import alloc_state, find_function, run_function
from support import run_tool, tiny, write_checkpoint


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_checkpoint(tiny(), tmp_path_factory.mktemp("cal") / "tiny")


def reference(model, prompts):
    """Every op's value per prompt, straight from the interpreter (independent of the recorder)."""
    linears: dict[str, np.ndarray] = {}
    tensors: dict[str, list[float]] = {}
    for p in prompts:
        fn = find_function(lower(model, entry_pipeline("prefill", tokens=len(p), start=0, ctx=len(p), kv_pad=1)))
        names = value_names(fn)
        values = {}
        run_function(fn, model.open_weights(quiet=True), alloc_state(fn), np.asarray(p, np.int32), 0,
                     observe=lambda op, r: values.__setitem__(op.results[0], r))
        for op in fn.walk():
            if isinstance(op, O.MulMatOp) and isinstance(op.operands[0].owner, O.ParamOp):
                x = np.abs(values[op.operands[1]]).reshape(-1, values[op.operands[1]].shape[-1]).max(axis=0)
                w = op.operands[0].owner.tensor_name.data
                linears[w] = np.maximum(linears.get(w, x), x)
            if op.results and not isinstance(op, (O.ParamOp, O.StateOp)) and values[op.results[0]].dtype.kind == "f":
                v = values[op.results[0]]
                lo, hi = tensors.get(names[op.results[0]], (np.inf, -np.inf))
                tensors[names[op.results[0]]] = (min(lo, float(v.min())), max(hi, float(v.max())))
    return linears, tensors


def test_ranges_are_the_op_levels(model_dir):
    model = load_model(model_dir)
    prompts = [[1, 2, 3, 4], [40, 7, 7], [5, 6, 7, 8]]  # two lengths
    r = calibrate(model, prompts)
    lin, ten = reference(model, prompts)
    assert set(r["linears"]) == set(lin) and len(lin) == 15
    for w, amax in lin.items():
        np.testing.assert_array_equal(np.asarray(r["linears"][w]["absmax"], np.float32), amax)
    # q, k and v read the same input
    assert r["linears"]["blk.0.attn_q.weight"]["absmax"] == r["linears"]["blk.0.attn_v.weight"]["absmax"]
    assert r["linears"]["blk.0.attn_q.weight"]["rows"] == 11 and r["linears"]["output.weight"]["rows"] == 3
    assert {k: (v["min"], v["max"]) for k, v in r["tensors"].items()} == ten
    assert r["tensors"]["ffn_out-1"]["op"] == "op.mul_mat" and r["tensors"]["ffn_out-1"]["name"] == "ffn_out-1"
    assert r["tensors"]["Qcur-0_2"]["op"] == "op.rope"  # the names `strata ir --level op` prints
    assert r["prompts"]["count"] == 3 and r["prompts"]["lengths"] == [4, 3, 4]


def test_deterministic(model_dir, tmp_path):
    model = load_model(model_dir)
    a = ranges_bytes(calibrate(model, random_prompts(3, 5, 48, seed=2)))
    assert a == ranges_bytes(calibrate(model, random_prompts(3, 5, 48, seed=2)))
    assert a != ranges_bytes(calibrate(model, random_prompts(3, 5, 48, seed=3)))
    for name in ("r1.json", "r2.json"):
        r = run_tool("calibrate", str(model_dir), "--random", "3", "--length", "5", "--seed", "2", "-o",
                     str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        assert "wrote the ranges of 15 linears" in r.stderr
    assert (tmp_path / "r1.json").read_bytes() == (tmp_path / "r2.json").read_bytes() == a


def test_prompts_file(model_dir, tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# calibration prompts\n1, 2, 3\n\n4 5 6 7\n")
    assert read_prompts(f, 48) == [[1, 2, 3], [4, 5, 6, 7]]
    r = run_tool("calibrate", str(model_dir), "--prompts", str(f), "-o", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["format"] == "strata-ranges/v1" and data["prompts"]["lengths"] == [3, 4]
    assert data == json.loads(ranges_bytes(calibrate(load_model(model_dir), [[1, 2, 3], [4, 5, 6, 7]])))


@pytest.mark.parametrize("text, message", [
    ("1,2\n3,x\n", "p.txt:2: 'x' is not a token id"),
    ("1,2\n\n7,48\n", "p.txt:3: token id 48 is outside the vocabulary [0, 48)"),
    ("# nothing\n\n", "p.txt: no prompts"),
])
def test_bad_prompts(model_dir, tmp_path, text, message):
    f = tmp_path / "p.txt"
    f.write_text(text)
    out = tmp_path / "r.json"
    out.write_text("keep me")
    with pytest.raises(CalibrationError, match=message.replace("[", r"\[").replace(")", r"\)")):
        read_prompts(f, 48)
    r = run_tool("calibrate", str(model_dir), "--prompts", str(f), "-o", str(out))
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert out.read_text() == "keep me"


def test_cli_errors(model_dir, tmp_path):
    for args, message in [
        (["--prompts", str(tmp_path / "none.txt"), "-o", str(tmp_path / "r.json")], "no such prompts file"),
        (["--random", "2", "-o", str(tmp_path)], "is a directory"),
        (["--random", "2", "-o", str(tmp_path / "no" / "r.json")], "does not exist"),
        (["--random", "0", "-o", str(tmp_path / "r.json")], "not in [1,"),
    ]:
        r = run_tool("calibrate", str(model_dir), *args)
        assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(CalibrationError, match="outside the vocabulary"):
        calibrate(load_model(model_dir), [[1, 99]])
    with pytest.raises(CalibrationError, match="at least one prompt"):
        calibrate(load_model(model_dir), [])
