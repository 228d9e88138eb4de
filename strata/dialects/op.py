"""The `op` dialect: ggml-like tensor operations (seed 000).

Every op has ggml's semantics, but shapes are ordinary row-major tensor types:
ggml's `{4096, 5, 1, 1}` (fastest dimension first) is `tensor<5x4096xf32>` here.
The trace exporter (`strata.exporters.trace`) converts back to ggml order.

Leaves are ops too: `op.param` names a weight in the weight store, `op.state` a
persistent buffer (the KV cache), `op.input` a value the host prepares for an entry
(tokens, positions, cache rows, mask, output rows), `op.constant` a small derived
table. Every op may carry a `name` attribute: the ggml tensor name (`Qcur-0`).

Types are builtin tensors so that the later levels can refine them in place: a
quantized weight (seed 001's fp8 block128x128, seed 004's int4 block-128 asymmetric)
is a tensor whose `encoding` names its format, and a FixedPoint32<frac> value (seed
004) is a tensor of a fixed-point element type; shapes, names and op semantics stay.

State is a buffer, as in ggml: `op.set_rows` writes rows into an `op.state` and
returns the written tensor; later ops that read the same `op.state` value see the
write because ops execute in program order. The effects say so to every pass:
`op.state` reads memory, `op.set_rows` and `op.cpy` write it, and every other op is
`Pure`, so xDSL's generic `cse` and `dce` keep the order of reads and writes.

Element types come from the one dtype table (`strata.ir.dtypes`): "float" admits f32,
f16, bf16 and fp8; a weight may also be an integer or packed int4 tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from strata.ir.dtypes import AnyTensor, FloatTensor, IntTensor, WeightTensor, is_float, is_int

# ---------------------------------------------------------------------------
# Shape helpers shared by the verifiers (dynamic dims are `?`).
# ---------------------------------------------------------------------------

def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    typ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(typ, TensorType):
        raise VerifyException(f"expected a tensor, got {typ}")
    return typ.get_shape()


def elem_of(value: SSAValue | Attribute) -> Attribute:
    typ = value.type if isinstance(value, SSAValue) else value
    assert isinstance(typ, TensorType)
    return typ.get_element_type()


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape) or "scalar"


def dim_eq(a: int, b: int) -> bool:
    return a == DYNAMIC_INDEX or b == DYNAMIC_INDEX or a == b


def shapes_eq(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(dim_eq(x, y) for x, y in zip(a, b))


def numel(shape: Sequence[int]) -> int | None:
    """Element count, or None when a dimension is dynamic."""
    n = 1
    for d in shape:
        if d == DYNAMIC_INDEX:
            return None
        n *= d
    return n


def can_repeat(small: Sequence[int], big: Sequence[int]) -> bool:
    """ggml_can_repeat: every dim of `big` is a multiple of the aligned dim of `small`."""
    if len(small) > len(big):
        return False
    for s, b in zip(reversed(small), reversed(big)):
        if s == DYNAMIC_INDEX or b == DYNAMIC_INDEX:
            continue
        if s == 0 or b % s != 0:
            return False
    return True


def require(cond: bool, message: str) -> None:
    if not cond:
        raise VerifyException(message)


def _check_float(op: Operation, value: SSAValue, what: str) -> None:
    require(is_float(elem_of(value)), f"{op.name}: {what} must be a float tensor, got {value.type}")


# ---------------------------------------------------------------------------
# Abstract bases.
# ---------------------------------------------------------------------------


class OpBase(IRDLOperation):
    """Base of every op-level op: an optional ggml tensor name. Compute ops are `Pure`
    (through their bases); the state ops declare their memory effects instead. (IRDL merges
    the traits of base classes, so `Pure` sits on the bases of pure ops only.)"""

    tensor_label = opt_attr_def(StringAttr, attr_name="name")

    @property
    def label(self) -> str | None:
        return self.tensor_label.data if self.tensor_label is not None else None


class LeafOp(OpBase):
    """A tensor with no operands that stays the same through a call: a weight, a host
    input or a constant (the state buffer is `op.state`, which is not pure)."""

    result = result_def(AnyTensor)
    traits = traits_def(Pure())


class UnaryOp(OpBase):
    src = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())

    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"


class BinaryOp(OpBase):
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())

    assembly_format = (
        "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    )


class ElementwiseBinaryOp(OpBase):
    """ggml's broadcasting binary op: `rhs` repeats to the shape of `lhs`."""

    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure())

    assembly_format = BinaryOp.assembly_format

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(shapes_eq(a, r), f"{self.name}: result {fmt_shape(r)} must have the shape of lhs {fmt_shape(a)}")
        require(can_repeat(b, a), f"{self.name}: rhs {fmt_shape(b)} cannot be broadcast to lhs {fmt_shape(a)}")


