"""The op level of the hybrid and MoE families equals llama.cpp's own graphs (tests/data/llamacpp):
`strata trace` of each tiny reference checkpoint, prefill (3 tokens) and a decode step, row for
row (node_N / leaf_N normalised); and executed on the checkpoint's weights, every op's sum is the
one llama-eval-callback logged, to 1e-3 of the tensor's magnitude Σ|x| (llama.cpp keeps its KV
cache in f16; a sum can cancel while its terms do not).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.exporters.trace import parse_trace
from strata.pipeline import entry_pipeline, load_model, lower
from strata.semantics.op_interp import alloc_state, find_function, run_function
from strata.verify.llamacpp import parse_callback_log
from support import LLAMACPP, run_tool

MODELS = ["qwen3-moe-tiny", "qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"]
#: The commands of the reference traces (tests/data/README.md): "hello" is
#: 256, 257, 78; the decode-shaped step is "h" (71) at position 0.
ENTRIES = {"prefill": (["--tokens", "3"], [256, 257, 78]), "decode": (["--start", "0"], [71])}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("model", MODELS)
def test_trace_equals_llama_cpp_row_for_row(model: str, entry: str) -> None:
    r = run_tool("trace", str(LLAMACPP / model), "--entry", entry, *ENTRIES[entry][0], "--ctx", "256")
    assert r.returncode == 0, r.stderr
    mine, theirs = parse_trace(r.stdout), parse_trace((LLAMACPP / model / f"{entry}.txt").read_text())
    assert len(theirs) > 100
    for i, (a, b) in enumerate(zip(mine, theirs), start=1):
        assert a == b, f"row {i}: strata {a} != llama.cpp {b}"
    assert len(mine) == len(theirs)


def callback_sums(path) -> list[tuple[str, float]]:
    """(tensor name, sum) of every op llama-eval-callback logged, in order."""
    return [(row.name, row.sum) for row in parse_callback_log(path).rows]


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("model", MODELS)
def test_every_op_sums_as_llama_cpp_logged(model: str, entry: str) -> None:
    """The converted params (1 + w, -exp(A_log), the squeezed conv, the split projections) give
    llama.cpp's values; the V heads stay in HF's order, which no sum sees."""
    loaded = load_model(LLAMACPP / model)
    tokens = ENTRIES[entry][1]
    opts = {"tokens": len(tokens)} if entry == "prefill" else {}
    fn = find_function(lower(loaded, entry_pipeline(entry, start=0, ctx=256, **opts)))
    sums: list[tuple[float, float]] = []  # (sum, sum of |x|)

    def observe(op, value: np.ndarray) -> None:
        if op.name not in ("op.param", "op.state", "op.input", "op.constant"):
            x = value.astype(np.float64)
            sums.append((float(x.sum()), float(np.abs(x).sum())))

    run_function(fn, loaded.open_weights(quiet=True), alloc_state(fn), np.array(tokens), 0, observe=observe)
    logged = callback_sums(LLAMACPP / model / f"{entry}.callback.log")
    assert len(sums) == len(logged)
    for i, ((name, want), (got, magnitude)) in enumerate(zip(logged, sums), start=1):
        assert abs(got - want) <= 1e-3 * magnitude + 1e-6, f"row {i}: {name}: {got} != llama.cpp's {want}"


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_unnormalised_top_k_keeps_llama_cpps_graph(entry: str, tmp_path: Path) -> None:
    """llama.cpp's Qwen3-MoE builder renormalises the top-k weights whatever norm_topk_prob
    says: with it false the graph is the same (its CLAMP's bounds are 1, so the DIV keeps
    HF's weights)."""
    import json

    config = json.loads((LLAMACPP / "qwen3-moe-tiny" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "norm_topk_prob": False}))
    r = run_tool("trace", str(tmp_path), "--entry", entry, *ENTRIES[entry][0], "--ctx", "256")
    assert r.returncode == 0, r.stderr
    assert parse_trace(r.stdout) == parse_trace((LLAMACPP / "qwen3-moe-tiny" / f"{entry}.txt").read_text())
    ir = run_tool("ir", str(tmp_path), "--level", "op", "--entry", entry, *ENTRIES[entry][0], "--ctx", "256")
    assert ir.stdout.count("op.clamp") == 2 and ir.stdout.count("min = 1.000000e+00 : f64, max = 1.000000e+00 : f64") == 2


EXAMPLE_MODELS = ["qwen3.6-35b-a3b", "qwen3-30b-a3b", "qwen3-next-80b-a3b"]


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("example", EXAMPLE_MODELS)
def test_example_traces_follow_the_layer_pattern(example: str, entry: str) -> None:
    """`strata trace` of each full-size example (config only): one GATED_DELTA_NET per linear
    layer, one FLASH_ATTN_EXT per full-attention layer, three MUL_MAT_IDs per MoE layer."""
    from strata.models import read_config
    from support import EXAMPLES

    cfg = read_config(EXAMPLES / example)
    r = run_tool("trace", str(EXAMPLES / example), "--entry", entry, *ENTRIES[entry][0])
    assert r.returncode == 0, r.stderr
    ops = [row[1] for row in parse_trace(r.stdout)]
    assert ops.count("GATED_DELTA_NET") == cfg.layer_types.count("linear_attention")
    assert ops.count("FLASH_ATTN_EXT") == cfg.layer_types.count("full_attention")
    assert ops.count("MUL_MAT_ID") == 3 * sum(cfg.moe_layers)
    assert ops.count("FLASH_ATTN_EXT") + ops.count("GATED_DELTA_NET") == cfg.num_layers > 0
    assert ops[-1] == "MUL_MAT" and parse_trace(r.stdout)[-1][0] == "result_output"
