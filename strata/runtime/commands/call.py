"""`strata call`: a model's entries run on given inputs, as IREE's `iree-run-module --function
--input` runs a module's functions: a list of calls, in order, on one program state (the KV
cache and the recurrent state carry from call to call), the results saved in one .npz.

    [{"entry": "prefill_slots", "inputs": {"tokens": [[1, 2, 3], [4, 5, 0]], "slots": [0, 1], "lengths": [3, 2]}},
     {"entry": "decode_rows", "inputs": {"tokens": [[7], [8]], "positions": [3, 2]}}]

    results = call_model("models/tiny", "calls.json", "out.npz", knobs={"Batch": 2})
    results["call0"], results["call1"]          # an entry with several results: call<i>_<j>

The arguments are the module level's, by name, with the shapes of the entry's signature (the dims the
checkpoint does not bind set with `--set Batch=2`, ...). The program is compiled with the
entries the calls use (and prefill and decode). Every call is checked before the first runs:
an unknown entry, a missing, extra or mistyped argument and a wrong shape are one-line errors
naming the call and the argument; what only running can tell (a position past the context, a
block table pointing at pages that do not exist) stops at that call, before anything is written.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.files import check_output_path, write_output
from strata.errors import StrataError, say
from strata.ir.inputs import MiB, read_text
from strata.semantics.host_inputs import check_args

#: The largest calls file read (token inputs as JSON text: a long batch is a few MiB).
CALLS_LIMIT = 256 * MiB


class CallError(StrataError):
    """A calls file that cannot be read, or a call that cannot run."""


@dataclass(frozen=True)
class Call:
    entry: str
    inputs: dict[str, Any]


def read_calls(path: str | Path) -> list[Call]:
    """The calls of a JSON file: a non-empty list of {"entry": NAME, "inputs": {ARG: VALUE}}."""
    path = Path(path)
    text = read_text(path, "calls file", CALLS_LIMIT, CallError, missing=f"{path}: no such file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CallError(f"{path}: line {e.lineno} column {e.colno}: not JSON ({e.msg})") from None
    if not isinstance(data, list) or not data:
        raise CallError(f"{path}: expected a non-empty list of calls ({{\"entry\": ..., \"inputs\": {{...}}}})")
    calls = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise CallError(f"{path}: call {i}: expected an object with \"entry\" and \"inputs\"")
        extra = sorted(set(item) - {"entry", "inputs"})
        if extra:
            raise CallError(f"{path}: call {i}: unknown field {extra[0]!r} (a call has \"entry\" and \"inputs\")")
        entry, inputs = item.get("entry"), item.get("inputs", {})
        if not isinstance(entry, str) or not entry:
            raise CallError(f"{path}: call {i}: \"entry\" must name an entry")
        if not isinstance(inputs, dict):
            raise CallError(f"{path}: call {i} ({entry[:40]}): \"inputs\" must be an object of arguments by name")
        calls.append(Call(entry, inputs))
    return calls


def check_calls(calls: Sequence[Call], entries: Mapping[str, tuple], where: str = "calls") -> list[dict]:
    """Each call's inputs as arrays of its entry's argument types (one-line errors naming the call)."""
    from strata.passes.convert_module_to_op import ENTRIES

    out = []
    for i, c in enumerate(calls):
        if c.entry not in entries:
            known = ", ".join(sorted(entries)) or "none"
            why = "an entry this program was not compiled with" if c.entry in ENTRIES else "no entry of the module level"
            raise CallError(f"{where}: call {i}: unknown entry {c.entry[:40]!r}: {why} (it has: {known})")
        try:
            out.append(check_args(c.entry, entries[c.entry][0], c.inputs))
        except ValueError as e:
            raise CallError(f"{where}: call {i}: {e}") from None
    return out


def run_calls(program: Any, calls: Sequence[Call], inputs: Sequence[dict] | None = None,
              where: str = "calls") -> dict[str, np.ndarray]:
    """Run the calls in order on `program`'s state; their results as call<i> (one result) or
    call<i>_<j> (several)."""
    if not hasattr(program, "call") or not getattr(program, "entries", None):
        raise CallError(f"{where}: the {program.runtime} program runs only prefill and decode for the generation "
                        "loop, not entries by call (use --target cpu)")
    inputs = inputs if inputs is not None else check_calls(calls, program.entries, where)
    out: dict[str, np.ndarray] = {}
    for i, (c, args) in enumerate(zip(calls, inputs)):
        try:
            results = program.call(c.entry, **args)
        except ValueError as e:
            raise CallError(f"{where}: call {i}: {e}") from None
        if len(results) == 1:
            out[f"call{i}"] = np.asarray(results[0])
        else:
            out.update({f"call{i}_{j}": np.asarray(r) for j, r in enumerate(results)})
    return out


def npz_bytes(results: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **results)
    return buf.getvalue()


def entries_for(calls: Sequence[Call]) -> str:
    """The entries knob for a program that runs `calls`: the generation loop's and theirs."""
    from strata.passes.convert_module_to_op import ENTRIES

    used = {c.entry for c in calls}
    return ",".join(e for e in ENTRIES if e in used | {"prefill", "decode"})


def call_model(model_path: str | Path, calls_path: str | Path, out_path: str | Path, *, target_name: str = "cpu",
               knobs: Mapping[str, Any] | None = None, cache_dir: str | Path | None = None,
               interpret: bool = False, allow_nonfinite: bool = False) -> dict[str, np.ndarray]:
    """`strata call`: the calls of `calls_path` on `model_path` compiled for a target, their
    results written to `out_path` (.npz, atomically) once all have run."""
    from strata.passes.convert_module_to_op import ENTRIES
    from strata.runtime.opener import open_model, target_of

    check_output_path(out_path)  # before the work, not after it
    calls = read_calls(calls_path)
    for i, c in enumerate(calls):  # before a compile: the names need no program
        if c.entry not in ENTRIES:
            raise CallError(f"{calls_path}: call {i}: unknown entry {c.entry[:40]!r} (the module level's entries: "
                            f"{', '.join(ENTRIES)})")
    if not target_of(target_name).compiles_entries:
        from strata.targets import TARGETS

        takes = ", ".join(f"--target {n}" for n, made in TARGETS.items() if made().compiles_entries)
        raise CallError(f"strata call runs entries on {takes}; the {target_name} target's program runs "
                        "prefill and decode for the generation loop only")
    knobs = dict(knobs or {})
    if knobs.get("entries") is None:
        knobs["entries"] = entries_for(calls)
    opened = open_model(model_path, target_name, knobs, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite)
    # Never onto the model's files, the calls or the compiled program: checked before the compile.
    cache = opened.cache()
    check_output_path(out_path, {**opened.model.input_files(), calls_path: "the calls file",
                                 cache: f"the compiled model's directory {cache}"}, "-o")
    program = opened.program()
    try:
        results = run_calls(program, calls, where=str(calls_path))
    finally:
        program.close()
    write_output(out_path, npz_bytes(results))
    say(f"{len(calls)} call(s) run; {len(results)} result(s) written to {out_path}")
    return results
