"""ONNX export: onnxruntime runs each family's exported prefill and decode (state fed back) as the
op interpreter does; the files pass onnx.checker; `strata run --via onnxruntime` prints what
`strata run` prints; bad input gives one line."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from strata.dialects.op import Op  # noqa: E402
from strata.exporters.onnx import ONNX_EXPORT, OnnxExportError, check_onnx_file, export_onnx  # noqa: E402
from strata.exporters.onnx_file import serialize_onnx  # noqa: E402
from strata.runtime.generate import generate  # noqa: E402
from strata.targets.onnxruntime.program import OrtEntry, OrtProgram  # noqa: E402
from strata.pipeline import entry_pipeline, load_model, lower  # noqa: E402
from strata.errors import StrataError  # noqa: E402
from strata.semantics.op_interp import InterpreterError, alloc_state, find_function, run_function  # noqa: E402
from support import HYBRID_FAMILIES, TINY, run_tool, write_checkpoint  # noqa: E402

FAMILIES = {**{k: TINY[k] for k in ("llama", "qwen2", "qwen3")}, **HYBRID_FAMILIES}
PROMPT = [3, 7, 1, 9, 4]
STEPS = 5  # decode steps after the prefill
CTX = 64
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    return {name: write_checkpoint(cfg, root / name) for name, cfg in FAMILIES.items()}


def _entries(directory, flash_attn: bool = True):
    model = load_model(directory)
    store = model.open_weights(quiet=True)
    pf = find_function(lower(model, entry_pipeline("prefill", tokens=len(PROMPT), start=-1, ctx=CTX, kv_pad=32,
                                                   flash_attn=flash_attn)))
    dc = find_function(lower(model, entry_pipeline("decode", start=-1, ctx=CTX, kv_pad=32, flash_attn=flash_attn)))
    return store, pf, dc


def _compare(store, pf, dc, steps: int = STEPS):
    """Prefill then `steps` greedy decode steps with both; (max |logits diff|, ids, ort ids, models)."""
    mp, md = export_onnx(pf, store), export_onnx(dc, store)
    prefill, decode = OrtEntry(mp), OrtEntry(md)
    ours, theirs = alloc_state(pf), prefill.zero_state()
    worst, ids, ort_ids = 0.0, [], []
    for step in range(steps + 1):
        fn, entry, tokens, start = (pf, prefill, PROMPT, 0) if step == 0 else (dc, decode, [ids[-1]],
                                                                               len(PROMPT) + step - 1)
        want = run_function(fn, store, ours, np.array(tokens), start)
        got = entry(tokens, start, theirs)
        assert got.shape == want.shape and got.dtype == np.float32
        worst = max(worst, float(np.abs(got.astype(np.float64) - want).max()))
        ids.append(int(np.argmax(want[-1])))
        ort_ids.append(int(np.argmax(got[-1])))
    return worst, ids, ort_ids, (mp, md)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_onnxruntime_matches_the_op_interpreter(checkpoints, family):
    worst, ids, ort_ids, models = _compare(*_entries(checkpoints[family]))
    assert worst < 1e-4, f"{family}: max |logits diff| {worst:.3g}"
    assert ort_ids == ids
    for model in models:
        onnx.checker.check_model(model, full_check=True)
        assert {n.domain for n in model.graph.node} <= {""}  # standard ONNX ops only
        assert model.opset_import[0].version == 21


def test_unfused_attention_exports_too(checkpoints):
    worst, ids, ort_ids, _ = _compare(*_entries(checkpoints["qwen3_5"], flash_attn=False), steps=2)
    assert worst < 1e-4 and ort_ids == ids


def test_bf16_weights_and_cache(tmp_path):
    """bf16 weights are bf16 initializers, the KV cache a bf16 input and output."""
    store, pf, dc = _entries(write_checkpoint(TINY["qwen3"], tmp_path / "bf16", dtype="bfloat16"))
    worst, ids, ort_ids, (mp, _) = _compare(store, pf, dc, steps=3)
    assert worst < 1e-4 and ort_ids == ids
    bf16 = onnx.TensorProto.BFLOAT16
    assert any(t.data_type == bf16 for t in mp.graph.initializer)
    assert {i.type.tensor_type.elem_type for i in mp.graph.input if i.name.startswith("cache_")} == {bf16}


def test_graph_interface(checkpoints):
    store, pf, dc = _entries(checkpoints["qwen3_5"])
    model = export_onnx(pf, store)
    inputs = [i.name for i in model.graph.input]
    outputs = [o.name for o in model.graph.output]
    states = list(dict.fromkeys(op.state_name.data for op in pf.walk() if op.name == "op.state"))
    kinds = {op.kind.data for op in pf.walk() if op.name == "op.input"}
    assert kinds == {"tokens", "mrope_positions", "state_copy", "kv_rows", "kq_mask", "out_ids"}
    # The host inputs, one per kind, then every buffer; the logits, then every updated buffer.
    assert set(inputs[:len(kinds)]) == kinds and inputs[len(kinds):] == states
    assert outputs == ["logits"] + [f"{s}_out" for s in states]
    names = inputs + outputs + [t.name for t in model.graph.initializer]
    names += [o for n in model.graph.node for o in n.output]
    assert all(IDENT.match(n) for n in names), [n for n in names if not IDENT.match(n)][:5]
    # Deterministic: the same bytes twice.
    assert export_onnx(pf, store).SerializeToString() == model.SerializeToString()


def test_a_new_sequence_clears_the_recurrent_state(checkpoints):
    """A second prefill at position 0, fed the first run's state, starts afresh (as the interpreter)."""
    store, pf, dc = _entries(checkpoints["qwen3_next"])
    prefill = OrtEntry(export_onnx(pf, store))
    state = prefill.zero_state()
    first = prefill(PROMPT, 0, state)
    again = prefill(PROMPT, 0, state)
    assert np.array_equal(first, again)
    later = prefill(PROMPT, len(PROMPT), state)  # continuing the sequence reads the state
    assert np.abs(later - first).max() > 1e-3


