"""The CUDA target's printer: the blueprint level (both entries, grouped) -> `kernels.py` and
`model.py`.

* `kernels.py`: the Triton kernel templates the groups need (`kernel_source`), self-contained.
* `model.py`: the host runtime (`runtime.py`'s source, verbatim) and the generated `Model`:
  its tables (weights with their formats, conversions, state buffers, ropes) and one method
  per entry, the launch sequence of its groups (`host.entry_code`); the sampler
  (`_sample_logits`) launches the sampling kernel, or, placed on the host, calls the numpy
  sampler whose source model.py then carries.

Neither file imports strata. Every model-supplied name reaches the code as a checked literal
(`literal_name`: weight and state names) or a sanitized comment (`sanitize_label`).
"""

from __future__ import annotations

from pathlib import Path

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from strata.dialects.blueprint.facts import function_dims, function_weights
from strata.targets.codegen import CodegenError, sanitize_label
from strata.targets.cuda.host import Tables, checked, entry_code
from strata.targets.cuda.emit_ranks import pieces_table, program_ranks, rank_runtime_text, rank_tables
from strata.targets.cuda.kernel_source import kernel_source

RUNTIME = Path(__file__).resolve().with_name("runtime.py")
RUNTIME_ENTRIES = Path(__file__).resolve().with_name("runtime_entries.py")


def host_sampler_source() -> str:
    """The numpy sampler's functions (`sample` and what it calls), for a sampler on the host."""
    from strata.targets.cpu.kernel_library import KernelLibrary
    from strata.semantics import sampling

    library = KernelLibrary.of(sampling)
    return "\n\n\n".join(library.text(n) for n in library.closure({"sample"})) + "\n"


