"""`strata verify` on block-quantized GGUFs made by llama.cpp's llama-quantize (tests/verify/data_ggml,
made by its make_refs.py): llama.cpp's CPU backend quantizes each activation row to the weight
type's vec_dot_type (Q8_0 for Q8_0 and Q4_0, Q8_K for the K-quants and IQ4_XS) and keeps the KV
cache in f16; Strata's op level says so (`op.mul_mat {act = ...}`, `kv_type=f16`) and agrees
with llama-eval-callback's log op for op, expert choices included, at verify's default rtol
(1e-3 of a tensor's sum of |x|).

Why 1e-3 holds: with the activations quantized as ggml does, a product's value is ggml's up to
the float32 rounding of its block sums (~1e-7), so the sums agree to ~1e-6 until an activation
within that rounding of a half-quantum rounds the other way. One such flip moves one element
by one quantum (its block's largest magnitude / 127) and a following product's sum by ~1e-5 of
its magnitude; the worst seen here, 4.6e-4 (qwen35-iq4_xs, after flips in its Gated DeltaNet
layer), is half the tolerance. Without the emulation the same sums differ by 3e-3 to 0.7 (a
block's rounding error, up to half a quantum, in every element): the check below fails then,
and the MoE files pick other experts."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import cpu_generate

from strata.cli import main
from strata.ir.text import print_ir
from strata.passes.pipelines import lowered
from strata.pipeline import compile_model, load_model
from strata.targets.cpu.program import load_compiled
from strata.verify.llamacpp import compare, parse_callback_log, strata_values

DATA = Path(__file__).resolve().parent / "data_ggml"
#: (file stem, entry, ops in llama.cpp's graph)
LOGS = [("llama-q4_k_m", "prefill", 68), ("llama-q4_k_m", "decode", 68), ("qwen3-q5_k_m", "prefill", 41),
        ("qwen3moe-q3_k_m", "prefill", 57), ("qwen35-iq4_xs", "prefill", 111), ("qwen35moe-q8_0", "prefill", 337),
        ("qwen35moe-q8_0", "decode", 337), ("qwen35moe-q4_0", "prefill", 337)]


@pytest.mark.parametrize("stem, entry, ops", LOGS)
def test_quantized_gguf_agrees_with_llama_cpp_op_for_op(stem, entry, ops, capsys) -> None:
    rc = main(["verify", str(DATA / f"{stem}.gguf"), "--against", str(DATA / f"{stem}.{entry}.callback.log")])
    out = capsys.readouterr().out.strip()
    assert rc == 0 and out.startswith(f"all {ops} ops agree"), out


@pytest.mark.parametrize("stem", ["qwen35moe-q8_0", "qwen3-q5_k_m"])
def test_float_activations_do_not_agree(stem) -> None:
    """The check above can fail: without ggml's activation quantization the sums leave the
    tolerance (and the MoE's expert choices differ: the sum of `ffn_moe_topk-N`, a view of the
    first TopK of ARGSORT's expert ids, is the sum of the chosen ids)."""
    log = parse_callback_log(DATA / f"{stem}.prefill.callback.log")
    ours = strata_values(load_model(DATA / f"{stem}.gguf"), log.tokens, ctx=256, kv_pad=256, act_quant=False)
    agreed, divergence = compare(log, ours, 1e-3)
    assert divergence is not None and divergence.why.startswith("sums differ"), divergence
    if "moe" in stem:
        choices = [(row.sum, float(np.sum(v))) for row, (name, _, v) in zip(log.rows, ours)
                   if name.startswith("ffn_moe_topk")]
        assert any(theirs != mine for theirs, mine in choices), choices


def test_the_op_level_says_what_llama_cpp_multiplies() -> None:
    """Q4_K_M mixes Q4_K and Q6_K per tensor; Qwen3.5's ssm_out is blocked in the GGUF's (tiled)
    order of its value heads: 2 key heads of 4 value heads of 64, ggml's row [4, 2, 64]."""
    text = print_ir(lowered(load_model(DATA / "llama-q4_k_m.gguf").module, "convert-module-to-op{entry=decode ctx=64}"))
    assert 'op.param "blk.0.attn_v.weight" {format = "q4_K", op.block = ' in text
    assert 'op.param "blk.1.attn_v.weight" {format = "q6_K", op.block = ' in text
    assert len(re.findall(r'op.mul_mat %\S+, %\S+ \{act = "q8_K"', text)) == 15  # 7 per layer and the output
    text = print_ir(lowered(load_model(DATA / "qwen35-iq4_xs.gguf").module, "convert-module-to-op{entry=decode ctx=64}"))
    assert ('op.param "blk.0.ssm_out.weight" {format = "iq4_xs", block_order = array<i64: 2, 4, 64>, op.block = ' in text), text
    assert 'act = "q8_K", act_order = array<i64: 2, 4, 64>' in text


def test_reference_data_is_small() -> None:
    total = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert total < 4.5 * 2**20, total


def printed_logits(path: Path) -> np.ndarray:
    """The first and last three logits llama-eval-callback prints of `result_output` (4 decimals)."""
    text = path.read_text()
    body = text[text.rindex("result_output = "):].split("sum =")[0]
    head, tail = re.findall(r"\[([^\[\]]*\.\.\.[^\[\]]*)\]", body)[-1].split("...")
    return np.array([float(v) for v in (head + "," + tail).split(",") if v.strip()])


#: Through the CPU target, the files whose logits llama.cpp prints to within its 4 decimals.
#: qwen35-iq4_xs is left out: its activation rounding flips after its attention layer (see the
#: module docstring) move its logits by up to 0.07 from llama.cpp's, at 4.6e-4 of the sums.
CPU_LOGS = [("llama-q4_k_m", "prefill"), ("llama-q4_k_m", "decode"), ("qwen3-q5_k_m", "prefill"),
            ("qwen3moe-q3_k_m", "prefill"), ("qwen35moe-q8_0", "prefill"), ("qwen35moe-q4_0", "prefill")]


#: Where the native kernels do not yet give llama.cpp's logits: Q4_K prefill rows (the K cache
#: takes another float16 rounding in the first layer, and the difference grows to 0.07 in the
#: logits, while the numpy kernels stay within llama.cpp's 4 printed decimals).
NATIVE_DEPARTURES = {("llama-q4_k_m", "prefill")}
NATIVE_DEPARTS = "the native kernels' Q4_K prefill departs from llama.cpp's logits (a known defect, see NATIVE_DEPARTURES)"


def _cpu_logits(model, tokens, out: Path, kv_type: str, kernels: str) -> np.ndarray:
    compiled = load_compiled(compile_model(model, "cpu", out, {"ctx": 256, "kv_type": kv_type, "kernels": kernels}))
    _, logits = cpu_generate(compiled.Model(model.open_weights(quiet=True)), None, list(tokens), 1)
    return logits[0]


@pytest.mark.parametrize("stem, entry", CPU_LOGS)
def test_the_cpu_target_computes_llama_cpps_logits(stem, entry, tmp_path) -> None:
    """The CPU target, its KV cache in f16 as llama.cpp's (`--set kv_type=f16`), on its numpy
    kernels (the portable reference) gives the op interpreter's logits bit for bit and llama.cpp's
    printed ones to their 4 decimals."""
    log_path = DATA / f"{stem}.{entry}.callback.log"
    log = parse_callback_log(log_path)
    model = load_model(DATA / f"{stem}.gguf")
    reference = _cpu_logits(model, log.tokens, tmp_path / "numpy", "f16", "numpy")
    interpreted = strata_values(model, log.tokens, ctx=256, kv_pad=256)[-1][2].reshape(-1, reference.shape[-1])[-1]
    np.testing.assert_array_equal(reference, interpreted)
    want = printed_logits(log_path)
    got = np.concatenate([reference[:3], reference[-3:]])
    assert np.abs(got - want).max() <= 1e-4, (got, want)


@pytest.mark.parametrize("stem, entry", [
    pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=NATIVE_DEPARTS)) if case in NATIVE_DEPARTURES
    else case for case in CPU_LOGS])
