"""The plans of the module level's entries: how each runs its tokens (see `CallPlan`), the generics it
binds, and its function's record of its arguments and of what the host computes from them.

| entry | K and V | attention streams | recurrent state |
|---|---|---|---|
| forward, next_token | the call's own | one per row (B rows of S) | fresh per row |
| decode, prefill (Batch > 1) | the cache | one per row | the rows' slots |
| decode_rows | the cache | one per row (one token each) | the rows' slots |
| prefill_slots | the call's own, written to the slots | one per prompt | the slots |
| hidden_packed, log_probs_packed, loss_packed | the call's own | one, masked to segments | fresh per segment |
| prefill_packed, step_packed | the cache | one, masked to rows | the rows' slots |
| decode_paged | the cache's pages | one per row | the rows' slots |
| prefill_paged, step_paged | the cache's pages | one, masked to rows | the rows' slots |
| generate, generate_until | (a loop over `@greedy_step`: decode_rows' graph and ARGMAX) | | |
| sample | (a loop over `@sample_step`: decode_rows' graph and the sampler, `op.sample`) | | |

A row's stream has the row's tokens only when every row has the same static number of them;
otherwise (a dynamic S) the tokens share one stream, each masked to its own sequence.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FlatSymbolRefAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Region

from strata.dialects import module as M
from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.ir.dtypes import DTypeError, dtype_named
from strata.ir.shapes import Expr, ShapeSyntaxError, parse_fn_signature
from strata.passes.convert_module_to_op.lowering import (
    CallPlan,
    Lowering,
    LoweringError,
    block_origin,
    stored_formats,
    tensor,
)

#: Every entry of the module level's entry table, in its order.
ENTRIES = ("forward", "next_token", "decode", "prefill", "decode_rows", "prefill_slots", "loss_packed",
           "log_probs_packed", "hidden_packed", "prefill_packed", "step_packed", "decode_paged", "prefill_paged",
           "step_paged", "generate", "sample", "generate_until")
#: entry -> (where K and V come from, what the recurrent state does); see the table above.
LAYOUTS = {
    "forward": ("self", "fresh"), "next_token": ("self", "fresh"),
    "decode": ("cache", "slots"), "prefill": ("cache", "slots"),
    "decode_rows": ("cache", "slots"), "prefill_slots": ("self", "slots"),
    "loss_packed": ("self", "fresh"), "log_probs_packed": ("self", "fresh"), "hidden_packed": ("self", "fresh"),
    "prefill_packed": ("cache", "slots"), "step_packed": ("cache", "slots"),
    "decode_paged": ("paged", "slots"), "prefill_paged": ("paged", "slots"), "step_paged": ("paged", "slots"),
}
#: The device loops: entry -> its step function (one decode step per row, choosing each row's
#: token by the argmax or, for sample, by the sampler).
LOOPS = {"generate": "greedy_step", "sample": "sample_step", "generate_until": "greedy_step"}
#: A step function's own signature (the module level's `step`, choosing the token as well); a sampling
#: step also takes the entry's key and temperature, and its draw's counter `step`.
STEP_SIGNATURES = {
    "greedy_step": "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch; i32]",
    "sample_step": "(token: Tensor[Batch, 1; i32], pos: i32, key: Tensor[2; i64], temperature: f32, step: i32) "
                   "-> Tensor[Batch; i32]",
}
#: The sampler's parameters the sample entry does not take: top_k 0, top_p 1, min_p 0 and no
#: penalties (every token kept; the temperature alone shapes the distribution).
FIXED_SAMPLE_PARAMS = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0,
                       "presence_penalty": 0.0, "frequency_penalty": 0.0}


def _error(msg: str) -> LoweringError:
    return LoweringError(f"convert-module-to-op: {msg}")


def conv_kernel(root: BlockInstance) -> int:
    """The conv kernel size of the model's Gated DeltaNet layers (0: it has none)."""
    for inst in root.walk():
        if inst.kind == "std.attn.gated_delta_net":
            return inst.dim("ConvK")
    return 0


