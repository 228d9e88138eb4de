"""The CPU emitter's printers of the tensor-parallel ops (strata/targets/cpu/emit_tp.py): a table
of their own that emit.py includes in CPU_EMITTER, so that no import fills a table by its side
effect."""

from __future__ import annotations

import subprocess
import sys

from strata.dialects import op as O
from strata.targets.cpu.emit import CPU_EMITTER
from strata.targets.cpu.emit_tp import TP_OPS, TP_PRINTERS


def _fresh(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_emitter_has_the_collectives_without_importing_emit_tp_by_hand():
    got = _fresh("from strata.dialects import op as O\n"
                 "from strata.targets.cpu.emit import CPU_EMITTER\n"
                 "print(all(CPU_EMITTER.get(c) is not None for c in "
                 "(O.AllReduceOp, O.AllGatherOp, O.GetRowsShardedOp, O.MulMatIdShardedOp)))")
    assert got == "True"


def test_emit_tp_fills_only_its_own_table():
    """No registration into the emitter's table from here: it is emit.py that includes this one."""
    import ast
    import inspect

    import strata.targets.cpu.emit_tp as tp

    names = {n.id for n in ast.walk(ast.parse(inspect.getsource(tp))) if isinstance(n, ast.Name)}
    assert "TP_PRINTERS" in names and "CPU_EMITTER" not in names


def test_every_tensor_parallel_op_is_printed_by_its_table():
    assert set(TP_PRINTERS.keys()) == set(TP_OPS)
    for op in TP_OPS:
        assert CPU_EMITTER.get(op) is TP_PRINTERS.get(op), op.name
    assert O.AllReduceOp in TP_OPS
