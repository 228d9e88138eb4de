"""w4a16 weights: SmoothQuant, then int4 weights as ONNX Runtime's
MatMulNBits stores them, written as a stage and read back.

    plan = plan_model(model, ranges="ranges.json", alpha=0.5, block=128)   # runs the passes
    write_w4a16(model, plan, "out/tiny-w4a16")                             # the stage
    weights = W4A16Weights.open("out/tiny-w4a16")                          # .get(name): dequantized f32
    b, scales, zp = weights.packed("blk.0.attn_q.weight")                   # MatMulNBits' initializers

`plan_model` lowers the model's decode entry and runs `smoothquant{alpha ranges}` (when a ranges
file is given) and `quantize-w4a16{block}` on it: the passes decide which norm weights and
projections are smoothed together and which weights become int4, and record it on the function.
`smoothed_weights` then carries SmoothQuant out on the weights (`strata.quant.smoothquant`),
`quantize_weights` the int4 step (`strata.ir.int4`).

The stage directory holds
- `w4a16.safetensors`: every param of the model under its llama.cpp name, f32 (the norm weights
  smoothed), except each int4 weight NAME [N, K], stored as MatMulNBits' three initializers:
  `NAME.q4` uint8 [N, ceil(K/block), block/2], `NAME.scales` f32 [N, ceil(K/block)],
  `NAME.zero_points` uint8 [N, ceil(ceil(K/block)/2)] (byte for byte what ONNX Runtime's
  MatMulNBitsQuantizer writes for the ONNX weight [K, N] = W^T);
- `w4a16.json`: `strata-w4a16/v1`, the block, each int4 weight's N and K, what was skipped and
  why, SmoothQuant's alpha, groups and the ranges file's sha256 (or null);
- the model's `config.json`, and `manifest.json` (`strata.artifacts.stage`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from strata.artifacts.stage import check_destination, locked, manifest_bytes, write_stage
from strata.errors import StrataError
from strata.ir.int4 import Int4Error, dequantize_int4_block, n_blocks, pack_int4, quantize_int4_block, unpack_int4
from strata.ir.weights import Overlay, SafetensorsFile, WeightError, write_safetensors
from strata.passes import quantize_w4a16 as QW
from strata.passes import smoothquant as SQ
from strata.passes.pipelines import entry_pipeline, lowered
from strata.passes.quantize_w4a16 import W4A16Error
from strata.quant.smoothquant import smooth_weights

FORMAT = "strata-w4a16/v1"
TENSORS = "w4a16.safetensors"
INFO = "w4a16.json"


@dataclass
class Plan:
    """What the passes decided for a model."""

    block: int
    weights: list[str]  # the int4 weights, llama.cpp names, program order
    skipped: list[tuple[str, str]]
    alpha: float | None = None
    groups: list[SQ.SmoothGroup] = field(default_factory=list)
    ranges: dict[str, Any] | None = None
    ranges_sha256: str | None = None


def _attr_pairs(fn, key: str) -> list[tuple[str, str]]:
    attr = fn.attributes.get(key)
    return [(a.data[0].data, a.data[1].data) for a in attr.data] if attr is not None else []  # type: ignore[attr-defined]


def plan_model(model: Any, ranges: str | Path | None = None, alpha: float = 0.5, block: int = 128) -> Plan:
    """Run smoothquant (with `ranges`) and quantize-w4a16 on the model's decode entry."""
    from strata.semantics.op_interp import find_function

    QW.check_block(block)
    if ranges is not None:  # calibrated on this model, before any work
        from strata.quant.calibrate import check_ranges_model

        check_ranges_model(SQ.read_ranges(ranges), model, ranges)
    passes = [entry_pipeline("decode", start=1, ctx=2, kv_pad=1)]
    if ranges is not None:
        spec = json.dumps(str(ranges))  # a quoted string in the pipeline syntax
        passes.append(f"smoothquant{{alpha={float(alpha)!r} ranges={spec}}}")
    passes.append(f"quantize-w4a16{{block={block}}}")
    fn = find_function(lowered(model.module, ",".join(passes)))
    names, blk = QW.plan_of(fn)
    plan = Plan(block=blk, weights=names, skipped=_attr_pairs(fn, "w4a16.skipped"))
    if ranges is not None:
        plan.groups, plan.alpha = SQ.plan_of(fn)
        plan.ranges = SQ.read_ranges(ranges)
        plan.ranges_sha256 = hashlib.sha256(Path(ranges).read_bytes()).hexdigest()
        plan.skipped += [(n, f"not smoothed: {why}") for n, why in _attr_pairs(fn, "smoothquant.skipped")]
    return plan


