"""The `fixed` dialect: FixedPoint32 integer arithmetic, as Quadric Chimera's FixedPoint32 kernels compute.

Element type `!fixed.fp32<frac>`: a signed 32-bit integer X meaning X * 2^-frac (frac 0..31, the
fractional bits; 31 - frac integer bits besides the sign). Values are static-shape tensors of it,
`tensor<5x32x!fixed.fp32<27>>`; weights in their packed int4 form are `ui8` tensors, int8 KV
rows `i8`. The type is in the dtype table (`strata.ir.dtypes`, kind `fixed`, stored as
int32, spelled `FixedPoint32<frac>` in C++).

Every op's result format is its result type; `assign-frac-bits` sets it from calibration ranges
(Chimera's FixedPoint32 rules) for every op that carries `node`, the name of its tensor in a ranges file.
Exact integer semantics, rounding (half away from zero) and saturation (at the int32 limits) are
`strata.semantics.fixed_interp`'s; each op's docstring says what it computes:

    %w  = fixed.param "blk.0.attn_norm.weight" : tensor<32x!fixed.fp32<30>>
    %h  = fixed.embed %ids, %table {node = "embd"} : tensor<5xi32>, tensor<48x32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<29>>
    %xn = fixed.rms_norm %h, %w {eps = 1.0e-05 : f64} : tensor<5x32x!fixed.fp32<29>>, tensor<32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<28>>
    %q  = fixed.matmul_w4a16 %xn, %b, %s, %zp {wfrac = 31 : i64} : tensor<5x32x!fixed.fp32<28>>, tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<5x32x!fixed.fp32<27>>

Ops that touch nothing but their operands are `Pure`; `fixed.param` reads a weight (a memory
read, so it is not hoisted or merged with another read of the same name by rewrites that treat
pure ops as values).
"""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, Signedness, StringAttr
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, attr_def, irdl_op_definition, operand_def, opt_attr_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, Pure

# The element type and the ops' base are the dialect's too: `FX.frac_of`, `FX.fixed_tensor`.
from strata.dialects.fixed_base import MAX_FRAC, FixedOp, FixedPointType, FixedTensor, fixed_tensor, frac_of  # noqa: F401
from strata.dialects.fixed_kv import KV_OPS
from strata.ir.checks import elem_of, require, shape_of
from strata.ir.dtypes import TensorOf, is_int

#: What `fixed.param` may produce from a weight: its value, or one part of its int4 packing.
PARTS = ("value", "int4_b", "int4_scales", "int4_zp")


AnyFixedOperand = TensorOf(("fixed", "int", "float"))


def _is_u8(value: SSAValue) -> bool:
    el = elem_of(value)
    return isinstance(el, IntegerType) and el.width.data == 8 and el.signedness.data == Signedness.UNSIGNED


class _Unary(FixedOp):
    src = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "$src attr-dict `:` type($src) `->` type($result)"

    def verify_op(self) -> None:
        require(shape_of(self.src) == shape_of(self.result),
                f"{self.name}: result shape {list(shape_of(self.result))} must be the source's {list(shape_of(self.src))}")


