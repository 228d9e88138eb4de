"""The blueprint level's typed attributes and its edge type.

    #blueprint.format<fp8, block = [128, 128]>          a weight or activation format
    #blueprint.format<int4, block = [128], asymmetric>
    #blueprint.precision<weight = #blueprint.format<fp8, block = [128, 128]>, activation = #blueprint.format<bf16>>
    #blueprint.placement<device>                         host or device
    #blueprint.effect<conv:update>                       a state name and what the node does to it
    #blueprint.step<mma, "bf16*bf16">                    one step of a node's numerics contract
    !blueprint.edge<"n*top_k", "hidden", bf16>           rows, dim (symbolic, kept as written), element type
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, IntAttr, NoneAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from strata.errors import StrataError
from strata.ir.dtypes import DType, dtype_named, lookup
from strata.ir.shapes import Expr, parse_expr

#: Short element names of kbp-graph/v1 and Chimera (fp8/block128x128, int4) and the dtype table's entries they mean.
FORMAT_ALIASES = {"fp8": "f8E4M3FN", "fp8e5": "f8E5M2", "int8": "i8", "int4": "i4", "uint4": "ui4"}
#: GGUF's block formats as weight formats (ggml's type names): a weight kept in the blocks its
#: file stores (`#blueprint.format<q4_K>`), dequantized by the kernel that reads it; and `gguf`,
#: each stored tensor of the weight in its own file's format (a merged projection whose parts
#: a GGUF stores in different formats, as Q4_K_M's q, k and v).
GGUF_FORMATS = ("q8_0", "q4_0", "q4_1", "q4_K", "q5_K", "q6_K")
AS_STORED = "gguf"
PLACEMENTS = ("host", "device")
EFFECTS = ("update", "snapshot", "read", "write")
#: The verbs of kbp-graph/v1's `steps` lists.
STEP_KINDS = ("act", "weight", "mma", "accumulate", "scale", "compute", "state", "gather", "scatter",
              "move", "combine", "compare", "score", "scores", "softmax", "cache", "wire")


def _dtype(name: str) -> DType:
    return dtype_named(FORMAT_ALIASES.get(name, name))


@irdl_attr_definition
class FormatAttr(ParametrizedAttribute):
    """A weight or activation format: an element kind (a dtype-table name or one of the
    short names fp8, int4, ... of kbp-graph/v1 and Chimera), an optional quantization block and, for integer
    kinds, an asymmetric (zero-point) flag.

        #blueprint.format<bf16>
        #blueprint.format<fp8, block = [128, 128]>
        #blueprint.format<int4, block = [128], asymmetric>
    """

    name = "blueprint.format"
    elem: StringAttr
    block: ArrayAttr[IntAttr]
    asymmetric: IntAttr

    def __init__(self, elem: str, block: Sequence[int] = (), asymmetric: bool = False):
        super().__init__(StringAttr(elem), ArrayAttr([IntAttr(b) for b in block]), IntAttr(int(asymmetric)))

    @property
    def dtype(self) -> DType:
        return _dtype(self.elem.data)

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(b.data for b in self.block.data)

    @property
    def is_asymmetric(self) -> bool:
        return bool(self.asymmetric.data)

    @property
    def is_stored_blocks(self) -> bool:
        """A GGUF block format (`q4_K`) or `gguf`: values the file's blocks hold, not a dtype."""
        return self.elem.data in GGUF_FORMATS or self.elem.data == AS_STORED

    def verify(self) -> None:
        if self.is_stored_blocks:
            if self.block_sizes or self.is_asymmetric:
                raise VerifyException(f"blueprint.format: '{self.elem.data}' is a GGUF block format (its block and "
                                      "scales are the format's): no block or asymmetric")
            return
        try:
            dtype = self.dtype
        except StrataError:
            raise VerifyException(f"blueprint.format: unknown element kind '{self.elem.data}'") from None
        if len(self.block_sizes) > 2 or any(b <= 0 for b in self.block_sizes):
            raise VerifyException(f"blueprint.format: a block is one or two positive sizes, got {list(self.block_sizes)}")
        if self.is_asymmetric and dtype.kind == "float":
            raise VerifyException(f"blueprint.format: only an integer format is asymmetric, not '{self.elem.data}'")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            elem = parser.parse_identifier(context_msg=" (an element kind)")
            block: list[int] = []
            asym = 0
            while parser.parse_optional_punctuation(",") is not None:
                if parser.parse_optional_keyword("asymmetric") is not None:
                    asym = 1
                    continue
                parser.parse_keyword("block", " or 'asymmetric'")
                parser.parse_punctuation("=")
                block = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
        return (StringAttr(elem), ArrayAttr([IntAttr(b) for b in block]), IntAttr(asym))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(self.elem.data)
            if self.block.data:
                printer.print_string(", block = [" + ", ".join(str(b) for b in self.block_sizes) + "]")
            if self.is_asymmetric:
                printer.print_string(", asymmetric")


