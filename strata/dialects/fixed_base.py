"""The `fixed` dialect's element type and the base of its ops.

`!fixed.fp32<frac>` (FixedPoint32 with `frac` fractional bits, defined with the element-type
table in `strata.ir.fixed_point`) and `FixedOp`, the base that
carries an op's ranges-file name and calibrated range, are shared by the compute ops
(`strata.dialects.fixed`) and the decode ops (`strata.dialects.fixed_kv`); the dialect itself
is assembled in `strata.dialects.fixed`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, FloatAttr, StringAttr, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, opt_attr_def
from xdsl.utils.exceptions import VerifyException

from strata.ir.checks import elem_of, require
from strata.ir.dtypes import TensorOf
from strata.ir.fixed_point import MAX_FRAC, FixedPointType

__all__ = ["MAX_FRAC", "FixedPointType", "FixedTensor", "FixedOp", "fixed_tensor", "frac_of"]

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
