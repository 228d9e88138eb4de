"""smoothquant{alpha ranges}: the groups it records (q/k/v share one s, gate/up one, the head the
final norm's), s by SmoothQuant's formula, the transform exact in f32 (the op level's logits
before and after within 1e-4) and folded where it should be (alpha = 1 makes every smoothed
input channel's max |x| exactly 1), and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from strata.quant.calibrate import calibrate, random_prompts, ranges_bytes
from strata.passes.smoothquant import EPS, SmoothQuantError, groups_of, plan_of
from strata.quant.smoothquant import smooth_weights, smoothing_scales
from strata.pipeline import PipelineError, entry_pipeline, load_model, lower
from strata.semantics.op_interp import alloc_state, find_function, run_function
from strata.quant.w4a16 import plan_model, smoothed_weights
from support import run_tool, tiny, write_checkpoint

PROMPTS = random_prompts(4, 6, 48, seed=1)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("sq")
    d = write_checkpoint(tiny(), root / "llama")
    model = load_model(d)
    ranges = root / "ranges.json"
    ranges.write_bytes(ranges_bytes(calibrate(model, PROMPTS)))
    return d, ranges


def op_fn(model, entry="prefill", n=5):
    spec = entry_pipeline("prefill", tokens=n, start=0, ctx=8, kv_pad=1) if entry == "prefill" else \
        entry_pipeline("decode", start=1, ctx=8, kv_pad=1)
    return find_function(lower(model, spec))


def logits(fn, weights, ids):
    return run_function(fn, weights, alloc_state(fn), np.asarray(ids, np.int32), 0)


def test_groups(llama):
    groups, skipped = groups_of(op_fn(load_model(llama[0])))
    assert skipped == []
    got = {g.norm: set(g.linears) for g in groups}
    want = {"output_norm.weight": {"output.weight"}}
    for i in range(2):
        want[f"blk.{i}.attn_norm.weight"] = {f"blk.{i}.attn_{p}.weight" for p in "qkv"}
        want[f"blk.{i}.ffn_norm.weight"] = {f"blk.{i}.ffn_gate.weight", f"blk.{i}.ffn_up.weight"}
    assert got == want
    assert [g.norm for g in groups][-1] == "output_norm.weight"


def test_pass_records_the_plan(llama):
    d, ranges = llama
    spec = entry_pipeline("decode", start=1, ctx=8, kv_pad=1) + f",smoothquant{{alpha=0.75 ranges={json.dumps(str(ranges))}}}"
    fn = find_function(lower(load_model(d), spec))
    groups, alpha = plan_of(fn)
    assert alpha == 0.75 and len(groups) == 5
    import hashlib

    assert fn.attributes["smoothquant.ranges"].data == hashlib.sha256(ranges.read_bytes()).hexdigest()
    assert [o.name for o in fn.walk()] == [o.name for o in op_fn(load_model(d), "decode").walk()]


def test_scales_formula():
    act = np.array([4.0, 1.0, 0.0, 9.0], np.float32)
    w1 = np.array([[1.0, -4.0, 0.0, 0.0]], np.float32)
    w2 = np.array([[-0.5, 2.0, 0.0, 0.0]], np.float32)
    s = smoothing_scales(act, [w1, w2], 0.5)
    # max|W_j| over both: [1, 4, 0 -> 1e-5, 0 -> 1e-5]; s = sqrt(act) / sqrt(wmax), clamped at 1e-5
    np.testing.assert_allclose(s, [2.0, 0.5, EPS, 3.0 / np.sqrt(EPS)], rtol=1e-6)
    np.testing.assert_allclose(smoothing_scales(act, [w1], 1.0), [4.0, 1.0, EPS, 9.0], rtol=1e-7)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_exact_in_f32(tmp_path, family):
    d = write_checkpoint(tiny(family), tmp_path / family)
    model = load_model(d)
    store = model.open_weights(quiet=True)
    ranges = tmp_path / "r.json"
    ranges.write_bytes(ranges_bytes(calibrate(model, PROMPTS, store)))
    plan = plan_model(model, ranges, 0.5)
    smooth = smoothed_weights(store, plan)
    # per layer: 2 norms, q, k, v, gate, up; the final norm and the head, unless the head is the
    # tied embedding (qwen2's), which the lookup reads too
    assert len(smooth.changed) == (16 if family == "llama" else 14)
    smoothed_out = [n for n, why in plan.skipped if why.startswith("not smoothed")]
    assert smoothed_out == ([] if family == "llama" else ["output_norm.weight"])
    assert min(float(np.abs(smooth.get(n) - store.get(n)).max()) for n in smooth.changed) > 1e-3
    for entry, ids in (("prefill", [5, 1, 40, 7, 2]), ("decode", [9])):
        fn = op_fn(model, entry)
        before, after = logits(fn, store, ids), logits(fn, smooth, ids)
        assert np.abs(after - before).max() < 1e-4 * max(1.0, float(np.abs(before).max()))


def test_qkv_share_one_s_and_alpha_one_flattens_activations(llama):
    d, ranges = llama
    model = load_model(d)
    store = model.open_weights(quiet=True)
    plan = plan_model(model, ranges, 1.0)
    smooth = smoothed_weights(store, plan)
    ratios = [smooth.get(f"blk.1.attn_{p}.weight") / store.get(f"blk.1.attn_{p}.weight") for p in "qkv"]
    np.testing.assert_allclose(ratios[0][0], ratios[1][0], rtol=1e-5)
    np.testing.assert_allclose(ratios[0][0], ratios[2][-1], rtol=1e-5)
    # alpha = 1: s_j = max|X_j|, so on the same prompts every smoothed input channel peaks at 1
    after = calibrate(model, PROMPTS, smooth)["linears"]
    for g in plan.groups:
        for w in g.linears:
            np.testing.assert_allclose(after[w]["absmax"], 1.0, rtol=1e-5)
    assert max(after["blk.0.attn_output.weight"]["absmax"]) != pytest.approx(1.0)  # o_proj is not smoothed


def test_errors(llama, tmp_path):
    d, ranges = llama
    model = load_model(d)
    data = json.loads(ranges.read_text())
    del data["linears"]["blk.1.ffn_up.weight"]
    (tmp_path / "missing.json").write_text(json.dumps(data))
    data = json.loads(ranges.read_text())
    data["linears"]["blk.0.attn_q.weight"]["absmax"] = [1.0] * 7
    (tmp_path / "short.json").write_text(json.dumps(data))
    (tmp_path / "other.json").write_text('{"format": "something"}')
    (tmp_path / "bad.json").write_text("{oops")
    cases = [("missing.json", "no calibration range for linear 'blk.1.ffn_up.weight'"),
             ("short.json", "linears.blk.0.attn_q.weight.absmax has 7 channels, the weight has K = 32"),
             ("other.json", "not a ranges file"), ("bad.json", "not JSON")]
    for name, message in cases:
        with pytest.raises((SmoothQuantError, PipelineError), match=message.replace(".", r"\.")):
            plan_model(model, tmp_path / name, 0.5)
        r = run_tool("quantize", str(d), "--w4a16", "--smoothquant", str(tmp_path / name), "-o", str(tmp_path / "o"))
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    with pytest.raises((SmoothQuantError, PipelineError), match=r"alpha must be in \[0, 1\]"):
        plan_model(model, ranges, 1.5)
    with pytest.raises(SmoothQuantError, match="no calibration range"):
        smooth_weights(model.open_weights(quiet=True), groups_of(op_fn(model))[0], {"linears": {}}, 0.5)
    assert not (tmp_path / "o").exists()


def test_cli_with_smoothquant(llama, tmp_path):
    d, ranges = llama
    r = run_tool("quantize", str(d), "--w4a16", "--smoothquant", str(ranges), "--alpha", "0.6", "-o",
                 str(tmp_path / "q"))
    assert r.returncode == 0, r.stderr
    assert "5 SmoothQuant groups (alpha 0.6)" in r.stderr
    info = json.loads((tmp_path / "q" / "w4a16.json").read_text())
    assert info["smoothquant"]["alpha"] == 0.6 and len(info["smoothquant"]["groups"]) == 5
    from strata.quant.w4a16 import W4A16Weights

    model = load_model(d)
    store = model.open_weights(quiet=True)
    smooth = smoothed_weights(store, plan_model(model, ranges, 0.6))
    np.testing.assert_array_equal(W4A16Weights.open(tmp_path / "q").get("blk.0.ffn_norm.weight"),
                                  smooth.get("blk.0.ffn_norm.weight"))
