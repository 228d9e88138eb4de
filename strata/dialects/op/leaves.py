"""The leaves of the op dialect: weights, state buffers, host inputs and constants."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, DenseIntOrFPElementsAttr, StringAttr, TensorType, UnitAttr, i64
from xdsl.ir import Attribute
from xdsl.irdl import attr_def, irdl_op_definition, opt_attr_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect

from strata.dialects.op.base import LeafOp, OpBase, fmt_shape
from strata.ir.dtypes import AnyTensor, is_float, is_int
from strata.ir.checks import elem_of, require, shape_of
from strata.ir.ggml_types import TYPES, block_types

#: The host inputs of an entry (see `InputOp`).
INPUT_KINDS = ("tokens", "positions", "kv_rows", "kq_mask", "out_ids", "mrope_positions", "state_copy",
               "kv_cells", "token_seq", "state_read", "state_write", "conv_window", "conv_tail",
               "targets", "weights", "start", "eos", "key", "temperature", "step")
#: The float kinds; every other kind holds integers.
FLOAT_INPUTS = ("kq_mask", "weights", "temperature")


#: The conversions an `op.param` may apply to its stored values (see `ParamOp`), with the
#: number of `convert_args` each takes (None: at least 4, see ungroup_rows).
PARAM_CONVERSIONS: dict[str, int | None] = {"plus_one": 0, "neg_exp": 0, "squeeze": 0, "ungroup_rows": None}


@irdl_op_definition
class ParamOp(LeafOp):
    """A weight, resolved by name in the weight store; its data never enters the IR.

    The op level names llama.cpp's tensors with llama.cpp's values, while the weight store
    holds the checkpoint's (HF's). Where llama.cpp's GGUF converter changes a tensor, the
    param says how with `convert`, and `source` names the stored tensor when it is another
    one; the result type is the converted tensor's. The vocabulary (`PARAM_CONVERSIONS`):

    * `plus_one`: 1 + w, in f32 (a zero-centred norm weight, stored w, used as 1 + w);
    * `neg_exp`: -exp(w), in f32 (Gated DeltaNet's A_log, used as ssm_a = -exp(A_log));
    * `squeeze`: w without its size-1 dims (the depthwise conv1d [C, 1, K] as [C, K]);
    * `ungroup_rows` with `convert_args = [G, lo, hi, s_0, ..., s_n-1]`: w's rows are G
      groups, each of parts of s_0, ..., s_n-1 rows; the result is parts lo..hi-1 taken
      part by part, each part's rows from every group in turn (Qwen3-Next's in_proj_qkvz,
      grouped per key head as [q | k | v | z], is llama.cpp's attn_qkv, parts 0..2 as
      [q | k | v], and attn_gate, part 3).

    `format` names the ggml block type the weight is stored in (`q4_K`, `q8_0`, ...: GGUF's
    types, `strata.ir.ggml_types`); the result type is that of its values (the blocks
    dequantized). A weight store may give the tensor's last axis in another order than the
    file's, and then `block_order = [a, b, c]` says how: viewed as [a, b, c], the stored
    axis is [b, a, c] (Qwen3.5's value heads, tiled in its GGUF): its blocks run along that.

    Each consumer (the op interpreter, each target's weight binding) implements every
    conversion once.

    In a tensor-parallel entry (see `strata.dialects.op.collective`) a param may be this
    rank's piece of the stored tensor: `split = [axis, pieces, p_0, ..., p_k]` says that the
    stored tensor's dim `axis` holds parts of pieces * p_0, ..., pieces * p_k (one part when
    no sizes are given: the whole dim), each part cut into `pieces` equal pieces; the rank
    reads piece `rank * pieces // ranks` of every part and joins them in part order (fused
    q|k|v rows keep their order per rank). pieces < ranks replicates a piece on
    ranks / pieces ranks (KV heads fewer than the ranks). The split is read first, then
    converted; without a conversion, the p_i sum to the result's dim `axis`.

        %w = op.param "blk.0.attn_q.weight" : tensor<4096x4096xbf16>
        %n = op.param "blk.0.attn_norm.weight" {convert = "plus_one"} : tensor<64xf32>
        %q = op.param "blk.0.attn_qkv.weight" {source = "blk.0.ssm_in.weight", convert = "ungroup_rows",
                                               convert_args = array<i64: 2, 0, 3, 16, 16, 32, 32>} : tensor<128x64xf32>
        %o = op.param "blk.0.attn_output.weight" {split = array<i64: 1, 2>} : tensor<64x32xf32>
        %s = op.param "blk.0.ssm_out.weight" {format = "q4_K", block_order = array<i64: 2, 2, 128>} : tensor<256x512xf32>
    """

    name = "op.param"
    tensor_name = attr_def(StringAttr, attr_name="tensor")
    convert = opt_attr_def(StringAttr)
    convert_args = opt_attr_def(DenseArrayBase)
    source = opt_attr_def(StringAttr)
    split = opt_attr_def(DenseArrayBase)
    stored_format = opt_attr_def(StringAttr, attr_name="format")
    block_order = opt_attr_def(DenseArrayBase)
    assembly_format = "$tensor attr-dict `:` type($result)"

    def __init__(self, tensor_name: str, typ: TensorType, convert: str | None = None,
                 args: tuple[int, ...] | None = None, source: str | None = None,
                 split: tuple[int, ...] | None = None, stored_format: str | None = None,
                 block_order: tuple[int, ...] | None = None):
        attrs: dict[str, Attribute] = {"tensor": StringAttr(tensor_name)}
        if stored_format is not None:
            attrs["format"] = StringAttr(stored_format)
        if block_order is not None:
            attrs["block_order"] = DenseArrayBase.from_list(i64, block_order)
        if convert is not None:
            attrs["convert"] = StringAttr(convert)
        if args is not None:
            attrs["convert_args"] = DenseArrayBase.from_list(i64, args)
        if source is not None:
            attrs["source"] = StringAttr(source)
        if split is not None:
            attrs["split"] = DenseArrayBase.from_list(i64, split)
        super().__init__(result_types=[typ], attributes=attrs)

    @property
    def piece(self) -> tuple[int, int, tuple[int, ...]] | None:
        """(axis, pieces, per-rank part sizes) of a split param, or None for a whole one."""
        if self.split is None:
            return None
        values = tuple(int(v) for v in self.split.get_values())
        return values[0], values[1], values[2:]

    @property
    def stored_name(self) -> str:
        """The weight store's tensor this param reads (before its conversion)."""
        return (self.source or self.tensor_name).data

    @property
    def conversion(self) -> tuple[str, tuple[int, ...]] | None:
        """(conversion, its arguments), or None for a weight used as stored."""
        if self.convert is None:
            return None
        args = tuple(self.convert_args.get_values()) if self.convert_args is not None else ()
        return self.convert.data, args

    @property
    def format_name(self) -> str | None:
        """The ggml block type the weight is stored in, or None."""
        return self.stored_format.data if self.stored_format is not None else None

    @property
    def stored_order(self) -> tuple[int, ...] | None:
        """`block_order` as a tuple, or None."""
        return tuple(self.block_order.get_values()) if self.block_order is not None else None  # type: ignore[arg-type]

    def verify_(self) -> None:
        self._verify_format()
        if self.split is not None:
            _check_split(self.split.get_values(), shape_of(self.result), self.convert is None)
        if self.convert is None:
            require(self.convert_args is None and self.source is None,
                    "op.param: convert_args and source go with a conversion (convert)")
            return
        kind = self.convert.data
        require(kind in PARAM_CONVERSIONS,
                f"op.param: unknown conversion '{kind}' (known: {', '.join(PARAM_CONVERSIONS)})")
        args = self.conversion[1]  # type: ignore[index]
        arity = PARAM_CONVERSIONS[kind]
        if arity is not None:
            require(len(args) == arity, f"op.param: conversion '{kind}' takes {arity} convert_args, got {len(args)}")
        if kind in ("plus_one", "neg_exp"):
            require(is_float(elem_of(self.result)), f"op.param: conversion '{kind}' gives a float tensor")
        if kind == "ungroup_rows":
            _check_ungroup_rows(args, shape_of(self.result))


    def _verify_format(self) -> None:
        if self.stored_format is None:
            require(self.block_order is None, "op.param: block_order goes with a format")
            return
        fmt = self.stored_format.data
        known = TYPES.get(fmt)
        require(known is not None and known.quantized,
                f"op.param: unknown ggml block format '{fmt}' (known: {', '.join(block_types())})")
        shape = shape_of(self.result)
        require(is_float(elem_of(self.result)), f"op.param: a {fmt} weight's values are floats, got {self.result.type}")
        require(len(shape) >= 1 and shape[-1] != DYNAMIC_INDEX and shape[-1] % known.block == 0,  # type: ignore[union-attr]
                f"op.param: a {fmt} weight's last dim is a multiple of {known.block}, got {fmt_shape(shape)}")  # type: ignore[union-attr]
        if self.block_order is not None:
            check_order(self, self.stored_order, shape[-1], "block_order")  # type: ignore[arg-type]


def check_order(op, order: tuple[int, ...], width: int, what: str) -> None:
    """A column order [a, b, c] of a row of `width` values (see ParamOp's `block_order`)."""
    require(len(order) == 3 and all(v > 0 for v in order) and order[0] * order[1] * order[2] == width,
            f"{op.name}: {what} is [a, b, c] of positive sizes whose product is the row's {width}, got {list(order)}")


def _check_split(values, shape: tuple[int, ...], plain: bool) -> None:
    values = [int(v) for v in values]
    require(len(values) >= 2, f"op.param: split takes [axis, pieces, part sizes...], got {values}")
    axis, pieces, parts = values[0], values[1], values[2:]
    require(0 <= axis < len(shape), f"op.param: split axis {axis} is not a dim of {fmt_shape(shape)}")
    require(pieces >= 1 and all(p > 0 for p in parts), f"op.param: split pieces and part sizes must be positive, got {values}")
    if plain and parts:
        require(sum(parts) == shape[axis], f"op.param: split parts {parts} sum to {sum(parts)}, the result's dim "
                                           f"{axis} is {shape[axis]}")


def _check_ungroup_rows(args: tuple[int, ...], shape: tuple[int, ...]) -> None:
    ok = len(args) >= 4 and args[0] > 0 and 0 <= args[1] < args[2] <= len(args) - 3 and all(s > 0 for s in args[3:])
    require(ok, f"op.param: ungroup_rows takes [G, lo, hi, s_0, ...] with G > 0, 0 <= lo < hi <= parts and "
                f"positive sizes, got {list(args)}")
    g, lo, hi, sizes = args[0], args[1], args[2], args[3:]
    rows = g * sum(sizes[lo:hi])
    require(len(shape) >= 1 and shape[0] == rows,
            f"op.param: ungroup_rows of {list(args)} gives {rows} rows, the result type has {fmt_shape(shape[:1])}")


@irdl_op_definition
class StateOp(OpBase):
    """A persistent buffer that outlives one call of an entry (the KV cache, a recurrent state).

    A `recurrent` state belongs to the sequence: a call at position 0 starts a new sequence
    and reads it zeroed (llama.cpp clears a new sequence's slot of its recurrent states; the
    SCALE by 0 in its graph). A KV cache needs no clearing: the mask hides rows not written.

        %k = op.state "cache_k_l0" : tensor<89856x1024xf32>
        %r = op.state "cache_r_l0" {recurrent} : tensor<1x384xf32>
    """

    name = "op.state"
    result = result_def(AnyTensor)
    state_name = attr_def(StringAttr, attr_name="state")
    recurrent = opt_attr_def(UnitAttr)
    # It yields the buffer's current contents: a read, ordered against the writes.
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$state attr-dict `:` type($result)"

    def __init__(self, state_name: str, typ: TensorType, recurrent: bool = False):
        attrs: dict[str, Attribute] = {"state": StringAttr(state_name)}
        if recurrent:
            attrs["recurrent"] = UnitAttr()
        super().__init__(result_types=[typ], attributes=attrs)

    def verify_(self) -> None:
        require(all(d != DYNAMIC_INDEX for d in shape_of(self.result)), "op.state: a state buffer must have a static shape")


@irdl_op_definition
class InputOp(LeafOp):
    """A tensor the host prepares for one call of an entry, like llama.cpp's graph inputs.

    Kinds: `tokens` (ids), `positions` (absolute positions), `kv_rows` (cache rows to
    write; -1: none), `kq_mask` (causal mask over the visible cache rows, 0 or -inf; [S, N],
    or [R, S, N] for R attention streams), `out_ids` (rows whose logits are returned; -1: a
    row of zeros), `mrope_positions` (M-RoPE's four position streams for text, [4*S]: the
    positions three times, then S zeros, as llama.cpp's `inp_pos` of a multi-section rope),
    `state_copy` (llama.cpp's `rs_s_copy`: for each recurrent-state slot the slot it is read
    from; [1] holding 0 for the one sequence).

    The entries that run several sequences at once (`op.call` on the function says how their
    arguments become these, see `strata.semantics.host_inputs`) add: `kv_cells` (the cache
    cells a paged attention reads, through the block table), `token_seq` (each token's
    recurrent-state sequence, -1: none), `state_read` / `state_write` (per sequence the state
    slot it reads, -1: zeros, and writes back, -1: none), `conv_window` / `conv_tail` (the
    rows of the conv table each token's window reads, and that are each sequence's next conv
    state), and the entry's own arguments `targets`, `weights`, `start` (its `pos`), `eos`,
    `key` and `temperature`; a sampling step of a device loop reads `step`, its draw's
    counter (the position the drawn token takes).

        %t = op.input "tokens" {name = "inp_tokens"} : tensor<5xi32>
        %p = op.input "mrope_positions" {name = "inp_pos"} : tensor<20xi32>
    """

    name = "op.input"
    kind = attr_def(StringAttr)
    assembly_format = "$kind attr-dict `:` type($result)"

    def __init__(self, kind: str, typ: TensorType, label: str | None = None):
        attrs: dict[str, Attribute] = {"kind": StringAttr(kind)}
        if label:
            attrs["name"] = StringAttr(label)
        super().__init__(result_types=[typ], attributes=attrs)

    def verify_(self) -> None:
        k = self.kind.data
        require(k in INPUT_KINDS, f"op.input: unknown kind '{k}' (expected one of {', '.join(INPUT_KINDS)})")
        shape, elem = shape_of(self.result), elem_of(self.result)
        ranks = (2, 3) if k == "kq_mask" else (1,)
        require(len(shape) in ranks, f"op.input: a '{k}' input must have rank {' or '.join(map(str, ranks))}, "
                                     f"got {fmt_shape(shape)}")
        if k in FLOAT_INPUTS:
            require(is_float(elem), f"op.input: a '{k}' input must be a float tensor")
        else:
            require(is_int(elem), f"op.input: a '{k}' input must be an integer tensor")
        if k == "mrope_positions":
            require(shape[0] == DYNAMIC_INDEX or shape[0] % 4 == 0,
                    f"op.input: a 'mrope_positions' input holds 4 positions per token, got {fmt_shape(shape)}")
        if k == "state_copy":
            require(shape[0] == 1, f"op.input: a 'state_copy' input has one slot per sequence (1), got {fmt_shape(shape)}")
        scalars = {"start": 1, "eos": 1, "temperature": 1, "key": 2, "step": 1}
        if k in scalars:
            require(shape[0] == scalars[k], f"op.input: a '{k}' input holds {scalars[k]} value(s), got {fmt_shape(shape)}")


@irdl_op_definition
class ConstantOp(LeafOp):
    """A small table derived from the config (never a weight), e.g. rope frequency factors.

        %f = op.constant dense<[1.0, 2.0]> : tensor<2xf32>
    """

    name = "op.constant"
    value = attr_def(DenseIntOrFPElementsAttr)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes, reserved_attr_names=("value",))

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("op.constant expects a dense elements attribute")
        attrs = parser.parse_optional_attr_dict()
        op = cls(value)
        op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        require(self.result.type == self.value.type, "op.constant: result type must be the value's")

    def __init__(self, value: DenseIntOrFPElementsAttr, label: str | None = None):
        attrs: dict[str, Attribute] = {"value": value}
        if label:
            attrs["name"] = StringAttr(label)
        super().__init__(result_types=[value.type], attributes=attrs)


#: The ops without operands (ggml's leaves).
LEAF_OPS = (ParamOp, StateOp, InputOp, ConstantOp)
