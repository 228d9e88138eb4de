"""What a target is: a pass pipeline from the module level, a printer of its result, a loader
that runs what was printed behind the runtime's program protocol, and what it can do.

The runtime asks a target's capabilities (`compiles_entries`, `greedy_only`, `ranks`,
`prepare`, `interprets`, `opens`) and never its name: a new target says what it does here and
every command follows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.errors import StrataError


#: The cells of one page of a paged KV cache unless asked otherwise: the server's pages
#: (`strata serve`, `--set PageSize=N`) and the cuda target's paged cache (`kv=paged`; its
#: runtime imports nothing from strata and holds the same number, which a test pins). The
#: module level's own generic default (`PageSize: Dim = 64`, the entry table's) applies only
#: where a paged entry is compiled with no PageSize given (`strata call`).
KV_PAGE_SIZE = 16


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

    # -- what it can do (asked by the runtime instead of its name) --------------------------------

    #: Whether it compiles any entry of the entry table (run by `strata call`, `step_paged` for
    #: the scheduler, the batched entries of bench and perplexity); False: only the generation
    #: loop's prefill and decode.
    compiles_entries: bool = False
    #: None: its programs draw sampled tokens; else the one-line reason it refuses sampling
    #: parameters (it decodes greedily).
    greedy_only: str | None = None
    #: The torch.distributed backend its tensor-parallel ranks meet on (a `tp` knob); None: it
    #: takes no ranks. Under its interpreter (`interprets`, `--interpret`) the ranks meet on gloo
    #: instead (`strata.runtime.tp.backend_of`).
    ranks: str | None = None
    #: (interpret) -> None: what the process needs before anything of the target is imported
    #: (Triton's interpreter set up, a GPU checked); None: nothing.
    prepare: Callable[[bool], None] | None = None
    #: Whether it runs its kernels in an interpreter on the CPU when asked (`--interpret`): its
    #: `load` then takes `interpret=True`, and its cache is a variant of its own.
    interprets: bool = False
    #: Whether its `load` prepares the weights (converted, copied to a device), worth a line of timing.
    prepares_weights: bool = False
    #: The architectures it compiles every kernel for ahead of time (`--aot`).
    aot_archs: tuple[str, ...] = ()
    #: (model, weights, knobs, prompt_len, decode) -> the program, for a target that exports
    #: and opens the model itself at each run instead of compiling into a cache (onnxruntime);
    #: None: compiled by `pipeline` and `emit`, then `load`ed.
    opens: Callable[..., Any] | None = None


class TargetError(StrataError):
    """An unknown target, or a target asked for something it does not do."""
