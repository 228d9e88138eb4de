"""Where an op-level op came from: the module-level block instance it was expanded from.

convert-module-to-op expands a tree of block instances (`strata.dialects.instances`) into
one flat ggml graph. Each op keeps the instance it was expanded from as a discardable
attribute, `op.block`: the instance's kind (its block's `path`), its module path, and for a
leaf that is a member of the block (an `op.param`), the member's name:

    %x = op.mul_mat %w, %h {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : ...
    %w = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : ...

A param's record names the instance that owns the tensor: a tied LM head reads its weight as
the embedding's member (`#op.block<"std.nn.embedding", "embedding", "weight">`), so the two
reads of a tied weight are the same op and cse may merge them; the product is the LM head's.
The root instance (the whole model) has the path "": its host inputs and what an entry adds
around the layers (the device loops, the sampler's draw) are the model's. The later levels
group ops by this record (convert-op-to-blueprint makes one blueprint block of each layer's
mixer and FFN), so they need not recognise a block by its tensors' names, which are the
family's. A pass that replaces ops must give the new ones the record of what they replace.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

#: The discardable attribute that holds an op's `BlockOriginAttr`.
ORIGIN = "op.block"


@irdl_attr_definition
class BlockOriginAttr(ParametrizedAttribute):
    """A block instance: its kind (`std.attn.grouped_query`), its module path
    (`layers.3.attention`, "" for the root) and, for a block's member, the member's name
    (`weight`; "" for an op the block computes)."""

    name = "op.block"
    kind: StringAttr
    path: StringAttr
    member: StringAttr

    def __init__(self, kind: str, path: str, member: str = ""):
        super().__init__(StringAttr(kind), StringAttr(path), StringAttr(member))

    @property
    def instance(self) -> str:
        return self.path.data

    @property
    def member_name(self) -> str | None:
        return self.member.data or None

    def verify(self) -> None:
        if not self.kind.data:
            raise VerifyException("op.block: the block kind is empty")
        if self.path.data.startswith(".") or self.path.data.endswith(".") or ".." in self.path.data:
            raise VerifyException(f"op.block: '{self.path.data}' is not a module path (dot-separated names)")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_str_literal(" (the block kind)")
            parser.parse_punctuation(",")
            path = parser.parse_str_literal(" (the instance's module path)")
            member = ""
            if parser.parse_optional_punctuation(",") is not None:
                member = parser.parse_str_literal(" (the member's name)")
        return (StringAttr(kind), StringAttr(path), StringAttr(member))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.kind.data)
            printer.print_string(", ")
            printer.print_string_literal(self.path.data)
            if self.member.data:
                printer.print_string(", ")
                printer.print_string_literal(self.member.data)


def origin_of(op: Operation) -> BlockOriginAttr | None:
    """The block instance `op` was expanded from, if it records one."""
    attr = op.attributes.get(ORIGIN)
    return attr if isinstance(attr, BlockOriginAttr) else None