def make_plan(root: BlockInstance, entry: str, opts, n_ctx: int) -> tuple[CallPlan, dict[str, int]]:
    """The entry's plan, and the values of its own generics (DYNAMIC_INDEX: the dynamic one)."""
    batch, page = root.dim("Batch"), root.dim("PageSize")
    tokens = opts.tokens or DYNAMIC_INDEX  # S
    if entry in ("hidden_packed", "log_probs_packed", "loss_packed", "prefill_packed", "step_packed",
                 "prefill_paged", "step_paged"):
        tokens = opts.packed_tokens or DYNAMIC_INDEX  # P
    kv, state = LAYOUTS[entry]
    recurrent = conv_kernel(root) > 0
    generics: dict[str, int] = {}
    groups, outputs, n_kv = batch, batch, n_ctx
    if entry in ("forward", "next_token"):
        streams, per = batch, tokens
        generics = {"B": batch, "S": tokens}
        outputs = None if entry == "forward" else batch
    elif entry in ("decode", "prefill", "decode_rows"):
        streams, per = batch, 1 if entry != "prefill" else tokens
        if entry == "prefill":
            generics = {"S": tokens}
        if entry != "decode_rows" and opts.start >= 0 and per != DYNAMIC_INDEX:
            if opts.start + per > n_ctx:
                raise _error(f"{opts.start} + {per} tokens exceed the context of {n_ctx}")
            n_kv = min(n_ctx, -(-(opts.start + per) // opts.kv_pad) * opts.kv_pad)
    elif entry == "prefill_slots":
        prompts = opts.prompts or batch
        if prompts > batch:
            raise _error(f"prefill_slots: M = {prompts} prompts do not fit the {batch} slots (Batch)")
        streams, per, groups, outputs = prompts, tokens, prompts, prompts
        generics = {"M": prompts, "S": tokens}
    elif entry in ("hidden_packed", "log_probs_packed", "loss_packed"):
        streams, per, groups, outputs = 1, tokens, 1, None
        generics = {"P": tokens}
    elif entry in ("prefill_packed", "step_packed"):
        streams = 1
        per = tokens if entry == "prefill_packed" else _plus(batch, tokens)
        outputs = batch if entry == "prefill_packed" else 2 * batch
        generics = {"P": tokens}
        n_kv = batch * n_ctx
    else:  # the paged entries
        if page > n_ctx:
            raise _error(f"the page size {page} exceeds the context of {n_ctx}")
        rows, pages = opts.rows or batch, opts.pages or -(-n_ctx // page)
        if recurrent and rows > batch:
            raise _error(f"{entry}: Rows = {rows} exceeds the {batch} recurrent-state slots (Batch)")
        generics = {"Rows": rows, "Pages": pages}
        groups = outputs = rows
        if entry == "decode_paged":
            streams, per, n_kv = rows, 1, pages * page
        else:
            generics["P"] = tokens
            streams, n_kv = 1, rows * pages * page
            per = tokens if entry == "prefill_paged" else _plus(rows, tokens)
            outputs = rows if entry == "prefill_paged" else 2 * rows
    if streams > 1 and per == DYNAMIC_INDEX:  # rows of a dynamic length share one stream
        streams = 1
        if kv == "cache":
            n_kv = batch * n_ctx
    if kv == "self":  # a stream's columns are its own tokens
        n_kv = per
    if entry in ("decode", "decode_rows", "decode_paged"):  # every token's logits, in order: no GET_ROWS
        outputs = None
    plan = CallPlan(entry, kv, streams, per, n_kv, state, groups, outputs, batch, writes=entry == "prefill_slots")
    return plan, generics


def _plus(n: int, tokens: int) -> int:
    return tokens if tokens == DYNAMIC_INDEX else n + tokens


def _times(n: int, tokens: int) -> int:
    return tokens if tokens == DYNAMIC_INDEX else n * tokens


def lower_plan_entry(root: BlockInstance, entry: str, opts, n_ctx: int, declared: M.FnOp | None) -> list[func.FuncOp]:
    """The function of an entry that runs by a plan (every entry but one-sequence prefill and
    decode), and for a device loop its step function."""
    env_extra: dict[str, int] = {}
    if entry in LOOPS:
        steps = opts.max_new if entry == "generate_until" else opts.steps
        env_extra = {"MaxNew" if entry == "generate_until" else "Steps": steps}
        step = _step_function(root, opts, n_ctx, LOOPS[entry])
        fn = _loop_function(root, entry, steps, n_ctx, step)
        _record(fn, root, entry, declared, env_extra, _layout(root, entry, "cache", "rows", "slots", n_ctx, n_ctx,
                                                             {"Steps": steps}))
        return [fn, step]
    plan, generics = make_plan(root, entry, opts, n_ctx)
    block = Block()
    lo = Lowering(block, entry, plan.tokens, n_ctx, plan.n_kv, opts.flash_attn, start=opts.start, plan=plan,
                  formats=stored_formats(root.block.parent_op()), act_quant=opts.act_quant)
    results = lo.call(root, entry)
    results = [lo.g.expand(r) for r in (results if isinstance(results, list) else [results])]
    lo.g.finish()
    block.add_op(func.ReturnOp(*results))
    fn = func.FuncOp(entry, ((), tuple(r.type for r in results)), Region(block))
    fn.attributes["op.n_ctx"] = IntegerAttr(n_ctx, i64)
    fn.attributes["op.n_kv"] = IntegerAttr(plan.n_kv if plan.n_kv != DYNAMIC_INDEX else n_ctx, i64)
    streams = "rows" if plan.streams > 1 else "one"
    _record(fn, root, entry, declared, generics,
            _layout(root, entry, plan.kv, streams, plan.state, n_ctx, plan.n_kv, {}))
    return [fn]


def entry_record(root: BlockInstance, entry: str, opts, n_ctx: int, declared: M.FnOp | None) -> dict[str, Attribute]:
    """What the host of a plan entry needs without its graph: `op.call` (its layout), `op.args`
    and `op.arg_types`, as the entry's lowered function records them (for a target that runs
    the entry's tokens through a graph of its own)."""
    if entry not in LAYOUTS or entry in ("prefill", "decode"):
        raise _error(f"'{entry}' is not an entry that runs by a plan")
    plan, generics = make_plan(root, entry, opts, n_ctx)
    fn = func.FuncOp(entry, ((), ()), Region(Block([func.ReturnOp()])))
    streams = "rows" if plan.streams > 1 else "one"
    _record(fn, root, entry, declared, generics, _layout(root, entry, plan.kv, streams, plan.state, n_ctx, plan.n_kv, {}))
    return {k: fn.attributes[k] for k in ("op.call", "op.args", "op.arg_types")}


def _step_function(root: BlockInstance, opts, n_ctx: int, name: str) -> func.FuncOp:
    """`@greedy_step`: decode_rows' graph at one position for every row, then ARGMAX;
    `@sample_step`: the same graph, then `op.sample` of the step's key, temperature and counter
    (row r's draw is the sampler's row r)."""
    batch = root.dim("Batch")
    plan = CallPlan("decode", "cache", batch, 1, n_ctx, "slots", batch, None, batch)
    block = Block()
    lo = Lowering(block, "decode", plan.tokens, n_ctx, n_ctx, opts.flash_attn, plan=plan,
                  formats=stored_formats(root.block.parent_op()), act_quant=opts.act_quant)
    (logits,) = lo.call(root, "decode_rows")
    if name == "greedy_step":
        ids = lo.g.expand(lo.g.unary(O.ArgmaxOp, logits, (batch,), "result_ids", elem=i32))
    else:
        ids = lo.g.expand(_sample(lo, logits, batch))
    lo.g.finish()
    block.add_op(func.ReturnOp(ids))
    fn = func.FuncOp(name, ((), (ids.type,)), Region(block), visibility="private")
    fn.attributes["op.n_ctx"] = IntegerAttr(n_ctx, i64)
    fn.attributes["op.n_kv"] = IntegerAttr(n_ctx, i64)
    _record(fn, root, "decode", None, {}, _layout(root, "decode", "cache", "rows" if batch > 1 else "one", "slots",
                                                 n_ctx, n_ctx, {}), STEP_SIGNATURES[name])
    return fn


def _sample(lo: Lowering, logits, batch: int):
    """`op.sample` of the logits [Batch, Vocab] by the step's key, counter and temperature (host
    inputs) and the fixed parameters (`FIXED_SAMPLE_PARAMS`, constants of one value per row)."""
    key = lo.input("key", (2,), i64, "key")
    step = lo.input("step", (1,), i32, "step")
    params = [lo.input("temperature", (1,), f32, "temperature")]
    for name, kind in O.SAMPLE_PARAMS[1:]:
        elem = i32 if kind == "i32" else f32
        value = DenseIntOrFPElementsAttr.from_list(tensor((1,), elem), [FIXED_SAMPLE_PARAMS[name]])
        params.append(lo.g.add(O.ConstantOp(value), f"sample_{name}"))
    op = O.SampleOp.build(operands=[logits, key, step, *params, None, None, None], result_types=[tensor((batch,), i32)])
    return lo.g.add(op, "result_ids")


def _loop_function(root: BlockInstance, entry: str, steps: int, n_ctx: int, step: func.FuncOp) -> func.FuncOp:
    batch = root.dim("Batch")
    block = Block()
    tokens = O.InputOp("tokens", tensor((batch,), i32), "inp_tokens")
    start = O.InputOp("start", tensor((1,), i32))
    block.add_ops([tokens, start])
    callee = FlatSymbolRefAttr(step.sym_name.data)
    attrs = {"callee": callee, "steps": IntegerAttr(steps, i64)}
    ids_type = tensor((batch, steps), i32)
    if entry == "generate":
        loop = O.GenerateOp.create(operands=[tokens.result, start.result], result_types=[ids_type], attributes=attrs)
    elif entry == "sample":
        key, temperature = O.InputOp("key", tensor((2,), i64)), O.InputOp("temperature", tensor((1,), f32))
        block.add_ops([key, temperature])
        loop = O.GenerateSampledOp.create(operands=[tokens.result, start.result, key.result, temperature.result],
                                          result_types=[ids_type], attributes=attrs)
    else:
        eos = O.InputOp("eos", tensor((1,), i32))
        block.add_op(eos)
        loop = O.GenerateUntilOp.create(operands=[tokens.result, start.result, eos.result],
                                        result_types=[ids_type, TensorType(i32, ())], attributes=attrs)
    block.add_ops([loop, func.ReturnOp(*loop.results)])
    model = block_origin(root)  # the loop and its inputs are the model's
    for op in block.ops:
        if not isinstance(op, func.ReturnOp):
            op.attributes[O.ORIGIN] = model
    fn = func.FuncOp(entry, ((), tuple(r.type for r in loop.results)), Region(block))
    fn.attributes["op.n_ctx"] = IntegerAttr(n_ctx, i64)
    fn.attributes["op.n_kv"] = IntegerAttr(n_ctx, i64)
    return fn


def _layout(root: BlockInstance, entry: str, kv: str, streams: str, state: str, n_ctx: int, n_kv: int,
            extra: dict[str, int]) -> dict[str, Attribute]:
    """What the host needs to turn the entry's arguments into its function's inputs (`op.call`)."""
    dims = {"Batch": root.dim("Batch"), "MaxSeq": n_ctx, "PageSize": root.dim("PageSize"), "Vocab": root.dim("Vocab"),
            "ConvK": conv_kernel(root), **extra}
    if n_kv != DYNAMIC_INDEX:  # the columns of a stream (a dynamic count: the call's tokens)
        dims["n_kv"] = n_kv
    return {"entry": StringAttr(entry), "kv": StringAttr(kv), "streams": StringAttr(streams), "state": StringAttr(state),
            **{k: IntegerAttr(v, i64) for k, v in dims.items()}}


def _record(fn: func.FuncOp, root: BlockInstance, entry: str, declared: M.FnOp | None, generics: dict[str, int],
            layout: dict[str, Attribute], signature: str | None = None) -> None:
    """`op.call`, and the entry's arguments as its signature gives them (`op.args`, `op.arg_types`)."""
    text = signature or (declared.type_text if declared is not None else None)
    if text is None:
        raise _error(f"no signature for the entry '{entry}'")
    try:
        sig = parse_fn_signature(text)
    except ShapeSyntaxError as e:
        raise _error(f"entry '{entry}': {e}") from None
    env = {k: v for k, v in root.env.items() if isinstance(v, int)} | {k: v for k, v in generics.items()}
    names, types = [], []
    for name, t in sig.params:
        names.append(StringAttr(name))
        types.append(_arg_type(entry, name, t, env, root))
    fn.attributes["op.call"] = DictionaryAttr(layout)
    fn.attributes["op.args"] = ArrayAttr(names)
    fn.attributes["op.arg_types"] = ArrayAttr(types)


def _arg_type(entry: str, name: str, t, env: dict[str, int], root: BlockInstance) -> Attribute:
    try:
        elem = dtype_named(str(root.env.get(t.dtype, t.dtype))).attr
    except DTypeError as e:
        raise _error(f"entry '{entry}': argument '{name}': {e}") from None
    if not t.dims:
        return elem
    shape = []
    for d in t.dims:
        if not isinstance(d, Expr):
            raise _error(f"entry '{entry}': argument '{name}' has a variadic shape")
        if any(env.get(n) == DYNAMIC_INDEX for n in d.names()):
            shape.append(DYNAMIC_INDEX)
            continue
        try:
            shape.append(d.evaluate(env))
        except ShapeSyntaxError as e:
            raise _error(f"entry '{entry}': argument '{name}': {e}") from None
    return TensorType(elem, shape)


__all__ = ["ENTRIES", "LAYOUTS", "LOOPS", "entry_record", "make_plan", "lower_plan_entry"]
