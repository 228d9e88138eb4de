"""What a target is: a pass pipeline from the module level, a printer of its result, and a
loader that runs what was printed behind the runtime's program protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.errors import StrataError


@dataclass(frozen=True)
class Target:
    name: str
    #: knobs -> the pass pipeline that takes the module level to what `emit` prints.
    pipeline: Callable[[Mapping[str, Any]], str]
    #: (lowered module, model name, weights or None) -> the files of the output, by name.
    emit: Callable[[ModuleOp, str | None, Any], dict[str, str | bytes]]
    #: The knobs the pipeline reads, with their defaults.
    knobs: Mapping[str, Any]
    #: The names of the files `emit` writes.
    outputs: tuple[str, ...]
    #: (compiled output directory, weights, options) -> the program (the runtime protocol).
    load: Callable[..., Any]
    #: knobs -> the names of the files `emit` writes beyond `outputs` (the cpu target's native
    #: library, named by its content); None: none.
    extra_outputs: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None
    #: (model, output directory, knobs) -> (the directory, the stages rebuilt), for a target
    #: whose compile reads the weights and is staged; None: one stage of `outputs`.
    staged: Callable[..., tuple[Path, list[str]]] | None = None
    #: (model, knobs with defaults) -> the knobs checked (a one-line error naming a bad one).
    check: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
    #: output directory -> a line about it for the user after a compile (the EPU's cost estimate).
    summary: Callable[[Path], str] | None = None


class TargetError(StrataError):
    """An unknown target, or a target asked for something it does not do."""
