"""The leaves of the op dialect: weights, state buffers, host inputs and constants."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseIntOrFPElementsAttr, StringAttr, TensorType
from xdsl.ir import Attribute
from xdsl.irdl import attr_def, irdl_op_definition, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect

from strata.dialects.op.base import LeafOp, OpBase, elem_of, fmt_shape, require, shape_of
from strata.ir.dtypes import AnyTensor, is_float, is_int

#: The host inputs of an entry (see `InputOp`).
INPUT_KINDS = ("tokens", "positions", "kv_rows", "kq_mask", "out_ids", "mrope_positions", "state_copy")


@irdl_op_definition
class ParamOp(LeafOp):
    """A weight, resolved by name in the weight store; its data never enters the IR.

        %w = op.param "blk.0.attn_q.weight" : tensor<4096x4096xbf16>
    """

    name = "op.param"
    tensor_name = attr_def(StringAttr, attr_name="tensor")
    assembly_format = "$tensor attr-dict `:` type($result)"

    def __init__(self, tensor_name: str, typ: TensorType):
        super().__init__(result_types=[typ], attributes={"tensor": StringAttr(tensor_name)})


@irdl_op_definition
class StateOp(OpBase):
    """A persistent buffer that outlives one call of an entry (the KV cache, a recurrent state).

        %k = op.state "cache_k_l0" : tensor<89856x1024xf32>
    """

    name = "op.state"
    result = result_def(AnyTensor)
    state_name = attr_def(StringAttr, attr_name="state")
    # It yields the buffer's current contents: a read, ordered against the writes.
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$state attr-dict `:` type($result)"

    def __init__(self, state_name: str, typ: TensorType):
        super().__init__(result_types=[typ], attributes={"state": StringAttr(state_name)})

    def verify_(self) -> None:
        require(all(d != DYNAMIC_INDEX for d in shape_of(self.result)), "op.state: a state buffer must have a static shape")


@irdl_op_definition
class InputOp(LeafOp):
    """A tensor the host prepares for one call of an entry, like llama.cpp's graph inputs.

    Kinds: `tokens` (ids), `positions` (absolute positions), `kv_rows` (cache rows to
    write), `kq_mask` (causal mask over the visible cache rows, 0 or -inf),
    `out_ids` (rows whose logits are returned), `mrope_positions` (M-RoPE's four position
    streams for text, [4*S]: the positions three times, then S zeros, as llama.cpp's
    `inp_pos` of a multi-section rope), `state_copy` (llama.cpp's `rs_s_copy`: for each
    recurrent-state slot the slot it is read from; [1] holding 0 for the one sequence).

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
        rank = 2 if k == "kq_mask" else 1
        require(len(shape) == rank, f"op.input: a '{k}' input must have rank {rank}, got {fmt_shape(shape)}")
        if k == "kq_mask":
            require(is_float(elem), "op.input: a 'kq_mask' input must be a float tensor")
        else:
            require(is_int(elem), f"op.input: a '{k}' input must be an integer tensor")
        if k == "mrope_positions":
            require(shape[0] == DYNAMIC_INDEX or shape[0] % 4 == 0,
                    f"op.input: a 'mrope_positions' input holds 4 positions per token, got {fmt_shape(shape)}")
        if k == "state_copy":
            require(shape[0] == 1, f"op.input: a 'state_copy' input has one slot per sequence (1), got {fmt_shape(shape)}")


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
