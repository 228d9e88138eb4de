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


#: The entries a program gets unless asked for others: the generation loop's.
DEFAULT_ENTRIES = "prefill,decode"
#: The entries that return logits [rows, vocab]: a program of only these gets the sampler.
SAMPLED_ENTRIES = {"prefill", "decode", "decode_rows", "prefill_slots", "prefill_packed", "step_packed",
                   "decode_paged", "prefill_paged", "step_paged", "next_token"}
#: The cpu target's knobs beyond ctx, flash_attn and kv_pad: the entries to compile
#: (comma-separated, or "all") and the module level's generics a checkpoint does not bind
#: (None: the model's value or the option's default).
ENTRY_KNOBS: dict[str, Any] = {"entries": DEFAULT_ENTRIES, **{g: None for g in (
    "Batch", "MaxSeq", "PageSize", "Rows", "Pages", "M", "S", "P", "Steps", "MaxNew")}}


def entry_list(text: str) -> list[str]:
    """The entries a knob names: comma-separated, or "all" (every entry of the module level)."""
    from strata.passes.convert_module_to_op import ENTRIES

    if text == "all":
        return list(ENTRIES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENTRIES]
    if unknown or not names:
        raise TargetError(f"entries: {unknown[0] if unknown else text!r} is not an entry "
                          f"(known: {', '.join(ENTRIES)}, or all)")
    return list(dict.fromkeys(names))


def check_entry_knobs(model: Any, k: dict[str, Any]) -> dict[str, Any]:
    """MaxSeq is ctx by another name; the entries must be known."""
    if k.get("MaxSeq") is not None:
        if k.get("ctx") is not None and k["ctx"] != k["MaxSeq"]:
            raise TargetError(f"MaxSeq={k['MaxSeq']} and ctx={k['ctx']} disagree (MaxSeq is the context)")
        k["ctx"] = k["MaxSeq"]
    entries = entry_list(k["entries"])
    if k.get("tp", 1) > 1 and set(entries) - {"prefill", "decode"}:
        raise TargetError(f"tp={k['tp']}: a tensor-parallel program runs prefill and decode; entries "
                          f"{','.join(e for e in entries if e not in ('prefill', 'decode'))} run on one rank (tp=1)")
    return k


def _tensor_parallel(k: Mapping[str, Any]) -> str:
    """The sharding pass a `tp` knob above 1 puts first (`ep`: whole experts per rank), or nothing."""
    ep = f" ep={k['ep']}" if k.get("ep", 1) > 1 else ""
    return f"shard-tensor-parallel{{tp={k['tp']}{ep}}}," if k.get("tp", 1) > 1 or ep else ""


def _cpu() -> Target:
    from strata.passes.pipelines import entry_pipeline, generic_options
    from strata.passes.cpu_native_kernels import is_native
    from strata.targets.cpu import native_stage, program
    from strata.targets.cpu.emit import emit_cpu

    def pipeline(k: Mapping[str, Any]) -> str:
        entries = ",".join(entry_list(k.get("entries", DEFAULT_ENTRIES)))
        shard = _tensor_parallel(k)
        # The runtime's loop and its scheduler sample with the program's own sampler, on the
        # logits [rows, vocab] their entries return; a program with entries of other results
        # (loss, log-probs, the device loops: run by strata call) has none.
        sampler = ",add-sampler" if set(entries.split(",")) <= SAMPLED_ENTRIES else ""
        return shard + entry_pipeline(entries, tokens=k.get("S") or 0, start=-1, ctx=k["ctx"], kv_pad=k["kv_pad"],
                                      flash_attn=k["flash_attn"], kv_type=k.get("kv_type", ""),
                                      act_quant=k.get("act_quant", True),
                                      **generic_options(dict(k))) + sampler + \
            (",cpu-native-kernels" if k.get("kernels") == "native" else "") + \
            (",cpu-native-host{host=python}" if k.get("kernels") == "native" and k.get("host") == "python" else "")

    def emit(module: ModuleOp, model_name: str | None, weights: Any = None) -> dict[str, str | bytes]:
        if not is_native(module):
            return {"model.py": emit_cpu(module, model_name)}
        found = native_stage.library_file({"kernels": "native"})
        if found is None:
            raise TargetError("cpu target: the module asks for the native kernels, but no C++ compiler built them")
        name, data = found
        entries = native_stage.native_entries(module)
        built = native_stage.entry_library_file(entries) if entries else None
        if built is not None:  # the kernels with the printed entries compiled in
            name, data = built
        else:
            entries = {}
        return {"model.py": emit_cpu(module, model_name, name, entries), name: data}

    def check(model: Any, k: dict[str, Any]) -> dict[str, Any]:
        return native_stage.check_kernels(model, check_entry_knobs(model, k))

    # kv_type: the KV cache's element type ("": the model's; f16 is llama.cpp's default cache).
    # tp: the ranks of a tensor-parallel program (launched by strata.runtime.tp: one process each);
    # ep: 1, or tp for whole experts per rank (expert parallelism).
    # kernels: native (the compiled library on the GGUF's packed weights, where a compiler is
    # found) or numpy (the portable reference).
    # host: native (each entry the C++ printer takes is one native call per step) or python.
    # act_quant: a block weight's activations rounded to its vec_dot type as ggml-cpu does (true),
    # or kept float (false: the numpy kernels, for a comparison with float kernels such as cuda's).
    knobs = {"ctx": None, "flash_attn": True, "kv_pad": 256, "kv_type": "", "tp": 1, "ep": 1, "kernels": "native",
             "host": "native", "act_quant": True,
             **ENTRY_KNOBS}
    return Target("cpu", pipeline, emit, knobs, ("model.py",), load=program.load, check=check,
                  extra_outputs=native_stage.library_outputs, compiles_entries=True, ranks="gloo")


