"""Targets: each a pass pipeline from the module level plus a printer of the result.

`strata compile --print-pipeline` shows a target's pipeline and `strata-opt -p` runs it;
the printer is a plain function of the IR (no policy). Adding a target: write
`strata/targets/<name>/` with its emitter and list a `Target` in :data:`TARGETS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import ModuleOp


@dataclass(frozen=True)
class Target:
    name: str
    #: knobs -> the pass pipeline that takes the module level to what `emit` prints.
    pipeline: Callable[[Mapping[str, Any]], str]
    #: (lowered module, model name) -> the files of the output, by name.
    emit: Callable[[ModuleOp, str | None], dict[str, str]]
    #: The knobs the pipeline reads, with their defaults.
    knobs: Mapping[str, Any]
    #: The names of the files `emit` writes.
    outputs: tuple[str, ...]


def _cpu() -> Target:
    from strata.targets.cpu.emit import emit_cpu

    def pipeline(k: Mapping[str, Any]) -> str:
        flash = "true" if k["flash_attn"] else "false"
        return (f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={k['ctx']} "
                f"kv_pad={k['kv_pad']} flash_attn={flash}}}")

    def emit(module: ModuleOp, model_name: str | None) -> dict[str, str]:
        return {"model.py": emit_cpu(module, model_name)}

    return Target("cpu", pipeline, emit, {"ctx": None, "flash_attn": True, "kv_pad": 256}, ("model.py",))


def _cuda() -> Target:
    from strata.targets.cuda.emit import emit_cuda

    def pipeline(k: Mapping[str, Any]) -> str:
        return (f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={k['ctx']} kv_pad=1}},"
                f"convert-op-to-blueprint{{mode=auto}},blueprint-assign-precision{{recipe={k['recipe']}}},"
                f"blueprint-place-state{{kv={k['kv']} embed=device sample=device}},blueprint-fuse")

    # Default recipe bf16 (every family): the weights and activations of the checkpoints' own
    # type; fp8-bf16head (fp8 block weights, bf16 head), w4a16 and f32 (exact, for the
    # interpreter) are the others. KV cache contiguous by default (one sequence; the paged
    # decode attention spills on sm_90 at Qwen3-8B's head size), kv=paged for pages of 16 rows.
    return Target("cuda", pipeline, emit_cuda, {"ctx": None, "recipe": "bf16", "kv": "contiguous"},
                  ("kernels.py", "model.py"))


#: target name -> its definition, made on first use.
TARGETS: dict[str, Callable[[], Target]] = {"cpu": _cpu, "cuda": _cuda}
TARGETS["epu"] = lambda: __import__("strata.targets.epu", fromlist=["epu_target"]).epu_target()  # seed 004 (staged: strata.epu)


def target(name: str) -> Target:
    from strata.errors import StrataError

    if name not in TARGETS:
        raise StrataError(f"target '{name}' is not available (available: {', '.join(TARGETS)})")
    return TARGETS[name]()
