"""The ops that write memory: CPY and SET_ROWS (cache and recurrent-state writes)."""

from __future__ import annotations

from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryWriteEffect

from strata.dialects.op.base import BinaryOp, OpBase, dim_eq, fmt_shape, numel
from strata.ir.dtypes import AnyTensor, FloatTensor, IntTensor, is_int
from strata.ir.checks import elem_of, require, shape_of


@irdl_op_definition
class CpyOp(OpBase):
    """CPY: copy `lhs` into the storage of `rhs` (same element count), converting the
    element type; the result is the written tensor (a view of `rhs`). Writing into an
    `op.view` of an `op.state` updates the state (llama.cpp's recurrent-state write-back);
    an empty copy does nothing.

        %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<80xbf16> -> tensor<80xbf16>
    """

    name = "op.cpy"
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(MemoryWriteEffect())

    assembly_format = BinaryOp.assembly_format

    def verify_(self) -> None:
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        na, nb = numel(a), numel(b)
        require(na is None or nb is None or na == nb, f"op.cpy: element counts differ ({na} vs {nb})")
        require(self.result.type == self.rhs.type, "op.cpy: result type must be the destination's")


@irdl_op_definition
class SetRowsOp(OpBase):
    """SET_ROWS: write the rows of `src` [N, C] into `dst` [R, C] at `rows` [N]
    (the KV-cache write). `dst` is a state buffer; the result is the written buffer. A row
    given as -1 is not written (a padding or idle token of a batch keeps no K and V).

        %w = op.set_rows %cache, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xi64> -> tensor<256x64xf32>
    """

    name = "op.set_rows"
    dst = operand_def(AnyTensor)
    src = operand_def(FloatTensor)
    rows = operand_def(IntTensor)
    result = result_def(AnyTensor)
    traits = traits_def(MemoryWriteEffect())

    assembly_format = (
        "$dst `,` $src `,` $rows attr-dict `:` type($dst) `,` type($src) `,` type($rows) `->` type($result)"
    )

    def verify_(self) -> None:
        d, s, i = shape_of(self.dst), shape_of(self.src), shape_of(self.rows)
        require(len(d) == 2 and len(s) == 2, "op.set_rows: dst and src must have rank 2")
        require(dim_eq(d[1], s[1]), f"op.set_rows: row sizes differ ({fmt_shape(d)} vs {fmt_shape(s)})")
        require(len(i) == 1 and dim_eq(i[0], s[0]) and is_int(elem_of(self.rows)), "op.set_rows: rows must be an integer tensor with one id per src row")
        require(self.result.type == self.dst.type, "op.set_rows: result type must be dst's")
