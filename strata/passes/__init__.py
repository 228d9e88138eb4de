"""Strata's passes, one per file named after the pass, and their registry.

Adding a pass: write `strata/passes/<name_with_underscores>.py` holding a frozen-dataclass
`ModulePass` whose `name` is the pass name, and list it in :data:`PASSES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

#: pass name -> (module, class name); imported only when the pass is used.
PASSES: dict[str, tuple[str, str]] = {
    "convert-module-to-op": ("strata.passes.convert_module_to_op", "ConvertModuleToOpPass"),
    "convert-op-to-blueprint": ("strata.passes.convert_op_to_blueprint", "ConvertOpToBlueprintPass"),
    "blueprint-assign-precision": ("strata.passes.blueprint_assign_precision", "BlueprintAssignPrecisionPass"),
    "blueprint-place-state": ("strata.passes.blueprint_place_state", "BlueprintPlaceStatePass"),
    "blueprint-fuse": ("strata.passes.blueprint_fuse", "BlueprintFusePass"),
    "blueprint-collapse": ("strata.passes.blueprint_collapse", "BlueprintCollapsePass"),
    "smoothquant": ("strata.passes.smoothquant", "SmoothQuantPass"),
    "quantize-w4a16": ("strata.passes.quantize_w4a16", "QuantizeW4A16Pass"),
    "assign-frac-bits": ("strata.passes.assign_frac_bits", "AssignFracBitsPass"),
    "convert-blueprint-to-fixed": ("strata.passes.convert_blueprint_to_fixed", "ConvertBlueprintToFixedPass"),
    "epu-pack-projections": ("strata.passes.epu_pack_projections", "EpuPackProjectionsPass"),
    "add-sampler": ("strata.passes.add_sampler", "AddSamplerPass"),
    "cpu-native-kernels": ("strata.passes.cpu_native_kernels", "CpuNativeKernelsPass"),
    "cpu-native-host": ("strata.passes.cpu_native_host", "CpuNativeHostPass"),
    "shard-tensor-parallel": ("strata.passes.shard_tensor_parallel", "ShardTensorParallelPass"),
    "record-entry-calls": ("strata.passes.record_entry_calls", "RecordEntryCallsPass"),
}


def strata_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> pass class factory, for `strata-opt -p` and pipelines."""

    def factory(module: str, cls: str) -> Callable[[], type[ModulePass]]:
        return lambda: getattr(importlib.import_module(module), cls)

    return {name: factory(*where) for name, where in PASSES.items()}
