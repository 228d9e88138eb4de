"""Pass pipelines: running a pipeline string on a module, and the strings that lower a model.

    module = lowered(model_module, entry_pipeline("decode", start=7, ctx=4096))
    bp = blueprint_module(model_module, "qwen3-8b", "decode", 1, "fp8-bf16head")

A pipeline is `strata-opt -p`'s syntax (`a,b{x=1},c`); every target's pipeline and every
lowering the drivers run is built by the functions here, so that `strata compile
--print-pipeline` prints what runs.
"""

from __future__ import annotations

from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

from strata.dialects import strata_context
from strata.errors import StrataError
from strata.passes import strata_passes


class PipelineError(StrataError):
    """A pass pipeline that cannot be parsed or run, or a compile that cannot proceed."""


def run_pipeline(module: ModuleOp, spec: str, ctx: Context | None = None) -> ModuleOp:
    """Run the pass pipeline `spec` (strata-opt's `-p` syntax) on `module` in place."""
    try:
        pipeline = PassPipeline.parse_spec(strata_passes(), spec)
    except Exception as e:  # noqa: BLE001 - xDSL reports bad specs with several exception types
        raise PipelineError(f"pass pipeline '{spec}': {str(e).strip().splitlines()[0]}") from None
    pipeline.apply(ctx or strata_context(), module)
    try:
        module.verify()
    except VerifyException as e:
        raise PipelineError(f"pass pipeline '{spec}' produced invalid IR: {str(e).strip().splitlines()[0]}") from None
    return module


def lowered(module: ModuleOp, spec: str) -> ModuleOp:
    """A copy of `module` after the pass pipeline `spec` (the original is left as it is)."""
    return run_pipeline(module.clone(), spec)


#: The entries' generics a checkpoint does not bind, by the option of convert-module-to-op that
#: sets each (MaxSeq is `ctx`; S and P are `tokens`), with the option's default.
GENERIC_OPTIONS = {"Batch": ("batch", 0), "PageSize": ("page_size", 0), "Rows": ("rows", 0), "Pages": ("pages", 0),
                   "M": ("prompts", 0), "Steps": ("steps", 16), "MaxNew": ("max_new", 16), "P": ("packed_tokens", 0)}
#: Every generic an entry's function can bind: those, MaxSeq (`ctx`) and S (`tokens`).
SETTABLE_GENERICS = ("Batch", "MaxSeq", "PageSize", "Steps", "MaxNew", "Rows", "Pages", "P", "M", "S")


def generic_options(values: dict[str, Any]) -> dict[str, int]:
    """The convert-module-to-op options (`batch=4`) of the generics in `values` (`Batch=4`; None
    or absent: the option's default). MaxSeq and S are `ctx` and `tokens`, not given here."""
    return {option: values[name] for name, (option, _) in GENERIC_OPTIONS.items() if values.get(name) is not None}


def entry_pipeline(entry: str, *, tokens: int = 0, start: int = -1, ctx: int = 0, kv_pad: int = 256,
                   flash_attn: bool = True, kv_type: str = "", act_quant: bool = True, **generics: int) -> str:
    """The pass pipeline that lowers one entry (or several, comma-separated: what `strata ir
    --level op` and `trace` run, and the targets); `kv_type` the cache's element type ("": the
    model's), `act_quant=False` keeps float activations for block-quantized weights (see
    convert-module-to-op); `generics` sets the options of GENERIC_OPTIONS by their option names
    (batch=4), each given only where it is not its default."""
    defaults = dict(GENERIC_OPTIONS.values())
    unknown = sorted(set(generics) - set(defaults))
    if unknown:
        raise PipelineError(f"convert-module-to-op has no option {unknown[0]!r}")
    flash = "true" if flash_attn else "false"
    extra = "".join(f" {k}={v}" for k, v in generics.items() if v is not None and v != defaults[k])
    extra += (f" kv_type={kv_type}" if kv_type else "") + ("" if act_quant else " act_quant=false")
    return (f"convert-module-to-op{{entry={entry} tokens={tokens} start={start} ctx={ctx} kv_pad={kv_pad} "
            f"flash_attn={flash}{extra}}}")


BLUEPRINT_MODES = ("decode", "multi_seq", "verify", "draft", "prefill")


def shard_pipeline(tp: int = 1, ep: int = 1) -> str:
    """The tensor-parallel pass for `tp` ranks (whole experts per rank with `ep` = tp), or nothing."""
    if tp == 1 and ep == 1:
        return ""
    return f"shard-tensor-parallel{{tp={tp}" + (f" ep={ep}" if ep > 1 else "") + "}"


def blueprint_pipeline(mode: str = "decode", rows: int = 1, recipe: str = "fp8-bf16head", *, kv: str = "paged",
                       embed: str = "host", sample: str = "host", collapse: bool = True, tp: int = 1,
                       ep: int = 1) -> str:
    """The passes from the module level to the blueprint level of one mode: the op level of the
    entry that runs `rows` rows (decode for one, prefill otherwise; one rank's of `tp`, see
    `shard_pipeline`), then convert-op-to-blueprint, precision, state placement, fusion and
    collapse."""
    if mode not in BLUEPRINT_MODES:
        raise PipelineError(f"unknown mode '{mode}' (known: {', '.join(BLUEPRINT_MODES)})")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise PipelineError(f"rows must be a positive integer, got {rows!r}")
    entry = "decode" if mode != "prefill" and rows == 1 else "prefill"
    # The blueprint keeps no context size: the smallest cache that holds the rows will do.
    lower = entry_pipeline(entry, tokens=rows if entry == "prefill" else 0, start=0 if entry == "prefill" else rows,
                           ctx=max(2 * rows, 64), kv_pad=1)
    shard = shard_pipeline(tp, ep)
    passes = [*([shard] if shard else []), lower, f"convert-op-to-blueprint{{mode={mode} rows={rows}}}",
              f"blueprint-assign-precision{{recipe={recipe}}}",
              f"blueprint-place-state{{kv={kv} embed={embed} sample={sample}}}", "blueprint-fuse"]
    return ",".join(passes + (["blueprint-collapse"] if collapse else []))


def blueprint_module(module: ModuleOp, model_name: str, mode: str = "decode", rows: int = 1,
                     recipe: str = "fp8-bf16head", **options: Any) -> ModuleOp:
    """The blueprint level of the module-level program `module` (one function, named after its
    entry, with `blueprint.model` = `model_name`)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import StringAttr

    out = lowered(module, blueprint_pipeline(mode, rows, recipe, **options))
    for fn in out.walk():
        if isinstance(fn, func.FuncOp):
            fn.attributes["blueprint.model"] = StringAttr(model_name)
    return out
