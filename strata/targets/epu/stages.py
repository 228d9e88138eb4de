"""The EPU target's compile: content-addressed stages from a Llama checkpoint to C++ calling
the EPU custom ops (Quadric Chimera's w4a16 and FixedPoint32 ops).

    out, rebuilt = compile_epu(model, "build/tiny-epu", {"headroom": 2})   # the stages under OUT

Stages, each a directory of OUT with a STAGE.json (the stage's knobs, the digests of what it
read: the config, the weights' headers, the strata sources and each upstream stage's outputs,
and the sha256 of every file it wrote). A stage is rebuilt only when that record no longer
matches (a knob, an input or its own files changed), so a knob rebuilds exactly the stages it
reaches:

    calibrate    ranges.json: `strata calibrate` on the f32 model (calib_prompts random prompts
                 of calib_len tokens, calib_seed): the per-channel input ranges SmoothQuant reads
    smoothquant  smoothed.safetensors (every tensor SmoothQuant changes: norm weights / s,
                 projections * s) and smoothquant.json (alpha, the groups)
    w4a16        q/: `strata quantize --w4a16`'s output (int4 in MatMulNBits' packing, block) of
                 the smoothed weights, and ranges.json: calibration again on that int4 model (the
                 ranges the fixed-point formats come from)
    fixed        fixed.mlir: the decode step at the fixed level (convert-blueprint-to-fixed with
                 an int8 KV cache of ctx positions, assign-frac-bits{headroom},
                 epu-pack-projections) and range_table.txt (Chimera's range table)
    cpp          model.h, main.cpp, epu_runtime.h, Makefile, weights.bin (strata.targets.epu) and
                 cost.txt (an estimate per custom op: MACs, DDR bytes, cycles; strata.targets.epu.cost)

    knobs   calib_prompts calib_len calib_seed -> calibrate; alpha -> smoothquant;
            block -> w4a16; headroom, ctx -> fixed

OUT/EPU.json lists the stages and which were rebuilt; OUT/build/model is the g++ build (not a
stage). OUT must be new, empty or an earlier EPU output: nothing else is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.directory import MARKER, locked, new_directory
from strata.artifacts.stage import sha256_file, versions
from strata.errors import StrataError
from strata.ir.weights import Overlay
from strata.passes.pipelines import blueprint_module, blueprint_pipeline, parsed_pipeline, run_pipeline

STAGE_JSON = "STAGE.json"
TOP = "EPU.json"
DEFAULT_CTX = 256
#: calib_*: the random calibration prompts (32 of 32 tokens: fewer leave ranges too tight for
#: other prompts, and an element-wise op past its range saturates).
KNOBS: dict[str, Any] = {"alpha": 0.5, "headroom": 2, "block": 128, "ctx": None, "calib_prompts": 32,
                         "calib_len": 32, "calib_seed": 0}


#: The blueprint the fixed stage converts: the decode step (mode, rows, recipe).
BLUEPRINT = ("prefill", 1, "w4a16")


class EpuError(StrataError):
    """An EPU compile or run that cannot proceed."""


def note(text: str) -> None:
    """A progress line on a terminal (quiet when standard error is piped)."""
    if sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def resolve(model: Any, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The knobs with defaults, checked (a one-line error naming the knob)."""
    out = dict(KNOBS)
    for k, v in (knobs or {}).items():
        if k not in out:
            raise EpuError(f"target 'epu' has no knob '{k}' (knobs: {', '.join(KNOBS)})")
        if v is not None:
            out[k] = v
    if out["ctx"] is None:
        out["ctx"] = min(int(model.config.max_position_embeddings), DEFAULT_CTX)
    for k in ("headroom", "block", "ctx", "calib_prompts", "calib_len", "calib_seed"):
        if isinstance(out[k], bool) or not isinstance(out[k], int) or out[k] < (0 if k in ("headroom", "calib_seed") else 1):
            raise EpuError(f"knob {k} must be a {'non-negative' if k in ('headroom', 'calib_seed') else 'positive'} "
                           f"integer, got {out[k]!r}")
    if out["ctx"] > int(model.config.max_position_embeddings):
        raise EpuError(f"knob ctx {out['ctx']} exceeds the model's max_position_embeddings")
    from strata.quant.calibrate import check_sizes

    check_sizes(out["calib_prompts"], out["calib_len"], int(model.config.max_position_embeddings),
                ("knob calib_prompts", "knob calib_len"))
    parsed_pipeline(pipeline_text(out))  # the fixed stage's passes check their options (headroom) up front
    if isinstance(out["alpha"], bool) or not isinstance(out["alpha"], (int, float)) or not 0 <= out["alpha"] <= 1:
        raise EpuError(f"knob alpha must be a number in [0, 1], got {out['alpha']!r}")
    out["alpha"] = float(out["alpha"])
    return out


