"""The compiler's pipeline: read a model once, build its module level once, lower its
entries through a target's pass pipeline, and write the result as a stage.

    model = load_model("models/tiny")                    # config + module level, built once
    store = model.open_weights()                         # checked against the module's params
    op_level = lower(model, entry_pipeline("decode", start=7, ctx=4096))
    out = compile_model(model, "cpu", "build/tiny")      # model.py, op.mlir, manifest.json
    print(target_pipeline("cpu", model, {}))             # the pass pipeline it ran

Every target is a pass-pipeline string over the module level (`strata-opt -p` runs the same
string) plus a printer (`strata.targets`). Families plug in through `strata.models`; the
frontends that build a module are wired to them here (`formats`).
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.artifacts.stage import StageError
from strata.passes.pipelines import (BLUEPRINT_MODES, PipelineError, blueprint_module, blueprint_pipeline,
                                     entry_pipeline, lowered, run_pipeline)
from strata.pipeline.compile import cached_compile, compile_model, resolve_knobs, stage_inputs, target_pipeline
from strata.pipeline.formats import capture, capture_model, capture_to_dir, import_tensorviz
from strata.pipeline.model import Model, composite_of, gguf_config, load_config, load_model, model_root


def lower(model: Model, spec: str) -> ModuleOp:
    """A copy of the model's module level after the pass pipeline `spec`."""
    return lowered(model.module, spec)


def blueprint_of(model: Model, mode: str = "decode", rows: int = 1, recipe: str = "fp8-bf16head",
                 **options: Any) -> ModuleOp:
    """The blueprint level of `model` (one function, named after its entry, `blueprint.model` its name)."""
    return blueprint_module(model.module, model.name, mode, rows, recipe, **options)


__all__ = ["Model", "PipelineError", "StageError", "BLUEPRINT_MODES", "load_model", "load_config", "gguf_config",
           "model_root", "lower", "run_pipeline", "entry_pipeline", "blueprint_pipeline", "blueprint_of",
           "compile_model", "cached_compile", "resolve_knobs", "target_pipeline", "capture", "capture_model",
           "capture_to_dir", "import_tensorviz", "stage_inputs", "composite_of"]
