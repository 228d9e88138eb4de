"""Linear-attention ops: SSM_CONV (the causal depthwise conv), GATED_DELTA_NET, and GATED_DELTA_NET over
the tokens of several sequences (GATED_DELTA_NET_SEQ)."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, Float32Type, UnitAttr
from xdsl.irdl import irdl_op_definition, operand_def, opt_attr_def, opt_operand_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.op.base import BinaryOp, OpBase, check_float, dim_eq, fmt_shape, shapes_eq
from strata.ir.checks import elem_of, require, shape_of
from strata.ir.dtypes import FloatTensor, IntTensor, is_int


@irdl_op_definition
class SsmConvOp(BinaryOp):
    """SSM_CONV (ggml_ssm_conv(sx, c)): the depthwise causal convolution of a channel-major
    window. `lhs` (sx) is [C, K-1+T] (or [S, C, K-1+T] with S sequences): per channel the
    K-1 previous inputs (the conv state) then the T new ones; `rhs` (c) [C, K] holds the
    channels' kernels. The result is token-major, [T, C] (or [S, T, C]):

        result[t, ch] = sum_i sx[ch, t + i] * c[ch, i]   (i < K, summed in order)

    (ggml: sx {K-1+T, C, S}, c {K, C}, result {C, T, S}.)

        %y = op.ssm_conv %sx, %w {name = "conv_output_raw-0"} : tensor<128x6xf32>, tensor<128x4xf32> -> tensor<3x128xf32>
    """

    name = "op.ssm_conv"

    def verify_(self) -> None:
        x, c, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(len(x) in (2, 3), f"op.ssm_conv: sx must be [C, K-1+T] or [S, C, K-1+T], got {fmt_shape(x)}")
        require(len(c) == 2, f"op.ssm_conv: the kernel must be [C, K], got {fmt_shape(c)}")
        require(dim_eq(x[-2], c[0]), f"op.ssm_conv: sx {fmt_shape(x)} and kernel {fmt_shape(c)} have different channels")
        k = c[1]
        if DYNAMIC_INDEX in (x[-1], k):
            t = DYNAMIC_INDEX
        else:
            require(k >= 1 and x[-1] >= k - 1, f"op.ssm_conv: sx {fmt_shape(x)} holds fewer than K-1 = {k - 1} columns")
            t = x[-1] - k + 1
        channels = x[-2] if x[-2] != DYNAMIC_INDEX else c[0]
        expect = (*x[:-2], t, channels)
        require(shapes_eq(r, expect), f"op.ssm_conv: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
        check_float(self, self.lhs, "sx")
        check_float(self, self.rhs, "the kernel")
        require(isinstance(elem_of(self.result), Float32Type), "op.ssm_conv: result must be f32")


@irdl_op_definition
class GatedDeltaNetOp(OpBase):
    """GATED_DELTA_NET (ggml_gated_delta_net(q, k, v, g, beta, state), one sequence, one
    state snapshot): the gated delta rule over T tokens, fused, as ggml's CPU kernel.

    Operands (row-major; Hk q/k heads, Hv value heads, D = dk = dv):
    q, k [T, Hk, D]; v [T, Hv, D]; g [T, Hv, 1] (one gate per head; KDA's per-channel
    gate is [T, Hv, D]); beta [T, Hv, 1]; state [Hv, D, D], the initial state, per head
    the transpose of the delta rule's S [dk, dv] (state[h, j, i] = S[h][i, j], ggml's
    {S_v, S_v, H}). Value head h reads q/k head h % Hk (ggml's broadcast: the GGUF stores
    the V heads in that tiled order), or h // (Hv / Hk) with `grouped` (HF's order).

    Per token t and head h, with q scaled inside by D^-1/2:

        S = S * exp(g[t, h])                       (KDA: row i of S times exp(g[t, h, i]))
        u = beta[t, h] * (v[t, h] - S^T k[t, h])
        S = S + k[t, h] u^T
        o[t, h] = S^T q[t, h] * D^-1/2

    The result [T + D, Hv*D] (f32) is ggml's packed output: rows 0..T-1 are the outputs o
    [T, Hv, D] (a view gives them as [T, Hv, D]); the Hv*D*D elements after them are the
    final state, laid out like `state` (a view at offset T*Hv*D).

        %r = op.gated_delta_net %q, %k, %v, %g, %b, %s
            : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>,
              tensor<4x16x16xf32> -> tensor<19x64xf32>
    """

    name = "op.gated_delta_net"
    q = operand_def(FloatTensor)
    k = operand_def(FloatTensor)
    v = operand_def(FloatTensor)
    g = operand_def(FloatTensor)
    beta = operand_def(FloatTensor)
    state = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    grouped = opt_attr_def(UnitAttr)
    traits = traits_def(Pure())

    assembly_format = (
        "$q `,` $k `,` $v `,` $g `,` $beta `,` $state attr-dict `:` type($q) `,` type($k) `,` type($v) `,`"
        " type($g) `,` type($beta) `,` type($state) `->` type($result)"
    )

    def verify_(self) -> None:
        q, k, v, g, b, s, r = (shape_of(x) for x in (self.q, self.k, self.v, self.g, self.beta, self.state, self.result))
        name = "op.gated_delta_net"
        require(len(q) == 3 and shapes_eq(q, k), f"{name}: q and k must be [T, Hk, D] alike, got {fmt_shape(q)} and {fmt_shape(k)}")
        require(len(v) == 3, f"{name}: v must be [T, Hv, D], got {fmt_shape(v)}")
        t, hk, d = q
        hv = v[1]
        require(dim_eq(v[0], t) and dim_eq(v[2], d), f"{name}: v {fmt_shape(v)} must have q's {fmt_shape((t,))} tokens and {d} dims")
        require(DYNAMIC_INDEX in (hk, hv) or (hk > 0 and hv % hk == 0), f"{name}: value heads {hv} must be a multiple of key heads {hk}")
        ok_g = len(g) == 3 and dim_eq(g[0], t) and dim_eq(g[1], hv) and (g[2] == 1 or dim_eq(g[2], d))
        require(ok_g, f"{name}: g must be [T, Hv, 1] or [T, Hv, D] = {fmt_shape((t, hv, 1))} or {fmt_shape((t, hv, d))}, got {fmt_shape(g)}")
        require(shapes_eq(b, (t, hv, 1)), f"{name}: beta must be {fmt_shape((t, hv, 1))}, got {fmt_shape(b)}")
        require(shapes_eq(s, (hv, d, d)), f"{name}: state must be {fmt_shape((hv, d, d))}, got {fmt_shape(s)}")
        rows = DYNAMIC_INDEX if DYNAMIC_INDEX in (t, d) else t + d
        width = DYNAMIC_INDEX if DYNAMIC_INDEX in (hv, d) else hv * d
        require(shapes_eq(r, (rows, width)), f"{name}: result must be {fmt_shape((rows, width))}, got {fmt_shape(r)}")
        require(isinstance(elem_of(self.result), Float32Type), f"{name}: result must be f32")


@irdl_op_definition
class GatedDeltaNetSeqOp(OpBase):
    """GATED_DELTA_NET over the tokens of several sequences at once: each token has its
    sequence (`seq` [T] i32, -1: a token of none, padding), and each sequence runs the
    delta rule of `op.gated_delta_net` over its own tokens, in order, from its own state.

    Operands as `op.gated_delta_net`'s (q, k [T, Hk, D]; v [T, Hv, D]; g [T, Hv, 1] or
    [T, Hv, D]; beta [T, Hv, 1]), then `seq`, then optionally `state` [G, Hv, D, D]: the
    initial state of each of the G sequences (seq values are 0..G-1). Without `state` every
    sequence starts from zero and its final state is dropped (packed segments, each run as if
    alone). The result is [T, Hv*D] of outputs (zeros for a token of no sequence), followed,
    with `state`, by each sequence's final state: [T + G*D, Hv*D], the G*Hv*D*D elements
    after the outputs laid out like `state`.

        %r = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq, %s
            : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>,
              tensor<5xi32>, tensor<2x4x16x16xf32> -> tensor<37x64xf32>
    """

    name = "op.gated_delta_net_seq"
    q = operand_def(FloatTensor)
    k = operand_def(FloatTensor)
    v = operand_def(FloatTensor)
    g = operand_def(FloatTensor)
    beta = operand_def(FloatTensor)
    seq = operand_def(IntTensor)
    state = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    grouped = opt_attr_def(UnitAttr)
    traits = traits_def(Pure())

    assembly_format = (
        "$q `,` $k `,` $v `,` $g `,` $beta `,` $seq (`,` $state^)? attr-dict `:` type($q) `,` type($k) `,` type($v)"
        " `,` type($g) `,` type($beta) `,` type($seq) (`,` type($state)^)? `->` type($result)"
    )

    def verify_(self) -> None:
        name = "op.gated_delta_net_seq"
        q, k, v, g, b, sq, r = (shape_of(x) for x in (self.q, self.k, self.v, self.g, self.beta, self.seq, self.result))
        require(len(q) == 3 and shapes_eq(q, k), f"{name}: q and k must be [T, Hk, D] alike, got {fmt_shape(q)} and {fmt_shape(k)}")
        require(len(v) == 3, f"{name}: v must be [T, Hv, D], got {fmt_shape(v)}")
        t, hk, d = q
        hv = v[1]
        require(dim_eq(v[0], t) and dim_eq(v[2], d), f"{name}: v {fmt_shape(v)} must have q's {fmt_shape((t,))} tokens and {d} dims")
        require(DYNAMIC_INDEX in (hk, hv) or (hk > 0 and hv % hk == 0), f"{name}: value heads {hv} must be a multiple of key heads {hk}")
        ok_g = len(g) == 3 and dim_eq(g[0], t) and dim_eq(g[1], hv) and (g[2] == 1 or dim_eq(g[2], d))
        require(ok_g, f"{name}: g must be [T, Hv, 1] or [T, Hv, D] = {fmt_shape((t, hv, 1))} or {fmt_shape((t, hv, d))}, got {fmt_shape(g)}")
        require(shapes_eq(b, (t, hv, 1)), f"{name}: beta must be {fmt_shape((t, hv, 1))}, got {fmt_shape(b)}")
        require(shapes_eq(sq, (t,)) and is_int(elem_of(self.seq), 32), f"{name}: seq must be tensor<{fmt_shape((t,))}xi32>, got {self.seq.type}")
        width = DYNAMIC_INDEX if DYNAMIC_INDEX in (hv, d) else hv * d
        rows = t
        if self.state is not None:
            s = shape_of(self.state)
            require(len(s) == 4 and shapes_eq(s[1:], (hv, d, d)),
                    f"{name}: state must be [G, {fmt_shape((hv, d, d))}], got {fmt_shape(s)}")
            rows = DYNAMIC_INDEX if DYNAMIC_INDEX in (t, d, s[0]) else t + s[0] * d
        require(shapes_eq(r, (rows, width)), f"{name}: result must be {fmt_shape((rows, width))}, got {fmt_shape(r)}")
        require(isinstance(elem_of(self.result), Float32Type), f"{name}: result must be f32")
