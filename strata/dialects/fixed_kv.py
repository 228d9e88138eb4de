"""The `fixed` dialect's decode ops: constants, the persistent int8 KV cache, attention over it.

Defined here, registered in the `fixed` dialect (`strata.dialects.fixed.OPS`). A decode step
at the fixed level (convert-blueprint-to-fixed with a cache) quantizes each new k/v row to int8
with one scale per head (`fixed.quant_int8`), stores it at its position in a persistent state
(`fixed.cache_write`), reads the whole cache back as fixed point (`fixed.dequant_int8` of the
state) and attends over the positions written so far (`fixed.cache_attention`):

    %ks = fixed.const {value = array<i64: 1717986918, 1717986918>} : tensor<2x!fixed.fp32<31>>
    %kc = fixed.kv_state "cache_k_l0" : tensor<64x16xi8>
    %k8 = fixed.quant_int8 %kr, %ks {head_dim = 8 : i64} : ... -> tensor<1x16xi8>
    fixed.cache_write %kc, %k8, %pos : tensor<64x16xi8>, tensor<1x16xi8>, tensor<1xi32>
    %kd = fixed.dequant_int8 %kc, %ks {head_dim = 8 : i64} : tensor<64x16xi8>, ... -> tensor<64x16x!fixed.fp32<27>>
    %a  = fixed.cache_attention %qr, %kd, %vd, %pos {head_dim = 8 : i64, scale = 0.35355 : f64, sfrac = 27 : i64} : ...

A `fixed.kv_state` value names a buffer that lives across calls (zero at the start); reads of
it (`fixed.dequant_int8`) see every `fixed.cache_write` before them in program order, so no
rewrite may move a read across a write of the same state (the pipelines run none that would).
"""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, IntegerAttr, StringAttr, TensorType
from xdsl.irdl import IRDLOperation, attr_def, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from strata.dialects.fixed_base import MAX_FRAC, FixedOp, FixedPointType, FixedTensor
from strata.ir.checks import elem_of, require, shape_of
from strata.ir.dtypes import TensorOf, is_int


@irdl_op_definition
class ConstOp(IRDLOperation):
    """A fixed-point constant: its integers (X meaning X * 2^-frac, the frac the result's),
    each within int32.

        %s = fixed.const {value = array<i64: 1717986918, 1717986918>} : tensor<2x!fixed.fp32<31>>
    """

    name = "fixed.const"
    value = attr_def(DenseArrayBase)
    result = result_def(FixedTensor)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def integers(self) -> list[int]:
        return [int(v) for v in self.value.get_values()]

    def verify_(self) -> None:
        n = 1
        for d in shape_of(self.result):
            n *= d
        vals = self.integers()
        require(len(vals) == n, f"fixed.const: {len(vals)} values for a result of {n} elements")
        require(all(-(2 ** 31) <= v < 2 ** 31 for v in vals), "fixed.const: a value is beyond int32")


@irdl_op_definition
class KvStateOp(IRDLOperation):
    """A persistent int8 buffer [ctx, heads*head_dim] (one layer's k or v cache) by name, zero
    before the first call.

        %kc = fixed.kv_state "cache_k_l0" : tensor<64x16xi8>
    """

    name = "fixed.kv_state"
    state = attr_def(StringAttr)
    result = result_def(TensorOf(("int",)))
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$state attr-dict `:` type($result)"

    def verify_(self) -> None:
        require(is_int(elem_of(self.result), 8) and len(shape_of(self.result)) == 2,
                f"fixed.kv_state: the state is an 8-bit [ctx, width] tensor, got {self.result.type}")


