"""Kernel groups: `blueprint.group`, a region op holding the nodes one fusion rule put in
one kernel launch, and its terminator `blueprint.yield`."""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import BlockArgument
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, RecursiveMemoryEffect

from strata.dialects.blueprint.attrs import PLACEMENTS, EdgeType, PlacementAttr
from strata.ir.checks import require


@irdl_op_definition
class GroupOp(IRDLOperation):
    """A kernel group: the nodes one fusion rule (kbp-graph/v1's `rule`, such as `w8a16_m32`
    or `cross_layer_add_norm`) fuses into one launch, where it runs, and the edges it
    hands on (its results, yielded by the body). The body reads edges from outside;
    groups do not nest.

        %q = blueprint.group "w8a16_m32" on device {
          %y = blueprint.linear %xn weight "q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
          blueprint.yield %y : !blueprint.edge<"n", "q_heads*head_dim", bf16>
        } : !blueprint.edge<"n", "q_heads*head_dim", bf16>
    """

    name = "blueprint.group"
    rule = attr_def(StringAttr)
    placement = attr_def(PlacementAttr)
    outs = var_result_def(EdgeType)
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    @classmethod
    def parse(cls, parser: Parser) -> GroupOp:
        rule = parser.parse_str_literal(" (the group's fusion rule)")
        parser.parse_keyword("on")
        where = parser.parse_keyword_in(PLACEMENTS, " (host or device)")
        attrs = parser.parse_optional_attr_dict_with_keyword(("rule", "placement"))
        body = parser.parse_region()
        types = []
        if parser.parse_optional_punctuation(":") is not None:
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        extra = dict(attrs.data) if attrs is not None else {}
        return cls.create(result_types=types, regions=[body],
                          attributes={**extra, "rule": StringAttr(rule), "placement": PlacementAttr(where)})

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.rule.data)
        printer.print_string(f" on {self.placement.value}")
        printer.print_op_attributes(self.attributes, reserved_attr_names=("rule", "placement"), print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=True)
        if self.outs:
            printer.print_string(" : ")
            printer.print_list([r.type for r in self.outs], printer.print_attribute)

    def verify_(self) -> None:
        require(self.rule.data.isidentifier(), f"blueprint.group: rule must be a name, got '{self.rule.data}'")
        block = self.body.block
        last = block.last_op
        require(isinstance(last, YieldOp), "blueprint.group: the body must end with blueprint.yield")
        assert isinstance(last, YieldOp)
        require([v.type for v in last.values] == [r.type for r in self.outs],
                "blueprint.group: the yielded types must be the group's result types")
        for v in last.values:
            home = v.block if isinstance(v, BlockArgument) else v.owner.parent_block()
            require(home is block, f"blueprint.group: a yielded value is not defined inside the group '{self.rule.data}'")
        for op in block.ops:
            require(not isinstance(op, GroupOp), f"blueprint.group: groups do not nest ('{self.rule.data}' holds another)")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The end of a group's body: the edges the group hands on.

        blueprint.yield %y : !blueprint.edge<"n", "hidden", bf16>
    """

    name = "blueprint.yield"
    values = var_operand_def(EdgeType)
    traits = traits_def(IsTerminator(), HasParent(GroupOp))

    assembly_format = "($values^ `:` type($values))? attr-dict"