class _Binary(FixedOp):
    lhs = operand_def(FixedTensor)
    rhs = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    def verify_op(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(r == a, f"{self.name}: result shape {list(r)} must be the lhs's {list(a)}")
        require(len(b) <= len(a) and a[len(a) - len(b):] == b,
                f"{self.name}: rhs shape {list(b)} must be the lhs's {list(a)} or a suffix of it (broadcast)")


@irdl_op_definition
class ParamOp(IRDLOperation):
    """A weight by name (weights never enter the IR): its value (float weights rounded to the
    result's frac, half away from zero, saturated), or, with `part`, one tensor of its int4
    form (ORT's block-wise asymmetric quantization and MatMulNBits packing, `strata.ir.int4`):
    `int4_b` (ui8 [N, nb, block/2]), `int4_scales` (fixed [N, nb]) or `int4_zp` (ui8 [N, ceil(nb/2)]),
    each with the quantization `block` (along K, the weight's last axis).

        %w = fixed.param "blk.0.attn_norm.weight" : tensor<32x!fixed.fp32<30>>
        %b = fixed.param "blk.0.attn_q.weight" {part = "int4_b", block = 128 : i64} : tensor<32x1x64xui8>
    """

    name = "fixed.param"
    param = attr_def(StringAttr)
    part = opt_attr_def(StringAttr)
    block = opt_attr_def(IntegerAttr)
    result = result_def(AnyFixedOperand)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$param attr-dict `:` type($result)"

    @property
    def part_name(self) -> str:
        return self.part.data if self.part is not None else "value"

    def verify_(self) -> None:
        part = self.part_name
        require(part in PARTS, f"fixed.param: part must be one of {', '.join(PARTS)}, got '{part}'")
        fixed = isinstance(elem_of(self.result), FixedPointType)
        if part == "value":
            require(self.block is None, "fixed.param: a block is for an int4 part")
        else:
            block = self.block.value.data if self.block is not None else 0
            require(block >= 2 and block % 2 == 0, f"fixed.param: part '{part}' needs an even block >= 2, got {block}")
            if part == "int4_b":
                shape = shape_of(self.result)
                require(len(shape) == 3 and 2 * shape[2] == block,
                        f"fixed.param: int4_b is [N, nb, {block // 2}] for block {block}, got {list(shape)}")
        if part in ("int4_b", "int4_zp"):
            require(_is_u8(self.result), f"fixed.param: part '{part}' is a ui8 tensor, got {self.result.type}")
        else:
            require(fixed, f"fixed.param: part '{part}' is a fixed-point tensor, got {self.result.type}")


@irdl_op_definition
class EmbedOp(FixedOp):
    """Gather rows of the table at the token ids, rescaled to the result's frac.

        %h = fixed.embed %ids, %table {node = "embd"} : tensor<5xi32>, tensor<48x32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<29>>
    """

    name = "fixed.embed"
    ids = operand_def(TensorOf(("int",)))
    table = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "$ids `,` $table attr-dict `:` type($ids) `,` type($table) `->` type($result)"

    def verify_op(self) -> None:
        t, i, r = shape_of(self.table), shape_of(self.ids), shape_of(self.result)
        require(len(t) == 2, f"fixed.embed: the table is [vocab, dim], got {list(t)}")
        require(r == (*i, t[1]), f"fixed.embed: result shape {list(r)} must be {[*i, t[1]]}")


@irdl_op_definition
class MulOp(_Binary):
    """Element-wise product: the exact 64-bit product X*Z, a rounding shift from frac(lhs) +
    frac(rhs) to the result's frac, saturated to int32. The rhs may be a suffix of the lhs's shape.

        %y = fixed.mul %a, %b : tensor<5x40x!fixed.fp32<24>>, tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<21>>
    """

    name = "fixed.mul"


@irdl_op_definition
class AddOp(_Binary):
    """Saturating add: both operands aligned exactly to the finest of the three fracs (a left
    shift in 64 bits), summed, then one rounding shift to the result's frac, saturated.

        %y = fixed.add %h, %o {node = "ffn_inp-0"} : tensor<5x32x!fixed.fp32<27>>, tensor<5x32x!fixed.fp32<25>> -> tensor<5x32x!fixed.fp32<25>>
    """

    name = "fixed.add"


@irdl_op_definition
class RescaleOp(_Unary):
    """Change the format: a rounding right shift (to fewer fractional bits) or a saturating
    left shift (to more).

        %y = fixed.rescale %x : tensor<4x!fixed.fp32<27>> -> tensor<4x!fixed.fp32<24>>
    """

    name = "fixed.rescale"


@irdl_op_definition
class RmsNormOp(FixedOp):
    """RMS norm of each row (the last axis, D wide) times the weight. The sum of squares is
    taken in 64 bits with each square pre-shifted right by p = ceil(log2 D) (rounded): every
    square is below 2^62, so the sum of D of them stays below 2^62 and cannot overflow. The
    mean (+ eps) is normalized to [2^60, 2^62), its integer square root taken exactly, its
    reciprocal computed as round(2^61 / root); x times it gives the normalized row at
    frac 31 - ceil(log2(D)/2) (|x / rms| <= sqrt(D)), which times the weight is rounded to
    the result's frac.

        %y = fixed.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<5x32x!fixed.fp32<27>>, tensor<32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<28>>
    """

    name = "fixed.rms_norm"
    src = operand_def(FixedTensor)
    weight = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    eps = attr_def(FloatAttr)
    traits = traits_def(Pure())
    assembly_format = "$src `,` $weight attr-dict `:` type($src) `,` type($weight) `->` type($result)"

    def verify_op(self) -> None:
        x, w, r = shape_of(self.src), shape_of(self.weight), shape_of(self.result)
        require(r == x, f"fixed.rms_norm: result shape {list(r)} must be the source's {list(x)}")
        require(w == x[-1:], f"fixed.rms_norm: the weight is [{x[-1]}], got {list(w)}")
        require(self.eps.value.data >= 0, "fixed.rms_norm: eps must be >= 0")


@irdl_op_definition
class SoftmaxOp(_Unary):
    """Softmax of each row (the last axis): the row's max subtracted (every difference <= 0),
    exp of those negatives in Q31 (`strata.semantics.fixed_arith.exp_neg`: within 1.25 LSB), their sum, and each exp times
    the reciprocal of the sum (normalized to 32 bits), rounded to the result's frac.

        %p = fixed.softmax %s : tensor<4x6x!fixed.fp32<26>> -> tensor<4x6x!fixed.fp32<31>>
    """

    name = "fixed.softmax"


@irdl_op_definition
class SigmoidOp(_Unary):
    """1 / (1 + exp(-x)) from exp of a negative (exp(-|x|)) and one rounded division.

        %g = fixed.sigmoid %x : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<31>>
    """

    name = "fixed.sigmoid"


@irdl_op_definition
class SiluOp(_Unary):
    """x * sigmoid(x), the sigmoid in Q31, one rounding shift to the result's frac.

        %a = fixed.silu %g : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<24>>
    """

    name = "fixed.silu"


@irdl_op_definition
class RopeOp(FixedOp):
    """NeoX (rotate-half) rope of each head_dim-wide head of each row, with the cos and sin
    tables [rows, head_dim/2] as operands (host-computed, Chimera's FixedPoint32<30> sin/cos):
    x1*c - x2*s and x2*c + x1*s exact in 64 bits, one rounding shift to the result's frac.

        %qr = fixed.rope %q, %cos, %sin {head_dim = 8 : i64} : tensor<5x32x!fixed.fp32<27>>, tensor<5x4x!fixed.fp32<30>>, tensor<5x4x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<27>>
    """

    name = "fixed.rope"
    src = operand_def(FixedTensor)
    cos = operand_def(FixedTensor)
    sin = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    head_dim = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = ("$src `,` $cos `,` $sin attr-dict `:` type($src) `,` type($cos) `,` type($sin) "
                       "`->` type($result)")

    def verify_op(self) -> None:
        x, c, s, r = shape_of(self.src), shape_of(self.cos), shape_of(self.sin), shape_of(self.result)
        hd = self.head_dim.value.data
        require(hd > 0 and hd % 2 == 0, f"fixed.rope: head_dim must be positive and even, got {hd}")
        require(len(x) == 2 and x[1] % hd == 0, f"fixed.rope: the source is [rows, heads*{hd}], got {list(x)}")
        require(self.cos.type == self.sin.type, f"fixed.rope: cos and sin must have one type, got {self.cos.type} and {self.sin.type}")
        require(c == s == (x[0], hd // 2), f"fixed.rope: cos and sin are [{x[0]}, {hd // 2}], got {list(c)} and {list(s)}")
        require(r == x, f"fixed.rope: result shape {list(r)} must be the source's {list(x)}")


def _int4_shapes(op: IRDLOperation, b: SSAValue, scales: SSAValue, zp: SSAValue, k: int, n: int) -> None:
    bs, ss, zs = shape_of(b), shape_of(scales), shape_of(zp)
    require(_is_u8(b) and len(bs) == 3, f"{op.name}: B is ui8 [N, nb, block/2] (MatMulNBits), got {b.type}")
    nb, half = bs[1], bs[2]
    require(bs[0] == n, f"{op.name}: B has {bs[0]} rows, expected N = {n}")
    require(-(-k // (2 * half)) == nb, f"{op.name}: K = {k} needs {-(-k // (2 * half))} blocks of {2 * half}, B has {nb}")
    require(ss == (n, nb), f"{op.name}: scales are [{n}, {nb}], got {list(ss)}")
    require(_is_u8(zp) and zs == (n, -(-nb // 2)), f"{op.name}: zero points are ui8 [{n}, {-(-nb // 2)}], got {zp.type}")


@irdl_op_definition
class DequantInt4Op(FixedOp):
    """int4 weights to fixed point: block-wise asymmetric (ONNX Runtime's formula), in
    MatMulNBits' layout (B ui8 [N, nb, block/2], element k in B[n, k // block, (k % block) // 2],
    even k in the low nibble; zero points two per byte, even block low). w = (q - zp) * scale,
    exact in 64 bits, one rounding shift from the scales' frac to the result's.

        %w = fixed.dequant_int4 %b, %s, %zp : tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<32x32x!fixed.fp32<29>>
    """

    name = "fixed.dequant_int4"
    b = operand_def(TensorOf(("int",)))
    scales = operand_def(FixedTensor)
    zp = operand_def(TensorOf(("int",)))
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "$b `,` $scales `,` $zp attr-dict `:` type($b) `,` type($scales) `,` type($zp) `->` type($result)"

    def verify_op(self) -> None:
        r = shape_of(self.result)
        require(len(r) == 2, f"fixed.dequant_int4: the result is [N, K], got {list(r)}")
        _int4_shapes(self, self.b, self.scales, self.zp, r[1], r[0])


@irdl_op_definition
class DequantInt8Op(FixedOp):
    """int8 rows (the KV cache) to fixed point with one scale per head (head_dim columns):
    q * scale, exact, one rounding shift to the result's frac.

        %k = fixed.dequant_int8 %q, %s {head_dim = 8 : i64} : tensor<5x16xi8>, tensor<2x!fixed.fp32<31>> -> tensor<5x16x!fixed.fp32<28>>
    """

    name = "fixed.dequant_int8"
    src = operand_def(TensorOf(("int",)))
    scales = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    head_dim = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = "$src `,` $scales attr-dict `:` type($src) `,` type($scales) `->` type($result)"

    def verify_op(self) -> None:
        x, s, r = shape_of(self.src), shape_of(self.scales), shape_of(self.result)
        hd = self.head_dim.value.data
        require(is_int(elem_of(self.src), 8), f"fixed.dequant_int8: the source is an 8-bit tensor, got {self.src.type}")
        require(len(x) == 2 and hd > 0 and x[1] % hd == 0, f"fixed.dequant_int8: the source is [rows, heads*{hd}], got {list(x)}")
        require(s == (x[1] // hd,), f"fixed.dequant_int8: one scale per head: [{x[1] // hd}], got {list(s)}")
        require(r == x, f"fixed.dequant_int8: result shape {list(r)} must be the source's {list(x)}")


@irdl_op_definition
class QuantInt8Op(IRDLOperation):
    """Fixed rows to int8 with one scale per head: q = x / scale rounded half away from zero
    (one exact integer division), saturated to [-127, 127].

        %q = fixed.quant_int8 %k, %s {head_dim = 8 : i64} : tensor<5x16x!fixed.fp32<28>>, tensor<2x!fixed.fp32<31>> -> tensor<5x16xi8>
    """

    name = "fixed.quant_int8"
    src = operand_def(FixedTensor)
    scales = operand_def(FixedTensor)
    result = result_def(TensorOf(("int",)))
    head_dim = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = "$src `,` $scales attr-dict `:` type($src) `,` type($scales) `->` type($result)"

    def verify_(self) -> None:
        x, s, r = shape_of(self.src), shape_of(self.scales), shape_of(self.result)
        hd = self.head_dim.value.data
        require(is_int(elem_of(self.result), 8), f"fixed.quant_int8: the result is an 8-bit tensor, got {self.result.type}")
        require(len(x) == 2 and hd > 0 and x[1] % hd == 0, f"fixed.quant_int8: the source is [rows, heads*{hd}], got {list(x)}")
        require(s == (x[1] // hd,), f"fixed.quant_int8: one scale per head: [{x[1] // hd}], got {list(s)}")
        require(r == x, f"fixed.quant_int8: result shape {list(r)} must be the source's {list(x)}")


@irdl_op_definition
class MatmulW4A16Op(FixedOp):
    """y = x @ W^T with W int4 (block-wise asymmetric, MatMulNBits layout: B, scales, zero
    points) and x fixed. W is dequantized to `wfrac` fractional bits (as fixed.dequant_int4);
    each product X*W (below 2^62) is pre-shifted right by g = ceil(log2 K) (rounded) so the
    64-bit sum of K of them cannot overflow; the sum is shifted to the result's frac (rounded,
    saturated). The result's frac is Chimera's `w4a16NBitsMatMul<frac, ...>`.

        %q = fixed.matmul_w4a16 %x, %b, %s, %zp {wfrac = 31 : i64, node = "Qcur-0"} : tensor<5x32x!fixed.fp32<28>>, tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<5x32x!fixed.fp32<27>>
    """

    name = "fixed.matmul_w4a16"
    src = operand_def(FixedTensor)
    b = operand_def(TensorOf(("int",)))
    scales = operand_def(FixedTensor)
    zp = operand_def(TensorOf(("int",)))
    result = result_def(FixedTensor)
    wfrac = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = ("$src `,` $b `,` $scales `,` $zp attr-dict `:` type($src) `,` type($b) `,` type($scales) "
                       "`,` type($zp) `->` type($result)")

    def verify_op(self) -> None:
        x, r = shape_of(self.src), shape_of(self.result)
        wf = self.wfrac.value.data
        require(0 <= wf <= MAX_FRAC, f"fixed.matmul_w4a16: wfrac must be in 0..{MAX_FRAC}, got {wf}")
        require(len(x) == 2 and len(r) == 2 and r[0] == x[0],
                f"fixed.matmul_w4a16: x is [M, K] and the result [M, N], got {list(x)} and {list(r)}")
        _int4_shapes(self, self.b, self.scales, self.zp, x[1], r[1])


@irdl_op_definition
class MatmulOp(FixedOp):
    """y = x @ W^T with both fixed (a weight kept in full precision, as the w4a16 recipe keeps
    the LM head in bf16): each product (below 2^62) pre-shifted by g = ceil(log2 K), summed in
    64 bits, shifted to the result's frac (rounded, saturated).

        %y = fixed.matmul %x, %w {node = "result_output"} : tensor<5x32x!fixed.fp32<28>>, tensor<48x32x!fixed.fp32<31>> -> tensor<5x48x!fixed.fp32<27>>
    """

    name = "fixed.matmul"
    src = operand_def(FixedTensor)
    weight = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "$src `,` $weight attr-dict `:` type($src) `,` type($weight) `->` type($result)"

    def verify_op(self) -> None:
        x, w, r = shape_of(self.src), shape_of(self.weight), shape_of(self.result)
        require(len(x) == 2 and len(w) == 2 and w[1] == x[1] and r == (x[0], w[0]),
                f"fixed.matmul: x [M, K], W [N, K] and the result [M, N], got {list(x)}, {list(w)} and {list(r)}")


@irdl_op_definition
class AttentionOp(FixedOp):
    """Causal multi-head attention over the rows given (a prefill from position 0), grouped
    query heads (q [rows, Hq*D], k and v [rows, Hkv*D], Hq a multiple of Hkv): scores q.k in
    64 bits (each product pre-shifted by ceil(log2 D)) times `scale`, rounded to `sfrac`
    fractional bits; the masked row's fixed.softmax in Q31; p.v in 64 bits (products pre-shifted
    by ceil(log2 rows)), rounded to the result's frac. Chimera's qwenMultiheadAttentionFx32RoPE
    without its rope and int8 cache (those are fixed.rope and fixed.quant_int8/dequant_int8).

        %a = fixed.attention %q, %k, %v {head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sfrac = 27 : i64} : tensor<5x32x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<28>> -> tensor<5x32x!fixed.fp32<28>>
    """

    name = "fixed.attention"
    q = operand_def(FixedTensor)
    k = operand_def(FixedTensor)
    v = operand_def(FixedTensor)
    result = result_def(FixedTensor)
    head_dim = attr_def(IntegerAttr)
    scale = attr_def(FloatAttr)
    sfrac = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = ("$q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type($result)")

    def verify_op(self) -> None:
        q, k, v, r = shape_of(self.q), shape_of(self.k), shape_of(self.v), shape_of(self.result)
        hd = self.head_dim.value.data
        require(hd > 0, f"fixed.attention: head_dim must be positive, got {hd}")
        require(len(q) == 2 and q[1] % hd == 0, f"fixed.attention: q is [rows, heads*{hd}], got {list(q)}")
        require(k == v and len(k) == 2 and k[0] == q[0] and k[1] % hd == 0,
                f"fixed.attention: k and v are [{q[0]}, kv_heads*{hd}], got {list(k)} and {list(v)}")
        require((q[1] // hd) % (k[1] // hd) == 0, f"fixed.attention: {q[1] // hd} query heads are not a multiple of {k[1] // hd} kv heads")
        require(0 <= self.sfrac.value.data <= MAX_FRAC, f"fixed.attention: sfrac must be in 0..{MAX_FRAC}")
        require(self.scale.value.data > 0, "fixed.attention: scale must be positive")
        require(r == q, f"fixed.attention: result shape {list(r)} must be q's {list(q)}")


#: The ops whose results get Chimera's w4a16 headroom (the matmul outputs).
MATMUL_OPS: tuple[type[FixedOp], ...] = (MatmulW4A16Op, MatmulOp)

OPS = [ParamOp, EmbedOp, MulOp, AddOp, RescaleOp, RmsNormOp, SoftmaxOp, SigmoidOp, SiluOp, RopeOp,
       DequantInt4Op, DequantInt8Op, QuantInt8Op, MatmulW4A16Op, MatmulOp, AttentionOp]
OPS += KV_OPS

Fixed = Dialect("fixed", OPS, [FixedPointType])