def fixed_passes(knobs: Mapping[str, Any], ranges: str) -> tuple[str, str, str]:
    """The fixed stage's pass pipeline in its three parts, the one place it is spelled: the
    decode step's blueprint (one row, the w4a16 recipe), its conversion to the fixed level (an
    int8 KV cache of `ctx` rows; the stage runs it with the weights, whose int4 formats it
    reads), and the formats and packing. `ranges`: the w4a16 stage's ranges file."""
    spec = json.dumps(str(ranges)) if ranges != "RANGES" else ranges  # a quoted string in the pipeline syntax
    return (blueprint_pipeline(*BLUEPRINT, collapse=False),
            f"convert-blueprint-to-fixed{{ranges={spec} kv_ctx={knobs['ctx']}}}",
            f"assign-frac-bits{{headroom={knobs['headroom']} ranges={spec}}},epu-pack-projections")


def pipeline_text(knobs: Mapping[str, Any]) -> str:
    """The pass pipeline of the fixed stage (ranges: the w4a16 stage's), for --print-pipeline."""
    return ",".join(fixed_passes(knobs, "RANGES"))


# ---------------------------------------------------------------------------------------------
# Stages


def digest(obj: Any) -> str:
    """The sha256 of `obj`'s canonical JSON: a stage's identity as its dependants record it."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_digests(d: Path) -> dict[str, str]:
    """Every file under `d` but the stage record, by relative path: its sha256."""
    return {p.relative_to(d).as_posix(): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file() and p.name != STAGE_JSON}


def _current(d: Path, inputs: Mapping[str, Any]) -> dict | None:
    """The stage's record if `d` is that stage, built from `inputs` and untouched since."""
    try:
        rec = json.loads((d / STAGE_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("inputs") != json.loads(json.dumps(dict(inputs))):
        return None
    if rec.get("outputs") != file_digests(d):
        return None
    return rec


def stage(out: Path, name: str, inputs: Mapping[str, Any], build: Callable[[Path], None],
          rebuilt: list[str]) -> str:
    """Reuse or (re)build the stage `name` of `out`; returns its digest (of its outputs, what
    downstream stages record as their input)."""
    d = out / name
    rec = _current(d, inputs)
    if rec is None:
        note(f"[epu] building {name}")
        t0 = time.perf_counter()
        with new_directory(d) as tmp:
            build(tmp)
            rec = {"stage": name, "inputs": json.loads(json.dumps(dict(inputs))), "outputs": file_digests(tmp)}
            (tmp / STAGE_JSON).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        rebuilt.append(name)
        note(f"[epu] built {name} in {time.perf_counter() - t0:.1f} s")
    return digest(rec["outputs"])


#: The stages of an EPU output, in build order; beside them OUT holds only TOP and the g++ build.
STAGES = ("calibrate", "smoothquant", "w4a16", "fixed", "cpp")
BUILD = "build"
#: what build.py writes into OUT/build: the driver, its stamp, and run_epu's default logits file
BUILD_FILES = frozenset({"model", "model.sha256", ".model.tmp", "logits.bin"})
FORMAT = "strata-epu/v1"
#: What a killed compile leaves in OUT: a stage's temporary or set-aside sibling (`new_directory`'s
#: `.w4a16.tmp-XXXX`, `.w4a16.old-XXXX`) with or without its marker, and the record's temporary.
LEFTOVER = re.compile(rf"\.(?:{'|'.join(STAGES)})\.(?:tmp|old)-[A-Za-z0-9_]+(?:{re.escape(MARKER)})?"
                      rf"|\.{re.escape(TOP)}\.tmp")


def is_leftover(entry: Path) -> bool:
    """Whether `entry` of an EPU output is what a killed compile left there (removed by the next)."""
    return LEFTOVER.fullmatch(entry.name) is not None and not entry.is_symlink()


def _remove_leftovers(out: Path) -> None:
    """Remove what killed compiles left in OUT (the caller holds the lock and has checked that
    OUT is an EPU output: a name of this shape there is strata's)."""
    for entry in sorted(out.iterdir()):
        if is_leftover(entry):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _write_record(out: Path, record: Mapping[str, Any], indent: int | None = None) -> None:
    """Write OUT's record whole or not at all (a kill while writing leaves the old one, or none)."""
    tmp = out / f".{TOP}.tmp"
    tmp.write_text(json.dumps(record, indent=indent, sort_keys=indent is not None) + "\n", encoding="utf-8")
    os.replace(tmp, out / TOP)


def _stage_problem(d: Path, name: str) -> str | None:
    """None when `d` is the stage `name` as strata wrote it: a STAGE.json naming it that lists
    every file inside (a listed file edited since is still the stage's own, and rebuilt); else
    what is foreign in it."""
    try:
        rec = json.loads((d / STAGE_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{d} has no {STAGE_JSON}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return f"{d / STAGE_JSON} is not a stage record"
    if not isinstance(rec, dict) or rec.get("stage") != name or not isinstance(rec.get("outputs"), dict):
        return f"{d / STAGE_JSON} is not the record of stage {name}"
    for p in sorted(d.rglob("*")):
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            return f"{p} is not a file strata wrote"
        if p.is_file() and p != d / STAGE_JSON and p.relative_to(d).as_posix() not in rec["outputs"]:
            return f"{p} is not among the files {d / STAGE_JSON} lists"
    return None


def epu_output_problem(out: Path) -> str | None:
    """None when `out` holds nothing but an EPU output strata wrote (its TOP record, stages that
    their records describe, the g++ build), so that strata may rebuild any of it; else the first
    thing in it that is not strata's."""
    try:
        top = json.loads((out / TOP).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"it has no {TOP}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return f"its {TOP} is not an EPU output record"
    if not isinstance(top, dict) or top.get("format") != FORMAT:
        return f"its {TOP} is not an EPU output record (no \"format\": \"{FORMAT}\")"
    for entry in sorted(out.iterdir()):
        if (entry.name == TOP and entry.is_file() and not entry.is_symlink()) or is_leftover(entry):
            continue
        if entry.is_symlink() or not entry.is_dir() or entry.name not in (*STAGES, BUILD):
            return f"{entry} is not part of an EPU output"
        if entry.name == BUILD:
            foreign = sorted(p.name for p in entry.iterdir() if p.name not in BUILD_FILES or not p.is_file())
            if foreign:
                return f"{entry / foreign[0]} is not part of the g++ build"
            continue
        problem = _stage_problem(entry, entry.name)
        if problem is not None:
            return problem
    return None


def _check_out(out: Path) -> None:
    """Refuse an OUT that holds anything but an earlier EPU output (nothing of the user's is replaced)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise EpuError(f"{out}: exists and is not a directory; refusing to replace it")
    if out.is_dir() and any(not is_leftover(entry) for entry in out.iterdir()):
        problem = epu_output_problem(out)
        if problem is not None:
            raise EpuError(f"{out}: exists and is not an EPU output directory ({problem}); refusing to overwrite "
                           "it, choose another output path")


def smoothed_store(model: Any, out: Path, store: Any = None) -> Overlay:
    """The model's weights with the smoothquant stage's tensors in place."""
    from strata.ir.weights import SafetensorsFile

    st = SafetensorsFile(out / "smoothquant" / "smoothed.safetensors")
    changed = {n: np.asarray(st.array(n), np.float32) for n in st.entries}
    return Overlay(store if store is not None else model.open_weights(quiet=True), changed)


def _int4_head(module, int4: set[str]) -> None:
    """Chimera's lm_head is int4 (w4a16NBitsMatMul) where the w4a16 stage made its weight int4, as
    the ORT graph's (the recipe keeps it bf16); a head tied to the embedding table stays fixed.matmul."""
    from strata.dialects import blueprint as B

    ops = list(module.walk())
    fmt = next((op.attributes["precision"] for op in ops if isinstance(op, B.LinearOp) and "precision" in op.attributes
                 and (op.attributes["precision"].fields().get("weight") is not None)  # type: ignore[attr-defined]
                 and op.attributes["precision"].fields()["weight"].elem.data == "int4"), None)  # type: ignore[attr-defined]
    for op in ops:
        if isinstance(op, B.LmHeadOp) and fmt is not None and op.param.data in int4:
            op.attributes["precision"] = fmt


def fixed_module(model: Any, ranges: Path, weights: Any, headroom: int, ctx: int, int4: set[str]):
    """The fixed-level decode step (the fixed stage's IR); `int4`: the weights the w4a16 stage made int4."""
    from strata.passes.assign_frac_bits import read_tensor_ranges
    from strata.passes.convert_blueprint_to_fixed import convert_blueprint_to_fixed

    _, _, finish = fixed_passes({"ctx": ctx, "headroom": headroom}, str(ranges))
    bp = blueprint_module(model.module, model.name, *BLUEPRINT, collapse=False)
    _int4_head(bp, int4)
    fx = convert_blueprint_to_fixed(bp, read_tensor_ranges(ranges), weights=weights, ctx=ctx)
    return run_pipeline(fx, finish)


def _clear_for_rebuild(out: Path) -> None:
    """Remove whatever stands at `out` that is not an EPU output (a folder of strata's own cache
    broken by a kill or an edit), so that it is built anew. The caller holds the lock."""
    try:
        _check_out(out)
    except EpuError:
        if out.is_symlink() or not out.is_dir():
            out.unlink()
        else:
            shutil.rmtree(out)
        out.mkdir(parents=True)


def compile_epu(model: Any, out: str | Path, knobs: Mapping[str, Any] | None = None, *,
                replace_any: bool = False) -> tuple[Path, list[str]]:
    """Build or reuse every stage of OUT; returns (OUT, the stages rebuilt). `replace_any`: OUT
    is a folder of strata's own cache, rebuilt whole if it is not an EPU output."""
    from strata.ir.text import parse_ir, print_ir
    from strata.ir.weights import write_safetensors
    from strata.passes.assign_frac_bits import range_table
    from strata.quant.calibrate import calibrate, random_prompts, ranges_bytes
    from strata.quant.smoothquant import smooth_weights
    from strata.quant.w4a16 import Plan, W4A16Weights, plan_model, write_w4a16
    from strata.targets.epu.cost import cost_table
    from strata.targets.epu.emit import emit_epu

    k = resolve(model, knobs)
    out = Path(out)
    if not replace_any:
        _check_out(out)
    store = model.open_weights(quiet=True)
    # The weights are baked into every stage (ranges, int4, weights.bin): their bytes are hashed
    # (each safetensors file, or the GGUF file), not only the headers the cpu target's manifest records.
    note(f"[epu] hashing the weights of {model.source}")
    files = [f.path for f in store.files] if model.gguf is None else [model.gguf.path]
    weights = [{"file": path.name, "sha256": sha256_file(path)} for path in files]
    base = {"config": model.config_fingerprint(), "weights": weights,
            "strata_sources_sha256": versions()["strata_sources_sha256"]}
    rebuilt: list[str] = []
    with locked(out):
        if replace_any:
            _clear_for_rebuild(out)
        out.mkdir(parents=True, exist_ok=True)
        _check_out(out)
        _remove_leftovers(out)
        if not (out / TOP).is_file():  # marks OUT as ours before any stage is written
            _write_record(out, {"format": FORMAT, "stages": {}})
        prompts = random_prompts(k["calib_prompts"], k["calib_len"], int(model.config.vocab_size), seed=k["calib_seed"])

        def b_calibrate(d: Path) -> None:
            (d / "ranges.json").write_bytes(ranges_bytes(calibrate(model, prompts, weights=store)))

        cal = stage(out, "calibrate", {**base, **{x: k[x] for x in ("calib_prompts", "calib_len", "calib_seed")}},
                    b_calibrate, rebuilt)

        def b_smooth(d: Path) -> None:
            plan = plan_model(model, out / "calibrate" / "ranges.json", k["alpha"], k["block"])
            changed, _ = smooth_weights(store, plan.groups, plan.ranges, k["alpha"])
            write_safetensors(d / "smoothed.safetensors", {n: np.asarray(a, np.float32) for n, a in sorted(changed.items())})
            info = {"alpha": k["alpha"], "groups": [[g.norm, *g.linears] for g in plan.groups]}
            (d / "smoothquant.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")

        sq = stage(out, "smoothquant", {**base, "calibrate": cal, "alpha": k["alpha"]}, b_smooth, rebuilt)

        def b_w4a16(d: Path) -> None:
            plan = plan_model(model, None, block=k["block"])
            smooth = smoothed_store(model, out, store)
            write_w4a16(model, Plan(block=plan.block, weights=plan.weights, skipped=plan.skipped), d / "q", store=smooth)
            int4 = W4A16Weights.open(d / "q")
            (d / "ranges.json").write_bytes(ranges_bytes(calibrate(model, prompts, weights=int4)))

        wq = stage(out, "w4a16", {**base, "smoothquant": sq, "block": k["block"], "calibrate": cal}, b_w4a16, rebuilt)

        def b_fixed(d: Path) -> None:
            int4 = set(W4A16Weights.open(out / "w4a16" / "q").weights)
            fx = fixed_module(model, out / "w4a16" / "ranges.json", smoothed_store(model, out, store), k["headroom"],
                              k["ctx"], int4)
            (d / "fixed.mlir").write_text(print_ir(fx), encoding="utf-8")
            (d / "range_table.txt").write_text(range_table(fx), encoding="utf-8")

        fxd = stage(out, "fixed", {**base, "w4a16": wq, "smoothquant": sq, "headroom": k["headroom"], "ctx": k["ctx"]},
                    b_fixed, rebuilt)

        def b_cpp(d: Path) -> None:
            from strata.dialects import strata_context

            text = (out / "fixed" / "fixed.mlir").read_text(encoding="utf-8")
            fx = parse_ir(text, str(out / "fixed" / "fixed.mlir"), strata_context())
            for name, data in emit_epu(fx, smoothed_store(model, out, store), model.name).items():
                (d / name).write_bytes(data)
            (d / "cost.txt").write_text(cost_table(fx), encoding="utf-8")  # an estimate, labelled so

        cpp = stage(out, "cpp", {**base, "fixed": fxd, "smoothquant": sq}, b_cpp, rebuilt)
        top = {"format": FORMAT, "model": model.name, "knobs": k,
               "stages": {"calibrate": cal, "smoothquant": sq, "w4a16": wq, "fixed": fxd, "cpp": cpp},
               "build": "cd cpp && g++ -O2 -std=c++17 -o ../build/model main.cpp"}
        _write_record(out, top, indent=1)
    return out, rebuilt