def smoothed_weights(store: Any, plan: Plan) -> Overlay:
    """`store` with SmoothQuant's changes applied (unchanged when the plan has no ranges)."""
    if plan.ranges is None or plan.alpha is None:
        return Overlay(store, {})
    changed, _ = smooth_weights(store, plan.groups, plan.ranges, plan.alpha)
    return Overlay(store, changed)


def emulated_weights(store: Any, plan: Plan) -> Overlay:
    """What the w4a16 model computes with, in memory: smoothed, each int4 weight quantized and
    dequantized ((q - zp) * scale, f32), everything else as stored."""
    smooth = smoothed_weights(store, plan)
    changed = dict(smooth.changed)
    for name in plan.weights:
        changed[name] = dequantize_int4_block(*quantize_int4_block(smooth.get(name), plan.block), plan.block)
    return Overlay(store, changed)


def quantize_weights(weights: Any, names: Sequence[str], block: int,
                     progress=None) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """name -> (B uint8 [N, nb, block/2], scales f32 [N, nb], zero points uint8 [N, ceil(nb/2)]),
    byte for byte what ONNX Runtime's MatMulNBitsQuantizer writes for the weight [K, N] = W^T."""
    QW.check_block(block)
    out = {}
    for i, name in enumerate(names):
        w = np.asarray(weights[name] if isinstance(weights, Mapping) else weights.get(name), np.float32)
        if w.ndim != 2:
            raise W4A16Error(f"'{name}': int4 quantization takes a 2-D weight, got shape {list(w.shape)}")
        try:
            q, scale, zp = quantize_int4_block(w, block)
        except StrataError as e:
            raise W4A16Error(f"'{name}': {e}") from None
        b, zpacked = pack_int4(q, zp, block)
        out[name] = (b, scale, zpacked)
        if progress is not None:
            progress(i + 1, len(names), name)
    return out


def write_w4a16(model: Any, plan: Plan, out: str | Path, store: Any = None,
                progress: Callable[[int, int, str], None] | None = None) -> Path:
    """Write the stage directory `out` (see the module docstring); returns it."""
    out = Path(out)
    files = {TENSORS, INFO, "config.json"}
    check_destination(out, files)  # before any work
    store = store if store is not None else model.open_weights(quiet=True)
    smooth = smoothed_weights(store, plan)
    packed = quantize_weights(smooth, plan.weights, plan.block, progress)
    tensors: dict[str, np.ndarray] = {}
    for name in model.params():
        if name in packed:
            b, s, z = packed[name]
            tensors.update({f"{name}.q4": b, f"{name}.scales": s, f"{name}.zero_points": z})
        else:
            tensors[name] = np.asarray(smooth.get(name), np.float32)
    shapes = {n: [int(packed[n][0].shape[0]), int(np.asarray(smooth.get(n)).shape[1])] for n in plan.weights}
    info = {
        "format": FORMAT, "model": model.name, "block": plan.block,
        "weights": {n: {"N": shapes[n][0], "K": shapes[n][1]} for n in plan.weights},
        "skipped": [{"weight": n, "why": why} for n, why in plan.skipped],
        "smoothquant": None if plan.ranges is None else {
            "alpha": plan.alpha, "ranges_sha256": plan.ranges_sha256,
            "groups": [[g.norm, *g.linears] for g in plan.groups]},
    }
    with tempfile.TemporaryDirectory() as tmp:
        data = write_safetensors(Path(tmp) / TENSORS, tensors).read_bytes()
    config = model.root / "config.json"
    blobs = {TENSORS: data, INFO: (json.dumps(info, indent=1) + "\n").encode(),
             "config.json": config.read_bytes() if config.is_file() else b"{}\n"}
    inputs = {"model": model.name, "block": plan.block, "alpha": plan.alpha, "ranges_sha256": plan.ranges_sha256,
              "config_sha256": hashlib.sha256(blobs["config.json"]).hexdigest()}
    blobs["manifest.json"] = manifest_bytes("w4a16", inputs, blobs)
    with locked(out):
        write_stage(out, blobs)
    return out


