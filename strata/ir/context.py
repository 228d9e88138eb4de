"""The xDSL context with every Strata dialect, and the registry of Strata passes."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.passes import ModulePass


def strata_context() -> Context:
    """A context that can parse every level of Strata IR."""
    from strata.dialects.module import Module
    from strata.dialects.op import Op

    ctx = Context()
    for dialect in (Builtin, Func, Arith, Module, Op):
        ctx.load_dialect(dialect)
    return ctx


def strata_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> pass class factory, for `strata-opt -p`."""

    def lower():
        from strata.passes.convert_module_to_op import ConvertModuleToOpPass

        return ConvertModuleToOpPass

    return {"convert-module-to-op": lower}
