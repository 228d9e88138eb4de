"""The op level of Qwen3-8B prefilling 5 tokens equals llama.cpp's eval-callback trace of it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from strata.exporters.trace import parse_trace, trace_table
from strata.models import read_config as load_hf_config
from strata.pipeline import load_model
from support import EXAMPLES, SEEDS, lower

LLAMA_CPP_TRACE = SEEDS / "000_fedadef405e17808.txt"


def lowered_trace(config, entry: str, **opts) -> str:
    return trace_table(lower(load_model(config).module, entry, **opts))


@pytest.mark.skipif(not LLAMA_CPP_TRACE.exists(), reason="no llama.cpp trace of Qwen3-8B beside the checkout (../shared/seeds/000_*.txt)")
def test_qwen3_8b_prefill_matches_llama_cpp_row_for_row():
    mine = parse_trace(lowered_trace(EXAMPLES / "qwen3-8b", entry="prefill", tokens=5, start=0, ctx=89856, kv_pad=256))
    seed = parse_trace(LLAMA_CPP_TRACE.read_text())
    assert len(seed) == 1266
    assert len(mine) == len(seed)
    for i, (a, b) in enumerate(zip(mine, seed), start=1):
        assert a == b, f"row {i}: strata {a} != llama.cpp {b}"


def test_cli_trace_prints_the_same_table():
    cmd = [sys.executable, "-m", "strata.cli", "trace", str(EXAMPLES / "qwen3-8b"), "--entry", "prefill",
           "--tokens", "5", "--ctx", "89856", "--kv-pad", "256"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = parse_trace(out)
    assert len(rows) == 1266
    assert rows[0] == ("embd", "GET_ROWS", "token_embd.weight{4096, 151936, 1, 1} , inp_tokens{5, 1, 1, 1}", "{4096, 5, 1, 1}")


def test_other_configs_give_their_own_graphs(tmp_path):
    """A Llama with no q/k norm, a bias-free graph and another context: the pass is general."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        '{"architectures": ["LlamaForCausalLM"], "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 3,'
        ' "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "rms_norm_eps": 1e-5,'
        ' "max_position_embeddings": 128}'
    )
    rows = parse_trace(lowered_trace(cfg, entry="prefill", tokens=7, start=3, ctx=128, kv_pad=32))
    ops = [r[1] for r in rows]
    assert "RMS_NORM" in ops and ops.count("FLASH_ATTN_EXT") == 3
    assert not any("normed" in r[0] for r in rows)
    # n_kv = pad(3 + 7, 32) = 32 rows of the cache, 2 KV heads of 16.
    assert ("cache_k_l0 (view)", "VIEW", "cache_k_l0{32, 128, 1, 1}", "{16, 2, 32, 1}") in rows
    assert rows[-1] == ("result_output", "MUL_MAT", "output.weight{64, 320, 1, 1} , result_norm{64, 1, 1, 1}", "{320, 1, 1, 1}")
    decode = parse_trace(lowered_trace(cfg, entry="decode", start=10, ctx=128, kv_pad=32))
    # This llama.cpp gathers the output rows (out_ids) in the last layer for one token too: the
    # attention's output and the residual, before ffn_inp.
    gathered = [r for r in decode if r[1] == "GET_ROWS" and r[0] != "embd"]
    assert [r[3] for r in gathered] == ["{64, 1, 1, 1}"] * 2, gathered
    assert gathered[0][2].startswith("attn_out-2{64, 1, 1, 1}") and gathered[1][2].startswith("l_out-1{64, 1, 1, 1}")
    unfused = parse_trace(lowered_trace(cfg, entry="prefill", tokens=7, start=0, ctx=128, kv_pad=32, flash_attn=False))
    kinds = [r[1] for r in unfused]
    assert "FLASH_ATTN_EXT" not in kinds and kinds.count("SOFT_MAX") == 3


@pytest.mark.parametrize("name", ["llama-3-8b", "tinyllama-1.1b", "qwen2.5-0.5b", "qwen3-0.6b"])
def test_example_configs_lower_for_both_entries(name):
    """Every shipped example lowers to a graph whose shape rows follow its config."""
    cfg = load_hf_config(EXAMPLES / name)
    rows = parse_trace(lowered_trace(EXAMPLES / name, entry="prefill", tokens=3, start=0, ctx=512, kv_pad=256))
    assert rows[0][1] == "GET_ROWS" and rows[-1][0] == "result_output"
    assert rows[-1][3] == f"{{{cfg.vocab_size}, 1, 1, 1}}"
    assert sum(r[1] == "FLASH_ATTN_EXT" for r in rows) == cfg.num_layers
    q = next(r for r in rows if r[0] == "Qcur-0" and r[1] == "RESHAPE")
    assert q[3] == f"{{{cfg.head_dim}, {cfg.num_heads}, 3, 1}}"
    assert sum(r[0].endswith("bias") or "bias" in r[2] for r in rows) == (3 * cfg.num_layers if cfg.attention_bias else 0)
    decode = parse_trace(lowered_trace(EXAMPLES / name, entry="decode", start=7, ctx=512, kv_pad=256))
    assert sum(r[1] == "SET_ROWS" for r in decode) == 2 * cfg.num_layers
