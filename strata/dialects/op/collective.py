"""Collectives: the ops by which the ranks of a tensor-parallel program exchange tensors.

A sharded entry is one SPMD function: every rank of its group runs the same ops, each on its
own piece of the weights (an `op.param` with a `split`), and the collectives combine what the
ranks computed. Each names its `group` (the process group it runs on: "tp") and `ranks`
(that group's size); the rank itself is the running process's place in the group, so one
function serves every rank (as MLIR's mesh dialect does).

A collective communicates: it reads and writes the group's buffers, so it declares memory
effects (read and write), and generic passes (`cse`, `dce`, reordering) keep every
collective, and keep them in program order, which every rank must share.

Numerics: `op.all_reduce` sums in rank order (0, 1, ...), so every rank gets the same value;
a real backend (gloo, NCCL) may sum in another order, within float rounding.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from strata.dialects.op.base import OpBase, UnaryOp, check_float, dim_eq, elem_of, fmt_shape, require, shape_of
from strata.dialects.op.matmul import check_mul_mat_id
from strata.ir.dtypes import AnyTensor, FloatTensor, IntTensor, WeightTensor, is_int

#: The process groups a collective may name.
GROUPS = ("tp",)


def group_attrs(ranks: int, group: str = "tp") -> dict[str, Attribute]:
    """The attributes every collective carries."""
    return {"group": StringAttr(group), "ranks": IntegerAttr(ranks, i64)}


class CollectiveOp(OpBase):
    """Base of the ops that exchange data between the ranks of `group` (of `ranks` ranks)."""

    group = attr_def(StringAttr)
    ranks = attr_def(IntegerAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    @property
    def group_size(self) -> int:
        return int(self.ranks.value.data)

    def verify_group(self) -> None:
        require(self.group.data in GROUPS, f"{self.name}: unknown group '{self.group.data}' (known: {', '.join(GROUPS)})")
        require(self.group_size >= 1, f"{self.name}: a group has at least one rank, got ranks = {self.group_size}")


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """ALL_REDUCE (sum): every rank gets the sum over the ranks of their `src`, same shape and
    type (after a row-parallel projection, whose ranks each hold a partial sum).

        %o = op.all_reduce %x {group = "tp", ranks = 2 : i64, name = "attn_out-0"} : tensor<5x64xf32> -> tensor<5x64xf32>
    """

    name = "op.all_reduce"
    src = operand_def(FloatTensor)
    result = result_def(FloatTensor)

    assembly_format = UnaryOp.assembly_format

    def verify_(self) -> None:
        self.verify_group()
        require(self.src.type == self.result.type, "op.all_reduce: the result type must be the operand's")


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """ALL_GATHER: every rank gets the ranks' `src` joined along `axis`, rank 0's first (the
    logits of a vocabulary-parallel lm_head: each rank's [S, Vocab/N] -> [S, Vocab]).

        %l = op.all_gather %x {group = "tp", ranks = 2 : i64, axis = 1 : i64} : tensor<1x24xf32> -> tensor<1x48xf32>
    """

    name = "op.all_gather"
    src = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    axis = attr_def(IntegerAttr)

    assembly_format = UnaryOp.assembly_format

    def verify_(self) -> None:
        self.verify_group()
        a, r = shape_of(self.src), shape_of(self.result)
        axis = int(self.axis.value.data)
        require(0 <= axis < len(a), f"op.all_gather: axis {axis} is not a dim of {fmt_shape(a)}")
        require(elem_of(self.src) == elem_of(self.result), "op.all_gather: the result's element type must be the operand's")
        want = tuple(d * self.group_size if i == axis and d >= 0 else d for i, d in enumerate(a))
        require(len(r) == len(a) and all(dim_eq(x, y) for x, y in zip(r, want)),
                f"op.all_gather: {self.group_size} ranks of {fmt_shape(a)} along axis {axis} give {fmt_shape(want)}, "
                f"got {fmt_shape(r)}")


@irdl_op_definition
class GetRowsShardedOp(CollectiveOp):
    """GET_ROWS from this rank's piece of a row-split table (a vocabulary-parallel embedding):
    rank r of the group holds rows r*R .. r*R + R-1 of the whole table, R being `table`'s rows;
    an id in that range gives its row, any other id a row of zeros. The ranks' results sum
    (by an `op.all_reduce`) to the whole table's GET_ROWS. It exchanges nothing itself, but
    its value depends on the rank, so it carries the group and its effects like a collective.

        %e = op.get_rows_sharded %w, %ids {group = "tp", ranks = 2 : i64} : tensor<24x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
    """

    name = "op.get_rows_sharded"
    table = operand_def(AnyTensor)
    ids = operand_def(IntTensor)
    result = result_def(FloatTensor)

    assembly_format = "$table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)"

    def verify_(self) -> None:
        self.verify_group()
        t, i, r = shape_of(self.table), shape_of(self.ids), shape_of(self.result)
        require(len(t) == 2 and len(i) == 1, f"op.get_rows_sharded: takes a table [R, C] and ids [N], got "
                                             f"{fmt_shape(t)} and {fmt_shape(i)}")
        require(is_int(elem_of(self.ids)), "op.get_rows_sharded: the ids must be integers")
        require(len(r) == 2 and dim_eq(r[0], i[0]) and dim_eq(r[1], t[1]),
                f"op.get_rows_sharded: result must be {fmt_shape((i[0], t[1]))}, got {fmt_shape(r)}")
        check_float(self, self.result, "the result")


@irdl_op_definition
class MulMatIdShardedOp(CollectiveOp):
    """MUL_MAT_ID over this rank's experts (expert parallelism: whole experts per rank): rank r
    of the group holds experts r*E .. r*E + E-1 of the whole set, E being `experts`' first dim;
    a slot routed to one of them gives its product, as MUL_MAT_ID does, a slot routed to another
    rank's expert gives zeros (and is not computed). The ranks' results, weighted and summed
    over the slots, sum (by an `op.all_reduce`) to the whole set's. The ids are the router's,
    over all the experts; like `op.get_rows_sharded` it exchanges nothing itself.

        %g = op.mul_mat_id_sharded %w, %x, %ids {group = "tp", ranks = 2 : i64} : tensor<4x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
    """

    name = "op.mul_mat_id_sharded"
    experts = operand_def(WeightTensor)
    b = operand_def(FloatTensor)
    ids = operand_def(IntTensor)
    result = result_def(FloatTensor)

    assembly_format = (
        "$experts `,` $b `,` $ids attr-dict `:` type($experts) `,` type($b) `,` type($ids) `->` type($result)"
    )

    def verify_(self) -> None:
        self.verify_group()
        check_mul_mat_id(self)


#: The ops whose value depends on the rank or on the other ranks.
COLLECTIVE_OPS = (AllReduceOp, AllGatherOp, GetRowsShardedOp, MulMatIdShardedOp)