def format_text(fmt: FormatAttr) -> str:
    """kbp-graph/v1's spelling of a format: `bf16`, `fp8/block128x128`, `int4/block128/asymmetric`."""
    text = fmt.elem.data
    if fmt.block_sizes:
        text += "/block" + "x".join(str(b) for b in fmt.block_sizes)
    if fmt.is_asymmetric:
        text += "/asymmetric"
    return text


_PRECISION_FIELDS = ("weight", "activation", "output", "accumulate")


@irdl_attr_definition
class PrecisionAttr(ParametrizedAttribute):
    """A node's precision: the formats of its weight, activation (input), output and
    accumulator, each optional (a node without a weight has none).

        #blueprint.precision<weight = #blueprint.format<fp8, block = [128, 128]>, activation = #blueprint.format<bf16>, output = #blueprint.format<bf16>, accumulate = #blueprint.format<f32>>
    """

    name = "blueprint.precision"
    weight: FormatAttr | NoneAttr
    activation: FormatAttr | NoneAttr
    output: FormatAttr | NoneAttr
    accumulate: FormatAttr | NoneAttr

    def __init__(self, weight: FormatAttr | None = None, activation: FormatAttr | None = None,
                 output: FormatAttr | None = None, accumulate: FormatAttr | None = None):
        super().__init__(*(NoneAttr() if f is None else f for f in (weight, activation, output, accumulate)))

    def fields(self) -> dict[str, FormatAttr]:
        return {k: v for k, v in zip(_PRECISION_FIELDS, self.parameters) if isinstance(v, FormatAttr)}

    def verify(self) -> None:
        for key, f in self.fields().items():
            if key != "weight" and f.is_stored_blocks:
                raise VerifyException(f"blueprint.precision: '{f.elem.data}' is a weight's GGUF block format, "
                                      f"not a format of the {key}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        found: dict[str, Attribute] = {}

        def field() -> None:
            key = parser.parse_keyword_in(_PRECISION_FIELDS, " (weight, activation, output or accumulate)")
            if key in found:
                parser.raise_error(f"blueprint.precision: '{key}' given twice")
            parser.parse_punctuation("=")
            value = parser.parse_attribute()
            if not isinstance(value, FormatAttr):
                parser.raise_error(f"blueprint.precision: '{key}' must be a #blueprint.format, got {value}")
            found[key] = value

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, field)
        return tuple(found.get(k, NoneAttr()) for k in _PRECISION_FIELDS)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            for i, (k, v) in enumerate(self.fields().items()):
                printer.print_string(f"{', ' if i else ''}{k} = ")
                printer.print_attribute(v)


class _WordAttr(ParametrizedAttribute):
    """An attribute holding one word from a fixed vocabulary: `#blueprint.x<word>`."""

    word: StringAttr
    WORDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, word: str):
        super().__init__(StringAttr(word))

    @property
    def value(self) -> str:
        return self.word.data

    def verify(self) -> None:
        if self.word.data not in self.WORDS:
            raise VerifyException(f"{self.name}: unknown value '{self.word.data}' (known: {', '.join(self.WORDS)})")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (StringAttr(parser.parse_identifier()),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.word.data}>")