def entries_runtime_source() -> str:
    """The host-input functions `entry_call` needs (strata.semantics.host_inputs) and
    `runtime_entries.py` without its docstring and imports."""
    import ast

    from strata.targets.cpu.kernel_library import KernelLibrary
    from strata.semantics import host_inputs

    library = KernelLibrary.of(host_inputs)
    text = RUNTIME_ENTRIES.read_text(encoding="utf-8")
    body = [n for n in ast.parse(text).body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    first = min([body[0].lineno] + [d.lineno for d in getattr(body[0], "decorator_list", [])])
    own = "\n".join(text.splitlines()[first - 1:])
    return "\n\n\n".join(library.text(n) for n in library.closure({"entry_call"})) + "\n\n\n" + own + "\n"


def entry_tables(module: ModuleOp) -> list[str] | None:
    """The generated Model's `ARGS` and `LAYOUTS` of the batched entries the module records
    (record-entry-calls), or None when it records none."""
    from xdsl.dialects.builtin import DictionaryAttr
    from xdsl.ir import Block, Region

    from strata.passes.record_entry_calls import ENTRY_CALLS
    from strata.targets.cpu.emit_entries import arg_spec, entry_layout

    records = module.attributes.get(ENTRY_CALLS)
    if not isinstance(records, DictionaryAttr):
        return None
    args, layouts = [], []
    for entry, record in records.data.items():
        fn = func.FuncOp(checked(entry, "entry name"), ((), ()), Region(Block()))
        fn.attributes.update(record.data)  # type: ignore[attr-defined]
        args.append(f"    {entry!r}: {arg_spec(fn, set())!r},")
        layouts.append(f"    {entry!r}: {entry_layout(fn)!r},")
    return ["ARGS = {", *args, "}", "LAYOUTS = {", *layouts, "}"]


def _functions(module: ModuleOp) -> list[func.FuncOp]:
    fns = [op for op in module.body.block.ops if isinstance(op, func.FuncOp)]
    if not fns:
        raise CodegenError("the module holds no function to compile")
    return fns


def _convert_table(fns: list[func.FuncOp]) -> dict:
    table: dict = {}
    for fn in fns:
        for name, read in function_weights(fn).items():
            kind = read.convert
            if kind is not None and kind not in ("plus_one", "neg_exp", "squeeze", "ungroup_rows"):
                raise CodegenError(f"weight '{sanitize_label(name)}': conversion '{sanitize_label(kind)}' is unknown")
            table[checked(name, "weight name")] = (checked(read.source, "weight name"), kind, read.args)
    return table


def _model_part(fns: list[func.FuncOp], tables: Tables, model_name: str, ranks: int = 1,
                calls: list[str] | None = None) -> list[str]:
    methods = [ln for fn in fns for ln in ["", *entry_code(fn, tables)]]
    if calls is not None:  # the batched entries: @prefill's groups over many sequences' tokens
        from strata.targets.cuda.host_tokens import tokens_code

        prefill = next((fn for fn in fns if fn.sym_name.data == "prefill"), None)
        if prefill is None:
            raise CodegenError("the batched entries need the blueprint function @prefill")
        methods += ["", *tokens_code(prefill, tables)]
    first = fns[0]
    recipe = first.attributes["blueprint.recipe"].data if "blueprint.recipe" in first.attributes else "?"
    dims = function_dims(first)
    kv_rows = [shape[0] for name, (shape, _) in tables.state.items() if name not in tables.recurrent
               and not name.endswith(".snapshot")]
    out = ["", "", "# " + "-" * 93, f"# Generated for {sanitize_label(model_name)}", "", "",
           f"class Model({'RankRuntime' if ranks > 1 else 'EntriesRuntime' if calls is not None else 'Runtime'}):",
           f'    """{sanitize_label(model_name)}, recipe {sanitize_label(recipe)}: Model(weights[, device, '
           'interpret, cuda_graph])."""', "",
           f"    MODEL_NAME = {sanitize_label(model_name)!r}",
           f"    RECIPE = {sanitize_label(recipe)!r}",
           f"    N_CTX = {min(kv_rows) if kv_rows else 2 ** 31 - 1}",
           f"    VOCAB = {dims.get('vocab', 0)}",
           f"    TOP_K = {dims.get('top_k', 0)}",
           "    WEIGHTS = ("]
    out += [f"        {spec!r}," for spec in tables.weights]
    out += ["    )", "    CONVERT = {"]
    out += [f"        {k!r}: {v!r}," for k, v in sorted(tables.convert.items())]
    out += ["    }", "    STATE = {"]
    out += [f"        {k!r}: {v!r}," for k, v in sorted(tables.state.items())]
    out += ["    }",
            f"    RECURRENT = {tuple(sorted(tables.recurrent))!r}",
            f"    PAGED = {tuple(sorted(tables.paged))!r}",
            f"    ROPES = {tuple(tables.ropes)!r}",
            f"    ROPE_MODES = {tuple(sorted(tables.rope_modes))!r}"]
    if ranks > 1:  # one rank's program: the rank runtime's tables (emit_ranks)
        out += rank_tables(ranks, pieces_table(fns))
    out += ["    " + ln for ln in calls or ()]
    out += ["    " + ln if ln else "" for ln in methods]
    return out


def emit_cuda(module: ModuleOp, model_name: str | None) -> dict[str, str]:
    """{"kernels.py": ..., "model.py": ...} of a module at the blueprint level."""
    name = model_name or "model"
    fns = _functions(module)
    tables = Tables()
    tables.convert = _convert_table(fns)
    ranks = program_ranks(fns)
    calls = entry_tables(module)
    model_part = _model_part(fns, tables, name, ranks, calls)
    recipe = fns[0].attributes["blueprint.recipe"].data if "blueprint.recipe" in fns[0].attributes else "?"
    kernels, jit = kernel_source(tables.launchers, name, recipe)
    runtime = RUNTIME.read_text(encoding="utf-8")
    if tables.host_sampler:  # the sampler placed on the host: the numpy sampler's source, as the cpu target's
        runtime += "\n\n# " + "-" * 93 + "\n# The sampler on the host (strata.semantics.sampling)\n\n\n" + host_sampler_source()
    head = (f'"""{sanitize_label(name)} compiled by strata for CUDA (Triton), recipe {sanitize_label(recipe)}: '
            "the host program (generated: do not edit).\n\n"
            "    from model import Model          # this file; kernels.py must stay beside it\n"
            "    m = Model(weights)               # llama.cpp tensor names -> arrays or tensors\n"
            "    ids, logits = m.generate([1, 2, 3], 16)\n\n"
            f"Kernels used: {', '.join(jit)}.\n"
            '"""\n')
    if ranks > 1:  # one rank of a tensor-parallel program: the collectives on torch.distributed
        runtime += "\n\n# " + "-" * 93 + "\n# One rank of a tensor-parallel program\n\n" + rank_runtime_text()
    if calls is not None:  # the host inputs' functions and the entries' runtime, their imports dropped
        runtime += "\n\n# " + "-" * 93 + "\n# The batched entries\n\n\n" + entries_runtime_source()
    # the runtime's own docstring is kept below the header as a comment-free module body
    body = runtime.split('"""', 2)[2].lstrip("\n")
    model = head + "\n" + body.rstrip("\n") + "\n" + "\n".join(model_part) + "\n\n\nK = _load_kernels()\n"
    return {"kernels.py": kernels, "model.py": model}
