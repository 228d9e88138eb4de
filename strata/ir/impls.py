"""Per-consumer registries: one implementation of an op (or a block kind) per consumer.

Each consumer of the IR (the CPU emitter, the trace exporter, the module interpreter, the
op-level expansion) owns one `Implementations` table next to its code, in the spirit of xDSL's
`@impl(Op)`; adding an op means its class plus one registered implementation per consumer,
and `missing(dialect)` lets a test find the gaps. The interpreters' semantics are xDSL's own
`@impl` methods; their tables (`op_interp.INTERPRETER`, ...) are built from those classes
(`strata.semantics.interpreter.implementations`).

    CPU_EMITTER = Implementations("cpu emitter")

    @CPU_EMITTER.register(O.AddOp, O.MulOp)
    def _binary(emitter, op): ...
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from xdsl.ir import Dialect

from strata.errors import StrataError

F = TypeVar("F")


class MissingImplementation(StrataError):
    """A consumer met an op or block kind it has no implementation for."""


class Implementations(Generic[F]):
    """Key (an op class, or a block kind's path) -> this consumer's implementation."""

    def __init__(self, consumer: str):
        self.consumer = consumer
        self._table: dict[Hashable, F] = {}

    def register(self, *keys: Hashable) -> Callable[[F], F]:
        def decorate(impl: F) -> F:
            for key in keys:
                if key in self._table:
                    raise ValueError(f"{self.consumer}: {_show(key)} is registered twice")
                self._table[key] = impl
            return impl

        return decorate

    def add(self, key: Hashable, impl: F) -> None:
        self.register(key)(impl)

    def include(self, other: Implementations[F]) -> None:
        """Add every implementation of `other` (a table of a part of this consumer, in a module of
        its own); a key both tables have is refused, as registering it twice is."""
        for key in other.keys():
            self.add(key, other._table[key])

    def get(self, key: Hashable) -> F | None:
        return self._table.get(key)

    def __getitem__(self, key: Hashable) -> F:
        impl = self._table.get(key)
        if impl is None:
            raise MissingImplementation(f"{self.consumer}: no implementation for {_show(key)}")
        return impl

    def __contains__(self, key: Hashable) -> bool:
        return key in self._table

    def keys(self) -> list[Hashable]:
        return list(self._table)

    def missing(self, dialect: Dialect | Iterable[Hashable]) -> list[str]:
        """The ops of `dialect` (or the given keys) that have no implementation here."""
        keys = dialect.operations if isinstance(dialect, Dialect) else dialect
        return [_show(k) for k in keys if k not in self._table]


def _show(key: Hashable) -> str:
    name = getattr(key, "name", None)
    return f"'{name}'" if isinstance(name, str) else repr(key)
