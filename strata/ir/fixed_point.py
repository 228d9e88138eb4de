"""The fixed-point level's element type, `!fixed.fp32<frac>`: FixedPoint32 with `frac`
fractional bits (int32 X means X * 2^-frac).

It lives with the element-type table (`strata.ir.dtypes`), which gives its entry (kind
`fixed`, stored as int32, spelled `FixedPoint32<frac>` in C++) as it gives every other type's;
the `fixed` dialect (`strata.dialects.fixed`) registers it with its ops.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

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
