"""assign-frac-bits on synthetic ranges files: Chimera's FixedPoint32 rules exactly (matmul outputs
31 - ceil(log2 max|y|) - headroom, every other op headroom 0), the edge cases (max|y| = 0, exact
powers of two, ranges below 1, overflow), the range lookup, the table's layout, and the
interpreter following the new formats."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from xdsl.dialects import func

from strata.dialects import parse_ir
from strata.dialects.fixed import frac_of
from strata.passes.assign_frac_bits import FracBitsError, frac_bits, integer_bits, range_table
from strata.pipeline import PipelineError, run_pipeline
from strata.semantics.fixed_interp import run_fixed, to_fixed

F = "!fixed.fp32"

IR = f"""
func.func @f(%x: tensor<2x32x{F}<28>>, %w: tensor<32x{F}<30>>) -> tensor<2x32x{F}<20>> {{
  %b = fixed.param "w" {{part = "int4_b", block = 32 : i64}} : tensor<32x1x16xui8>
  %s = fixed.param "w" {{part = "int4_scales", block = 32 : i64}} : tensor<32x1x{F}<31>>
  %zp = fixed.param "w" {{part = "int4_zp", block = 32 : i64}} : tensor<32x1xui8>
  %n = fixed.rms_norm %x, %w {{eps = 1.0e-05 : f64, node = "norm-0"}} : tensor<2x32x{F}<28>>, tensor<32x{F}<30>> -> tensor<2x32x{F}<20>>
  %q = fixed.matmul_w4a16 %n, %b, %s, %zp {{wfrac = 31 : i64, node = "Qcur-0"}} : tensor<2x32x{F}<20>>, tensor<32x1x16xui8>, tensor<32x1x{F}<31>>, tensor<32x1xui8> -> tensor<2x32x{F}<20>>
  %g = fixed.sigmoid %q {{node = "sig"}} : tensor<2x32x{F}<20>> -> tensor<2x32x{F}<20>>
  %m = fixed.mul %g, %q {{node = "ffn_out-0"}} : tensor<2x32x{F}<20>>, tensor<2x32x{F}<20>> -> tensor<2x32x{F}<20>>
  %r = fixed.rescale %m : tensor<2x32x{F}<20>> -> tensor<2x32x{F}<20>>
  %y = fixed.add %x, %m {{node = "l_out-0"}} : tensor<2x32x{F}<28>>, tensor<2x32x{F}<20>> -> tensor<2x32x{F}<20>>
  func.return %y : tensor<2x32x{F}<20>>
}}
"""


def ranges_file(tmp_path, tensors: dict) -> str:
    p = tmp_path / "ranges.json"
    p.write_text(json.dumps({"format": "strata-ranges/v1", "tensors": tensors}))
    return str(p)


def row(lo, hi, name=None, op="op.x"):
    return {"op": op, "name": name, "min": lo, "max": hi}


def fracs(module) -> dict[str, int]:
    return {op.node.data: frac_of(op.results[0]) for op in module.walk()
            if getattr(op, "node", None) is not None}


def run(tmp_path, tensors, headroom=2):
    module = parse_ir(IR)
    run_pipeline(module, f'assign-frac-bits{{headroom={headroom} ranges="{ranges_file(tmp_path, tensors)}"}}')
    return module


SEED = {  # Chimera's rows: (range, frac) with the op kind its range table gives
    "norm-0": row(-18.9287, 28.7483),       # contrib.epu.rms_norm -> 26
    "Qcur-0": row(-11.0497, 9.87976),       # w4a16NBitsMatMul<25, 31> -> 25 (headroom 2)
    "sig": row(1.40071e-05, 0.999586),      # sigmoid -> 31
    "ffn_out-0": row(-40.6006, 27.927),     # (multiply: 31 - 6 = 25 by the rule)
    "l_out-0": row(-10.8817, 11.1882),      # (add: 31 - 4 = 27 by the rule)
}


def test_chimera_rules(tmp_path):
    m = run(tmp_path, SEED)
    assert fracs(m) == {"norm-0": 26, "Qcur-0": 25, "sig": 31, "ffn_out-0": 25, "l_out-0": 27}
    # Chimera's other matmul rows: <18, 31> [-1840.37, 87.8], <15, 28> [-54.17, 10572.1], lm_head <23, 31>
    assert frac_bits(-1840.37, 87.7969, 2) == 18
    assert frac_bits(-54.1731, 10572.1, 2) == 15
    assert frac_bits(-29.1443, 37.6655, 2) == 23
    assert frac_bits(-8.1875, 6.34375) == 27  # the embedding
    assert frac_bits(-10.6596, 11.3762) == 27  # a dequantize
    fn = next(o for o in m.walk() if isinstance(o, func.FuncOp))
    assert fn.function_type.outputs.data[0] == fn.body.block.last_op.operands[0].type
    assert frac_of(fn.function_type.outputs.data[0]) == 27
    assert fn.attributes["fixed.headroom"].value.data == 2


@pytest.mark.parametrize("headroom", [0, 1, 2, 3])
def test_headroom_only_on_matmul_outputs(tmp_path, headroom):
    f = fracs(run(tmp_path, SEED, headroom))
    assert f["Qcur-0"] == 27 - headroom
    assert (f["norm-0"], f["sig"], f["ffn_out-0"], f["l_out-0"]) == (26, 31, 25, 27)


@pytest.mark.parametrize("lo,hi,bits,frac0,frac2", [
    (0.0, 0.0, None, 31, 31),           # max|y| = 0: nothing to hold, the finest format
    (-8.0, 1.0, 3, 28, 26),             # exact power of two: 3 integer bits (8 saturates by 1 LSB)
    (0.0, 1.0, 0, 31, 29),              # [0, 1] -> 31, as Chimera's sigmoid rows
    (-8.000001, 0.0, 4, 27, 25),        # just above a power of two
    (-0.75, 0.5, 0, 31, 29),            # below 1: no integer bit
    (0.0, 2.0 ** -40, -40, 31, 31),     # far below 1: clamped at 31
    (-2.0 ** 29, 0.0, 29, 2, 0),        # the largest that fits headroom 2
    (-2.0 ** 31, 1.0, 31, 0, -2),       # fits only without headroom
])
def test_edge_cases(lo, hi, bits, frac0, frac2):
    if bits is not None:
        assert integer_bits(max(abs(lo), abs(hi))) == bits == math.ceil(math.log2(max(abs(lo), abs(hi))))
    assert frac_bits(lo, hi, 0) == frac0
    assert frac_bits(lo, hi, 2) == frac2


def test_overflow_is_an_error_naming_op_and_range(tmp_path):
    t = dict(SEED, **{"Qcur-0": row(-2.0 ** 29 - 1, 5.0)})
    with pytest.raises(FracBitsError, match=r"fixed.matmul_w4a16 'Qcur-0': range \[-5.36871e\+08, 5\] needs 30 integer bits \+ 2 headroom"):
        run(tmp_path, t)
    run(tmp_path, t, headroom=1)  # fits with one bit less headroom: frac 0
    t = dict(SEED, **{"l_out-0": row(-3e9, 0.0)})
    with pytest.raises(FracBitsError, match=r"fixed.add 'l_out-0'.*needs 32 integer bits \+ 0 headroom"):
        run(tmp_path, t)


def test_lookup_by_key_then_last_of_name(tmp_path):
    t = {k: v for k, v in SEED.items() if k != "Qcur-0"}
    t["Qcur-0_x"] = row(-100.0, 100.0, name="Qcur-0", op="op.mul_mat")
    t["Qcur-0_y"] = row(-3.0, 3.0, name="Qcur-0", op="op.rope")  # the name's last value
    assert fracs(run(tmp_path, t))["Qcur-0"] == 31 - 2 - 2
    t["Qcur-0"] = row(-100.0, 100.0)  # a key wins over names
    assert fracs(run(tmp_path, t))["Qcur-0"] == 31 - 7 - 2


def test_errors(tmp_path):
    t = {k: v for k, v in SEED.items() if k != "sig"}
    with pytest.raises(FracBitsError, match="has no range for tensor 'sig' \\(fixed.sigmoid\\)"):
        run(tmp_path, t)
    with pytest.raises(FracBitsError, match="not a finite"):
        run(tmp_path, dict(SEED, sig=row(-float("inf"), 0.0)))
    module = parse_ir(IR)
    with pytest.raises(FracBitsError, match="no such ranges file"):
        run_pipeline(module, f'assign-frac-bits{{ranges="{tmp_path}/none.json"}}')
    with pytest.raises(FracBitsError, match="needs ranges=FILE"):
        run_pipeline(module, "assign-frac-bits")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "strata-ranges/v1", "tensors": {"a": {"min": "x", "max": 1}}}')
    with pytest.raises(FracBitsError, match="tensors.a needs numbers"):
        run_pipeline(module, f'assign-frac-bits{{ranges="{bad}"}}')
    bad.write_text('{"tensors": {}}')
    with pytest.raises(FracBitsError, match="not a ranges file"):
        run_pipeline(module, f'assign-frac-bits{{ranges="{bad}"}}')
    with pytest.raises((FracBitsError, PipelineError), match="headroom"):
        run_pipeline(module, f'assign-frac-bits{{headroom=40 ranges="{ranges_file(tmp_path, SEED)}"}}')


def test_table_layout(tmp_path):
    m = run(tmp_path, SEED)
    # Chimera's cells ([-18.9287f, 28.7483f], C's %g then f; N/A for a second output); columns
    # as wide as their widest cell, two spaces apart
    assert range_table(m) == (
        "Source name  Op                  Output 0 Range             Output 0 Frac Bits  Output 1 Range  Output 1 Frac Bits\n"
        "-----------  ------------------  -------------------------  ------------------  --------------  ------------------\n"
        "norm-0       fixed.rms_norm      [-18.9287f, 28.7483f]      26                  N/A             N/A\n"
        "Qcur-0       fixed.matmul_w4a16  [-11.0497f, 9.87976f]      25                  N/A             N/A\n"
        "sig          fixed.sigmoid       [1.40071e-05f, 0.999586f]  31                  N/A             N/A\n"
        "ffn_out-0    fixed.mul           [-40.6006f, 27.927f]       25                  N/A             N/A\n"
        "l_out-0      fixed.add           [-10.8817f, 11.1882f]      27                  N/A             N/A\n")


def test_interpreter_follows_the_new_formats(tmp_path):
    m = run(tmp_path, SEED)
    fn = next(o for o in m.walk() if isinstance(o, func.FuncOp))
    rng = np.random.default_rng(1)
    x = to_fixed(rng.standard_normal((2, 32)), 28)
    w = to_fixed(np.ones(32), 30)
    (y,) = run_fixed(fn, {"w": rng.standard_normal((32, 32)).astype(np.float32) * 0.1}, [x, w])
    assert y.dtype == np.int64 and np.abs(y).max() < 2 ** 31
    # the result is read at the new frac (27), not the frac written before the pass (20)
    assert frac_of(fn.function_type.outputs.data[0]) == 27
