"""The `fixed` dialect's element type and the base of its ops.

`!fixed.fp32<frac>` (FixedPoint32 with `frac` fractional bits) and `FixedOp`, the base that
carries an op's ranges-file name and calibrated range, are shared by the compute ops
(`strata.dialects.fixed`) and the decode ops (`strata.dialects.fixed_kv`); the dialect itself
is assembled in `strata.dialects.fixed`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, FloatAttr, IntAttr, StringAttr, TensorType
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, opt_attr_def
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from strata.ir.checks import elem_of, require
from strata.ir.dtypes import DType, TensorOf, register_dtype

MAX_FRAC = 31


@irdl_attr_definition
class FixedPointType(ParametrizedAttribute, TypeAttribute):
    """FixedPoint32 with `frac` fractional bits: int32 X means X * 2^-frac.

        !fixed.fp32<27>      range [-16, 16 - 2^-27), resolution 2^-27
    """

    name = "fixed.fp32"
    frac_attr: IntAttr

    def __init__(self, frac: int):
        super().__init__(IntAttr(frac))

    @property
    def frac(self) -> int:
        return self.frac_attr.data

    def verify(self) -> None:
        if not 0 <= self.frac <= MAX_FRAC:
            raise VerifyException(f"fixed.fp32: frac must be in 0..{MAX_FRAC}, got {self.frac}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            frac = parser.parse_integer(allow_boolean=False, context_msg=" (the fractional bits)")
        return (IntAttr(frac),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.frac}>")


def _fixed_dtype(attr: Attribute) -> DType:
    assert isinstance(attr, FixedPointType)
    f = attr.frac
    return DType(f"fp32<{f}>", "fixed", 32, attr, np.dtype(np.int32), None, None,
                 {"cpp": f"FixedPoint32<{f}>", "cpu": "np.int32"})


register_dtype(lambda a: isinstance(a, FixedPointType), _fixed_dtype)

FixedTensor = TensorOf(("fixed",))


def fixed_tensor(shape: Sequence[int], frac: int) -> TensorType:
    return TensorType(FixedPointType(frac), list(shape))


def frac_of(value: SSAValue | Attribute) -> int:
    """The frac of a fixed tensor value or type."""
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    el = t.get_element_type()
    if not isinstance(el, FixedPointType):
        raise VerifyException(f"expected a fixed-point tensor, got {t}")
    return el.frac


class FixedOp(IRDLOperation):
    """Base of the compute ops: `node` names the op's tensor in a ranges file (what
    assign-frac-bits reads), `range` ([min, max], f64) is the calibrated range the pass set the
    result's format from; results are fixed tensors."""

    node = opt_attr_def(StringAttr)
    calibrated = opt_attr_def(ArrayAttr[FloatAttr], attr_name="range")

    def verify_(self) -> None:
        if self.calibrated is not None:
            require(len(self.calibrated.data) == 2, f"{self.name}: range is [min, max], got {len(self.calibrated.data)} numbers")
            lo, hi = (f.value.data for f in self.calibrated.data)
            require(lo <= hi, f"{self.name}: range [{lo}, {hi}] has min > max")
        for r in self.results:
            require(isinstance(elem_of(r), FixedPointType), f"{self.name}: the result must be a fixed-point tensor, got {r.type}")
        self.verify_op()

    def verify_op(self) -> None:
        """The op's own checks."""