def test_every_op_has_an_onnx_translation():
    ops = list(Op.operations)
    assert len(ops) >= 20 and ONNX_EXPORT.missing(Op) == []
    assert [k for k in ONNX_EXPORT.keys() if k not in ops] == []


def test_external_data_round_trip(checkpoints, tmp_path):
    store, pf, dc = _entries(checkpoints["llama"])
    model = export_onnx(pf, store)
    want = OrtEntry(model)(PROMPT, 0, OrtEntry(model).zero_state())
    inline, none = serialize_onnx(model, "m.onnx.data")
    assert none is None
    content, data = serialize_onnx(model, "m.onnx.data", inline_limit=0)
    assert data is not None and len(content) < len(inline) // 3 and len(data) > len(inline) // 2
    (tmp_path / "m.onnx").write_bytes(content)
    (tmp_path / "m.onnx.data").write_bytes(data)
    check_onnx_file(tmp_path / "m.onnx")
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    entry = OrtEntry(loaded)
    assert np.array_equal(entry(PROMPT, 0, entry.zero_state()), want)
    # A model too large for one protobuf message runs from a temporary directory.
    big = OrtEntry(export_onnx(pf, store), inline_limit=0)
    assert big._files is not None and np.array_equal(big(PROMPT, 0, big.zero_state()), want)


def test_generate_ort_matches_the_interpreter(checkpoints):
    store, pf, dc = _entries(checkpoints["qwen3_moe"])
    got = generate(OrtProgram(OrtEntry(export_onnx(pf, store)), OrtEntry(export_onnx(dc, store))), PROMPT, 4,
                   keep_logits=True)
    ids, logits = got.ids, got.logits
    assert logits.shape == (4, 128)
    _, want, _, _ = _compare(store, pf, dc, steps=3)
    assert ids == want


# ---------------------------------------------------------------------------------------------
# Errors


def test_dynamic_shapes_are_refused_in_one_line(checkpoints):
    model = load_model(checkpoints["llama"])
    fn = find_function(lower(model, entry_pipeline("prefill", tokens=0, start=-1, ctx=CTX)))
    with pytest.raises(OnnxExportError, match="static token count") as e:
        export_onnx(fn, model.open_weights(quiet=True))
    assert "\n" not in str(e.value)


def test_a_missing_weight_is_named(checkpoints, tmp_path):
    store, pf, _ = _entries(checkpoints["llama"])

    class Partial:
        def get(self, name):
            if name == "blk.1.ffn_up.weight":
                raise KeyError(name)
            return store.get(name)

    # The interpreter's read of a param names it; the store's own KeyError must not escape.
    with pytest.raises(InterpreterError, match=r"op.param 'blk.1.ffn_up.weight': .* is not in the weight store") as e:
        export_onnx(pf, Partial())
    assert isinstance(e.value, StrataError) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# The CLI


def test_cli_run_via_onnxruntime_prints_what_run_prints(checkpoints, tmp_path):
    model = str(checkpoints["llama"])
    common = ["run", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--ctx", "32"]
    plain = run_tool(*common, "--dump-logits", str(tmp_path / "a.npy"), "--cache-dir", str(tmp_path / "cache"))
    via = run_tool(*common, "--dump-logits", str(tmp_path / "b.npy"), "--via", "onnxruntime")
    assert plain.returncode == 0 and via.returncode == 0, (plain.stderr, via.stderr)
    assert via.stdout == plain.stdout and plain.stdout.startswith("ids=")
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    assert a.shape == b.shape == (6, 48) and b.dtype == np.float32
    assert np.abs(a - b).max() < 1e-4


def test_cli_export_writes_a_checked_model(checkpoints, tmp_path):
    out = tmp_path / "d.onnx"
    r = run_tool("export", str(checkpoints["qwen3_5_moe"]), "--format", "onnx", "-o", str(out), "--entry", "decode",
                 "--ctx", "16")
    assert r.returncode == 0, r.stderr
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1  # one token
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["strata.entry"] == "decode" and meta["strata.n_kv"] == "16"


@pytest.mark.parametrize("args, message", [
    (["-o", "{tmp}/no/such/dir/m.onnx"], "does not exist"),
    (["-o", "{tmp}/m.onnx", "--tokens", "100", "--ctx", "16"], "exceeds the context"),
    (["-o", "{tmp}", "--entry", "decode"], "is a directory"),
])
def test_cli_export_errors_are_one_line(checkpoints, tmp_path, args, message):
    args = [a.format(tmp=tmp_path) for a in args]
    r = run_tool("export", str(checkpoints["llama"]), "--format", "onnx", *args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr


def test_cli_export_leaves_an_existing_file_on_error(checkpoints, tmp_path):
    out = tmp_path / "m.onnx"
    out.write_bytes(b"mine")
    r = run_tool("export", str(tmp_path / "nope"), "--format", "onnx", "-o", str(out))
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert out.read_bytes() == b"mine"


def test_cli_run_via_onnxruntime_errors_are_one_line(checkpoints):
    r = run_tool("run", str(checkpoints["llama"]), "--prompt-ids", "1,2,999", "--via", "onnxruntime")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "vocabulary" in r.stderr
