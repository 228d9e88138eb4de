"""Op-level expansion of Gated DeltaNet linear attention, as llama.cpp builds it
(build_layer_attn_linear of src/models/qwen35.cpp and qwen3next.cpp, with
llm_build_delta_net_base's build_conv_state and build_recurrent_attn).

Per layer il, two recurrent states, each one row per sequence slot (one slot here), f32 as
llama.cpp keeps them:

* `cache_r_l<il>` [1, (K-1)*C]: the conv state, the last K-1 inputs of the C conv channels
  (channel-major: [C, K-1] row-major is ggml's {K-1, C});
* `cache_s_l<il>` [1, Hv*D*D]: the delta rule's state, per value head the transpose of S.

Both are read as llama.cpp's build_rs does: a RESHAPE, the SCALE by 0 that clears a new
sequence's slot (a view of the whole row when the call starts at position 0, else empty;
the clearing itself is the state's `recurrent` reset, see `op.state`), GET_ROWS by
`rs_s_copy` (the slot read) and the CPY of the slots after it (none); and written back by
CPY into a VIEW of the state.

The checkpoint's layout (`layout`) decides the projections: "separate" (Qwen3.5:
in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) or "grouped" (Qwen3-Next: in_proj_qkvz and
in_proj_ba grouped per key head). llama.cpp's converter splits a grouped in_proj_qkvz into
`attn_qkv` [q | k | v] and `attn_gate` (z): the params convert it (`ungroup_rows`), named
after the block's `ggml_split`. The value heads stay in HF's grouped order (value head j
reads key head j // (Hv / Hk)): GATED_DELTA_NET broadcasts q and k `grouped`, or, with the
block's `qk_repeat` (Qwen3-Next's builder), they are repeated per value head first.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import DYNAMIC_INDEX, FloatAttr, IntegerAttr, UnitAttr, f32, f64, i32, i64
from xdsl.ir import SSAValue

from strata.dialects import op as O
from strata.dialects.instances import BlockInstance
from strata.passes.convert_module_to_op.lowering import (
    EXPANSIONS,
    Lowering,
    LoweringError,
    flag,
    string_dict,
    tensor,
)

#: llama.cpp's names of the tensors its converter makes of a grouped in_proj_qkvz.
SPLIT_DEFAULT = {"qkv": "attn_qkv", "z": "attn_gate"}


@EXPANSIONS.register("std.attn.gated_delta_net")
class GatedDeltaNet:
    @staticmethod
    def forward(lo: Lowering, inst: BlockInstance, x: SSAValue) -> SSAValue:
        g, S, sfx, il = lo.g, lo.S, lo.suffix(inst), inst.layer or 0
        hk, hv, dk, dv = (inst.dim(n) for n in ("LinKHeads", "LinVHeads", "LinKDim", "LinVDim"))
        if hv % hk or dk != dv:
            raise LoweringError(f"convert-module-to-op: {inst.name}: {hv} value heads of {dv} for {hk} key "
                                f"heads of {dk}: GATED_DELTA_NET needs a multiple of the key heads and dk = dv")
        k_conv, hidden = inst.dim("ConvK"), O.shape_of(x)[-1]
        channels = 2 * hk * dk + hv * dv
        qkv, z, beta, alpha = _projections(lo, inst, x)
        qkv = g.reshape(qkv, (S, channels), f"linear_attn_qkv_mixed{sfx}")

        # The gates: beta = sigmoid(b) [S, Hv, 1], g = -exp(A_log) * softplus(a + dt_bias).
        alpha = g.binary(O.AddOp, alpha, lo.param(inst, "dt_bias"), (S, hv))
        alpha = g.unary(O.SoftplusOp, alpha, (S, hv), f"a_softplus{sfx}")
        gate = g.binary(O.MulOp, alpha, lo.param(inst, "A_log", convert="neg_exp"), (S, hv), f"gate{sfx}")
        gate = g.reshape(gate, (S, hv, 1))

        if lo.plan is not None:  # several sequences, each with its own state slot (or none)
            conv = _conv_seqs(lo, inst, qkv, channels, k_conv, il)
        else:
            # The conv state: [state | new columns] is the causal conv's window; its last K-1
            # columns are the next state.
            conv_all = lo.state(f"cache_r_l{il}", (1, (k_conv - 1) * channels), f32, recurrent=True)
            ssm_all = lo.state(f"cache_s_l{il}", (1, hv * dv * dv), f32, recurrent=True)
            states = g.reshape(read_state(lo, conv_all, f"conv_states{sfx}"), (channels, k_conv - 1),
                               f"conv_states_reshaped{sfx}")
            columns = g.unary(O.TransposeOp, qkv, (channels, S), f"qkv_mixed_transposed{sfx}")
            window = g.binary(O.ConcatOp, states, columns, (channels, _plus(k_conv - 1, S)), f"conv_input{sfx}",
                              axis=IntegerAttr(1, i64))
            last = lo.view_t(window, (channels, k_conv - 1), f"conv_state_last{sfx}", offset=(0, 1),
                             strides=[(k_conv - 1, 1), (1, 0)])
            write_state(lo, last, g.view(conv_all, O.shape_of(conv_all), f"conv_state_update{sfx}"))
            state = g.reshape(read_state(lo, ssm_all, None), (hv, dv, dv), f"state_predelta{sfx}")
            conv = g.binary(O.SsmConvOp, window, lo.param(inst, "conv1d", convert="squeeze"), (S, channels),
                            f"conv_output_raw{sfx}")
        conv = g.unary(O.SiluOp, conv, (S, channels), f"conv_output_silu{sfx}")
        q = _l2_norm(lo, inst, g.view(conv, (S, hk, dk), f"q_conv{sfx}", 0, (channels, dk, 1)))
        k = _l2_norm(lo, inst, g.view(conv, (S, hk, dk), f"k_conv{sfx}", hk * dk, (channels, dk, 1)))
        v = g.view(conv, (S, hv, dv), None, 2 * hk * dk, (channels, dv, 1))
        repeat = flag(inst, "qk_repeat") and hk != hv
        if repeat:  # value head j reads key head j // (Hv / Hk): repeat each key head in place
            q, k = (_repeat_heads(lo, t, hk, hv // hk, dk) for t in (q, k))
        for t, name in ((q, "q"), (k, "k"), (v, "v")):
            g.rename(t, f"{name}_conv_predelta{sfx}")

        attrs = {"grouped": UnitAttr()} if not repeat and hk != hv else {}
        if lo.plan is not None:
            out = _delta_seqs(lo, inst, (q, k, v, gate, beta), attrs, hv, dv, il)
        else:
            delta = g.add(O.GatedDeltaNetOp.create(operands=[q, k, v, gate, beta, state], attributes=attrs,
                                                   result_types=[tensor((_plus(dv, S), hv * dv))]))
            new_state = lo.view_t(delta, (hv, dv, dv), f"new_state{sfx}", offset=(0, hv * dv))
            write_state(lo, new_state, g.view(ssm_all, O.shape_of(ssm_all)))
            out = g.view(delta, (S, hv, dv), f"attn_output{sfx}")

        out = lo.call(inst.child("norm"), "forward", out, g.reshape(z, (S, hv, dv)))
        out = g.reshape(out, (S, hv * dv), f"final_output{sfx}")
        out = lo.call(inst.child("out_proj"), "forward", out, label=f"linear_attn_out{sfx}")
        return g.reshape(out, (S, hidden))


def _conv_seqs(lo: Lowering, inst: BlockInstance, qkv: SSAValue, channels: int, k_conv: int, il: int) -> SSAValue:
    """The causal conv of an entry of several sequences, before its SiLU: [N, C].

    The conv table is the state blocks' K-1 columns each (GET_ROWS of the conv state
    [Batch, C*(K-1)] by `state_read`, a zero block for a sequence that starts) then the call's
    token columns; GET_ROWS by `conv_window` gives each token its window [N, C, K] within its
    own sequence, and SSM_CONV runs them as N sequences of one token. With slots, GET_ROWS by
    `conv_tail` gives each sequence's last K-1 columns, its next conv state, written back by
    SET_ROWS at `state_write`."""
    plan, g, N, sfx = lo.plan, lo.g, lo.S, lo.suffix(inst)
    assert plan is not None
    kept = k_conv - 1
    blocks = plan.groups if plan.state == "slots" else 1
    conv_all = lo.state(f"cache_r_l{il}", (plan.batch, kept * channels), f32)
    read = lo.input("state_read", (blocks,), i32, "state_read")
    states = g.binary(O.GetRowsOp, conv_all, read, (blocks, kept * channels), f"conv_states{sfx}")
    states = g.permute(g.reshape(states, (blocks, channels, kept)), (0, 2, 1))
    states = g.unary(O.ContOp, states, (blocks * kept, channels))
    table = g.binary(O.ConcatOp, states, qkv, (_plus(blocks * kept, N), channels), f"conv_input{sfx}",
                     axis=IntegerAttr(0, i64))
    window = lo.input("conv_window", (_times(k_conv, N),), i32, "conv_window")
    cols = g.binary(O.GetRowsOp, table, window, (_times(k_conv, N), channels))
    cols = g.permute(g.reshape(cols, (N, k_conv, channels)), (0, 2, 1))
    cols = g.unary(O.ContOp, cols, (N, channels, k_conv))
    conv = g.binary(O.SsmConvOp, cols, lo.param(inst, "conv1d", convert="squeeze"), (N, 1, channels),
                    f"conv_output_raw{sfx}")
    if plan.state == "slots":
        tail_rows = lo.input("conv_tail", (blocks * kept,), i32, "conv_tail")
        tail = g.binary(O.GetRowsOp, table, tail_rows, (blocks * kept, channels))
        tail = g.permute(g.reshape(tail, (blocks, kept, channels)), (0, 2, 1))
        tail = g.unary(O.ContOp, tail, (blocks, kept * channels), f"conv_state_update{sfx}")
        write = lo.input("state_write", (blocks,), i64, "state_write")
        g.expand(g.add(O.SetRowsOp.create(operands=[conv_all, tail, write], result_types=[conv_all.type])))
    return g.reshape(conv, (N, channels))


def _delta_seqs(lo: Lowering, inst: BlockInstance, operands, attrs, hv: int, dv: int, il: int) -> SSAValue:
    """GATED_DELTA_NET_SEQ over the call's sequences (`token_seq`), from their slots' states
    (GET_ROWS by `state_read`, zeros for a new sequence) written back at `state_write`, or from
    zero states kept nowhere; returns the outputs [N, Hv, dv]."""
    plan, g, N, sfx = lo.plan, lo.g, lo.S, lo.suffix(inst)
    assert plan is not None
    seq = lo.input("token_seq", (N,), i32, "token_seq")
    if plan.state != "slots":
        delta = g.add(O.GatedDeltaNetSeqOp.create(operands=[*operands, seq], attributes=attrs,
                                                  result_types=[tensor((N, hv * dv))]))
        return g.view(delta, (N, hv, dv), f"attn_output{sfx}")
    groups, size = plan.groups, hv * dv * dv
    ssm_all = lo.state(f"cache_s_l{il}", (plan.batch, size), f32)
    read = lo.input("state_read", (groups,), i32, "state_read")
    state = g.reshape(g.binary(O.GetRowsOp, ssm_all, read, (groups, size)), (groups, hv, dv, dv),
                      f"state_predelta{sfx}")
    delta = g.add(O.GatedDeltaNetSeqOp.create(operands=[*operands, seq, state], attributes=attrs,
                                              result_types=[tensor((_plus(groups * dv, N), hv * dv))]))
    new_state = lo.view_t(delta, (groups, size), f"new_state{sfx}", offset=(0, hv * dv))
    write = lo.input("state_write", (groups,), i64, "state_write")
    g.expand(g.add(O.SetRowsOp.create(operands=[ssm_all, new_state, write], result_types=[ssm_all.type])))
    return g.view(delta, (N, hv, dv), f"attn_output{sfx}")


def _times(n: int, tokens: int) -> int:
    """n * T, dynamic when T is."""
    return tokens if tokens == DYNAMIC_INDEX else n * tokens


def _plus(n: int, tokens: int) -> int:
    """n + T, dynamic when T is."""
    return tokens if tokens == DYNAMIC_INDEX else n + tokens


def _projections(lo: Lowering, inst: BlockInstance, x: SSAValue):
    """The conv input qkv [S, C], z [S, Hv*dv], beta [S, Hv, 1] (after its sigmoid) and
    alpha [S, Hv], as llama.cpp's builder for the block's layout computes them."""
    g, S, sfx = lo.g, lo.S, lo.suffix(inst)
    hk, hv, dk, dv = (inst.dim(n) for n in ("LinKHeads", "LinVHeads", "LinKDim", "LinVDim"))
    layout = inst.str_attr("layout", "separate")
    if layout == "separate":
        qkv = lo.call(inst.child("in_proj_qkv"), "forward", x)
        z = lo.call(inst.child("in_proj_z"), "forward", x, label=f"z{sfx}")
        beta = g.reshape(lo.call(inst.child("in_proj_b"), "forward", x), (S, hv, 1), f"beta{sfx}")
        beta = g.unary(O.SigmoidOp, beta, (S, hv, 1), f"beta_sigmoid{sfx}")
        alpha = g.reshape(lo.call(inst.child("in_proj_a"), "forward", x), (S, hv), f"alpha{sfx}")
        return qkv, z, beta, alpha
    if layout != "grouped":
        raise LoweringError(f"convert-module-to-op: {inst.name}: layout '{layout}' is neither 'separate' nor 'grouped'")
    r = hv // hk
    proj = inst.child("in_proj_qkvz")
    if "bias" in proj.params:
        raise LoweringError(f"convert-module-to-op: {inst.name}: in_proj_qkvz has a bias, which llama.cpp's has not")
    names = {**SPLIT_DEFAULT, **string_dict(inst, "ggml_split")}
    stored = proj.params["weight"].ggml  # blk.N.ssm_in.weight: the converted ones are blk.N.<name>.weight
    prefix, _, suffix = stored.rsplit(".", 2)
    parts = (dk, dk, r * dv, r * dv)  # each key head's [q | k | v·r | z·r]
    hidden = O.shape_of(x)[-1]
    w_qkv = lo.param(proj, "weight", convert="ungroup_rows", args=(hk, 0, 3, *parts),
                     ggml=f"{prefix}.{names['qkv']}.{suffix}", shape=(2 * hk * dk + hv * dv, hidden))
    w_z = lo.param(proj, "weight", convert="ungroup_rows", args=(hk, 3, 4, *parts),
                   ggml=f"{prefix}.{names['z']}.{suffix}", shape=(hv * dv, hidden))
    qkv, z = g.mul_mat(w_qkv, x), g.mul_mat(w_z, x, f"z{sfx}")
    # in_proj_ba per key head [b·r | a·r]: views of b and a, made contiguous.
    ba = lo.call(inst.child("in_proj_ba"), "forward", x, label=f"linear_attn_mixed_ba{sfx}")
    ba = g.reshape(ba, (S, hk, 2 * r))
    strides = (hk * 2 * r, 2 * r, 1)
    b = g.unary(O.ContOp, g.view(ba, (S, hk, r), f"b{sfx}", 0, strides), (S, hk, r))
    a = g.view(ba, (S, hk, r), f"a{sfx}", r, strides)
    beta = g.reshape(g.unary(O.SigmoidOp, b, (S, hk, r)), (S, hv, 1))
    return qkv, z, beta, g.unary(O.ContOp, a, (S, hv))


def _l2_norm(lo: Lowering, inst: BlockInstance, x: SSAValue) -> SSAValue:
    """HF's per-head L2 norm x·rsqrt(Σx² + eps), as llama.cpp writes it (build_gdn_l2_norm):
    RMS_NORM with eps / D, then SCALE by D^-1/2. The block's `eps` is HF's (1e-6)."""
    g, shape = lo.g, O.shape_of(x)
    d = shape[-1]
    normed = g.unary(O.RmsNormOp, x, shape, eps=FloatAttr(inst.float_attr("eps") / d, f64))
    return g.unary(O.ScaleOp, normed, shape, scale=FloatAttr(1.0 / math.sqrt(d), f64))


def _repeat_heads(lo: Lowering, x: SSAValue, heads: int, r: int, d: int) -> SSAValue:
    """[S, Hk, d] -> [S, Hk*r, d], each head r times in a row (llama.cpp's RESHAPE, REPEAT, RESHAPE)."""
    g, S = lo.g, lo.S
    tiled = g.unary(O.RepeatOp, g.reshape(x, (S, heads, 1, d)), (S, heads, r, d))
    return g.reshape(tiled, (S, heads * r, d))


def read_state(lo: Lowering, state: SSAValue, label: str | None) -> SSAValue:
    """llama.cpp's build_rs for one sequence: the state row the sequence reads, [1, N]."""
    g = lo.g
    size = O.shape_of(state)[1]
    name = state.owner.state_name.data  # type: ignore[union-attr]
    rows = g.reshape(state, (1, size))
    # Clear a new sequence's slot (an empty view otherwise); ggml's in-place SCALE is a view.
    cleared = size if lo.start == 0 else 0
    g.expand(g.unary(O.ScaleOp, g.view(rows, (cleared,)), (cleared,), f"{name} (reshaped) (view) (view)",
                     scale=FloatAttr(0.0, f64)))
    copy = lo.input("state_copy", (1,), i32, "rs_s_copy", label=lo.input_name("state_copy"))
    main = lo.once(("rs_s_copy", "main"), lambda: g.view(copy, (1,)))
    read = g.expand(g.binary(O.GetRowsOp, rows, main, (1, size), label))
    # Copy the slots after the sequences' (none: one sequence, one slot).
    extra = lo.once(("rs_s_copy", "extra"), lambda: g.view(copy, (0,), offset=1))
    write_state(lo, g.binary(O.GetRowsOp, rows, extra, (0, size)), g.view(state, (0, size), offset=size))
    return read


def write_state(lo: Lowering, value: SSAValue, dst: SSAValue) -> None:
    """CPY `value` into `dst` (a VIEW of a state), expanded at once as llama.cpp does."""
    lo.g.expand(lo.g.add(O.CpyOp.create(operands=[value, dst], result_types=[dst.type])))