# ---------------------------------------------------------------------------
# Leaves.
# ---------------------------------------------------------------------------

INPUT_KINDS = ("tokens", "positions", "kv_rows", "kq_mask", "out_ids")


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
    """A persistent buffer that outlives one call of an entry (the KV cache).

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
    `out_ids` (rows whose logits are returned).

        %t = op.input "tokens" {name = "inp_tokens"} : tensor<5xi32>
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


# ---------------------------------------------------------------------------
# Compute ops.
# ---------------------------------------------------------------------------


@irdl_op_definition
class GetRowsOp(BinaryOp):
    """GET_ROWS: gather rows of `lhs` [..., R, C] by the ids in `rhs` [N] -> [N, C].

        %e = op.get_rows %w, %ids {name = "embd"} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
    """

    name = "op.get_rows"

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(len(a) == 2, f"op.get_rows: the table must have rank 2, got {fmt_shape(a)}")
        require(len(b) == 1 and is_int(elem_of(self.rhs)), "op.get_rows: the ids must be a rank-1 integer tensor")
        require(shapes_eq(r, (b[0], a[1])), f"op.get_rows: result must be {fmt_shape((b[0], a[1]))}, got {fmt_shape(r)}")
        require(is_float(elem_of(self.result)), "op.get_rows: result must be float")


@irdl_op_definition
class RmsNormOp(UnaryOp):
    """RMS_NORM over the last dimension: x / sqrt(mean(x^2) + eps), no weight.

        %n = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.rms_norm"
    eps = attr_def(FloatAttr)

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), "op.rms_norm: result shape must equal the operand's")
        _check_float(self, self.src, "the operand")


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    """MUL: element-wise product, `rhs` broadcast to `lhs`.

        %y = op.mul %x, %w : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
    """

    name = "op.mul"


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    """ADD: element-wise sum, `rhs` broadcast to `lhs`.

        %y = op.add %x, %r : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.add"


@irdl_op_definition
class MulMatOp(BinaryOp):
    """MUL_MAT: ggml_mul_mat(a, b) = b @ a^T over the last two dims.

    a is [..., M, K] (a weight is stored [out, in]), b is [..., N, K], the result is
    [..., N, M] in f32. Leading dims of `a` broadcast over `b`'s as in ggml: b's
    dim must be a multiple of a's and consecutive b slices share an a slice (GQA).

        %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<5x64xf32>
    """

    name = "op.mul_mat"

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(len(a) >= 2 and len(b) >= 2, "op.mul_mat: operands must have rank >= 2")
        require(len(a) <= len(b), "op.mul_mat: lhs rank must not exceed rhs rank")
        require(dim_eq(a[-1], b[-1]), f"op.mul_mat: contraction dims differ: {fmt_shape(a)} vs {fmt_shape(b)}")
        require(can_repeat(a[:-2], b[:-2]), f"op.mul_mat: batch dims of {fmt_shape(a)} do not broadcast to {fmt_shape(b)}")
        expect = (*b[:-1], a[-2])
        require(shapes_eq(r, expect), f"op.mul_mat: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
        require(WeightTensor.verifies(self.lhs.type), f"op.mul_mat: lhs must be a float, integer or packed tensor, got {self.lhs.type}")
        _check_float(self, self.rhs, "rhs")
        require(isinstance(elem_of(self.result), Float32Type), "op.mul_mat: result must be f32")


class ReshapeLikeOp(UnaryOp):
    def _check_numel(self) -> None:
        a, r = numel(shape_of(self.src)), numel(shape_of(self.result))
        require(a is None or r is None or a == r, f"{self.name}: element count changes from {a} to {r}")
        require(elem_of(self.src) == elem_of(self.result), f"{self.name}: element type must not change")


@irdl_op_definition
class ReshapeOp(ReshapeLikeOp):
    """RESHAPE: same elements, new shape (at most one dynamic dim).

        %r = op.reshape %x : tensor<5x64xf32> -> tensor<5x4x16xf32>
    """

    name = "op.reshape"

    def verify_(self) -> None:
        self._check_numel()
        dyn = sum(d == DYNAMIC_INDEX for d in shape_of(self.result))
        require(dyn <= 1, "op.reshape: at most one dynamic dim in the result")


@irdl_op_definition
class ContOp(ReshapeLikeOp):
    """CONT: a contiguous copy (of a permuted or transposed view), optionally reshaped.

        %c = op.cont %x : tensor<4x5x16xf32> -> tensor<4x5x16xf32>
    """

    name = "op.cont"

    def verify_(self) -> None:
        self._check_numel()


@irdl_op_definition
class ViewOp(ReshapeLikeOp):
    """VIEW: a window of `src`'s storage: `offset` elements in, row-major with the
    result's shape, or with explicit element `strides`.

        %v = op.view %c {offset = 0 : i64} : tensor<4096x64xf32> -> tensor<256x4x16xf32>
    """

    name = "op.view"
    offset = attr_def(IntegerAttr)
    strides = opt_attr_def(DenseArrayBase)

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        require(elem_of(self.src) == elem_of(self.result), "op.view: element type must not change")
        off = self.offset.value.data
        require(off >= 0, "op.view: offset must be >= 0")
        if self.strides is not None:
            st = self.strides.get_values()
            require(len(st) == len(res), "op.view: one stride per result dim")
            require(all(s >= 0 for s in st), "op.view: strides must be >= 0")
        total, need = numel(src), numel(res)
        if total is not None and need is not None and self.strides is None:
            require(off + need <= total, f"op.view: {need} elements at offset {off} exceed the {total} of the source")


@irdl_op_definition
class PermuteOp(UnaryOp):
    """PERMUTE: result dim i is source dim `dims[i]` (numpy's transpose order).

        %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<4x5x16xf32>
    """

    name = "op.permute"
    dims = attr_def(DenseArrayBase)

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        perm = tuple(self.dims.get_values())
        require(sorted(perm) == list(range(len(src))), f"op.permute: dims {list(perm)} is not a permutation of rank {len(src)}")
        require(shapes_eq(res, tuple(src[p] for p in perm)), f"op.permute: result must be {fmt_shape(tuple(src[p] for p in perm))}")
        require(elem_of(self.src) == elem_of(self.result), "op.permute: element type must not change")


@irdl_op_definition
class TransposeOp(UnaryOp):
    """TRANSPOSE: swap the last two dims (ggml's dims 0 and 1), as a view.

        %t = op.transpose %v : tensor<4x8x16xf32> -> tensor<4x16x8xf32>
    """

    name = "op.transpose"

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        require(len(src) >= 2, "op.transpose: rank must be >= 2")
        require(shapes_eq(res, (*src[:-2], src[-1], src[-2])), "op.transpose: result must swap the last two dims")
        require(elem_of(self.src) == elem_of(self.result), "op.transpose: element type must not change")


@irdl_op_definition
class ScaleOp(UnaryOp):
    """SCALE: x * scale.

        %s = op.scale %x {scale = 0.25 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
    """

    name = "op.scale"
    scale = attr_def(FloatAttr)

    def verify_(self) -> None:
        require(shapes_eq(shape_of(self.src), shape_of(self.result)), "op.scale: result shape must equal the operand's")
        _check_float(self, self.src, "the operand")


@irdl_op_definition
class CpyOp(OpBase):
    """CPY: copy `lhs` into the storage of `rhs` (same element count), converting the
    element type; the result is the written tensor (a view of `rhs`).

        %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<80xbf16> -> tensor<80xbf16>
    """

    name = "op.cpy"
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    traits = traits_def(MemoryWriteEffect())

    assembly_format = BinaryOp.assembly_format

    def verify_(self) -> None:
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        na, nb = numel(a), numel(b)
        require(na is None or nb is None or na == nb, f"op.cpy: element counts differ ({na} vs {nb})")
        require(self.result.type == self.rhs.type, "op.cpy: result type must be the destination's")


@irdl_op_definition
class ArgmaxOp(UnaryOp):
    """ARGMAX over the last dim: [R, C] -> [R] i32.

        %i = op.argmax %logits : tensor<1x32xf32> -> tensor<1xi32>
    """

    name = "op.argmax"

    def verify_(self) -> None:
        a, r = shape_of(self.src), shape_of(self.result)
        require(len(a) == 2, "op.argmax: operand must have rank 2")
        require(shapes_eq(r, a[:1]) and is_int(elem_of(self.result), 32), f"op.argmax: result must be tensor<{fmt_shape(a[:1])}xi32>")


@irdl_op_definition
class SwigluOp(BinaryOp):
    """SWIGLU: silu(gate) * up (ggml_swiglu_split(gate, up)).

        %h = op.swiglu %g, %u : tensor<5x40xf32>, tensor<5x40xf32> -> tensor<5x40xf32>
    """

    name = "op.swiglu"

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(shapes_eq(a, b) and shapes_eq(a, r), "op.swiglu: gate, up and result must have one shape")
        _check_float(self, self.lhs, "gate")


@irdl_op_definition
class SetRowsOp(OpBase):
    """SET_ROWS: write the rows of `src` [N, C] into `dst` [R, C] at `rows` [N]
    (the KV-cache write). `dst` is a state buffer; the result is the written buffer.

        %w = op.set_rows %cache, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xi64> -> tensor<256x64xf32>
    """

    name = "op.set_rows"
    dst = operand_def(AnyTensor)
    src = operand_def(FloatTensor)
    rows = operand_def(IntTensor)
    result = result_def(AnyTensor)
    traits = traits_def(MemoryWriteEffect())

    assembly_format = (
        "$dst `,` $src `,` $rows attr-dict `:` type($dst) `,` type($src) `,` type($rows) `->` type($result)"
    )

    def verify_(self) -> None:
        d, s, i = shape_of(self.dst), shape_of(self.src), shape_of(self.rows)
        require(len(d) == 2 and len(s) == 2, "op.set_rows: dst and src must have rank 2")
        require(dim_eq(d[1], s[1]), f"op.set_rows: row sizes differ ({fmt_shape(d)} vs {fmt_shape(s)})")
        require(len(i) == 1 and dim_eq(i[0], s[0]) and is_int(elem_of(self.rows)), "op.set_rows: rows must be an integer tensor with one id per src row")
        require(self.result.type == self.dst.type, "op.set_rows: result type must be dst's")


@irdl_op_definition
class SoftMaxOp(OpBase):
    """SOFT_MAX (ggml_soft_max_ext): softmax(x * scale + mask) over the last dim; the
    mask [S, N] broadcasts over leading dims.

        %p = op.soft_max %kq, %m {scale = 0.25 : f64} : tensor<4x5x8xf32>, tensor<5x8xf32> -> tensor<4x5x8xf32>
    """

    name = "op.soft_max"
    traits = traits_def(Pure())
    src = operand_def(FloatTensor)
    mask = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    scale = attr_def(FloatAttr)

    assembly_format = "$src (`,` $mask^)? attr-dict `:` type($src) (`,` type($mask)^)? `->` type($result)"

    def verify_(self) -> None:
        a, r = shape_of(self.src), shape_of(self.result)
        require(shapes_eq(a, r), "op.soft_max: result shape must equal the operand's")
        if self.mask is not None:
            m = shape_of(self.mask)
            require(can_repeat(m, a), f"op.soft_max: mask {fmt_shape(m)} does not broadcast to {fmt_shape(a)}")


@irdl_op_definition
class RopeOp(OpBase):
    """ROPE: rotary embedding of x [S, Heads, D] at `positions` [S].

    `mode` is "neox" (rotate halves, HF's rotate_half) or "norm" (rotate adjacent
    pairs, GGUF llama). The angle of pair i is pos * freq_scale * freq_base^(-2i/n_dims)
    / freq_factors[i]; `freq_factors` (llama3 scaling) is optional.

        %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64}
            : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
    """

    name = "op.rope"
    traits = traits_def(Pure())
    src = operand_def(FloatTensor)
    positions = operand_def(IntTensor)
    freq_factors = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    n_dims = attr_def(IntegerAttr)
    mode = attr_def(StringAttr)
    freq_base = attr_def(FloatAttr)
    freq_scale = attr_def(FloatAttr)

    assembly_format = (
        "$src `,` $positions (`,` $freq_factors^)? attr-dict `:` type($src) `,` type($positions)"
        " (`,` type($freq_factors)^)? `->` type($result)"
    )

    def verify_(self) -> None:
        a, p, r = shape_of(self.src), shape_of(self.positions), shape_of(self.result)
        require(len(a) == 3, f"op.rope: operand must be [S, Heads, D], got {fmt_shape(a)}")
        require(shapes_eq(a, r), "op.rope: result shape must equal the operand's")
        require(len(p) == 1 and dim_eq(p[0], a[0]) and is_int(elem_of(self.positions)), "op.rope: positions must be an integer tensor [S]")
        require(self.mode.data in ("neox", "norm"), f"op.rope: mode must be 'neox' or 'norm', got '{self.mode.data}'")
        n = self.n_dims.value.data
        fits = a[2] == DYNAMIC_INDEX or n <= a[2]
        require(n > 0 and n % 2 == 0 and fits, f"op.rope: n_dims {n} must be even and at most D={fmt_shape(a[2:])}")
        if self.freq_factors is not None:
            ok = shape_of(self.freq_factors) == (n // 2,) and isinstance(elem_of(self.freq_factors), Float32Type)
            require(ok, f"op.rope: freq_factors must be tensor<{n // 2}xf32>")


@irdl_op_definition
class FlashAttnExtOp(OpBase):
    """FLASH_ATTN_EXT: fused softmax(q k^T * scale + mask) v.

    q [Heads, S, D], k [KvHeads, N, D], v [KvHeads, N, Dv], mask [S, N];
    the result is [S, Heads, Dv] (ggml's permuted output). Heads must be a multiple
    of KvHeads; consecutive query heads share a KV head.

        %o = op.flash_attn_ext %q, %k, %v, %m {scale = 0.25 : f64}
            : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<5x8xf32> -> tensor<5x4x16xf32>
    """

    name = "op.flash_attn_ext"
    traits = traits_def(Pure())
    q = operand_def(FloatTensor)
    k = operand_def(FloatTensor)
    v = operand_def(FloatTensor)
    mask = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    scale = attr_def(FloatAttr)

    assembly_format = (
        "$q `,` $k `,` $v (`,` $mask^)? attr-dict `:` type($q) `,` type($k) `,` type($v)"
        " (`,` type($mask)^)? `->` type($result)"
    )

    def verify_(self) -> None:
        q, k, v, r = (shape_of(x) for x in (self.q, self.k, self.v, self.result))
        require(len(q) == len(k) == len(v) == 3, "op.flash_attn_ext: q, k and v must have rank 3")
        require(dim_eq(q[2], k[2]), "op.flash_attn_ext: q and k head sizes differ")
        require(dim_eq(k[1], v[1]) and dim_eq(k[0], v[0]), "op.flash_attn_ext: k and v must have the same heads and rows")
        grouped = DYNAMIC_INDEX in (q[0], k[0]) or (k[0] != 0 and q[0] % k[0] == 0)
        require(grouped, "op.flash_attn_ext: query heads must be a multiple of KV heads")
        require(shapes_eq(r, (q[1], q[0], v[2])), f"op.flash_attn_ext: result must be {fmt_shape((q[1], q[0], v[2]))}")
        if self.mask is not None:
            m = shape_of(self.mask)
            require(len(m) == 2 and dim_eq(m[0], q[1]) and dim_eq(m[1], k[1]), "op.flash_attn_ext: mask must be [S, N]")


#: The ops without operands (ggml's leaves).
LEAF_OPS = (ParamOp, StateOp, InputOp, ConstantOp)

Op = Dialect(
    "op",
    [
        ParamOp,
        StateOp,
        InputOp,
        ConstantOp,
        GetRowsOp,
        RmsNormOp,
        MulOp,
        AddOp,
        MulMatOp,
        ReshapeOp,
        ViewOp,
        PermuteOp,
        TransposeOp,
        ContOp,
        ScaleOp,
        CpyOp,
        ArgmaxOp,
        SwigluOp,
        SetRowsOp,
        SoftMaxOp,
        RopeOp,
        FlashAttnExtOp,
    ],
    [],
)
