"""The fixed dialect: !fixed.fp32<frac> in the dtype table (strata.ir.dtypes), its
parameters, the tensor helpers, and the dialect's registration in strata_dialects()."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import TensorType, f32
from xdsl.utils.exceptions import VerifyException

from strata.dialects import parse_ir, strata_dialects
from strata.dialects.fixed import OPS, Fixed, FixedPointType, MatmulOp, MatmulW4A16Op, fixed_tensor, frac_of
from strata.ir.dtypes import dtype_of, has_kind, lookup


def test_registered_in_strata_dialects():
    assert Fixed in strata_dialects()
    assert {op.name for op in OPS} == {op.name for op in Fixed.operations}
    assert len(OPS) == 20  # 16, and the decode ops of strata/dialects/fixed_kv.py


@pytest.mark.parametrize("frac", [0, 23, 31])
def test_dtype_table_entry(frac):
    t = FixedPointType(frac)
    d = dtype_of(t)
    assert (d.name, d.kind, d.bits, d.numpy) == (f"fp32<{frac}>", "fixed", 32, np.dtype(np.int32))
    assert d.spelling("cpp") == f"FixedPoint32<{frac}>"
    assert has_kind(t, "fixed") and not has_kind(t, "int", "float")
    assert lookup(FixedPointType(frac)) == d


def test_frac_range_and_helpers():
    with pytest.raises(VerifyException, match="frac must be in 0..31, got 32"):
        FixedPointType(32).verify()
    t = fixed_tensor([5, 32], 27)
    assert isinstance(t, TensorType) and frac_of(t) == 27
    with pytest.raises(VerifyException, match="expected a fixed-point tensor"):
        frac_of(TensorType(f32, [2]))


def test_parse_print_round_trip():
    text = ('func.func @f(%a: tensor<2x8x!fixed.fp32<24>>) -> tensor<2x8x!fixed.fp32<31>> {\n'
            '  %y = fixed.softmax %a {node = "p"} : tensor<2x8x!fixed.fp32<24>> -> tensor<2x8x!fixed.fp32<31>>\n'
            '  func.return %y : tensor<2x8x!fixed.fp32<31>>\n}')
    m = parse_ir(text)
    assert str(parse_ir(str(m))) == str(m)
    assert "!fixed.fp32<31>" in str(m)


def test_headroom_ops():
    from strata.dialects.fixed import MATMUL_OPS

    assert MATMUL_OPS == (MatmulW4A16Op, MatmulOp)
