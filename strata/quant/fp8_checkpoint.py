"""Writing fp8 block-quantized checkpoints, with the quantization error of every tensor.

    rows = quantize_checkpoint(load_model("models/qwen"), "models/qwen-fp8", "fp8-bf16head")
    print(error_table(rows))

Which tensors become fp8 is read off the blueprint level, never listed by hand: `fp8_targets`
lowers the model to its blueprint under the recipe (decode and prefill, one row), takes every
node whose precision gives its weight an `fp8` format, and follows the node's weight names
(`weight`, `concat`, `weights`) through the function's `blueprint.weights` table (a name read
from another stored tensor) and the model's name table to the checkpoint's (HF) tensors. A
stored tensor that some node reads in another format (a tied embedding read by an fp8 head and
a bf16 lookup) is not a target: quantizing it would change the other reader.

The written checkpoint stores what DeepSeek-V3 and Qwen's FP8 checkpoints store
(`strata.ir.fp8`): each target `NAME` as float8_e4m3fn [N, K] plus `NAME_scale_inv` f32
[ceil(N/128), ceil(K/128)] (`...weight` -> `...weight_scale_inv`), config.json with
`quantization_config = {quant_method: fp8, fmt: e4m3, activation_scheme: dynamic,
weight_block_size: [128, 128]}`, every other tensor unchanged (same dtype and bytes), the
other top-level files (tokenizer, generation config) copied. Shards mirror the input's: each
output file holds what the input file of the same name held, the index maps each scale to its
weight's shard.

Experts: the hub stores them one by one (`experts.0.gate_proj.weight`, ...), each 2-D and
quantized as any weight. A checkpoint that stores them stacked and merged (transformers'
`experts.gate_up_proj` [E, 2*I, H], `experts.down_proj` [E, H, I]) gets them written one
expert at a time under the per-expert names (each part of a merged tensor, each expert: one
2-D tensor with its own scale), as Qwen's FP8 checkpoints store them; the reader assembles
those (the weight store's composites prefer the per-expert form). Blocks never straddle two
experts or two parts.

The output directory is written as a stage (`strata.artifacts`): built in a temporary sibling,
renamed into place, with a `manifest.json`; an existing directory is replaced only when it
is empty or a previous strata output.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.directory import new_directory
from strata.artifacts.stage import FORMAT, MANIFEST, check_destination, file_record, locked, sha256_file, versions
from strata.dialects import blueprint as B
from strata.dialects.blueprint_graph import blueprint_functions
from strata.errors import StrataError
from strata.ir.fp8 import BLOCK, fp8_error_of, quantize_fp8_block
from strata.ir.weights import INDEX_FILE, WeightStore, write_safetensors
from strata.passes.pipelines import blueprint_module

#: What the written config.json says (DeepSeek-V3's and Qwen's FP8 checkpoints).
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": list(BLOCK)}
#: The blueprint modes whose nodes decide the targets (together they read every weight).
MODES = ("decode", "prefill")
SCALE_SUFFIX = "_scale_inv"


class QuantizeError(StrataError):
    """A checkpoint that cannot be quantized as asked."""


@dataclass(frozen=True)
class Row:
    """The quantization error of one written fp8 tensor (`strata.ir.fp8.fp8_error`'s fields),
    with what a total needs: its size, the rms of the original, its nonzero count."""

    name: str
    shape: tuple[int, int]
    max_abs: float
    mean_abs: float
    rmse: float
    rel_rmse: float
    max_rel: float
    zero_frac: float
    size: int
    rms: float
    nonzero: int


# ---------------------------------------------------------------------------------------------
# The targets


def _node_weights(op: B.NodeOp) -> list[str]:
    attrs = op.attributes
    if "param" in attrs:
        return [attrs["param"].data] + [c.data for c in (op.concat.data if op.concat is not None else ())]
    if "weights" in attrs:
        return [w.data for w in attrs["weights"].data]
    return []


def _is_fp8(op: B.NodeOp) -> bool:
    fmt = op.precision.fields().get("weight") if op.precision is not None else None
    return fmt is not None and fmt.elem.data == "fp8"


def _stored_of(model: Any, stored_names: set[str]) -> dict[str, tuple[str, ...]]:
    """llama.cpp name -> the checkpoint tensors it is read from (several: experts one by one)."""
    names, _, composites = model.weight_names()
    out = {ggml: (hf,) for hf, ggml in names.items()}
    for ggml, comp in composites.items():
        if comp.stack and all(n in stored_names for n in comp.stack):
            out[ggml] = comp.stack
        elif comp.merged is not None and comp.merged in stored_names:
            out[ggml] = (comp.merged,)
    return out


def fp8_targets(model: Any, recipe: str = "fp8-bf16head", store: WeightStore | None = None) -> list[str]:
    """The checkpoint (HF) tensors that `recipe` makes fp8, sorted (see the module docstring)."""
    raw = store if store is not None else WeightStore.open(model.root)
    stored_of = _stored_of(model, set(raw.names()))
    fp8_use: dict[str, set[bool]] = {}
    for mode in MODES:
        for fn in blueprint_functions(blueprint_module(model.module, model.name, mode, 1, recipe)):
            table = B.function_weights(fn)
            for op in fn.walk():
                if not isinstance(op, B.NodeOp):
                    continue
                for name in _node_weights(op):
                    source = table[name].source if name in table else name
                    if source not in stored_of:
                        raise QuantizeError(f"{model.root}: the blueprint's weight '{name}' ({op.name}) "
                                            "is stored under no tensor of the checkpoint")
                    for stored in stored_of[source]:
                        fp8_use.setdefault(stored, set()).add(_is_fp8(op))
    return sorted(stored for stored, uses in fp8_use.items() if uses == {True})


def _merged_experts(model: Any) -> dict[str, list[tuple[int, int, str]]]:
    """Stored merged expert tensor -> its (part, parts, per-expert name pattern), by part."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for t in model.param_instances():
        if t.hf_merged and "*" in t.hf:
            merged, _, which = t.hf_merged.rpartition(":")
            part, _, parts = which.partition("/")
            out.setdefault(merged, []).append((int(part), int(parts), t.hf))
    return {k: sorted(v) for k, v in out.items()}


def _pieces(stored: str, a: np.ndarray, merged: dict[str, list[tuple[int, int, str]]]):
    """(written name, 2-D weight) for each fp8 tensor written for target `stored`."""
    if a.ndim == 2:
        yield stored, a
        return
    if a.ndim != 3 or stored not in merged:
        raise QuantizeError(f"'{stored}' of shape {list(a.shape)}: fp8 blocks are written for 2-D weights "
                            "and for stacked experts the model names one by one")
    for part, parts, pattern in merged[stored]:
        if a.shape[1] % parts:
            raise QuantizeError(f"'{stored}' of shape {list(a.shape)} does not split into {parts} parts along axis 1")
        n = a.shape[1] // parts
        for e in range(a.shape[0]):
            yield pattern.replace("*", str(e)), a[e, part * n:(part + 1) * n, :]


def _row(name: str, w: np.ndarray, q: np.ndarray, s: np.ndarray) -> Row:
    e = fp8_error_of(w, q, s)
    rms = float(np.sqrt(np.mean(np.square(w, dtype=np.float64)))) if w.size else 0.0
    return Row(name, tuple(w.shape), e["max_abs"], e["mean_abs"], e["rmse"], e["rel_rmse"], e["max_rel"],
               e["zero_frac"], int(w.size), rms, int(np.count_nonzero(w)))


# ---------------------------------------------------------------------------------------------
# Writing


def quantize_checkpoint(model: Any, out_dir: str | Path | None, recipe: str = "fp8-bf16head",
                        progress: Callable[[int, int, str], None] | None = None) -> list[Row]:
    """Write `model`'s checkpoint (a loaded model, `strata.pipeline.load_model`) with `recipe`'s
    fp8 targets block-quantized to `out_dir` (None: write nothing, only measure); returns one
    error row per fp8 tensor written, by name. `progress(i, n, name)` is called after each of
    the n targets."""
    if model.fp8_block is not None:
        raise QuantizeError(f"{model.root}: the checkpoint is fp8-quantized already (its config.json has a "
                            "quantization_config)")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        _check_not_inside(model.root, out)
        check_destination(out)  # before the work, not after it
    raw = WeightStore.open(model.root)
    targets = set(fp8_targets(model, recipe, raw))
    merged = _merged_experts(model)
    rows: list[Row] = []
    done = 0

    def shard(f) -> dict[str, np.ndarray]:
        nonlocal done
        tensors: dict[str, np.ndarray] = {}
        for stored in sorted(f.entries):
            a = f.array(stored)
            if stored not in targets:
                tensors[stored] = a
                continue
            for name, w in _pieces(stored, a, merged):
                w = np.asarray(w, dtype=np.float32)
                q, s = quantize_fp8_block(w)
                tensors[name], tensors[name + SCALE_SUFFIX] = q, s
                rows.append(_row(name, w, q, s))
            done += 1
            if progress is not None:
                progress(done, len(targets), stored)
        return tensors

    if out is None:
        for f in raw.files:
            shard(f)
        return sorted(rows, key=lambda r: r.name)
    inputs = {"config": file_record(model.root / "config.json"), "weights": raw.fingerprint(), "recipe": recipe}
    with locked(out):
        _write_stage(out, lambda tmp: _fill(model, raw, tmp, shard), inputs)
    return sorted(rows, key=lambda r: r.name)


def _check_not_inside(root: Path, out: Path) -> None:
    r, o = Path(os.path.realpath(root)), Path(os.path.realpath(out))
    if o == r or r in o.parents:
        raise QuantizeError(f"{out}: the output must lie outside the model directory {root}")


def _fill(model: Any, raw: WeightStore, tmp: Path, shard) -> None:
    """Write the quantized checkpoint's files into `tmp`."""
    weight_map: dict[str, str] = {}
    total = 0
    for f in raw.files:
        tensors = shard(f)
        write_safetensors(tmp / f.path.name, tensors, f.metadata)
        weight_map.update({n: f.path.name for n in tensors})
        total += sum(t.nbytes for t in tensors.values())
    if raw.label.name == INDEX_FILE:
        index = json.loads(raw.label.read_text(encoding="utf-8"))
        index["metadata"] = dict(index.get("metadata") or {}, total_size=total)
        index["weight_map"] = dict(sorted(weight_map.items()))
        (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    config = json.loads((model.root / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = dict(QUANTIZATION_CONFIG)
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # The rest of the model directory's plain files (tokenizer, generation config, ...);
    # subdirectories (a compile cache) and hidden files are not part of the checkpoint.
    written = {p.name for p in tmp.iterdir()}
    for p in sorted(model.root.iterdir()):
        if p.is_file() and not p.name.startswith(".") and p.name not in written and p.name not in (MANIFEST, INDEX_FILE) \
                and not p.name.endswith(".safetensors"):
            shutil.copyfile(p, tmp / p.name)


def _write_stage(out: Path, fill: Callable[[Path], None], inputs: dict) -> None:
    """A stage whose files are written straight to disk (a checkpoint does not fit in memory):
    `fill` the new directory, add the manifest, put it in place (the caller holds the lock)."""
    with new_directory(out) as tmp:
        fill(tmp)
        outputs = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        manifest = {"format": FORMAT, "target": "fp8-checkpoint", "inputs": inputs, "versions": versions(),
                    "outputs": outputs}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        check_destination(out, set(outputs))  # again, right before replacing anything


# ---------------------------------------------------------------------------------------------
# The report


def total_row(rows: list[Row]) -> Row:
    """All rows as one tensor: errors over every element (max of the maxima)."""
    size = sum(r.size for r in rows)
    nonzero = sum(r.nonzero for r in rows)
    if not size:
        return Row("total", (0, 0), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0)
    rmse = math.sqrt(sum(r.rmse ** 2 * r.size for r in rows) / size)
    rms = math.sqrt(sum(r.rms ** 2 * r.size for r in rows) / size)
    return Row("total", (0, 0), max(r.max_abs for r in rows), sum(r.mean_abs * r.size for r in rows) / size,
               rmse, rmse / rms if rms else 0.0, max(r.max_rel for r in rows),
               sum(r.zero_frac * r.nonzero for r in rows) / max(1, nonzero), size, rms, nonzero)


COLUMNS = ("tensor", "shape", "max_abs", "rmse", "rel_rmse", "max_rel", "zero_frac")


def error_table(rows: list[Row]) -> str:
    """One aligned line per tensor, then a total line."""
    def cells(r: Row, name: str, shape: str) -> list[str]:
        return [name, shape, f"{r.max_abs:.3e}", f"{r.rmse:.3e}", f"{r.rel_rmse:.5f}", f"{r.max_rel:.5f}",
                f"{r.zero_frac:.5f}"]

    t = total_row(rows)
    lines = [list(COLUMNS)] + [cells(r, r.name, "x".join(map(str, r.shape))) for r in rows]
    lines.append(cells(t, f"total: {len(rows)} tensors", f"{t.size} params"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
                   + "\n" for line in lines)
