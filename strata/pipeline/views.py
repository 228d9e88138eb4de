"""A model's levels as text: what `strata inspect`, `ir`, `trace`, `blueprint` and `view` print.

    text = listing(model)                                        # the module level: entries, generics
    text = level_ir(model, "op", entry="decode", start=7, ctx=4096)
    text = trace(model, "prefill", tokens=5, ctx=256, kv_pad=256)
    text = blueprint_text(model, "kbp-graph", "decode", 1, "fp8-bf16head")
    text = view(module, "blueprint", "html", ...)                # Graphviz, SVG or a page

Each function lowers what it needs (`strata.passes.pipelines`) and hands the IR to one
printer (`strata.exporters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from strata.errors import StrataError
from strata.passes.pipelines import blueprint_module, blueprint_pipeline, entry_pipeline, lowered, max_seq


@dataclass(frozen=True)
class Lowering:
    """Which entry to lower and for what: `strata ir/trace/view --entry --tokens --start --ctx --kv-pad`."""

    entry: str = "prefill"
    tokens: int | None = None  # None: 5 for a prefill, 1 for a decode
    start: int = 0
    ctx: int = 0
    kv_pad: int = 256
    flash_attn: bool = True

    def pipeline(self) -> str:
        tokens = self.tokens if self.tokens is not None else (5 if self.entry == "prefill" else 1)
        return entry_pipeline(self.entry, tokens=tokens, start=self.start, ctx=self.ctx, kv_pad=self.kv_pad,
                              flash_attn=self.flash_attn)


@dataclass(frozen=True)
class Blueprint:
    """Which blueprint: `--mode --rows --recipe --kv`, and `--tp --ep`: one rank's of a
    tensor-parallel program (every rank's is the same, on its piece of the weights)."""

    mode: str = "decode"
    rows: int = 1
    recipe: str = "fp8-bf16head"
    kv: str = "paged"
    tp: int = 1
    ep: int = 1


def _function(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


def blueprint_function(model: Any, bp: Blueprint) -> func.FuncOp:
    """The model's blueprint function for `bp`."""
    return _function(blueprint_module(model.module, model.name, bp.mode, bp.rows, bp.recipe, kv=bp.kv, tp=bp.tp,
                                      ep=bp.ep))


def listing(model: Any) -> str:
    """The module level as a listing: entries, generics, blocks."""
    from strata.exporters.listing import model_listing

    return model_listing(model.module)


def group_table(model: Any, bp: Blueprint) -> str:
    """The blueprint level as one line per kernel group: rule, nodes, precision, state."""
    from strata.exporters.blueprint_table import inspect_table

    return inspect_table(blueprint_function(model, bp))


def level_ir(model: Any, level: str, lowering: Lowering, recipe: str = "fp8-bf16head", kv: str = "paged") -> str:
    """The IR of a level: the module level, an entry's op level, or that entry's blueprint
    (prefill: its tokens as rows; decode: one row)."""
    from strata.ir.text import print_ir

    if level == "blueprint":
        prefill = lowering.entry == "prefill"
        bp = Blueprint("prefill" if prefill else "decode", (lowering.tokens or 5) if prefill else 1, recipe, kv)
        return print_ir(blueprint_function(model, bp))
    if level == "module":
        return print_ir(model.module)
    return print_ir(lowered(model.module, lowering.pipeline()))


def trace(model: Any, lowering: Lowering) -> str:
    """An entry's op level as llama.cpp's eval-callback table."""
    from strata.exporters.trace import trace_table

    return trace_table(lowered(model.module, lowering.pipeline()))


def provenance(model: Any, bp: Blueprint) -> dict:
    """What a kbp-graph export records of where it came from."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        strata_version = version("strata")
    except PackageNotFoundError:  # run from a source tree
        strata_version = "source"
    config = (model.root / "config.json").read_bytes() if (model.root / "config.json").is_file() else b""
    config_sha256 = model.gguf.header_sha256 if model.gguf is not None else hashlib.sha256(config).hexdigest()
    command = (f"strata blueprint {model.name} --mode {bp.mode} --rows {bp.rows} --recipe {bp.recipe} "
               f"--kv {bp.kv}" + (f" --tp {bp.tp}" if bp.tp > 1 else "") + (f" --ep {bp.ep}" if bp.ep > 1 else ""))
    return {"kind": "strata", "model": model.name, "config_sha256": config_sha256,
            "recipe": bp.recipe, "mode": bp.mode, "rows": bp.rows, "kv": bp.kv,
            **({"tp": bp.tp, "ep": bp.ep} if bp.tp > 1 else {}), "strata": strata_version, "commands": [command]}


BLUEPRINT_FORMATS = ("kbp-graph", "dot", "table", "mlir")


def blueprint_text(model: Any, fmt: str, bp: Blueprint) -> str:
    """The blueprint level as kbp-graph/v1 JSON, Graphviz (a cluster per group), the group table
    or the IR."""
    fn = blueprint_function(model, bp)
    if fmt == "kbp-graph":
        from strata.exporters.kbp_graph import export_kbp_graph, kbp_graph_json

        return kbp_graph_json(export_kbp_graph(fn, provenance=provenance(model, bp))) + "\n"
    if fmt == "dot":
        from strata.exporters.blueprint_dot import blueprint_dot

        return blueprint_dot(fn)
    if fmt == "table":
        from strata.exporters.blueprint_table import inspect_table

        return inspect_table(fn)
    if fmt == "mlir":
        from strata.ir.text import print_ir

        return print_ir(fn)
    raise StrataError(f"blueprint: unknown format {fmt!r} (known: {', '.join(BLUEPRINT_FORMATS)})")


def view(module: ModuleOp, level: str, fmt: str, *, lowering: Lowering, bp: Blueprint, expand: bool = False,
         require_dot: bool = False, label: str = "model") -> tuple[str, str]:
    """(the picture, a one-line summary) of a module level's `level` as Graphviz text, SVG (by
    Graphviz's dot if installed, else strata's own layout) or a self-contained HTML page."""
    from strata.exporters import view as V
    from strata.exporters import view_render as R

    dot = R.dot_binary() if fmt != "dot" else None
    if fmt != "dot" and dot is None and require_dot:
        raise StrataError("view: Graphviz's 'dot' is not on PATH (install graphviz), and --require-dot was given")
    if level == "module":
        graph = V.module_graph(module)
        keys = V.layer_keys(graph)
    elif level == "op":
        graph = V.op_graph(lowered(module, lowering.pipeline()))
        keys = V.layer_keys(graph)
    else:
        spec = blueprint_pipeline(bp.mode, bp.rows, bp.recipe, kv=bp.kv, tp=bp.tp, ep=bp.ep, max_ctx=max_seq(module))
        graph, keys = V.blueprint_graph(_function(lowered(module, spec)))
    full = len(graph.nodes)
    if not expand:
        graph = V.collapse_layers(graph, keys)
    summary = (f"{label}: {level} level, {len(graph.nodes)} nodes shown of {full}"
               + ("" if len(graph.nodes) == full else " (repeated layers collapsed; --expand shows all)")
               + (f"; {graph.label}" if graph.label else ""))
    text = V.to_dot(graph)
    if fmt != "dot":
        text = R.svg_via_dot(text, dot) if dot is not None else R.layout_svg(graph)
        if fmt == "html":
            text = R.html_page(f"{graph.name}: {level} level", text, summary)
    return text, summary
