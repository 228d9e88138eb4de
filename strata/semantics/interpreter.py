"""The run loop of the op, blueprint and fixed interpreters: xDSL's `Interpreter`.

Each level's semantics is a `@register_impls` class of `@impl(Op)` methods, as xDSL writes its
own (`xdsl/interpreters/arith.py`); the class holds the run's environment (weights, state,
positions), and the loop that walks a function's body, binds each op's operands to their
values and its results to what its method returned is xDSL's:

    results = run_body(fn, [OpFunctions(env)], args=(), listeners=[Observer(observe)])

A listener sees each op right after it runs: `Observer` hands it and its results to a callback
(the levels' `observe=`); a level adds its own checks the same way (the op level checks each
result against its IR type). `implementations(...)` is the registry view of such classes that
`tests/test_registries.py` reads to find an op without semantics, and a level's run function
checks its input against it before running anything (`first_unimplemented`). A Strata error
an implementation raises comes out as raised (`strata.errors.one_line_errors`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Operation
from xdsl.traits import IsTerminator

from strata.errors import one_line_errors
from strata.ir.impls import Implementations


def implementations(consumer: str, *classes: type[InterpreterFunctions]) -> Implementations:
    """The ops that `classes` (each `@register_impls`) implement, as a registry of `consumer`."""
    table: Implementations = Implementations(consumer)
    for cls in classes:
        for op_type, run in cls._impls():  # pyright: ignore[reportPrivateUsage]  (the @impl methods)
            table.add(op_type, run)
    return table


def first_unimplemented(root: Operation, table: Implementations) -> Operation | None:
    """The first op nested in `root` (in program order) that `table` has no semantics for;
    `func.return`, which xDSL's own functions run, aside."""
    for op in root.walk():
        if op is not root and type(op) not in table and not isinstance(op, func.ReturnOp):
            return op
    return None


class Observer(Interpreter.Listener):
    """Calls `callback(op, results)` after each op runs, terminators and `skip` aside."""

    def __init__(self, callback: Callable[[Operation, PythonValues], Any], skip: tuple[type[Operation], ...] = ()):
        self.callback, self.skip = callback, skip

    def did_interpret_op(self, op: Operation, results: PythonValues) -> None:
        if not isinstance(op, self.skip) and not op.has_trait(IsTerminator):
            self.callback(op, results)


def interpreter_for(op: Operation, functions: Iterable[InterpreterFunctions],
                    listeners: Sequence[Interpreter.Listener] = ()) -> Interpreter:
    """xDSL's interpreter with `functions` and `func.return`'s, for the IR around `op`."""
    top = op.get_toplevel_object()
    interpreter = Interpreter(top if isinstance(top, ModuleOp) else ModuleOp([]), listeners=tuple(listeners))
    interpreter.register_implementations(FuncFunctions())
    for f in functions:
        interpreter.register_implementations(f)
    return interpreter


def run_body(fn: func.FuncOp, functions: Iterable[InterpreterFunctions], args: Sequence[Any] = (),
             listeners: Sequence[Interpreter.Listener] = ()) -> PythonValues:
    """Run `fn`'s body on `args` (its block arguments' values); returns what its `func.return` returns."""
    with one_line_errors():
        return interpreter_for(fn, functions, listeners).run_ssacfg_region(fn.body, tuple(args), fn.sym_name.data)
