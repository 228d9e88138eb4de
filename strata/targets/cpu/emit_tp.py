"""The CPU target's printers of the tensor-parallel ops: each collective prints as a call of one
of the functions a tensor-parallel module carries (`collectives.py`, copied by
`emit_collectives.py`) on the `Model`'s process group; a rank-dependent op calls its kernel
with the Model's rank. They fill `TP_PRINTERS`, which `emit.py` includes in `CPU_EMITTER`.
"""

from __future__ import annotations

from xdsl.ir import Operation

from strata.dialects import op as O
from strata.ir.impls import Implementations
from strata.targets.cpu.printer import CpuEmitter, type_comment

#: The printers of the tensor-parallel ops, a table of their own: `emit.py` adds it to the CPU
#: emitter's (`CPU_EMITTER.include(TP_PRINTERS)`), so that importing this module changes nothing.
TP_PRINTERS: Implementations = Implementations("cpu emitter (tensor-parallel ops)")


def _call(e: CpuEmitter, op: Operation, fn: str, *args: str) -> None:
    """``<result> = fn(args)`` for a function that is not one of the kernels."""
    res = op.results[0]
    name = e.locals.fresh(e.labels.get(res, "v"))
    e.names[res] = name
    e.out.line(f"{name} = {fn}({', '.join(args)})  # {type_comment(res.type)}")


@TP_PRINTERS.register(O.AllReduceOp)
def _all_reduce(e: CpuEmitter, op: O.AllReduceOp) -> None:
    # In place when nothing reads the operand after the sum (a computed local, not a weight).
    inplace = e.last_use.get(op.src) is op and e._is_local(op.src) and not isinstance(op.src.owner, O.LEAF_OPS)
    _call(e, op, "all_reduce", e.ref(op.src), "self.group", str(inplace))


@TP_PRINTERS.register(O.AllGatherOp)
def _all_gather(e: CpuEmitter, op: O.AllGatherOp) -> None:
    _call(e, op, "all_gather", e.ref(op.src), str(int(op.axis.value.data)), "self.group", "RANKS")


@TP_PRINTERS.register(O.GetRowsShardedOp)
def _get_rows_sharded(e: CpuEmitter, op: O.GetRowsShardedOp) -> None:
    e.assign(op, "get_rows_sharded", e.ref(op.table), e.ref(op.ids), "self.rank")


@TP_PRINTERS.register(O.MulMatIdShardedOp)
def _mul_mat_id_sharded(e: CpuEmitter, op: O.MulMatIdShardedOp) -> None:
    e.assign(op, "mul_mat_id_sharded", e.ref(op.experts), e.ref(op.b), e.ref(op.ids), "self.rank")


#: The ops printed here.
TP_OPS = (O.AllReduceOp, O.AllGatherOp, O.GetRowsShardedOp, O.MulMatIdShardedOp)