def _cuda() -> Target:
    from strata.targets.cuda import device, program
    from strata.targets.cuda.emit import emit_cuda

    def pipeline(k: Mapping[str, Any]) -> str:
        from strata.passes.pipelines import entry_pipeline, generic_options, spec_value

        # The batched entries run @prefill's kernel groups over their tokens (host_tokens.py):
        # only their host records (arguments, layout) are made, before prefill and decode lower.
        batched = [e for e in entry_list(k.get("entries", DEFAULT_ENTRIES)) if e not in ("prefill", "decode")]
        record = "record-entry-calls" + entry_pipeline(
            ",".join(batched), tokens=k.get("S") or 0, ctx=k["ctx"], kv_pad=1,
            **generic_options(dict(k))).removeprefix("convert-module-to-op") + "," if batched else ""
        return (_tensor_parallel(k) + record +
                f"convert-module-to-op{{entry=prefill,decode tokens=0 start=-1 ctx={k['ctx']} kv_pad=1}},add-sampler,"
                f"convert-op-to-blueprint{{mode=auto}},blueprint-assign-precision{{recipe={spec_value(k['recipe'])}}},"
                f"blueprint-place-state{{kv={spec_value(k['kv'])} embed=device sample={spec_value(k['sample'])}}},"
                "blueprint-fuse")

    def emit(module: ModuleOp, model_name: str | None, weights: Any = None) -> dict[str, str | bytes]:
        return emit_cuda(module, model_name)

    # Default recipe bf16 (every family): the weights and activations of the checkpoints' own
    # type; fp8-bf16head (fp8 block weights, bf16 head), w4a16 and f32 (exact, for the
    # interpreter) are the others. KV cache contiguous by default (one sequence; the paged
    # decode attention spills on sm_90 at Qwen3-8B's head size), kv=paged for pages of 16 rows.
    # The sampler (kbp-graph/v1's `sample` placement): on the device by default, beside the argmax;
    # sample=host draws on the host from the logits copied there.
    def check(model: Any, k: dict[str, Any]) -> dict[str, Any]:
        loops = [e for e in entry_list(k["entries"]) if e in ("generate", "sample", "generate_until")]
        if loops:
            raise TargetError(f"entries: the cuda target does not compile the device loop {loops[0]} "
                              "(the runtime's loop steps its decode)")
        return check_entry_knobs(model, k)

    # entries: prefill and decode, and any batched entry of the entry table (the device loops
    # excepted), with the generics they bind (Batch, PageSize, Rows, Pages, ...).
    # tp, ep: as the cpu target's; its ranks meet on NCCL, or on gloo in the interpreter
    # (`strata.runtime.tp.backend_of`: the interpreter's tensors are on the CPU).
    knobs = {"ctx": None, "recipe": "bf16", "kv": "contiguous", "sample": "device", "tp": 1, "ep": 1,
             **ENTRY_KNOBS}
    return Target("cuda", pipeline, emit, knobs, ("kernels.py", "model.py"), load=program.load, check=check,
                  prepare=device.prepare, interprets=True, prepares_weights=True, aot_archs=("sm_90a",),
                  compiles_entries=True, ranks="nccl")


def _epu() -> Target:
    from strata.targets.epu import epu_target

    return epu_target()


def _onnxruntime() -> Target:
    from strata.targets.onnxruntime.program import open_onnxruntime

    def nothing_compiled(*_: Any) -> Any:
        raise TargetError("onnxruntime exports the model and runs it at each run: it is not compiled "
                          "(strata run --via onnxruntime)")

    # The op level exported to ONNX at each run (prefill for the prompt's length, and decode):
    # the knobs its lowering reads.
    knobs = {"ctx": None, "flash_attn": True, "kv_pad": 256}
    return Target("onnxruntime", nothing_compiled, nothing_compiled, knobs, (), load=nothing_compiled,
                  opens=open_onnxruntime)


#: target name -> its definition, made on first use (a target's imports are not free).
TARGETS: dict[str, Callable[[], Target]] = {"cpu": _cpu, "cuda": _cuda, "epu": _epu}
#: The runtimes a model is exported to and run by at each run, not compiled for (`--via`).
EXPORTED: dict[str, Callable[[], Target]] = {"onnxruntime": _onnxruntime}


def target(name: str) -> Target:
    """A compiled target, or a runtime the model is exported to (`EXPORTED`)."""
    made = TARGETS.get(name) or EXPORTED.get(name)
    if made is None:
        raise TargetError(f"target '{name}' is not available (available: {', '.join(TARGETS)})")
    return made()
