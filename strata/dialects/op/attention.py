"""Attention ops: SOFT_MAX, ROPE (plain and multi-section) and FLASH_ATTN_EXT."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, Float32Type, FloatAttr, IntegerAttr, StringAttr
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, opt_attr_def, opt_operand_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.op.base import OpBase, can_repeat, dim_eq, fmt_shape, shapes_eq
from strata.ir.dtypes import FloatTensor, IntTensor, is_int
from strata.ir.checks import elem_of, require, shape_of

#: ROPE's modes: ggml's NORMAL ("norm"), NEOX, MROPE and IMROPE (interleaved M-RoPE).
ROPE_MODES = ("neox", "norm", "mrope", "imrope")
#: The modes with position sections (ggml_rope_multi): four positions per token.
MULTI_ROPE_MODES = ("mrope", "imrope")


@irdl_op_definition
class SoftMaxOp(OpBase):
    """SOFT_MAX (ggml_soft_max_ext): softmax(x * scale + mask) over the last dim; the
    mask [S, N] broadcasts over leading dims. Without a mask (and scale 1) it is
    ggml_soft_max.

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
    """ROPE: rotary embedding of x [S, Heads, D] at `positions`.

    The angle of pair i (i < n_dims/2) is p * freq_scale * freq_base^(-2i/n_dims)
    / freq_factors[i]; `freq_factors` (llama3 scaling) is optional. Dims from n_dims on
    pass through (partial rotary). Modes:

    * "norm" rotates adjacent pairs (2i, 2i+1) (GGUF llama), "neox" the halves
      (i, i + n_dims/2) (HF's rotate_half); `positions` is [S] and p is the token's.
    * "mrope" and "imrope" (ggml_rope_multi, GGML_ROPE_TYPE_MROPE / _IMROPE) rotate
      the halves like "neox", with four position streams: `positions` is [4*S], stream k
      of token s at k*S + s (t, h, w, e; for text llama.cpp passes the positions three
      times and zeros, op.input "mrope_positions"). `sections` [4] splits the pairs among
      the streams, as ggml (their sum may exceed the pairs: Qwen3.5's default [11, 11, 10, 0]
      with a small head): with sector = i % sum(sections), "mrope" gives sectors
      [0, s0) to t, then s1 to h, s2 to w and the rest to e; "imrope" interleaves:
      sector % 3 == 1 and sector < 3*s1 is h, == 2 and < 3*s2 is w, == 0 and < 3*s0 is
      t, anything else e.

        %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64}
            : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
        %m = op.rope %q, %pos4 {n_dims = 8 : i64, mode = "imrope", sections = array<i64: 2, 1, 1, 0>,
                                freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64}
            : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
    """

    name = "op.rope"
    traits = traits_def(Pure())
    src = operand_def(FloatTensor)
    positions = operand_def(IntTensor)
    freq_factors = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    n_dims = attr_def(IntegerAttr)
    mode = attr_def(StringAttr)
    sections = opt_attr_def(DenseArrayBase)
    freq_base = attr_def(FloatAttr)
    freq_scale = attr_def(FloatAttr)

    assembly_format = (
        "$src `,` $positions (`,` $freq_factors^)? attr-dict `:` type($src) `,` type($positions)"
        " (`,` type($freq_factors)^)? `->` type($result)"
    )

    def verify_(self) -> None:
        a, p, r = shape_of(self.src), shape_of(self.positions), shape_of(self.result)
        mode = self.mode.data
        require(len(a) == 3, f"op.rope: operand must be [S, Heads, D], got {fmt_shape(a)}")
        require(shapes_eq(a, r), "op.rope: result shape must equal the operand's")
        require(mode in ROPE_MODES, f"op.rope: mode must be one of {', '.join(ROPE_MODES)}, got '{mode}'")
        multi = mode in MULTI_ROPE_MODES
        per_token = 4 if multi else 1
        want = DYNAMIC_INDEX if a[0] == DYNAMIC_INDEX else per_token * a[0]
        ok = len(p) == 1 and dim_eq(p[0], want) and is_int(elem_of(self.positions))
        what = "[4*S] (four streams)" if multi else "[S]"
        require(ok, f"op.rope: positions must be an integer tensor {what}, got {self.positions.type}")
        n = self.n_dims.value.data
        fits = a[2] == DYNAMIC_INDEX or n <= a[2]
        require(n > 0 and n % 2 == 0 and fits, f"op.rope: n_dims {n} must be even and at most D={fmt_shape(a[2:])}")
        if multi:
            require(self.sections is not None, f"op.rope: mode '{mode}' needs `sections` (4 values)")
            sec = tuple(self.sections.get_values())
            require(len(sec) == 4 and all(s >= 0 for s in sec) and sum(sec) > 0,
                    f"op.rope: sections must be 4 values >= 0 with a positive sum, got {list(sec)}")
        else:
            require(self.sections is None, f"op.rope: mode '{mode}' takes no sections")
        if self.freq_factors is not None:
            ok = shape_of(self.freq_factors) == (n // 2,) and isinstance(elem_of(self.freq_factors), Float32Type)
            require(ok, f"op.rope: freq_factors must be tensor<{n // 2}xf32>")


@irdl_op_definition
class FlashAttnExtOp(OpBase):
    """FLASH_ATTN_EXT: fused softmax(q k^T * scale + mask) v.

    q [Heads, S, D], k [KvHeads, N, D], v [KvHeads, N, Dv], mask [S, N];
    the result is [S, Heads, Dv] (ggml's permuted output). Heads must be a multiple
    of KvHeads; consecutive query heads share a KV head. With a leading dim R (ggml's
    ne[3], one attention stream per batch row, each with its own keys) every operand has
    it: q [R, Heads, S, D], k [R, KvHeads, N, D], v [R, KvHeads, N, Dv], mask [R, S, N],
    and the result is [R, S, Heads, Dv].

        %o = op.flash_attn_ext %q, %k, %v, %m {scale = 0.25 : f64}
            : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<5x8xf32> -> tensor<5x4x16xf32>
        %b = op.flash_attn_ext %q4, %k4, %v4, %m3 {scale = 0.25 : f64}
            : tensor<3x4x1x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x1x8xf32> -> tensor<3x1x4x16xf32>
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
        require(len(q) == len(k) == len(v) and len(q) in (3, 4), "op.flash_attn_ext: q, k and v must have rank 3 "
                "(or 4, with a leading dim of streams)")
        lead = q[:-3]
        require(shapes_eq(k[:-3], lead) and shapes_eq(v[:-3], lead), "op.flash_attn_ext: q, k and v must have the "
                "same streams")
        q, k, v = q[-3:], k[-3:], v[-3:]
        require(dim_eq(q[2], k[2]), "op.flash_attn_ext: q and k head sizes differ")
        require(dim_eq(k[1], v[1]) and dim_eq(k[0], v[0]), "op.flash_attn_ext: k and v must have the same heads and rows")
        grouped = DYNAMIC_INDEX in (q[0], k[0]) or (k[0] != 0 and q[0] % k[0] == 0)
        require(grouped, "op.flash_attn_ext: query heads must be a multiple of KV heads")
        expect = (*lead, q[1], q[0], v[2])
        require(shapes_eq(r, expect), f"op.flash_attn_ext: result must be {fmt_shape(expect)}")
        if self.mask is not None:
            m = shape_of(self.mask)
            require(shapes_eq(m, (*lead, q[1], k[1])), f"op.flash_attn_ext: mask must be [S, N] ([R, S, N] with "
                    f"streams): {fmt_shape((*lead, q[1], k[1]))}, got {fmt_shape(m)}")
