"""The EPU target (Quadric Chimera's GPNPU): a fixed-level decode step printed as C++17 calling
the EPU custom ops (`emit.py`), with a header-only reference runtime (`runtime/epu_runtime.h`).

Its compile reads the weights and calibration data, so it is staged (`stages.py`: calibrate ->
smoothquant -> w4a16 -> fixed -> cpp, each a content-addressed directory); g++ builds the
driver (`build.py`), and the driver steps under the runtime's generation loop (`program.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.targets.target import Target
from strata.targets.epu.emit import EpuTargetError, emit_epu
from strata.targets.epu.stages import KNOBS

OUTPUTS = ("model.h", "main.cpp", "Makefile", "epu_runtime.h", "weights.bin")


def epu_target() -> Target:
    from strata.targets.epu import program, stages

    def emit(module: ModuleOp, model_name: str | None, weights: Any = None) -> dict[str, str | bytes]:
        if weights is None:
            raise EpuTargetError("epu target: printing the C++ needs the weights (they go to weights.bin)")
        return dict(emit_epu(module, weights, model_name))

    def summary(out: Path) -> str:
        return (out / "cpp" / "cost.txt").read_text(encoding="utf-8").splitlines()[0]

    return Target("epu", stages.pipeline_text, emit, KNOBS, OUTPUTS, load=program.load, staged=stages.compile_epu,
                  check=stages.resolve, summary=summary,
                  greedy_only=program.SAMPLING_REFUSED)


__all__ = ["epu_target", "emit_epu", "EpuTargetError", "KNOBS", "OUTPUTS"]
