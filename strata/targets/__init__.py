"""Targets: each a pass pipeline from the module level, a printer of the result, and a loader
that runs what was printed behind the runtime's program protocol (`strata.runtime.program`).

`strata compile --print-pipeline` shows a target's pipeline and `strata-opt -p` runs it; the
printer is a plain function of the IR (no policy). A target whose compile reads the weights
(the EPU's calibration and int4 stages) builds its own stages (`staged`). Adding a target:
write `strata/targets/<name>/` with its emitter and its program, and list a `Target` in
:data:`TARGETS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.targets.target import Target, TargetError


def _cpu() -> Target:
    from strata.targets.cpu import program
    from strata.targets.cpu.emit import emit_cpu

    def pipeline(k: Mapping[str, Any]) -> str:
        flash = "true" if k["flash_attn"] else "false"
        kv_type = f" kv_type={k['kv_type']}" if k["kv_type"] else ""
        return (f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={k['ctx']} "
                f"kv_pad={k['kv_pad']} flash_attn={flash}{kv_type}}}")

    def emit(module: ModuleOp, model_name: str | None, weights: Any = None) -> dict[str, str | bytes]:
        return {"model.py": emit_cpu(module, model_name)}

    # kv_type: the KV cache's element type ("": the model's; f16 is llama.cpp's default cache)
    return Target("cpu", pipeline, emit, {"ctx": None, "flash_attn": True, "kv_pad": 256, "kv_type": ""}, ("model.py",),
                  load=program.load)


def _cuda() -> Target:
    from strata.targets.cuda import program
    from strata.targets.cuda.emit import emit_cuda

    def pipeline(k: Mapping[str, Any]) -> str:
        return (f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={k['ctx']} kv_pad=1}},"
                f"convert-op-to-blueprint{{mode=auto}},blueprint-assign-precision{{recipe={k['recipe']}}},"
                f"blueprint-place-state{{kv={k['kv']} embed=device sample=device}},blueprint-fuse")

    def emit(module: ModuleOp, model_name: str | None, weights: Any = None) -> dict[str, str | bytes]:
        return emit_cuda(module, model_name)

    # Default recipe bf16 (every family): the weights and activations of the checkpoints' own
    # type; fp8-bf16head (fp8 block weights, bf16 head), w4a16 and f32 (exact, for the
    # interpreter) are the others. KV cache contiguous by default (one sequence; the paged
    # decode attention spills on sm_90 at Qwen3-8B's head size), kv=paged for pages of 16 rows.
    return Target("cuda", pipeline, emit, {"ctx": None, "recipe": "bf16", "kv": "contiguous"},
                  ("kernels.py", "model.py"), load=program.load)


def _epu() -> Target:
    from strata.targets.epu import epu_target

    return epu_target()


#: target name -> its definition, made on first use (a target's imports are not free).
TARGETS: dict[str, Callable[[], Target]] = {"cpu": _cpu, "cuda": _cuda, "epu": _epu}


def target(name: str) -> Target:
    if name not in TARGETS:
        raise TargetError(f"target '{name}' is not available (available: {', '.join(TARGETS)})")
    return TARGETS[name]()