def test_the_native_kernels_compute_llama_cpps_logits(stem, entry, tmp_path) -> None:
    """The CPU target's native kernels, KV cache in f16, give llama.cpp's printed logits to their
    4 decimals."""
    if not (shutil.which("g++") or shutil.which("clang++")):
        pytest.skip("no C++ compiler (g++ or clang++): the native kernels are not built")
    log_path = DATA / f"{stem}.{entry}.callback.log"
    logits = _cpu_logits(load_model(DATA / f"{stem}.gguf"), parse_callback_log(log_path).tokens, tmp_path / "native",
                         "f16", "native")
    got, want = np.concatenate([logits[:3], logits[-3:]]), printed_logits(log_path)
    assert np.abs(got - want).max() <= 1e-4, (got, want)


def test_the_cpu_targets_logits_check_can_fail(tmp_path) -> None:
    """With the model's own f32 KV cache, ggml-cpu's f16 attention is not what runs: the logits
    leave llama.cpp's by far more than the 1e-4 above (0.1 here)."""
    log_path = DATA / "llama-q4_k_m.prefill.callback.log"
    logits = _cpu_logits(load_model(DATA / "llama-q4_k_m.gguf"), parse_callback_log(log_path).tokens,
                         tmp_path / "out", "", "numpy")
    assert np.abs(np.concatenate([logits[:3], logits[-3:]]) - printed_logits(log_path)).max() > 1e-2
