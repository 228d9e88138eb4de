"""The EPU target's C++ (strata/targets/epu): built once with g++ for a tiny Llama, its logits
are the fixed interpreter's integers bit for bit, its greedy ids the interpreter's, and the code
calls Quadric Chimera's custom ops with their template parameters."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
from support import TINY, write_checkpoint

from xdsl.rewriter import Rewriter

from strata.dialects import parse_ir
from strata.dialects.fixed import MatmulW4A16Op, fixed_tensor, frac_of
from strata.targets.epu.build import build_epu, run_epu
from strata.targets.epu.stages import compile_epu, smoothed_store
from support import epu_interpret as interpret_epu
from strata.pipeline import load_model
from strata.targets.epu.emit import ALIGN, MAGIC, EpuTargetError, emit_epu

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
PROMPT = [3, 17, 5, 40, 2, 9]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("epu")
    model = load_model(write_checkpoint(TINY["llama"], root / "tiny"))
    out, _ = compile_epu(model, root / "out", {"ctx": 32})
    build_epu(out)  # the one g++ build of this module
    return model, out


def test_logits_and_greedy_ids_are_the_interpreters(built):
    model, out = built
    ids, logits, frac = run_epu(out, PROMPT, 5)
    ref_ids, ref_logits, ref_frac = interpret_epu(model, out, PROMPT, 5)
    assert frac == ref_frac
    np.testing.assert_array_equal(logits[0], ref_logits[0])  # the first token's logits, integer for integer
    np.testing.assert_array_equal(logits, ref_logits)  # and every step's, the KV cache persisting
    assert ids == ref_ids and len(ids) == 5
    assert ids == [int(np.argmax(row)) for row in logits]
    # a different prompt gives different logits (the program reads its input)
    _, other, _ = run_epu(out, [1, 2, 3], 1)
    assert not np.array_equal(other[0], logits[0])
    # the logits file run_epu leaves in OUT/build is strata's own: the output is reused after it
    assert (out / "build" / "logits.bin").is_file()
    assert compile_epu(model, out, {"ctx": 32})[1] == []


def test_stepped_driver_is_its_own_loop(built):
    """The driver stepped by the runtime's loop (`--steps` over a pipe) gives the ids and logits of
    its own autoregressive loop, bit for bit; a reset starts a new sequence; bad steps are refused."""
    from strata.errors import StrataError
    from strata.runtime.generate import generate
    from strata.targets.epu.program import EpuProgram

    model, out = built
    ids, logits, frac = run_epu(out, PROMPT, 5)
    program = EpuProgram(out, model.name)
    try:
        assert (program.vocab, program.n_ctx, program.frac) == (logits.shape[1], 32, frac)
        for _ in range(2):  # the second run begins at position 0: the state is reset
            got = generate(program, PROMPT, 5, keep_logits=True)
            assert got.ids == ids
            np.testing.assert_array_equal(np.rint(got.logits * 2.0 ** frac).astype(np.int64), logits)
        with pytest.raises(StrataError, match="position 32 is outside the KV cache of 32"):
            program.decode(1, 32)
    finally:
        program.close()
    assert program.proc.returncode is not None


def test_custom_op_calls(built):
    _, out = built
    code = (out / "cpp" / "model.h").read_text()
    assert len(re.findall(r"nn_custom::w4a16PackedProj<3, \d+, \d+>", code)) == 2  # q|k|v per layer
    assert len(re.findall(r"nn_custom::w4a16PackedProj<2, \d+, \d+>", code)) == 2  # gate|up
    assert len(re.findall(r"nn_custom::w4a16NBitsMatMul<\d+, \d+>", code)) == 5  # o and down per layer, lm_head
    assert len(re.findall(r"nn::qwenMultiheadAttentionFx32RoPE<8, 4, 2, 32, \d+>", code)) == 2
    assert "epu::matmul<" not in code and "epu::rope<" not in code  # head int4; ropes inside the attention
    assert "g++ -O2 -std=c++17" in (out / "cpp" / "Makefile").read_text()
    assert (out / "cpp" / "epu_runtime.h").read_bytes() == (
        __import__("strata.targets.epu.emit", fromlist=["RUNTIME"]).RUNTIME.read_bytes())


def test_weights_bin_header(built):
    model, out = built
    blob = (out / "cpp" / "weights.bin").read_bytes()
    assert blob[:8] == MAGIC
    (count,) = struct.unpack("<Q", blob[8:16])
    entries = [struct.unpack("<QQ", blob[16 + 16 * i:32 + 16 * i]) for i in range(count)]
    assert all(off % ALIGN == 0 for off, _ in entries)
    assert all(a[0] + a[1] <= b[0] for a, b in zip(entries, entries[1:])) and entries[-1][0] + entries[-1][1] == len(blob)
    # 2 layers x (2 norms + 7 int4 weights x 3 parts) + embedding + final norm + head's 3 parts + rope cos/sin
    assert count == 2 * (2 + 21) + 2 + 3 + 2
    fixed = parse_ir((out / "fixed" / "fixed.mlir").read_text())
    again = emit_epu(fixed, smoothed_store(model, out), model.name)
    assert again["weights.bin"] == blob and again["model.h"] == (out / "cpp" / "model.h").read_bytes()  # deterministic


def test_emitter_refusals(built):
    model, out = built
    text = (out / "fixed" / "fixed.mlir").read_text()
    # projections of one input in different formats: the packed op has one
    bad = parse_ir(text)
    k = next(op for op in bad.walk() if isinstance(op, MatmulW4A16Op) and op.node.data == "Kcur-0")
    Rewriter.replace_value_with_new_type(k.result, fixed_tensor(k.result.type.get_shape(), frac_of(k.result) - 1))
    with pytest.raises(EpuTargetError, match="Qcur-0, Kcur-0, Vcur-0 read one value but have formats .* run epu-pack-projections first"):
        emit_epu(bad, smoothed_store(model, out), "m")
    nocache = parse_ir(text)
    fn = next(op for op in nocache.walk() if op.name == "func.func")
    del fn.attributes["fixed.ctx"]
    with pytest.raises(EpuTargetError, match="has no KV cache"):
        emit_epu(nocache, smoothed_store(model, out), "m")


def test_driver_refuses_bad_input(built):
    _, out = built
    exe = str((out / "build" / "model").resolve())
    weights = str((out / "cpp" / "weights.bin").resolve())
    r = subprocess.run([exe, weights, "3,99", "2", str(out / "build" / "x.bin")], capture_output=True, text=True)
    assert r.returncode == 2 and "bad prompt id list" in r.stderr
    r = subprocess.run([exe, str((out / "cpp" / "Makefile").resolve()), "3", "2", str(out / "build" / "x.bin")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not this model's weights.bin" in r.stderr
    r = subprocess.run([exe, weights, "1,2,3", "40", str(out / "build" / "x.bin")], capture_output=True, text=True)
    assert r.returncode == 2 and "exceed the KV cache of 32" in r.stderr


def test_the_printers_gaps_are_known():
    """Ops with no handler of their own: the prefill attention and standalone softmax and int4
    dequantization (the decode step has none), and the KV-cache parts, which only occur inside
    qwenMultiheadAttentionFx32RoPE (the match prints them)."""
    from strata.dialects.fixed import Fixed
    from strata.targets.epu.emit import EPU_EMITTER

    assert sorted(EPU_EMITTER.missing(Fixed)) == sorted(
        f"'fixed.{n}'" for n in ("softmax", "dequant_int4", "dequant_int8", "quant_int8", "attention", "kv_state",
                                 "cache_write"))
