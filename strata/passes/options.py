"""Pass options read from a pipeline string (`name{key=value ...}`), checked before xDSL sees
them, so that a bad one is a line naming the pass, the option and what it takes.

    class MyPass(StrataPass):   # a frozen dataclass; its fields are its options
        alpha: float = 0.5

xDSL converts option values by their field types and, for a mismatch, says `Incompatible
types: given (2,), expected <class 'float'>`. Here an integer where a number is expected is
that number (`alpha=2` is 2.0, which the pass then checks), and any other mismatch, an unknown
option or a missing value is a `PassOptionError` in the user's words. The values themselves
are checked by each pass, which every entry point (strata-opt -p, the drivers' pipelines,
the CLI's flags) reaches.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec

from strata.errors import StrataError


class PassOptionError(StrataError):
    """A pass option that is unknown or of the wrong kind."""


def _kind(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        return " or ".join(_kind(a) for a in typing.get_args(t) if a is not type(None))
    if origin is tuple:
        return f"a comma-separated list of {_kind(typing.get_args(t)[0]).removeprefix('a ').removeprefix('an ')}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a name or a quoted string"}.get(
        t, getattr(t, "__name__", str(t)))


def _scalar_ok(value: Any, t: Any) -> bool:
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t) if isinstance(t, type) else True


def _coerce(value: tuple, t: Any) -> tuple | None:
    """`value` (the option's parsed items) as `t` wants them, or None if it cannot be."""
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        for arm in typing.get_args(t):
            if arm is type(None):
                if not value:
                    return value
                continue
            got = _coerce(value, arm)
            if got is not None:
                return got
        return None
    if origin is tuple:
        item = typing.get_args(t)[0]
        if value and all(_scalar_ok(v, item) for v in value):
            return tuple(float(v) if item is float else v for v in value)
        return None
    if len(value) == 1 and _scalar_ok(value[0], t):
        return (float(value[0]),) if t is float else value
    return None


def _shown(value: tuple) -> str:
    text = ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


class StrataPass(ModulePass):
    """A pass whose options are checked with messages for the user (see the module docstring)."""

    def check(self) -> None:
        """Refuse option values the pass cannot run with (a one-line error). Called when the pass
        is built from a pipeline string, so that a pipeline is refused before any of it runs (and
        `--print-pipeline` prints none that would fail), and by `apply` for a pass built in Python."""

    @classmethod
    def from_spec(cls, spec: ArgSpec):  # type: ignore[override]
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "name"}
        given = spec.normalize_parameter_names().parameters
        coerced: dict[str, Any] = {}
        for key, value in given.items():
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise PassOptionError(f"{cls.name}: no option '{key}' (its options: {known})")
            got = _coerce(tuple(value), hints[key])
            if got is None:
                what = "no value" if not value else _shown(tuple(value))
                raise PassOptionError(f"{cls.name}: option {key} takes {_kind(hints[key])}, got {what}")
            coerced[key] = got
        configured = super().from_spec(ArgSpec(spec.name, coerced))
        configured.check()
        return configured
