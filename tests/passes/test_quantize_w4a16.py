"""quantize-w4a16{block}: which weights become int4 (recorded on the op level), their packing byte
for byte as ONNX Runtime's MatMulNBitsQuantizer writes it, ORT's MatMulNBits on the packed bytes
against numpy, `strata quantize --w4a16` end to end and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from strata.passes.quantize_w4a16 import W4A16Error, plan_of
from strata.quant.w4a16 import quantize_weights
from strata.pipeline import PipelineError, entry_pipeline, load_model, lower
from strata.semantics.op_interp import alloc_state, find_function, run_function
from support import run_tool, tiny, write_checkpoint

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

LAYER = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # K = 160 (two blocks of 128, the second partial), 136 for down: MatMulNBits' padding matters.
    cfg = tiny(hidden_size=160, head_dim=40, intermediate_size=136, vocab_size=64)
    return write_checkpoint(cfg, tmp_path_factory.mktemp("w4a16") / "tiny")


def plan(model, block=128, entry="decode"):
    spec = entry_pipeline(entry, start=1, ctx=4, kv_pad=1) if entry == "decode" else \
        entry_pipeline("prefill", tokens=3, start=0, ctx=4, kv_pad=1)
    return find_function(lower(model, spec + f",quantize-w4a16{{block={block}}}"))


def test_pass_records_every_projection_and_the_head(model_dir):
    fn = plan(load_model(model_dir))
    names, block = plan_of(fn)
    assert block == 128
    assert sorted(names) == sorted([f"blk.{i}.{p}.weight" for i in range(2) for p in LAYER] + ["output.weight"])
    assert names[-1] == "output.weight" and names[0].startswith("blk.0.")
    assert "w4a16.skipped" not in fn.attributes
    # the same choice on the prefill entry; the IR's ops are untouched
    assert plan_of(plan(load_model(model_dir), entry="prefill"))[0] == names
    before = lower(load_model(model_dir), entry_pipeline("decode", start=1, ctx=4, kv_pad=1))
    assert [o.name for o in find_function(before).walk()] == [o.name for o in fn.walk()]


def test_tied_head_is_skipped(tmp_path):
    d = write_checkpoint(tiny("qwen2"), tmp_path / "tied")
    fn = plan(load_model(d), block=16)
    names, _ = plan_of(fn)
    assert "output.weight" not in names and "token_embd.weight" not in names
    skipped = {a.data[0].data: a.data[1].data for a in fn.attributes["w4a16.skipped"].data}
    assert skipped == {"token_embd.weight": "also read by op.get_rows"}  # the head reads the embedding


@pytest.mark.parametrize("block", [0, 48, 8, 100])
def test_bad_block(model_dir, block):
    with pytest.raises((W4A16Error, PipelineError), match="power of two >= 16"):
        plan(load_model(model_dir), block=block)


def test_bytes_equal_matmulnbitsquantizer(model_dir):
    """ORT's own quantizer on an ONNX MatMul per weight (B = W^T) writes Strata's bytes."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = load_model(model_dir)
    store = model.open_weights(quiet=True)
    names, block = plan_of(plan(model))
    ours = quantize_weights(store, names, block)
    h = onnx.helper
    nodes, inits, outs = [], [], []
    for i, name in enumerate(names):
        w = store.get(name)
        inits.append(onnx.numpy_helper.from_array(np.ascontiguousarray(w.T), f"W{i}"))
        nodes.append(h.make_node("MatMul", [f"X{w.shape[1]}", f"W{i}"], [f"Y{i}"], name=f"mm{i}"))
        outs.append(h.make_tensor_value_info(f"Y{i}", onnx.TensorProto.FLOAT, [1, w.shape[0]]))
    ins = [h.make_tensor_value_info(f"X{k}", onnx.TensorProto.FLOAT, [1, k])
           for k in sorted({store.get(n).shape[1] for n in names})]
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, inits), opset_imports=[h.make_opsetid("", 21)])
    q = MatMulNBitsQuantizer(m, block_size=block, is_symmetric=False)
    q.process()
    got = {t.name: onnx.numpy_helper.to_array(t) for t in q.model.model.graph.initializer}
    assert {n.op_type for n in q.model.model.graph.node} == {"MatMulNBits"}
    for i, name in enumerate(names):
        b, s, z = ours[name]
        assert got[f"W{i}_Q4"].tobytes() == b.tobytes() and got[f"W{i}_Q4"].shape == b.shape, name
        assert got[f"W{i}_scales"].tobytes() == s.tobytes(), name
        assert got[f"W{i}_zero_points"].tobytes() == z.tobytes(), name


def test_cli_writes_a_stage_ort_reads(model_dir, tmp_path):
    from strata.verify.onnx_judge import check_projections
    from strata.quant.w4a16 import W4A16Weights, emulated_weights, plan_model

    out = tmp_path / "q"
    r = run_tool("quantize", str(model_dir), "--w4a16", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote 15 int4 weights (block 128)" in r.stderr
    info = json.loads((out / "w4a16.json").read_text())
    assert info["format"] == "strata-w4a16/v1" and info["smoothquant"] is None
    assert info["weights"]["blk.0.ffn_down.weight"] == {"N": 160, "K": 136}
    stage = W4A16Weights.open(out)
    # ORT's MatMulNBits on the written bytes equals numpy's dequant-matmul (1e-5 of the output's scale)
    errs = check_projections(stage)
    assert len(errs) == 15 and max(errs.values()) < 1e-5
    # the written weights are the in-memory emulation's, and the op level runs on them
    model = load_model(model_dir)
    store = model.open_weights(quiet=True)
    emu = emulated_weights(store, plan_model(model, None, block=128))
    for name in stage.weights:
        np.testing.assert_array_equal(stage.get(name), emu.get(name))
    np.testing.assert_array_equal(stage.get("blk.0.attn_norm.weight"), store.get("blk.0.attn_norm.weight"))
    fn = find_function(lower(model, entry_pipeline("prefill", tokens=4, start=0, ctx=4, kv_pad=1)))
    ids = np.array([3, 1, 4, 1], np.int32)
    got = run_function(fn, stage, alloc_state(fn), ids, 0)
    ref = run_function(fn, store, alloc_state(fn), ids, 0)
    assert 0 < np.abs(got - ref).max() < 0.5 * np.abs(ref).max()
    # deterministic: the same bytes again
    r = run_tool("quantize", str(model_dir), "--w4a16", "-o", str(tmp_path / "q2"))
    assert r.returncode == 0
    assert (tmp_path / "q2" / "w4a16.safetensors").read_bytes() == (out / "w4a16.safetensors").read_bytes()


def test_cli_errors(model_dir, tmp_path):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    cases = [
        (["--w4a16", "--block", "48", "-o", str(tmp_path / "a")], "block must be a power of two >= 16"),
        (["--w4a16", "--smoothquant", str(tmp_path / "none.json"), "-o", str(tmp_path / "b")], "no such ranges file"),
        (["--w4a16", "-o", str(keep)], "refusing to overwrite"),
        (["--w4a16"], "give -o OUT"),
        (["--w4a16", "--report-only", "-o", str(tmp_path / "c")], "--report-only reports fp8 errors"),
    ]
    for args, message in cases:
        r = run_tool("quantize", str(model_dir), *args)
        assert r.returncode == 1, args
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (keep / "notes.txt").read_text() == "precious"
    assert not any((tmp_path / n).exists() for n in "abc")
