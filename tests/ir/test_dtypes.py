"""The one dtype table (strata/ir/dtypes.py): every element type with its numpy type,
safetensors code, HF name and target spellings; the `TensorOf` constraint built on its kinds;
the fixed-point type, in the table without any other module imported; quantized weights in
op-level IR."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float32Type,
    IntAttr,
    IntegerType,
    Signedness,
    TensorType,
    f32,
    i1,
    i32,
)
from xdsl.ir import ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.irdl.constraints import VerificationContext
from xdsl.utils.exceptions import VerifyException

from strata.dialects import op as O
from strata.dialects import parse_ir
from strata.errors import StrataError
from strata.ir import dtypes as D

NAMES = D.names()
TABLE = [D.dtype_named(n) for n in NAMES]

NUMPY = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "ui8": np.uint8,
    "i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4,
}


def test_the_table_holds_what_the_levels_need():
    assert NAMES == list(NUMPY)  # every entry is checked below, and nothing is missing
    assert D.names("packed") == ["i4", "ui4"]
    assert set(D.names("float")) == {"f64", "f32", "f16", "bf16", "f8E4M3FN", "f8E5M2"}
    assert sorted(D.names("float") + D.names("int") + D.names("packed")) == sorted(NAMES)


# ---------------------------------------------------------------------------------------------
# Each entry


@pytest.mark.parametrize("name", NAMES)
def test_entry_round_trips(name):
    d = D.dtype_named(name)
    assert d.name == name and d.kind in D.KINDS
    assert D.dtype_of(d.attr) is d and D.lookup(d.attr) is d
    assert D.dtype_named(name).attr == d.attr
    # the attribute's printed IR type parses back to the same attribute, and to the same entry
    text = f"func.func @f() -> tensor<2x{d.attr}> {{\n  %w = op.param \"w\" : tensor<2x{d.attr}>\n" \
           f"  func.return %w : tensor<2x{d.attr}>\n}}\n"
    param = next(op for op in parse_ir(text).walk() if isinstance(op, O.ParamOp))
    assert D.dtype_of(param.result.type.get_element_type()) is d


@pytest.mark.parametrize("name", NAMES)
def test_numpy_type(name):
    d = D.dtype_named(name)
    assert d.numpy == np.dtype(NUMPY[name])
    assert D.numpy_dtype(d.attr) == d.numpy
    assert D.dtype_of_numpy(d.numpy) is d
    if d.numpy.itemsize > 1:  # a big-endian array (as numpy may hand one) is the same type
        assert D.dtype_of_numpy(d.numpy.newbyteorder(">")) is d
    if d.kind == "packed":
        assert d.bits == 4 and d.itemsize == 1  # two per byte in storage, one per numpy item
    else:
        assert d.bits == 8 * d.itemsize
    assert d.storage_bits == d.bits


@pytest.mark.parametrize("name", NAMES)
def test_cpu_spelling_names_the_numpy_type(name):
    """The CPU target writes `np.float32` / `ml_dtypes.bfloat16`: resolved without eval."""
    d = D.dtype_named(name)
    module, _, attr = d.spelling("cpu").partition(".")
    assert np.dtype(getattr({"np": np, "ml_dtypes": ml_dtypes}[module], attr)) == d.numpy


def test_safetensors_codes_and_hf_names_are_unique_and_found():
    codes = [d.safetensors for d in TABLE if d.safetensors is not None]
    assert len(codes) == len(set(codes))
    assert {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I64"} <= set(codes)
    for d in TABLE:
        if d.safetensors is not None:
            assert D.dtype_of_safetensors(d.safetensors) is d
    hf = [d.hf for d in TABLE if d.hf is not None]
    assert len(hf) == len(set(hf))
    assert {D.dtype_of_hf(n).name for n in ("float32", "float16", "bfloat16")} == {"f32", "f16", "bf16"}
    assert D.dtype_of_safetensors("F4") is None and D.dtype_of_hf("complex64") is None
    assert len({d.numpy for d in TABLE}) == len(TABLE)
    assert len({d.attr for d in TABLE}) == len(TABLE)


def test_unknown_types_are_errors():
    assert D.lookup(i1) is None
    with pytest.raises(D.DTypeError, match="element type i1 is not supported"):
        D.dtype_of(i1)
    with pytest.raises(D.DTypeError, match=r"unknown element type 'f128' \(known: f64, f32"):
        D.dtype_named("f128")
    with pytest.raises(D.DTypeError, match="i4 has no spelling in the cuda target"):
        D.dtype_named("i4").spelling("cuda")
    assert issubclass(D.DTypeError, StrataError)


def test_kind_predicates():
    assert D.is_float(BFloat16Type()) and D.is_float(Float8E4M3FNType()) and not D.is_float(i32)
    assert D.is_int(i32) and D.is_int(i32, 32) and not D.is_int(i32, 64) and not D.is_int(f32)
    assert not D.is_int(IntegerType(4))  # packed, not int
    assert D.has_kind(IntegerType(4), "packed") and D.has_kind(IntegerType(4, Signedness.UNSIGNED), "packed")
    assert not D.has_kind(i1, *D.KINDS)


@pytest.mark.parametrize("name", NAMES)
def test_module_level_notation_takes_every_element_type(name):
    """One table: what the op level can hold, the module level can declare (`Tensor[H; T]`)."""
    from strata.ir.shapes import parse_tensor_type

    assert parse_tensor_type(f"Tensor[H, 8; {name}]", known=["H"]).dtype == name


@pytest.mark.parametrize("name", NAMES)
def test_the_ir_spelling_is_a_name(name):
    """The docstring: `name` is the IR spelling (what the op level prints)."""
    d = D.dtype_named(name)
    assert D.dtype_named(str(d.attr)) is d


# ---------------------------------------------------------------------------------------------
# TensorOf


def _ok(constraint, attr) -> bool:
    try:
        constraint.verify(attr, VerificationContext())
    except VerifyException:
        return False
    return True


@pytest.mark.parametrize("constraint, accepts, rejects", [
    (D.FloatTensor, ["f32", "bf16", "f8E4M3FN", "f64"], ["i32", "i4", "ui8"]),
    (D.IntTensor, ["i32", "i64", "i8", "ui8"], ["f32", "i4", "bf16"]),
    (D.WeightTensor, ["f32", "bf16", "f8E5M2", "i8", "i4", "ui4"], []),
    (D.AnyTensor, NAMES, []),
])
def test_tensor_of(constraint, accepts, rejects):
    for name in accepts:
        for shape in ([4, 8], [], [-1, 3]):
            assert _ok(constraint, TensorType(D.dtype_named(name).attr, shape)), (name, shape)
    for name in rejects:
        assert not _ok(constraint, TensorType(D.dtype_named(name).attr, [4, 8])), name
    assert not _ok(constraint, TensorType(i1, [4]))  # not in the table
    assert not _ok(constraint, Float32Type())  # not a tensor
    assert constraint.get_bases() == {TensorType}
    assert constraint.verifies(TensorType(D.dtype_named(accepts[0]).attr, [2]))


def test_tensor_of_message_names_the_kinds():
    with pytest.raises(VerifyException, match=r"expected a tensor of float elements, got tensor<4xi32>"):
        D.FloatTensor.verify(TensorType(i32, [4]), VerificationContext())
    with pytest.raises(VerifyException, match="expected a tensor, got f32"):
        D.IntTensor.verify(f32, VerificationContext())


# ---------------------------------------------------------------------------------------------
# The fixed-point type: in the table without any other module imported

#: Run in a fresh interpreter: the table alone, before any dialect is imported.
TABLE_ALONE = """
import sys
from strata.ir.dtypes import dtype_of, has_kind, names
from strata.ir.fixed_point import FixedPointType
loaded = sorted(m for m in sys.modules if m.startswith("strata.") and not m.startswith(("strata.ir", "strata.errors")))
d = dtype_of(FixedPointType(27))
print(loaded, d.name, d.kind, d.numpy, d.spelling("cpp"), has_kind(FixedPointType(0), "fixed"), len(names()))
"""


def test_the_table_is_complete_by_itself():
    """No module above the table adds to it: importing strata.ir.dtypes alone gives every element
    type, the fixed-point level's included, with no dialect loaded."""
    r = subprocess.run([sys.executable, "-c", TABLE_ALONE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[]", "fp32<27>", "fixed", "int32", "FixedPoint32<27>", "True",
                                str(len(D.names()))]


@irdl_attr_definition
class _Unknown(ParametrizedAttribute, TypeAttribute):
    """A parametric type that is not in the table."""

    name = "test.unknown32"
    frac: IntAttr


def test_a_type_outside_the_table_is_refused():
    assert D.lookup(_Unknown(IntAttr(12))) is None
    with pytest.raises(D.DTypeError, match="is not supported"):
        D.dtype_of(_Unknown(IntAttr(12)))


# ---------------------------------------------------------------------------------------------
# Quantized weights in op-level IR


MUL_MAT_IR = """\
func.func @f() -> tensor<5x64xf32> {
  %w = op.param "blk.0.attn_q.weight" : tensor<64x16xELEM>
  %x = op.param "x" : tensor<5x16xf32>
  %y = op.mul_mat %w, %x {name = "Qcur-0"} : tensor<64x16xELEM>, tensor<5x16xf32> -> tensor<5x64xf32>
  func.return %y : tensor<5x64xf32>
}
"""


@pytest.mark.parametrize("elem", ["f8E4M3FN", "f8E5M2", "i4", "ui4", "i8", "bf16"])
def test_quantized_weight_feeds_mul_mat(elem):
    module = parse_ir(MUL_MAT_IR.replace("ELEM", elem))
    module.verify()
    mm = next(op for op in module.walk() if isinstance(op, O.MulMatOp))
    assert str(mm.lhs.type) == f"tensor<64x16x{elem}>"
    assert D.dtype_of(mm.lhs.type.get_element_type()).kind in ("float", "int", "packed")
    # and it prints back to the same text
    from strata.ir.text import print_ir

    assert parse_ir(print_ir(module)).is_structurally_equivalent(module)


@pytest.mark.parametrize("bad, message", [
    # a quantized activation is not allowed: rhs must be float
    (MUL_MAT_IR.replace("ELEM", "f32").replace("tensor<5x16xf32>", "tensor<5x16xi4>"), "rhs must be a float tensor"),
    # an element type outside the table is not a weight
    (MUL_MAT_IR.replace("ELEM", "i1"), "float or int or packed"),
])
def test_bad_element_types_are_rejected(bad, message):
    with pytest.raises(StrataError, match=message):
        parse_ir(bad)
