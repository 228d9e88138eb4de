"""convert-module-to-op: expand a `module.model`'s entries into llama.cpp's op graph.

The pass walks the model's block instances and dispatches on each block's kind (its
`path`) to the expansion registered for it (`EXPANSIONS`, filled by the modules of this
package); it knows no model family. One `func.func` per entry:

* `prefill` of S tokens (S static, or dynamic with `tokens=0`) from a start position, and
  `decode` of one token: llama.cpp's graph of one sequence (with Batch 1);
* every other entry of the module level's entry table (and prefill and decode with Batch > 1) runs the tokens of
  several sequences as one flat row [N, H] (see `CallPlan`): batched rows (`decode_rows`),
  prompts into slots (`prefill_slots`), packed segments (`*_packed`), a paged cache
  (`*_paged`), whole sequences without a cache (`forward`, `next_token`), and the device
  loops (`generate`, `generate_until`, `sample`) over a step function (`@greedy_step`, or
  `@sample_step`, which draws with the sampler).

The generics a checkpoint does not bind are options: `batch` (Batch), `page_size`
(PageSize), `rows` and `pages` (Rows, Pages: default Batch and the pages that hold `ctx`),
`prompts` (M, default Batch), `steps` (Steps), `max_new` (MaxNew) and `packed_tokens` (P,
0: dynamic); `tokens` is S (0: dynamic) and `ctx` is MaxSeq. The function records its entry's arguments (`op.args`,
`op.arg_types`) and what the host needs to turn them into the inputs (`op.call`).

`n_kv` (the visible cache rows) is `start + S` rounded up to `kv-pad` (capped at `ctx`)
when both are known, else `ctx`: the mask hides the rows not yet written either way.

The expansions, by theme: `nn` (embedding, RMS norm, gated norm, linear, SwiGLU),
`attention` (grouped-query and gated attention, RoPE and M-RoPE, the KV cache), `hybrid`
(Gated DeltaNet with its conv and recurrent state), `moe` (routed and shared experts) and
`model` (decoder layer, causal LM and its entries); `lowering` holds the graph builder,
which orders ops as ggml's graph does (see `GraphBuilder`), and `entries` the plans of the
entries. Where llama.cpp's builders differ in a name or in one of two equivalent graphs, the
family stamps the fact on its blocks (`ggml_names`, `ggml_inputs`, `ggml_output_rows`,
`ggml_q_split`, `ggml_split`, `qk_repeat`, `rope_mode`): the pass knows block kinds and
attributes, never a family.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, Region

from strata.dialects import module as M
from strata.dialects.instances import BlockInstance, InstanceError, find_model, instantiate
from strata.errors import StrataError

# The expansions register themselves with EXPANSIONS when imported.
from strata.passes.convert_module_to_op import attention, hybrid, model, moe, nn  # noqa: F401
from strata.passes.convert_module_to_op.entries import ENTRIES, LOOPS, lower_plan_entry
from strata.passes.convert_module_to_op.lowering import EXPANSIONS, Lowering, LoweringError, stored_formats
from strata.passes.options import StrataPass

__all__ = ["ConvertModuleToOpPass", "ENTRIES", "EXPANSIONS", "LOOPS", "LoweringError", "lower_entry"]

#: The KV cache types convert-module-to-op can give (kv_type; "" is the model's own).
KV_TYPES = ("", "f32", "f16", "bf16")
#: The largest context the IR can describe with room to spare in int64 products.
MAX_CTX = 2**31 - 1


@dataclass(frozen=True)
class ConvertModuleToOpPass(StrataPass):
    """Lower the model's entries (`entry=prefill,decode`) to one `func.func` each."""

    name = "convert-module-to-op"

    entry: tuple[str, ...] = ("prefill",)
    tokens: int = 0
    start: int = -1
    ctx: int = 0
    kv_pad: int = 256
    flash_attn: bool = True
    batch: int = 0
    page_size: int = 0
    rows: int = 0
    pages: int = 0
    prompts: int = 0
    steps: int = 16
    max_new: int = 16
    packed_tokens: int = 0
    #: A product of a weight stored in a ggml block type quantizes its activation rows as
    #: ggml-cpu does (`op.mul_mat`'s `act`); false: float32 activations.
    act_quant: bool = True
    #: The KV cache's element type ("": the model's); llama.cpp keeps it in f16 by default.
    kv_type: str = ""

    def check(self) -> None:
        _check_options(self, self.entries())

    def entries(self) -> tuple[str, ...]:
        return (self.entry,) if isinstance(self.entry, str) else tuple(self.entry)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check()
        entries = self.entries()
        try:
            model = find_model(op)
            root = instantiate(model, bound_generics(self))
        except InstanceError as e:
            raise _error(str(e)) from None
        declared = {fn.member_name: fn for fn in model.entries()}
        fns: dict[str, func.FuncOp] = {}
        for entry in entries:
            if entry not in declared:
                raise _error(f"the model declares no entry '{entry}' (it has: {', '.join(sorted(declared))})")
            for fn in lower_entry(root, entry, self, declared[entry]):
                fns.setdefault(fn.sym_name.data, fn)  # a step function shared by two loops goes in once
        model.detach()
        model.erase()
        op.body.block.add_ops(list(fns.values()))