class W4A16Weights:
    """A written w4a16 stage, read back: `.get(name)` gives every param as the w4a16 model
    computes with it (int4 weights dequantized, f32), `.packed(name)` the MatMulNBits tensors."""

    def __init__(self, root: Path, info: dict[str, Any], st: SafetensorsFile) -> None:
        self.root, self.info, self.file = root, info, st
        self.block = int(info["block"])
        self.weights: dict[str, dict[str, int]] = info["weights"]

    @classmethod
    def open(cls, out: str | Path) -> W4A16Weights:
        root = Path(out)
        try:
            info = json.loads((root / INFO).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise W4A16Error(f"{root}: no {INFO} (not a `strata quantize --w4a16` output)") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise W4A16Error(f"{root / INFO}: cannot read it ({str(e).splitlines()[0][:80]})") from None
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise W4A16Error(f"{root / INFO}: not a w4a16 description (expected \"format\": \"{FORMAT}\")")
        block, weights = info.get("block"), info.get("weights")
        if not isinstance(block, int) or isinstance(block, bool) or block < 16 or not isinstance(weights, dict):
            raise W4A16Error(f"{root / INFO}: fields 'block' (an integer >= 16) and 'weights' (an object) are required")
        try:
            st = SafetensorsFile(root / TENSORS)
        except (OSError, WeightError) as e:
            raise W4A16Error(f"{root / TENSORS}: {e}") from None
        return cls(root, info, st)

    def _array(self, name: str) -> np.ndarray:
        try:
            return self.file.array(name)
        except (KeyError, WeightError):
            raise W4A16Error(f"{self.root / TENSORS}: no tensor '{name}'") from None

    def packed(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if name not in self.weights:
            raise W4A16Error(f"{self.root}: '{name}' is not an int4 weight")
        b, s, z = (self._array(f"{name}{sfx}") for sfx in (".q4", ".scales", ".zero_points"))
        n, k = self.weights[name]["N"], self.weights[name]["K"]
        nb = n_blocks(k, self.block)
        want = {"q4": (n, nb, self.block // 2), "scales": (n, nb), "zero_points": (n, n_blocks(nb, 2))}
        for what, arr in zip(want, (b, s, z)):
            if tuple(arr.shape) != want[what]:
                raise W4A16Error(f"{self.root / TENSORS}: '{name}.{what}' has shape {list(arr.shape)}, "
                                 f"expected {list(want[what])} for N={n} K={k} block={self.block}")
        return np.asarray(b), np.asarray(s, np.float32), np.asarray(z)

    def get(self, name: str) -> np.ndarray:
        if name not in self.weights:
            return np.asarray(self._array(name))
        b, s, z = self.packed(name)
        try:
            q, zp = unpack_int4(b, z, self.weights[name]["K"])
        except Int4Error as e:
            raise W4A16Error(f"{self.root / TENSORS}: '{name}': {e}") from None
        return dequantize_int4_block(q, s, zp, self.block)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.get(name)


def quantize_to(model: Any, output: str | Path, ranges: str | Path | None = None, alpha: float = 0.5,
                block: int = 128) -> list[str]:
    """`strata quantize --w4a16`: SmoothQuant (with `ranges`, from `strata calibrate`), then int4
    weights packed as MatMulNBits, written to the stage `output`; returns the lines to report."""
    from strata.errors import counter

    check_destination(Path(output), {TENSORS, INFO, "config.json"})
    plan = plan_model(model, ranges, alpha, block)
    write_w4a16(model, plan, output, progress=counter("quantized", "weights"))
    smooth = f", {len(plan.groups)} SmoothQuant groups (alpha {plan.alpha})" if plan.ranges is not None else ""
    return ([f"wrote {len(plan.weights)} int4 weights (block {plan.block}){smooth} to {output}"]
            + [f"left as f32: '{name}' ({why})" for name, why in plan.skipped])
