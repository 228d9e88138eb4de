"""The CPU emitter's printers of the collectives (`strata.dialects.op.collective`).

A tensor-parallel module (entries with `op.ranks` > 1) carries the functions of `collectives.py`
(torch.distributed on the `Model`'s process group); each collective prints as a call of one.
"""

from __future__ import annotations

from pathlib import Path

from xdsl.ir import Operation

from strata.dialects import op as O
from strata.targets.cpu.emit import CPU_EMITTER, CpuEmitter, type_comment

#: The source of the collectives a tensor-parallel module carries, and their names.
COLLECTIVES = Path(__file__).with_name("collectives.py")
TP_FUNCTIONS = ("tp_rank", "all_reduce", "all_gather")


def tp_functions() -> list[str]:
    """The source of the functions a tensor-parallel module carries: the collectives and the
    weights' piece cutter (`strata.ir.split`), read as text (compiling imports no torch)."""
    from strata.ir import split
    from strata.targets.cpu.kernel_library import KernelLibrary

    collectives = KernelLibrary(COLLECTIVES.read_text())
    texts = [collectives.text(n) for n in collectives.closure(set(TP_FUNCTIONS))]
    return texts + [KernelLibrary(Path(split.__file__).read_text()).text("split_piece")]


def _call(e: CpuEmitter, op: Operation, fn: str, *args: str) -> None:
    """``<result> = fn(args)`` for a function that is not one of the kernels."""
    res = op.results[0]
    name = e.locals.fresh(e.labels.get(res, "v"))
    e.names[res] = name
    e.out.line(f"{name} = {fn}({', '.join(args)})  # {type_comment(res.type)}")


@CPU_EMITTER.register(O.AllReduceOp)
def _all_reduce(e: CpuEmitter, op: O.AllReduceOp) -> None:
    # In place when nothing reads the operand after the sum (a computed local, not a weight).
    inplace = e.last_use.get(op.src) is op and e._is_local(op.src) and not isinstance(op.src.owner, O.LEAF_OPS)
    _call(e, op, "all_reduce", e.ref(op.src), "self.group", str(inplace))


@CPU_EMITTER.register(O.AllGatherOp)
def _all_gather(e: CpuEmitter, op: O.AllGatherOp) -> None:
    _call(e, op, "all_gather", e.ref(op.src), str(int(op.axis.value.data)), "self.group", "RANKS")


@CPU_EMITTER.register(O.GetRowsShardedOp)
def _get_rows_sharded(e: CpuEmitter, op: O.GetRowsShardedOp) -> None:
    e.assign(op, "get_rows_sharded", e.ref(op.table), e.ref(op.ids), "self.rank")