def bound_generics(opts: ConvertModuleToOpPass) -> dict[str, int]:
    """The model generics the options bind (Batch, PageSize, MaxSeq), over the checkpoint's."""
    out = {"Batch": opts.batch, "PageSize": opts.page_size, "MaxSeq": opts.ctx}
    return {k: v for k, v in out.items() if v}


def _error(msg: str) -> StrataError:
    return LoweringError(f"convert-module-to-op: {msg}")


def _check_options(opts: ConvertModuleToOpPass, entries: tuple[str, ...]) -> None:
    """Refuse options that would give IR nobody can parse back or run."""
    if not entries or len(set(entries)) != len(entries):
        raise _error(f"entry must name distinct entries, got {','.join(entries) or 'none'}")
    for entry in entries:
        if entry not in ENTRIES:
            raise _error(f"unknown entry '{entry}' (known: {', '.join(ENTRIES)})")
    if not 0 <= opts.tokens <= MAX_CTX:
        raise _error(f"tokens must be >= 0 (0: dynamic) and at most {MAX_CTX}, got {opts.tokens}")
    if not 0 <= opts.packed_tokens <= MAX_CTX:
        raise _error(f"packed-tokens must be >= 0 (0: dynamic) and at most {MAX_CTX}, got {opts.packed_tokens}")
    if entries == ("decode",) and opts.tokens not in (0, 1):
        raise _error(f"decode takes one token, got tokens={opts.tokens}")
    if not -1 <= opts.start <= MAX_CTX:
        raise _error(f"start must be a position >= 0, or -1 for unknown, got {opts.start}")
    if not 0 <= opts.ctx <= MAX_CTX:
        raise _error(f"ctx must be >= 0 (0: the model's MaxSeq) and at most {MAX_CTX}, got {opts.ctx}")
    if not 1 <= opts.kv_pad <= MAX_CTX:
        raise _error(f"kv-pad must be 1 to {MAX_CTX}, got {opts.kv_pad}")
    for name in ("batch", "page_size", "rows", "pages", "prompts"):
        value = getattr(opts, name)
        if not 0 <= value <= 65536:
            raise _error(f"{name.replace('_', '-')} must be >= 1 (0: the default) and at most 65536, got {value}")
    for name in ("steps", "max_new"):
        value = getattr(opts, name)
        if not 1 <= value <= MAX_CTX:
            raise _error(f"{name.replace('_', '-')} must be >= 1, got {value}")
    if opts.kv_type not in KV_TYPES:
        raise _error(f"kv_type must be one of {', '.join(repr(t) for t in KV_TYPES)} ('': the model's), got {opts.kv_type!r}")


def lower_entry(root: BlockInstance, entry: str, opts: ConvertModuleToOpPass,
                declared: M.FnOp | None = None) -> list[func.FuncOp]:
    """The `func.func @<entry>` of the model rooted at `root` (and the step function a device
    loop calls)."""
    n_ctx = opts.ctx or root.dim("MaxSeq")
    if entry in ("prefill", "decode") and root.dim("Batch") == 1:
        return [_one_sequence(root, entry, opts, n_ctx)]
    return lower_plan_entry(root, entry, opts, n_ctx, declared)


def _one_sequence(root: BlockInstance, entry: str, opts: ConvertModuleToOpPass, n_ctx: int) -> func.FuncOp:
    """llama.cpp's graph of prefill or decode for one sequence."""
    tokens = 1 if entry == "decode" else (opts.tokens or DYNAMIC_INDEX)
    if tokens != DYNAMIC_INDEX and tokens > n_ctx:  # at any start, where it is not known
        raise _error(f"{tokens} tokens exceed the context of {n_ctx}")
    if tokens != DYNAMIC_INDEX and opts.start >= 0:
        if opts.start + tokens > n_ctx:
            raise _error(f"{opts.start} + {tokens} tokens exceed the context of {n_ctx}")
        n_kv = min(n_ctx, -(-(opts.start + tokens) // opts.kv_pad) * opts.kv_pad)
    else:
        n_kv = n_ctx
    block = Block()
    ranks = root.dim("Shards") if "Shards" in root.env else 1
    lo = Lowering(block, entry, tokens, n_ctx, n_kv, opts.flash_attn, start=opts.start, ranks=ranks,
                  formats=stored_formats(root.block.parent_op()), act_quant=opts.act_quant,
                  kv_type=opts.kv_type or None)
    logits = lo.g.expand(lo.call(root, entry))
    lo.g.finish()
    block.add_op(func.ReturnOp(logits))
    fn = func.FuncOp(entry, ((), (logits.type,)), Region(block))
    fn.attributes["op.n_ctx"] = IntegerAttr(n_ctx, i64)
    fn.attributes["op.n_kv"] = IntegerAttr(n_kv, i64)
    if ranks > 1:  # one SPMD function for every rank (see strata.dialects.op.collective)
        fn.attributes["op.ranks"] = IntegerAttr(ranks, i64)
    return fn
