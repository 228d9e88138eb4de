"""The EPU target's compile (issue 10 item 3, seed 004): content-addressed stages from a Llama
checkpoint to C++ calling the EPU custom ops, and running it.

    out = compile_epu(model, "build/tiny-epu", {"headroom": 2})   # the stages under OUT
    exe = build_epu(out)                                            # g++ -O2 -std=c++17
    ids, logits, frac = run_epu(out, [1, 2, 3], 4)                  # the device-side loop

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
                 epu-pack-projections) and range_table.txt (seed 004's table)
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
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.pipeline import Model, blueprint_of, blueprint_pipeline, run_pipeline
from strata.stage import locked, sha256_file, versions
from strata.targets.epu import KNOBS

STAGE_JSON = "STAGE.json"
TOP = "EPU.json"
DEFAULT_CTX = 256


class EpuError(StrataError):
    """An EPU compile or run that cannot proceed."""


def _say(text: str) -> None:
    if sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def resolve(model: Model, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
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
    if isinstance(out["alpha"], bool) or not isinstance(out["alpha"], (int, float)) or not 0 <= out["alpha"] <= 1:
        raise EpuError(f"knob alpha must be a number in [0, 1], got {out['alpha']!r}")
    out["alpha"] = float(out["alpha"])
    return out


def pipeline_text(knobs: Mapping[str, Any]) -> str:
    """The pass pipeline of the fixed stage (ranges: the w4a16 stage's), for --print-pipeline."""
    return (blueprint_pipeline("prefill", 1, "w4a16", collapse=False)
            + f",convert-blueprint-to-fixed{{ranges=RANGES kv_ctx={knobs['ctx']}}}"
            + f",assign-frac-bits{{headroom={knobs['headroom']} ranges=RANGES}},epu-pack-projections")


# ---------------------------------------------------------------------------------------------
# Stages


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _files(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file() and p.name != STAGE_JSON}


def _current(d: Path, inputs: Mapping[str, Any]) -> dict | None:
    """The stage's record if `d` is that stage, built from `inputs` and untouched since."""
    try:
        rec = json.loads((d / STAGE_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("inputs") != json.loads(json.dumps(dict(inputs))):
        return None
    if rec.get("outputs") != _files(d):
        return None
    return rec


def stage(out: Path, name: str, inputs: Mapping[str, Any], build: Callable[[Path], None],
          rebuilt: list[str]) -> str:
    """Reuse or (re)build the stage `name` of `out`; returns its digest (of its outputs, what
    downstream stages record as their input)."""
    d = out / name
    rec = _current(d, inputs)
    if rec is None:
        _say(f"[epu] building {name}")
        t0 = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out))
        try:
            build(tmp)
            rec = {"stage": name, "inputs": json.loads(json.dumps(dict(inputs))), "outputs": _files(tmp)}
            (tmp / STAGE_JSON).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            os.chmod(tmp, 0o755)
            old = out / f".{name}.old"
            shutil.rmtree(old, ignore_errors=True)
            if d.exists():
                os.rename(d, old)
            os.rename(tmp, d)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rebuilt.append(name)
        _say(f"[epu] built {name} in {time.perf_counter() - t0:.1f} s")
    return _digest(rec["outputs"])


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise EpuError(f"{out}: exists and is not a directory; refusing to replace it")
    if out.is_dir() and any(out.iterdir()) and not (out / TOP).is_file():
        raise EpuError(f"{out}: exists and is not an EPU output directory (no {TOP}); refusing to overwrite it, "
                       "choose another output path")


class _Overlay:
    def __init__(self, base: Any, changed: Mapping[str, np.ndarray]) -> None:
        self.base, self.changed = base, changed

    def get(self, name: str) -> np.ndarray:
        return self.changed[name] if name in self.changed else self.base.get(name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.get(name)


def smoothed_store(model: Model, out: Path, store: Any = None) -> _Overlay:
    """The model's weights with the smoothquant stage's tensors in place."""
    from strata.ir.weights import SafetensorsFile

    st = SafetensorsFile(out / "smoothquant" / "smoothed.safetensors")
    changed = {n: np.asarray(st.array(n), np.float32) for n in st.entries}
    return _Overlay(store if store is not None else model.open_weights(quiet=True), changed)


def _int4_head(module, int4: set[str]) -> None:
    """Seed 004's lm_head is int4 (w4a16NBitsMatMul) where the w4a16 stage made its weight int4, as
    the ORT graph's (the recipe keeps it bf16); a head tied to the embedding table stays fixed.matmul."""
    from strata.dialects import blueprint as B

    ops = list(module.walk())
    fmt = next((op.attributes["precision"] for op in ops if isinstance(op, B.LinearOp) and "precision" in op.attributes
                 and (op.attributes["precision"].fields().get("weight") is not None)  # type: ignore[attr-defined]
                 and op.attributes["precision"].fields()["weight"].elem.data == "int4"), None)  # type: ignore[attr-defined]
    for op in ops:
        if isinstance(op, B.LmHeadOp) and fmt is not None and op.param.data in int4:
            op.attributes["precision"] = fmt


def fixed_module(model: Model, ranges: Path, weights: Any, headroom: int, ctx: int, int4: set[str]):
    """The fixed-level decode step (the fixed stage's IR); `int4`: the weights the w4a16 stage made int4."""
    from strata.passes.assign_frac_bits import read_tensor_ranges
    from strata.passes.convert_blueprint_to_fixed import convert_blueprint_to_fixed

    bp = blueprint_of(model, "prefill", 1, "w4a16", collapse=False)
    _int4_head(bp, int4)
    fx = convert_blueprint_to_fixed(bp, read_tensor_ranges(ranges), weights=weights, ctx=ctx)
    spec = json.dumps(str(ranges))
    return run_pipeline(fx, f"assign-frac-bits{{headroom={headroom} ranges={spec}}},epu-pack-projections")


def compile_epu(model: Model, out: str | Path, knobs: Mapping[str, Any] | None = None) -> tuple[Path, list[str]]:
    """Build or reuse every stage of OUT; returns (OUT, the stages rebuilt)."""
    from strata.calibrate import calibrate, random_prompts, ranges_bytes
    from strata.ir.text import parse_ir, print_ir
    from strata.ir.weights import write_safetensors
    from strata.passes import smoothquant as SQ
    from strata.passes.assign_frac_bits import range_table
    from strata.targets.epu.cost import cost_table
    from strata.targets.epu.emit import emit_epu
    from strata.w4a16 import Plan, W4A16Weights, plan_model, write_w4a16

    k = resolve(model, knobs)
    out = Path(out)
    _check_out(out)
    store = model.open_weights(quiet=True)
    config = model.root / "config.json"
    # The weights are baked into every stage (ranges, int4, weights.bin): their bytes are hashed,
    # not only the safetensors headers the cpu target's manifest records.
    _say(f"[epu] hashing the weights of {model.root}")
    weights = [{"file": f.path.name, "sha256": sha256_file(f.path)} for f in store.files]
    base = {"config_sha256": sha256_file(config) if config.is_file() else None, "weights": weights,
            "strata_sources_sha256": versions()["strata_sources_sha256"]}
    rebuilt: list[str] = []
    with locked(out):
        out.mkdir(parents=True, exist_ok=True)
        _check_out(out)
        if not (out / TOP).is_file():  # marks OUT as ours before any stage is written
            (out / TOP).write_text(json.dumps({"format": "strata-epu/v1", "stages": {}}) + "\n", encoding="utf-8")
        prompts = random_prompts(k["calib_prompts"], k["calib_len"], int(model.config.vocab_size), seed=k["calib_seed"])

        def b_calibrate(d: Path) -> None:
            (d / "ranges.json").write_bytes(ranges_bytes(calibrate(model, prompts, weights=store)))

        cal = stage(out, "calibrate", {**base, **{x: k[x] for x in ("calib_prompts", "calib_len", "calib_seed")}},
                    b_calibrate, rebuilt)

        def b_smooth(d: Path) -> None:
            plan = plan_model(model, out / "calibrate" / "ranges.json", k["alpha"], k["block"])
            changed, _ = SQ.smooth_weights(store, plan.groups, plan.ranges, k["alpha"])
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
        top = {"format": "strata-epu/v1", "model": model.name, "knobs": k,
               "stages": {"calibrate": cal, "smoothquant": sq, "w4a16": wq, "fixed": fxd, "cpp": cpp},
               "build": f"cd cpp && g++ -O2 -std=c++17 -o ../build/model main.cpp"}
        (out / TOP).write_text(json.dumps(top, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out, rebuilt


# ---------------------------------------------------------------------------------------------
# Build and run


def build_epu(out: str | Path, gxx: str = "g++") -> Path:
    """OUT/build/model from OUT/cpp with `g++ -O2 -std=c++17` (reused while the sources match)."""
    out = Path(out)
    cpp = out / "cpp"
    if not (cpp / "main.cpp").is_file():
        raise EpuError(f"{out}: no cpp/main.cpp; compile it first (strata compile MODEL --target epu -o {out})")
    exe = shutil.which(gxx)
    if exe is None:
        raise EpuError(f"{gxx} is not on PATH: the EPU target's C++ needs a C++17 compiler (g++ -O2 -std=c++17)")
    build = out / "build"
    build.mkdir(exist_ok=True)
    stamp = _digest(_files(cpp))
    binary, stamp_file = build / "model", build / "model.sha256"
    if binary.is_file() and stamp_file.is_file() and stamp_file.read_text().strip() == stamp:
        return binary
    _say(f"[epu] g++ -O2 -std=c++17 {cpp / 'main.cpp'}")
    t0 = time.perf_counter()
    tmp = build / ".model.tmp"
    r = subprocess.run([exe, "-O2", "-std=c++17", "-o", str(tmp.resolve()), "main.cpp"], cwd=cpp, capture_output=True, text=True)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["(no message)"])[0]
        raise EpuError(f"{cpp / 'main.cpp'}: g++ failed: {first[:300]}")
    os.replace(tmp, binary)
    stamp_file.write_text(stamp + "\n")
    _say(f"[epu] built {binary} in {time.perf_counter() - t0:.1f} s")
    return binary


def read_logits(path: str | Path) -> tuple[np.ndarray, int]:
    """The driver's logits file: (int32 [steps, vocab], frac)."""
    raw = Path(path).read_bytes()
    if len(raw) < 20 or raw[:8] != b"STRLOGT1":
        raise EpuError(f"{path}: not a logits file of the EPU driver")
    steps, vocab, frac = np.frombuffer(raw[8:20], "<i4")
    data = np.frombuffer(raw[20:], "<i4")
    if data.size != int(steps) * int(vocab):
        raise EpuError(f"{path}: {data.size} logits, expected {int(steps)} x {int(vocab)}")
    return data.reshape(int(steps), int(vocab)).astype(np.int64), int(frac)


def run_epu(out: str | Path, prompt: Sequence[int], n_new: int, logits: str | Path | None = None) -> tuple[list[int], np.ndarray, int]:
    """Run the built driver: (the generated ids, each step's logits as integers, their frac)."""
    out = Path(out)
    binary = build_epu(out)
    target = Path(logits) if logits is not None else out / "build" / "logits.bin"
    r = subprocess.run([str(binary.resolve()), str((out / "cpp" / "weights.bin").resolve()), ",".join(map(str, prompt)),
                        str(int(n_new)), str(target.resolve())], capture_output=True, text=True)
    if r.returncode != 0:
        raise EpuError(f"{binary}: {(r.stderr.strip().splitlines() or ['failed'])[-1][:300]}")
    ids = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    data, frac = read_logits(target)
    return ids, data, frac


def ort_logits(model: Model, out: str | Path, prompt: Sequence[int]) -> np.ndarray:
    """ONNX Runtime's first-token logits on the w4a16 stage's int4 graph (MatMulNBits), before
    any custom-op replacement: the gate's reference."""
    from strata.verify.onnx_judge import llama_prefill_onnx, packed_of, run_onnx
    from strata.w4a16 import W4A16Weights

    stage_ = W4A16Weights.open(Path(out) / "w4a16" / "q")
    ids = np.asarray(prompt, np.int64).reshape(-1)
    (y,) = run_onnx(llama_prefill_onnx(model.config, stage_, packed_of(stage_), stage_.block, len(ids)), {"input_ids": ids})
    return np.asarray(y[-1], np.float64)


def score_epu(model: Model, out: str | Path, prompt: Sequence[int]) -> dict[str, float]:
    """The gate's metrics (rank_of_ort_argmax, rel_rmse_affine, ...): the EPU program's first-token
    logits against ONNX Runtime's on the same int4 graph."""
    from strata.verify.metrics import logit_metrics

    _, logits, frac = run_epu(out, prompt, 1)
    return logit_metrics(logits[0].astype(np.float64) * 2.0 ** -frac, ort_logits(model, out, prompt))


def parse_knobs(items: Sequence[str] | None) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs as knobs (numbers parsed; a one-line error naming a bad one)."""
    knobs: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or key not in KNOBS:
            raise EpuError(f"--set {item!r}: expected KEY=VALUE with KEY one of {', '.join(KNOBS)}")
        try:
            knobs[key] = float(value) if key == "alpha" else int(value, 10)
        except ValueError:
            raise EpuError(f"--set {item!r}: {value!r} is not a number") from None
    return knobs


def cmd_compile_epu(args: Any, model: Model) -> int:
    """`strata compile MODEL --target epu -o OUT [--set KEY=VALUE ...]`."""
    knobs = parse_knobs(getattr(args, "set", None))
    if getattr(args, "ctx", None) is not None:
        knobs.setdefault("ctx", args.ctx)
    if args.print_pipeline:
        print(pipeline_text(resolve(model, knobs)))
        return 0
    if args.output is None:
        raise EpuError("compile: give -o OUT (the output directory), or --print-pipeline")
    t0 = time.perf_counter()
    out, rebuilt = compile_epu(model, args.output, knobs)
    print(f"strata: compiled {args.model} for epu in {time.perf_counter() - t0:.2f} s (rebuilt: "
          f"{', '.join(rebuilt) or 'nothing'})", file=sys.stderr)
    print("strata: " + (out / "cpp" / "cost.txt").read_text(encoding="utf-8").splitlines()[0], file=sys.stderr)
    print(out)
    return 0


def interpret_epu(model: Model, out: str | Path, prompt: Sequence[int], n_new: int) -> tuple[list[int], np.ndarray, int]:
    """What `run_epu` computes, by the fixed interpreter on the fixed stage's IR (the same loop:
    one step per prompt token, then the argmax fed back): (ids, logits integers, frac)."""
    from xdsl.dialects import func

    from strata.dialects import strata_context
    from strata.dialects.fixed import frac_of
    from strata.ir.text import parse_ir
    from strata.semantics.fixed_interp import rope_tables, run_fixed

    path = Path(out) / "fixed" / "fixed.mlir"
    fn = next(op for op in parse_ir(path.read_text(encoding="utf-8"), str(path), strata_context()).walk()
              if isinstance(op, func.FuncOp))
    half = fn.function_type.inputs.data[2].get_shape()[1]  # type: ignore[attr-defined]
    theta = float(fn.attributes["fixed.rope_theta"].value.data)  # type: ignore[attr-defined]
    weights = smoothed_store(model, Path(out))
    state: dict = {}
    cache: dict = {}
    ids: list[int] = []
    rows = []
    token = int(prompt[0])
    for pos in range(len(prompt) + n_new - 1):
        if pos < len(prompt):
            token = int(prompt[pos])
        cos, sin = rope_tables(1, 2 * half, theta, pos)
        (y,) = run_fixed(fn, weights, [np.array([token], np.int32), np.array([pos], np.int32), cos, sin],
                         state=state, cache=cache)
        if pos >= len(prompt) - 1:
            rows.append(y[0])
            token = int(np.argmax(y[0]))
            ids.append(token)
    return ids, np.array(rows, np.int64), frac_of(fn.function_type.outputs.data[0])


def cmd_run_epu(args: Any) -> int:
    """`strata run MODEL --target epu --prompt-ids ...`: compile (or reuse) the stages in the cache
    directory, build with g++, run the driver; prints `ids=...` last (as the cpu target does)."""
    from strata.cli import parse_prompt_ids, report_result
    from strata.outputs import check_output_path
    from strata.pipeline import load_model
    from strata.targets.cpu.driver import check_request

    prompt = parse_prompt_ids(args.prompt_ids)
    if args.dump_logits:
        check_output_path(args.dump_logits)
    model = load_model(args.model)
    n = int(args.max_new_tokens)
    if n < 1:
        raise EpuError("--max-new-tokens must be at least 1 for the EPU driver")
    knobs = parse_knobs(getattr(args, "set", None))
    if args.ctx is not None:
        knobs.setdefault("ctx", args.ctx)
    k = resolve(model, knobs)
    check_request(prompt, n, int(model.config.vocab_size), k["ctx"])
    cache = Path(args.cache_dir) if args.cache_dir else model.root / ".strata-cache" / "epu"
    _, rebuilt = compile_epu(model, cache, k)
    print(f"strata: EPU stages in {cache} (rebuilt: {', '.join(rebuilt) or 'nothing'})", file=sys.stderr)
    ids, logits, frac = run_epu(cache, prompt, n)
    report_result(ids, logits * 2.0 ** -frac, args.dump_logits)
    return 0
