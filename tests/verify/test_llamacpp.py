"""`strata verify --against LOG`: every op's sum against a llama-eval-callback log."""

from __future__ import annotations

import numpy as np
import pytest

from strata.cli import main
from strata.pipeline import load_model
from strata.verify.llamacpp import VerifyError, compare, parse_callback_log, strata_values
from support import LLAMACPP, tiny, write_checkpoint

TOKENS = (5, 17, 3, 40)


def fake_log(rows, tokens=TOKENS, bump: int | None = None) -> str:
    """A log in llama-eval-callback's format, from (name, op, value) rows; `bump` shifts one sum."""
    lines = ["0.00.024.277 I number of input tokens = %d" % len(tokens)]
    lines += [f"0.00.024.277 I   {t}" for t in tokens]
    for i, (name, op, value) in enumerate(rows):
        s = float(np.asarray(value, dtype=np.float64).sum())
        if i == bump:
            s += 0.5 * float(np.abs(value).sum()) + 1.0
        lines.append(f"common_debug_cb_eval: {name:>24} = (f32) {op:>10}(x{{1, 1, 1, 1}}, }}) = {{1, 1, 1, 1}}")
        lines += ["    [", "    ]", f"    sum = {s:.6f}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_checkpoint(tiny("qwen3"), tmp_path_factory.mktemp("m") / "q3")


def test_parse_and_agree(model_dir, tmp_path, capsys):
    rows = strata_values(load_model(model_dir), TOKENS, ctx=64, kv_pad=32)
    log_path = tmp_path / "prefill.callback.log"
    log_path.write_text(fake_log(rows))
    log = parse_callback_log(log_path)
    assert log.tokens == TOKENS and len(log.rows) == len(rows)
    assert compare(log, rows, 1e-4) == (len(rows), None)
    assert main(["verify", str(model_dir), "--against", str(log_path), "--ctx", "64", "--kv-pad", "32"]) == 0
    assert f"all {len(rows)} ops agree" in capsys.readouterr().out


def test_names_the_first_divergence(model_dir, tmp_path, capsys):
    rows = strata_values(load_model(model_dir), TOKENS, ctx=64, kv_pad=32)
    at = next(i for i, (name, _, _) in enumerate(rows) if name == "Kcur-1")
    log_path = tmp_path / "bad.log"
    log_path.write_text(fake_log(rows, bump=at))
    assert main(["verify", str(model_dir), "--against", str(log_path), "--ctx", "64", "--kv-pad", "32"]) == 1
    out = capsys.readouterr().out
    assert f"ops 1-{at} agree; op {at + 1} diverges:" in out and "'Kcur-1'" in out


def test_another_graph_is_named(model_dir, tmp_path, capsys):
    rows = strata_values(load_model(model_dir), TOKENS, ctx=64, kv_pad=32)
    rows[3] = ("something-else", rows[3][1], rows[3][2])
    log_path = tmp_path / "other.log"
    log_path.write_text(fake_log(rows))
    assert main(["verify", str(model_dir), "--against", str(log_path), "--ctx", "64", "--kv-pad", "32"]) == 1
    assert "op 4 diverges" in capsys.readouterr().out


def test_not_a_log(tmp_path, model_dir, capsys):
    (tmp_path / "x.log").write_text("hello\n")
    with pytest.raises(VerifyError, match="no prompt found"):
        parse_callback_log(tmp_path / "x.log")
    assert main(["verify", str(model_dir), "--against", str(tmp_path / "missing.log")]) == 1
    assert "missing.log: no such llama-eval-callback log" in capsys.readouterr().err


#: llama.cpp's logs for the four tiny checkpoints of tests/data/llamacpp.
REFERENCES = ["qwen3-moe-tiny", "qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"]
LOGS = [(name, entry) for name in REFERENCES for entry in ("prefill", "decode")]


def test_reference_logs_parse():
    for d in (LLAMACPP / name for name in REFERENCES):
        for entry in ("prefill", "decode"):
            log = parse_callback_log(d / f"{entry}.callback.log")
            assert len(log.tokens) == (3 if entry == "prefill" else 1) and len(log.rows) > 50


@pytest.mark.parametrize("name, entry", LOGS)
def test_every_shipped_log_agrees(name, entry, capsys):
    """llama.cpp's own values for the hybrid and MoE families, op by op (its GGUF bakes 1 + w,
    -exp(A_log) and a V-head order; Strata's op.param conversions give the same tensors)."""
    d = LLAMACPP / name
    assert main(["verify", str(d), "--against", str(d / f"{entry}.callback.log")]) == 0
    assert "ops agree" in capsys.readouterr().out


def test_a_wrong_weight_is_found_where_it_is_used(tmp_path, capsys):
    import shutil

    from safetensors.numpy import load_file

    from strata.ir.weights import write_safetensors

    d = tmp_path / "m"
    shutil.copytree(LLAMACPP / "qwen3.5-tiny", d)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.layers.1.linear_attn.A_log"] = tensors["model.layers.1.linear_attn.A_log"] + 0.5
    write_safetensors(d / "model.safetensors", tensors, {"format": "pt"})
    assert main(["verify", str(d), "--against", str(LLAMACPP / "qwen3.5-tiny" / "prefill.callback.log")]) == 1
    out = capsys.readouterr().out
    assert "diverges: MUL 'gate-1'" in out, out