@irdl_op_definition
class CacheWriteOp(IRDLOperation):
    """Store int8 rows [rows, width] into the state at rows pos.. (pos a tensor<1xi32>; the
    rows must fit: pos + rows <= ctx, checked when it runs).

        fixed.cache_write %kc, %k8, %pos : tensor<64x16xi8>, tensor<1x16xi8>, tensor<1xi32>
    """

    name = "fixed.cache_write"
    cache = operand_def(TensorOf(("int",)))
    rows = operand_def(TensorOf(("int",)))
    pos = operand_def(TensorOf(("int",)))
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$cache `,` $rows `,` $pos attr-dict `:` type($cache) `,` type($rows) `,` type($pos)"

    def verify_(self) -> None:
        c, r, p = shape_of(self.cache), shape_of(self.rows), shape_of(self.pos)
        require(isinstance(self.cache.owner, KvStateOp), "fixed.cache_write: the cache must be a fixed.kv_state")
        require(self.cache.type.get_element_type() == self.rows.type.get_element_type()  # type: ignore[attr-defined]
                and len(r) == 2 and r[1] == c[1] and r[0] <= c[0],
                f"fixed.cache_write: rows are [n <= {c[0]}, {c[1]}] of the cache's element type, got {self.rows.type}")
        require(p == (1,), f"fixed.cache_write: pos is a tensor<1xi32>, got {self.pos.type}")


@irdl_op_definition
class CacheAttentionOp(FixedOp):
    """fixed.attention's arithmetic over a cache: q [rows, Hq*D] at positions pos.., k and v
    [ctx, Hkv*D] (every cache row, dequantized); query row i attends keys 0..pos+i. Scores q.k
    in 64 bits (products pre-shifted by ceil(log2 D)) times `scale`, at `sfrac`; the masked
    row's softmax in Q31; p.v in 64 bits with products pre-shifted by ceil(log2 ctx), rounded
    to the result's frac. Chimera's qwenMultiheadAttentionFx32RoPE after its rope and cache.

        %a = fixed.cache_attention %q, %k, %v, %pos {head_dim = 8 : i64, scale = 0.3535533905932738 : f64, sfrac = 27 : i64} : tensor<1x32x!fixed.fp32<27>>, tensor<64x16x!fixed.fp32<27>>, tensor<64x16x!fixed.fp32<28>>, tensor<1xi32> -> tensor<1x32x!fixed.fp32<28>>
    """

    name = "fixed.cache_attention"
    q = operand_def(FixedTensor)
    k = operand_def(FixedTensor)
    v = operand_def(FixedTensor)
    pos = operand_def(TensorOf(("int",)))
    result = result_def(FixedTensor)
    head_dim = attr_def(IntegerAttr)
    scale = attr_def(FloatAttr)
    sfrac = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = ("$q `,` $k `,` $v `,` $pos attr-dict `:` type($q) `,` type($k) `,` type($v) `,` type($pos) "
                       "`->` type($result)")

    def verify_op(self) -> None:
        q, k, v, r = shape_of(self.q), shape_of(self.k), shape_of(self.v), shape_of(self.result)
        hd = self.head_dim.value.data
        require(hd > 0 and len(q) == 2 and q[1] % hd == 0, f"fixed.cache_attention: q is [rows, heads*{hd}], got {list(q)}")
        require(k == v and len(k) == 2 and k[1] % hd == 0 and k[0] >= q[0],
                f"fixed.cache_attention: k and v are [ctx >= {q[0]}, kv_heads*{hd}], got {list(k)} and {list(v)}")
        require((q[1] // hd) % (k[1] // hd) == 0,
                f"fixed.cache_attention: {q[1] // hd} query heads are not a multiple of {k[1] // hd} kv heads")
        require(shape_of(self.pos) == (1,), f"fixed.cache_attention: pos is a tensor<1xi32>, got {self.pos.type}")
        require(0 <= self.sfrac.value.data <= MAX_FRAC, f"fixed.cache_attention: sfrac must be in 0..{MAX_FRAC}")
        require(self.scale.value.data > 0, "fixed.cache_attention: scale must be positive")
        require(r == q, f"fixed.cache_attention: result shape {list(r)} must be q's {list(q)}")


KV_OPS = [ConstOp, KvStateOp, CacheWriteOp, CacheAttentionOp]

__all__ = ["KV_OPS", "ConstOp", "KvStateOp", "CacheWriteOp", "CacheAttentionOp", "FixedPointType", "TensorType"]
