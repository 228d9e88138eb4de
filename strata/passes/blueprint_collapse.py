"""blueprint-collapse: record each blueprint function's layer templates in its IR.

For every function holding blueprint nodes, read its rows (`strata.dialects.blueprint_graph`),
collapse its layers into templates (`strata.dialects.blueprint_templates.collapse`: a layer is an
instance of a template when its nodes, precision, groups and internal edges are the template's)
and set the function attribute

    blueprint.collapsed = {prologue = ["embed"], layout = ["gdn+moe_ffn", ..., "attn+moe_ffn"],
                           epilogue = ["head"],
                           templates = {"gdn+moe_ffn" = {instances = [0, 1, 2], ports = {in = [0, 10], out = [22]}}, ...}}

The kbp-graph exporter computes the same collapse for its `collapsed` section and refuses a
function whose recorded attribute no longer matches it. The pass changes nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from strata.dialects.blueprint_graph import (COLLAPSED_ATTR, blueprint_functions, check_functions, collapsed_attr,
                                            read_graph)
from strata.dialects.blueprint_templates import collapse
from strata.errors import StrataError
from strata.passes.options import StrataPass


@dataclass(frozen=True)
class BlueprintCollapsePass(StrataPass):
    name = "blueprint-collapse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_functions(op, self.name)
        for fn in blueprint_functions(op):
            graph = read_graph(fn)
            try:
                result = collapse(graph.nodes, graph.edges)
            except StrataError as e:
                raise StrataError(f"blueprint-collapse: @{fn.sym_name.data}: {e}") from None
            fn.attributes[COLLAPSED_ATTR] = collapsed_attr(result)
