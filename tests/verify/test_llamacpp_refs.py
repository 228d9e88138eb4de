"""`strata verify` against llama.cpp's own logs of tiny checkpoints kept in tests/verify/data
(made by data/make_refs.py: transformers wrote each HF directory, llama.cpp's converter its
GGUF, llama-eval-callback the logs), from the HF directory and from the GGUF."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from strata.cli import main
from strata.pipeline import load_model
from support import LLAMACPP

DATA = Path(__file__).resolve().parent / "data"
LLAMAS = ("llama-tiny", "llama3-tiny")
ENTRIES = ("prefill", "decode")


def verify(model: Path, log: Path, capsys) -> tuple[int, str]:
    rc = main(["verify", str(model), "--against", str(log)])
    return rc, capsys.readouterr().out.strip()


def copy_with(tmp_path: Path, name: str, **fields) -> Path:
    """The HF directory of `name`, its config.json updated with `fields`."""
    d = tmp_path / name
    shutil.copytree(DATA / name, d, ignore=shutil.ignore_patterns("*.gguf", "*.log"))
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **fields}, indent=2))
    return d


@pytest.mark.parametrize("source", ["hf", "gguf"])
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", LLAMAS)
def test_llama_agrees_op_for_op(name, entry, source, capsys):
    """llama.cpp's llama names its o_proj `attn_out` and keeps the output row in the last layer
    for one token too; from the GGUF, a llama3 rope_freqs with a single smoothed pair is read."""
    d = DATA / name
    rc, out = verify(d if source == "hf" else d / "model.gguf", d / f"{entry}.callback.log", capsys)
    assert rc == 0 and out.startswith("all 68 ops agree"), out


@pytest.mark.parametrize("name, ops", [("qwen2", 74), ("qwen3", 76)])
def test_qwen2_and_qwen3_keep_the_output_row_for_one_token_too(name, ops, capsys):
    """llama.cpp's qwen2 and qwen3 gather out_ids in the last layer for a one-token call too."""
    gguf = DATA.parents[1] / "frontends" / "data" / f"{name}-f32.gguf"
    rc, out = verify(gguf, DATA / "fixtures" / f"{name}.decode.callback.log", capsys)
    assert rc == 0 and out.startswith(f"all {ops} ops agree"), out


def test_llama3_scaling_shows_in_the_values(tmp_path, capsys):
    """The llama3 logs tell a scaled RoPE from a plain one: the check above is not vacuous."""
    d = copy_with(tmp_path, "llama3-tiny", rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    rc, out = verify(d, DATA / "llama3-tiny" / "prefill.callback.log", capsys)
    assert rc == 1 and "ops 1-5 agree; op 6 diverges: ROPE 'Qcur-0'" in out, out


def test_norm_topk_prob_false_is_named_where_it_shows(capsys):
    d = DATA / "qwen3moe-nonorm-tiny"
    for entry in ENTRIES:
        rc, out = verify(d, d / f"{entry}.callback.log", capsys)
        assert rc == 1, out
        assert "op 40 diverges: CLAMP 'ffn_moe_weights_sum_clamped-0'" in out, out
        assert "llama.cpp ignores this HF config's 'norm_topk_prob': false: its qwen3moe graph always " \
            "renormalises the top-k expert weights" in out, out
        assert "\n" not in out
        # The GGUF is what llama.cpp computed: Strata reads it as llama.cpp does.
        rc, out = verify(d / "model.gguf", d / f"{entry}.callback.log", capsys)
        assert rc == 0 and out.startswith("all 108 ops agree"), out


def test_norm_topk_prob_false_is_named_for_qwen3_next_too(tmp_path, capsys):
    """qwen3next.cpp renormalises too; the log of the norm_topk_prob: true model is llama.cpp's
    for the false one (the GGUF has no key for it)."""
    ref = LLAMACPP / "qwen3-next-tiny"
    d = tmp_path / "next"
    shutil.copytree(ref, d, ignore=shutil.ignore_patterns("*.log", "*.txt"))
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "norm_topk_prob": False}))
    rc, out = verify(d, ref / "prefill.callback.log", capsys)
    assert rc == 1 and "diverges: CLAMP 'ffn_moe_weights_sum_clamped-0'" in out, out
    assert "ignores this HF config's 'norm_topk_prob': false: its qwen3next graph" in out, out


def test_an_unrelated_divergence_names_no_field(tmp_path, capsys):
    """The field is named only at the op where it shows."""
    d = copy_with(tmp_path, "qwen3moe-nonorm-tiny", rms_norm_eps=1e-2)
    rc, out = verify(d, DATA / "qwen3moe-nonorm-tiny" / "prefill.callback.log", capsys)
    assert rc == 1 and "op 3 diverges: MUL 'attn_norm-0'" in out and "norm_topk_prob" not in out, out


def test_mrope_gguf_leaves_the_fourth_streams_pairs_unturned_as_llama_cpp_does(capsys):
    """Sections [2, 0, 2] send rotary pair 1 of 4 to M-RoPE's fourth stream, which llama.cpp
    sets to 0 for text: read from the GGUF, Strata leaves that pair unturned too."""
    d = DATA / "qwen35-mrope-tiny"
    for entry in ENTRIES:
        rc, out = verify(d / "model.gguf", d / f"{entry}.callback.log", capsys)
        assert rc == 0 and out.startswith("all 111 ops agree"), out
    # At position 0 every rotation is the identity: the one-token log agrees from the HF directory too.
    rc, out = verify(d, d / "decode.callback.log", capsys)
    assert rc == 0, out


def test_mrope_sections_reaching_the_fourth_stream_are_named_where_they_show(capsys):
    """HF turns every pair by the token's position (Strata's HF path does, as transformers)."""
    d = DATA / "qwen35-mrope-tiny"
    rc, out = verify(d, d / "prefill.callback.log", capsys)
    assert rc == 1 and "ops 1-74 agree; op 75 diverges: ROPE 'Qcur-1'" in out, out
    assert "this HF config's 'rope_parameters.mrope_section': [2, 0, 2] otherwise than HF" in out, out
    assert "turns rotary pair 1 of 4 by M-RoPE's fourth stream" in out and "\n" not in out, out


def test_qwen3_moe_turns_every_dim_whatever_partial_rotary_factor_says(tmp_path):
    """HF's Qwen3-MoE (its default RoPE reads no partial_rotary_factor) and llama.cpp's qwen3moe
    (which asserts n_rot == head_dim) both turn all 8 dims of a head. (The logs cannot tell:
    at theta 1e6 the last two pairs turn by under 0.01 rad over the prompt.)"""
    d = copy_with(tmp_path, "qwen3moe-nonorm-tiny",
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5})
    assert load_model(d).config.rotary_dim == 8


def test_qwen3_moe_sliding_window_is_refused(tmp_path, capsys):
    """HF's Qwen3-MoE honours use_sliding_window, llama.cpp's qwen3moe does not: Strata refuses it
    (as it does for Qwen2 and Qwen3) rather than ignore it."""
    d = copy_with(tmp_path, "qwen3moe-nonorm-tiny", use_sliding_window=True, sliding_window=4)
    assert main(["verify", str(d), "--against", str(DATA / "qwen3moe-nonorm-tiny" / "prefill.callback.log")]) == 1
    assert "field 'use_sliding_window' is true; sliding-window attention is not supported" in capsys.readouterr().err


def test_reference_data_is_small():
    total = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert total < 3 * 2**20, total
