"""The EPU target (seed 004, Quadric Chimera): a fixed-level decode step printed as C++17 calling
the EPU custom ops (`emit.py`), with a header-only reference runtime (`runtime/epu_runtime.h`).

Its compile is staged (calibrate -> smoothquant -> w4a16 -> fixed -> cpp) and needs the weights
and calibration data, so it lives above the pipeline in `strata.epu`; `strata compile --target
epu` runs it. This `Target` lists the knobs and prints the passes of the fixed stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.targets import Target
from strata.targets.epu.emit import EpuTargetError, emit_epu

#: calib_*: the random calibration prompts (32 of 32 tokens: fewer leave ranges too tight for
#: other prompts, and an element-wise op past its range saturates).
KNOBS: dict[str, Any] = {"alpha": 0.5, "headroom": 2, "block": 128, "ctx": None, "calib_prompts": 32,
                         "calib_len": 32, "calib_seed": 0}
OUTPUTS = ("model.h", "main.cpp", "Makefile", "epu_runtime.h", "weights.bin")


def epu_target() -> Target:
    def pipeline(k: Mapping[str, Any]) -> str:
        return (f"convert-op-to-blueprint{{mode=prefill rows=1}},blueprint-assign-precision{{recipe=w4a16}},"
                f"convert-blueprint-to-fixed{{ranges=RANGES kv_ctx={k.get('ctx')}}},"
                f"assign-frac-bits{{headroom={k.get('headroom')} ranges=RANGES}},epu-pack-projections")

    def emit(module: ModuleOp, model_name: str | None) -> dict[str, str]:
        raise EpuTargetError("epu target: its compile is staged and reads the weights (strata.epu.compile_epu, "
                             "or strata compile MODEL --target epu -o OUT)")

    return Target("epu", pipeline, emit, KNOBS, OUTPUTS)


__all__ = ["epu_target", "emit_epu", "EpuTargetError", "KNOBS", "OUTPUTS"]