@irdl_attr_definition
class PlacementAttr(_WordAttr):
    """Where a node or group runs, host or device:

        #blueprint.placement<host>
        #blueprint.placement<device>
    """

    name = "blueprint.placement"
    WORDS = PLACEMENTS


@irdl_attr_definition
class StateEffectAttr(ParametrizedAttribute):
    """What a node does to a named state (kbp-graph/v1's `conv:update`, `k:write`, `v:read`):

        #blueprint.effect<conv:update>
        #blueprint.effect<k:write>
    """

    name = "blueprint.effect"
    state: StringAttr
    effect: StringAttr

    def __init__(self, state: str, effect: str):
        super().__init__(StringAttr(state), StringAttr(effect))

    def verify(self) -> None:
        if self.effect.data not in EFFECTS:
            raise VerifyException(f"blueprint.effect: unknown effect '{self.effect.data}' (known: {', '.join(EFFECTS)})")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            state = parser.parse_identifier(context_msg=" (a state name)")
            parser.parse_punctuation(":")
            effect = parser.parse_identifier(context_msg=" (update, snapshot, read or write)")
        return (StringAttr(state), StringAttr(effect))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.state.data}:{self.effect.data}>")


@irdl_attr_definition
class StepAttr(ParametrizedAttribute):
    """One step of a node's numerics contract (kbp-graph/v1's `steps`): a verb and its detail.

        #blueprint.step<weight, "fp8/block128x128->bf16">
    """

    name = "blueprint.step"
    kind: StringAttr
    detail: StringAttr

    def __init__(self, kind: str, detail: str):
        super().__init__(StringAttr(kind), StringAttr(detail))

    def verify(self) -> None:
        if self.kind.data not in STEP_KINDS:
            raise VerifyException(f"blueprint.step: unknown step '{self.kind.data}' (known: {', '.join(STEP_KINDS)})")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier(context_msg=" (a step kind)")
            parser.parse_punctuation(",")
            detail = parser.parse_str_literal(" (the step's detail)")
        return (StringAttr(kind), StringAttr(detail))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.kind.data}, ")
        printer.print_string_literal(self.detail.data)
        printer.print_string(">")


def _check_expr(text: str, what: str) -> Expr:
    try:
        return parse_expr(text)
    except StrataError as e:
        raise VerifyException(f"blueprint.edge: bad {what} '{text}': {e}") from None


@irdl_attr_definition
class EdgeType(ParametrizedAttribute, TypeAttribute):
    """The type of an edge between nodes: its rows and its dim, symbolic expressions over
    the model's dims kept as written (`n`, `n*top_k`; `hidden`), and its element type.

        !blueprint.edge<"n*top_k", "moe_inter*2", bf16>
    """

    name = "blueprint.edge"
    rows: StringAttr
    dim: StringAttr
    element: Attribute

    def __init__(self, rows: str, dim: str, element: Attribute):
        super().__init__(StringAttr(rows), StringAttr(dim), element)

    @property
    def rows_expr(self) -> Expr:
        return parse_expr(self.rows.data)

    @property
    def dim_expr(self) -> Expr:
        return parse_expr(self.dim.data)

    def verify(self) -> None:
        _check_expr(self.rows.data, "rows")
        _check_expr(self.dim.data, "dim")
        if lookup(self.element) is None:
            raise VerifyException(f"blueprint.edge: element type {self.element} is not in the dtype table")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            rows = parser.parse_str_literal(" (the rows, a dim expression)")
            parser.parse_punctuation(",")
            dim = parser.parse_str_literal(" (the dim, a dim expression)")
            parser.parse_punctuation(",")
            element = parser.parse_type()
        return (StringAttr(rows), StringAttr(dim), element)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_string_literal(self.rows.data)
        printer.print_string(", ")
        printer.print_string_literal(self.dim.data)
        printer.print_string(", ")
        printer.print_attribute(self.element)
        printer.print_string(">")


ATTRIBUTES = [FormatAttr, PrecisionAttr, PlacementAttr, StateEffectAttr, StepAttr, EdgeType]
