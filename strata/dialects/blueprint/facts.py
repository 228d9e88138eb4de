"""What a blueprint function knows about its model: its dims and its weight table, as typed
attributes of the function, read through `function_dims` and `function_weights`.

    func.func @decode(%tokens: !blueprint.edge<"n", "1", i32>) -> ... attributes {
        blueprint.dims = #blueprint.dims<head_dim = 8, hidden = 32, q_heads = 4, vocab = 48>,
        blueprint.weights = #blueprint.weights<"blk.0.attn_norm.weight" = plus_one,
            "blk.0.ssm_a" = neg_exp of "blk.0.ssm_a_log",
            "blk.0.attn_qkv.weight" = ungroup_rows [2, 0, 3, 16, 16, 32, 32] of "blk.0.ssm_in.weight",
            "blk.0.attn_q.weight" = split [0, 2]>}

`blueprint.dims` gives the size of each symbol the edges' dims are written in (kbp-graph/v1's
`hidden`, `q_heads`, `top_k`, ...). `blueprint.weights` says, for each weight a node names
whose op-level param is not read as stored, how it is read: the op level's conversion
(`op.param`'s `convert` and `convert_args`, one of `strata.dialects.op.PARAM_CONVERSIONS`) and
the stored tensor (`of`, when it is another one), and in a tensor-parallel blueprint the
rank's piece (`split [axis, pieces, parts...]`, `op.param`'s split: the piece is read, then
converted); a weight the table does not name is read as stored, whole, under its own name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntAttr, NoneAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from strata.dialects.op.leaves import PARAM_CONVERSIONS
from strata.errors import StrataError

DIMS = "blueprint.dims"
WEIGHTS = "blueprint.weights"


@irdl_attr_definition
class DimsAttr(ParametrizedAttribute):
    """The sizes of a blueprint function's dim symbols, in the order written:

        #blueprint.dims<head_dim = 128, hidden = 4096, top_k = 8>
    """

    name = "blueprint.dims"
    symbols: ArrayAttr[StringAttr]
    values: ArrayAttr[IntAttr]

    def __init__(self, sizes: Mapping[str, int]):
        super().__init__(ArrayAttr([StringAttr(k) for k in sizes]), ArrayAttr([IntAttr(int(v)) for v in sizes.values()]))

    @property
    def sizes(self) -> dict[str, int]:
        """Symbol -> size."""
        return {k.data: v.data for k, v in zip(self.symbols.data, self.values.data)}

    def verify(self) -> None:
        names = [k.data for k in self.symbols.data]
        if len(names) != len(self.values.data):
            raise VerifyException(f"blueprint.dims: {len(names)} symbols but {len(self.values.data)} sizes")
        for k, v in zip(names, self.values.data):
            if not k.isidentifier():
                raise VerifyException(f"blueprint.dims: a dim symbol is a name, got '{k}'")
            if v.data < 0:
                raise VerifyException(f"blueprint.dims: '{k}' must be a size >= 0, got {v.data}")
        twice = sorted({k for k in names if names.count(k) > 1})
        if twice:
            raise VerifyException(f"blueprint.dims: '{twice[0]}' is given twice")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def entry() -> tuple[str, int]:
            key = parser.parse_identifier(context_msg=" (a dim symbol)")
            parser.parse_punctuation("=")
            return key, parser.parse_integer(allow_boolean=False, context_msg=" (the dim's size)")

        pairs = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
        return (ArrayAttr([StringAttr(k) for k, _ in pairs]), ArrayAttr([IntAttr(v) for _, v in pairs]))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(f"{k} = {v}" for k, v in self.sizes.items()) + ">")


@dataclass(frozen=True)
class WeightRead:
    """How a weight is read: the stored tensor `source` (this rank's piece of it, `split` =
    (axis, pieces, part sizes...) as op.param's, when not empty), then the op level's
    conversion `convert` with its `args` (None: used as stored)."""

    source: str
    convert: str | None = None
    args: tuple[int, ...] = ()
    split: tuple[int, ...] = ()

    def piece(self, rank: int, ranks: int) -> tuple[int, int, tuple[int, ...], int] | None:
        """(axis, pieces, parts, index) of this rank's piece, or None for the whole tensor."""
        if not self.split:
            return None
        axis, pieces, *parts = self.split
        return axis, pieces, tuple(parts), rank * pieces // ranks


@irdl_attr_definition
class WeightReadAttr(ParametrizedAttribute):
    """One entry of a weight table: the weight's name, its conversion, its stored tensor and
    the rank's piece of it (any may be absent, not all):

        #blueprint.weight_read<"blk.0.ssm_a" = neg_exp of "blk.0.ssm_a_log">
        #blueprint.weight_read<"blk.0.attn_norm.weight" = plus_one>
        #blueprint.weight_read<"output.weight" = "token_embd.weight">
        #blueprint.weight_read<"blk.0.attn_output.weight" = split [1, 2]>
        #blueprint.weight_read<"blk.0.ssm_a" = neg_exp split [0, 2] of "blk.0.ssm_a_log">
    """

    name = "blueprint.weight_read"
    weight: StringAttr
    source: StringAttr | NoneAttr
    convert: StringAttr | NoneAttr
    args: ArrayAttr[IntAttr]
    split: ArrayAttr[IntAttr]

    def __init__(self, weight: str, source: str | None = None, convert: str | None = None,
                 args: Sequence[int] = (), split: Sequence[int] = ()):
        super().__init__(StringAttr(weight), NoneAttr() if source is None else StringAttr(source),
                         NoneAttr() if convert is None else StringAttr(convert), ArrayAttr([IntAttr(a) for a in args]),
                         ArrayAttr([IntAttr(a) for a in split]))

    @property
    def read(self) -> WeightRead:
        """The weight's read, its source defaulting to its own name."""
        source = self.source.data if isinstance(self.source, StringAttr) else self.weight.data
        convert = self.convert.data if isinstance(self.convert, StringAttr) else None
        return WeightRead(source, convert, tuple(a.data for a in self.args.data), tuple(a.data for a in self.split.data))

    def verify(self) -> None:
        what = f"blueprint.weights: '{self.weight.data}'"
        split = [a.data for a in self.split.data]
        if split and (len(split) < 2 or split[0] < 0 or any(v < 1 for v in split[1:])):
            raise VerifyException(f"{what}: split takes [axis, pieces, part sizes...], got {split}")
        if not isinstance(self.convert, StringAttr):
            if not isinstance(self.source, StringAttr) and not split:
                raise VerifyException(f"{what} names neither a conversion, a stored tensor nor a split")
            if self.args.data:
                raise VerifyException(f"{what}: conversion arguments without a conversion")
            return
        kind, n = self.convert.data, len(self.args.data)
        if kind not in PARAM_CONVERSIONS:
            raise VerifyException(f"{what}: unknown conversion '{kind}' (known: {', '.join(PARAM_CONVERSIONS)})")
        arity = PARAM_CONVERSIONS[kind]
        if arity is not None and n != arity:
            raise VerifyException(f"{what}: conversion '{kind}' takes {arity} arguments, got {n}")

    @classmethod
    def parse_entry(cls, parser: AttrParser) -> WeightReadAttr:
        """`"name" = [conversion [args]] [split [axis, pieces, ...]] [of "source"]` (one at
        least), or `"name" = "source"`."""
        weight = parser.parse_str_literal(" (a weight name)")
        parser.parse_punctuation("=")
        source = parser.parse_optional_str_literal()
        if source is not None:
            return cls(weight, source)
        convert: str | None = None
        args: list[int] = []
        if parser.parse_optional_keyword("split") is None:
            convert = parser.parse_identifier(context_msg=" (a conversion, split, or the stored tensor's name)")
            args = _optional_ints(parser)
            split = _optional_ints(parser) if parser.parse_optional_keyword("split") is not None else []
        else:
            split = _optional_ints(parser)
        if parser.parse_optional_keyword("of") is not None:
            source = parser.parse_str_literal(" (the stored tensor's name)")
        return cls(weight, source, convert, args, split)

    def print_entry(self, printer: Printer) -> None:
        printer.print_string_literal(self.weight.data)
        printer.print_string(" = ")
        if not isinstance(self.convert, StringAttr) and not self.split.data:
            printer.print_string_literal(self.source.data)  # type: ignore[union-attr]
            return
        words = []
        if isinstance(self.convert, StringAttr):
            words.append(self.convert.data + (" [" + ", ".join(str(a.data) for a in self.args.data) + "]"
                                              if self.args.data else ""))
        if self.split.data:
            words.append("split [" + ", ".join(str(a.data) for a in self.split.data) + "]")
        printer.print_string(" ".join(words))
        if isinstance(self.source, StringAttr):
            printer.print_string(" of ")
            printer.print_string_literal(self.source.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return cls.parse_entry(parser).parameters

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            self.print_entry(printer)


def _optional_ints(parser: AttrParser) -> list[int]:
    """`[i, j, ...]` if one comes next, else nothing."""
    out: list[int] = []
    if parser.parse_optional_punctuation("[") is not None:
        if parser.parse_optional_punctuation("]") is None:
            out = [parser.parse_integer(allow_boolean=False)]
            while parser.parse_optional_punctuation(",") is not None:
                out.append(parser.parse_integer(allow_boolean=False))
            parser.parse_punctuation("]")
    return out


@irdl_attr_definition
class WeightsAttr(ParametrizedAttribute):
    """A blueprint function's weight table (see the module docstring):

        #blueprint.weights<"blk.0.attn_norm.weight" = plus_one, "blk.0.ssm_a" = neg_exp of "blk.0.ssm_a_log">
    """

    name = "blueprint.weights"
    entries: ArrayAttr[WeightReadAttr]

    def __init__(self, entries: Sequence[WeightReadAttr]):
        super().__init__(ArrayAttr(list(entries)))

    @property
    def reads(self) -> dict[str, WeightRead]:
        """Weight name -> how it is read."""
        return {e.weight.data: e.read for e in self.entries.data}

    def verify(self) -> None:
        names = [e.weight.data for e in self.entries.data]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise VerifyException(f"blueprint.weights: '{twice[0]}' is given twice")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        entries = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, lambda: WeightReadAttr.parse_entry(parser))
        return (ArrayAttr(entries),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            for i, entry in enumerate(self.entries.data):
                if i:
                    printer.print_string(", ")
                entry.print_entry(printer)


ATTRIBUTES = [DimsAttr, WeightReadAttr, WeightsAttr]


class FunctionFactsError(StrataError):
    """A blueprint function whose dims or weight table is not of its typed attribute."""


def _fact(fn: func.FuncOp, key: str, kind: type[Attribute]) -> Attribute | None:
    attr = fn.attributes.get(key)
    if attr is not None and not isinstance(attr, kind):
        raise FunctionFactsError(f"@{fn.sym_name.data}: {key} must be a #{kind.name}<...>, got {attr}")  # type: ignore[attr-defined]
    return attr


def function_dims(fn: func.FuncOp) -> dict[str, int]:
    """The function's `blueprint.dims` (symbol -> size); {} when it has none."""
    attr = _fact(fn, DIMS, DimsAttr)
    return attr.sizes if isinstance(attr, DimsAttr) else {}


def function_weights(fn: func.FuncOp) -> dict[str, WeightRead]:
    """The function's `blueprint.weights` (weight name -> how it is read); {} when it has none.
    A weight it does not name is read as stored: `table.get(name, WeightRead(name))`."""
    attr = _fact(fn, WEIGHTS, WeightsAttr)
    return attr.reads if isinstance(attr, WeightsAttr) else {}
