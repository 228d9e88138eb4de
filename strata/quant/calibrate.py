"""Calibration: run the op level on prompts and record the ranges that
SmoothQuant and the fixed-point formats are chosen from.

    prompts = read_prompts("prompts.txt", vocab)     # or random_prompts(8, 16, vocab, seed=0)
    ranges = calibrate(load_model("models/tiny"), prompts)
    Path("ranges.json").write_bytes(ranges_bytes(ranges))

Each prompt is prefilled on its own (a fresh KV cache, positions from 0) through the f32 op
level (`strata.semantics.op_interp.run_function` with `observe=`). Recorded, folded over all
prompts (max of maxima, min of minima):

- `linears`: for every `op.mul_mat` whose weight is an `op.param`, keyed by the weight's
  llama.cpp name: `absmax`, the per-input-channel max |x| over every row of its input (K
  floats: SmoothQuant's max|X_j|), and `rows`, how many rows were seen;
- `tensors`: for every float op result but params and state buffers (a cache's contents are
  its `op.set_rows` results), keyed by its name in the op level's printed IR
  (`Qcur-0_2`, `ffn_out-1`, `%42` as `42`), in program order: `op`, the llama.cpp `name` when
  the op has one, `min`, `max`.

The file (`strata-ranges/v1`, JSON) also names the model, its config's sha256 and the prompts
(count, lengths, sha256 of their token ids). Same model and prompts give the same bytes.

A prompts file holds one prompt per line: token ids separated by commas or spaces; blank lines
and lines starting with `#` are skipped.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.printer import Printer

from strata.dialects import op as O
from strata.errors import StrataError
from strata.passes.pipelines import entry_pipeline, lowered

FORMAT = "strata-ranges/v1"
#: The most prompts one calibration runs (each is a prefill through the interpreter), and the
#: largest prompts file read.
MAX_PROMPTS = 1 << 16
PROMPTS_LIMIT = 64 << 20


class CalibrationError(StrataError):
    """Prompts or a ranges file that cannot be used."""


# ---------------------------------------------------------------------------------------------
# Prompts


def check_sizes(count: int, length: int, context: int, names: tuple[str, str] = ("--random", "--length")) -> None:
    """The one check of a calibration's random prompts, whoever asks (`strata calibrate --random N
    --length L`, the EPU target's knobs calib_prompts and calib_len: `names`): 1 to MAX_PROMPTS
    prompts, each 1 to the model's context long."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PROMPTS:
        raise CalibrationError(f"{names[0]} must be 1 to {MAX_PROMPTS} prompts, got {count!r}")
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= context:
        raise CalibrationError(f"{names[1]} must be 1 to {context} tokens (the model's context), got {length!r}")


def read_prompts(path: str | Path, vocab: int, context: int | None = None) -> list[list[int]]:
    """The prompts of a prompts file (one per line, token ids, each at most `context` long);
    errors name the file and line."""
    from strata.ir.inputs import text_lines

    p = Path(path)
    prompts = []
    for number, line in text_lines(p, "prompts file", PROMPTS_LIMIT, CalibrationError):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(prompts) == MAX_PROMPTS:
            raise CalibrationError(f"{p}:{number}: more than {MAX_PROMPTS} prompts, the most one calibration runs")
        ids = []
        for item in line.replace(",", " ").split():
            try:
                ids.append(int(item))
            except ValueError:
                raise CalibrationError(f"{p}:{number}: '{item[:40]}' is not a token id") from None
            if not 0 <= ids[-1] < vocab:
                raise CalibrationError(f"{p}:{number}: token id {ids[-1]} is outside the vocabulary [0, {vocab})")
        if context is not None and len(ids) > context:
            raise CalibrationError(f"{p}:{number}: the prompt has {len(ids)} tokens, more than the model's context "
                                   f"of {context}")
        prompts.append(ids)
    if not prompts:
        raise CalibrationError(f"{p}: no prompts (one line of token ids per prompt)")
    return prompts


def random_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts of `length` token ids drawn uniformly (numpy's PCG64 at `seed`)."""
    if count < 1 or length < 1:
        raise CalibrationError(f"random prompts need a count and a length >= 1, got {count} and {length}")
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, vocab, length)] for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Calibration


def value_names(fn) -> dict:
    """SSA value -> its name in the printed IR (what `strata ir --level op` shows, without %)."""
    printer = Printer(stream=io.StringIO())
    printer.print_op(fn)
    return dict(printer._ssa_values)  # noqa: SLF001 - the printer's own naming, not re-derived


def _linear_of(use) -> str | None:
    """The weight name when `use` is the activation operand of a mul_mat reading a param."""
    op = use.operation
    if isinstance(op, O.MulMatOp) and use.index == 1 and isinstance(op.operands[0].owner, O.ParamOp):
        return op.operands[0].owner.tensor_name.data
    return None


class _Recorder:
    def __init__(self, fn) -> None:
        self.names = value_names(fn)
        self.linears: dict[str, dict[str, Any]] = {}
        self.tensors: dict[str, dict[str, Any]] = {}

    def __call__(self, op, result: np.ndarray) -> None:
        value = op.results[0]
        if result.dtype.kind != "f" or result.size == 0:
            return
        key = self.names.get(value)
        if key is not None and not isinstance(op, (O.ParamOp, O.StateOp)):
            lo, hi = float(result.min()), float(result.max())
            row = self.tensors.get(key)
            if row is None:
                name = op.attributes.get("name")
                self.tensors[key] = {"op": op.name, "name": name.data if name is not None else None,
                                     "min": lo, "max": hi}
            else:
                row["min"], row["max"] = min(row["min"], lo), max(row["max"], hi)
        for weight in sorted({w for w in map(_linear_of, value.uses) if w is not None}):
            x = np.abs(result.reshape(-1, result.shape[-1]).astype(np.float32))
            amax = x.max(axis=0)
            row = self.linears.get(weight)
            if row is None:
                self.linears[weight] = {"absmax": amax, "rows": int(x.shape[0])}
            else:
                row["absmax"] = np.maximum(row["absmax"], amax)
                row["rows"] += int(x.shape[0])


def calibrate(model: Any, prompts: Sequence[Sequence[int]], weights=None,
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The ranges of `model` over `prompts` (see the module docstring)."""
    from strata.semantics.op_interp import alloc_state, find_function, run_function

    if not prompts:
        raise CalibrationError("calibration needs at least one prompt")
    if len(prompts) > MAX_PROMPTS:
        raise CalibrationError(f"{len(prompts)} prompts: one calibration runs at most {MAX_PROMPTS}")
    vocab, context = int(model.config.vocab_size), int(model.config.max_position_embeddings)
    for i, p in enumerate(prompts):
        if not len(p):
            raise CalibrationError(f"prompt {i} is empty")
        if len(p) > context:
            raise CalibrationError(f"prompt {i} has {len(p)} tokens, more than the model's context of {context}")
        bad = [t for t in p if not 0 <= int(t) < vocab]
        if bad:
            raise CalibrationError(f"prompt {i}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    store = weights if weights is not None else model.open_weights(quiet=True)
    fns: dict[int, Any] = {}
    recorders: dict[int, _Recorder] = {}
    linears: dict[str, dict[str, Any]] = {}
    tensors: dict[str, dict[str, Any]] = {}
    for i, prompt in enumerate(prompts):
        n = len(prompt)
        if n not in fns:
            fns[n] = find_function(lowered(model.module, entry_pipeline("prefill", tokens=n, start=0, ctx=n, kv_pad=1)))
            recorders[n] = _Recorder(fns[n])
        fn = fns[n]
        run_function(fn, store, alloc_state(fn), np.asarray(prompt, np.int32), 0, observe=recorders[n])
        if progress is not None:
            progress(i + 1, len(prompts))
    # Fold the recorders of the prompt lengths, in the order the lengths first came.
    for rec in recorders.values():
        for k, row in rec.linears.items():
            have = linears.get(k)
            if have is None:
                linears[k] = {"absmax": row["absmax"].copy(), "rows": row["rows"]}
            else:
                have["absmax"] = np.maximum(have["absmax"], row["absmax"])
                have["rows"] += row["rows"]
        for k, row in rec.tensors.items():
            have = tensors.get(k)
            if have is None:
                tensors[k] = dict(row)
            else:
                have["min"], have["max"] = min(have["min"], row["min"]), max(have["max"], row["max"])
    ids = json.dumps([list(map(int, p)) for p in prompts], separators=(",", ":")).encode()
    return {
        "format": FORMAT,
        "model": model.name,
        "config_sha256": config_sha256(model),
        "prompts": {"count": len(prompts), "lengths": [len(p) for p in prompts],
                    "sha256": hashlib.sha256(ids).hexdigest()},
        "linears": {k: {"rows": v["rows"], "absmax": [float(x) for x in v["absmax"]]} for k, v in linears.items()},
        "tensors": tensors,
    }


def config_sha256(model: Any) -> str | None:
    """What a ranges file records of the model it was calibrated on: its config.json's sha256 (a
    GGUF's: of its metadata and tensor infos); None for a model with neither."""
    fingerprint = model.config_fingerprint() if hasattr(model, "config_fingerprint") else {}
    digest = fingerprint.get("sha256") or fingerprint.get("header_sha256")
    if digest is None and (model.root / "config.json").is_file():
        digest = hashlib.sha256((model.root / "config.json").read_bytes()).hexdigest()
    return digest


def check_ranges_model(ranges: dict[str, Any], model: Any, path: str | Path) -> None:
    """Refuse ranges calibrated on another model (their config_sha256 is not this model's): the
    one check, for every command that reads ranges with a model at hand."""
    recorded, own = ranges.get("config_sha256"), config_sha256(model)
    if recorded is not None and own is not None and recorded != own:
        named = ranges.get("model")
        which = f"model {str(named)[:60]!r}" if isinstance(named, str) and named != model.name else "another config"
        raise CalibrationError(f"{path}: these ranges were calibrated on {which} (config_sha256 {str(recorded)[:12]}...), "
                               f"not on {model.source} ({own[:12]}...); calibrate this model with strata calibrate")


def ranges_bytes(ranges: dict[str, Any]) -> bytes:
    return (json.dumps(ranges, indent=1) + "\n").encode()


def calibrate_to(model: Any, output: str | Path, prompts_file: str | Path | None = None, count: int | None = None,
                 length: int = 16, seed: int = 0) -> str:
    """`strata calibrate`: the ranges over the prompts of `prompts_file` (or `count` random ones,
    8 by default, of `length` tokens) written to `output`; returns a one-line summary."""
    from strata.artifacts.files import check_output_path, write_output
    from strata.errors import counter

    inputs = {**model.input_files(), **({prompts_file: "the prompts file"} if prompts_file is not None else {})}
    check_output_path(output, inputs)
    vocab, context = int(model.config.vocab_size), int(model.config.max_position_embeddings)
    if prompts_file is not None:
        prompts = read_prompts(prompts_file, vocab, context)
    else:
        check_sizes(count or 8, length, context)
        prompts = random_prompts(count or 8, length, vocab, seed)
    ranges = calibrate(model, prompts, progress=counter("calibrated", "prompts"))
    write_output(output, ranges_bytes(ranges))
    return (f"wrote the ranges of {len(ranges['linears'])} linears and {len(ranges['tensors'])} tensors "
            f"over {len(prompts)} prompts to {output}")
