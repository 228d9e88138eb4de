"""Execute a blueprint-level function node by node in numpy, emulating each node's precision.

    outs = run_blueprint(fn, weights, state, [tokens], dims={"top_k": 2, ...}, pos=7)

Each node's semantics is an `@impl` method of `BlueprintFunctions` (xDSL's interpreter shape,
the run loop xDSL's `Interpreter`, see `strata.semantics.interpreter`); `blueprint.group` runs
its body and yields its results. How a node's `precision` is emulated (weights quantized and
dequantized per format, activations and outputs rounded through theirs, f32 accumulation) is
`strata.semantics.blueprint_env`'s.

Edges are 2-D arrays [rows, dim]. The symbolic dims the edges leave open (heads, head sizes,
top_k) come from the function's `blueprint.dims` and `dims`. Weights are read by name, converted
as the function's `blueprint.weights` says (the op level's stored name and conversion). Node
hyperparameters (`eps`, the rope's `mode`/`n_dims`/`freq_base`/`sections`, attention's `scale`,
top-k's `norm`) come from the node. State buffers are the node's `slots` (the op level's
buffers: the conv state flat [1, C*(K-1)], the recurrent state [1, Hv*D*D] as ggml's
GATED_DELTA_NET keeps it), or, without slots, keyed by the effects' state names
(`#blueprint.effect<conv:update>` -> `state["conv"]`); updated in place:

- `conv` [C, K-1]: the last K-1 conv inputs; `h` [lin_v_heads, lin_k_dim, lin_v_dim];
- `k`, `v` [ctx, kv_heads*head_dim]: the KV cache, rows written at `pos ..`;
- a snapshot of state `s` goes to `state[s + ".snapshot"]`.

Layout conventions (HF's, row-major, `y = x @ W.T`): linear weights [out, in]; expert
`gate_up` weights [experts, 2*moe_inter, hidden] (gate rows first), `down` [experts, hidden,
moe_inter]; expert rows are slot-major per token (row `i*top_k + j` is token i's j-th expert).
`gdn_gates`' source is [b | a] and its `decay` result is the log decay
g = softplus(a + dt_bias) * A with A = -exp(A_log) (the recurrence multiplies the state by exp(g));
`conv1d_update` reads the first C columns of its source (C: the conv weight's channels);
`gated_rms_norm` takes z as the last lin_v_heads*lin_v_dim columns of `lhs`; `split` de-interleaves
per head [q | gate] into (q, gate); `rope` is NeoX (rotate-half) over `rotary_dim` (default
head_dim) at positions `pos + row`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Operation, SSAValue

from strata.dialects import blueprint as B
from strata.dialects.blueprint.base import rank_sharded
from strata.dialects.blueprint.facts import function_dims, function_weights
from strata.errors import one_line_errors
from strata.ir.impls import Implementations
from strata.ir.int4 import roundf  # noqa: F401 - re-exported
from strata.semantics import kernels as K
from strata.semantics import sampling as S
from strata.semantics.blueprint_env import (  # noqa: F401 - re-exported
    BF16,
    BlueprintRunError,
    Env,
    dequantize_int4_block,
    precision_of,
    quantize_int4_block,
    quantize_weight,
    round_activation,
)
from strata.semantics.interpreter import Observer, first_unimplemented, implementations, interpreter_for, run_body
from strata.semantics.module_hybrid import causal_attention, l2_normalize
from strata.semantics.ranks import SoloGroup

V = PythonValues
NodeRun = Callable[["BlueprintFunctions", Interpreter, Any, list], tuple]


def _names(op: Operation) -> list[str]:
    return [s.data for s in op.attributes["weights"].data]  # type: ignore[attr-defined]


def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T, f32 accumulation."""
    return np.asarray(x, np.float32) @ np.asarray(w, np.float32).T


def node(run: NodeRun) -> Callable[["BlueprintFunctions", Interpreter, Any, PythonValues], PythonValues]:
    """A node's semantics in its precision: its float operands rounded through its `activation`
    format, its float results through its `output` format (unless the functions compute in f32
    throughout: `emulate_precision=False`), and as many results as the node has."""

    @functools.wraps(run)
    def run_node(self: BlueprintFunctions, interpreter: Interpreter, op: Operation, args: PythonValues) -> PythonValues:
        prec = precision_of(op) if self.emulate_precision else {}
        act, out = prec.get("activation"), prec.get("output")
        results = tuple(round_activation(r, out) for r in run(self, interpreter, op, [round_activation(x, act) for x in args]))
        if len(results) != len(op.results):
            raise BlueprintRunError(f"{op.name}: computed {len(results)} results, the op has {len(op.results)}")
        return results

    return run_node


def _rope(x: np.ndarray, env: Env) -> np.ndarray:
    hd = env.dim("head_dim")
    rd = int(env.dims.get("rotary_dim", hd))
    n = x.shape[0]
    h = x.reshape(n, -1, hd).astype(np.float32)
    inv = 1.0 / (env.rope_theta ** (np.arange(0, rd, 2, dtype=np.float64) / rd))
    ang = (env.pos + np.arange(n, dtype=np.float64))[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32)[:, None, :], np.sin(ang).astype(np.float32)[:, None, :]
    x1, x2 = h[..., :rd // 2], h[..., rd // 2:rd]
    out = h.copy()
    out[..., :rd // 2] = x1 * cos - x2 * sin
    out[..., rd // 2:rd] = x2 * cos + x1 * sin
    return out.reshape(n, -1)


def _experts(op, x: np.ndarray, ids: np.ndarray, env: Env, per_token: bool) -> np.ndarray:
    """Each slot's expert product; with whole experts per rank (`ranks`), this rank holds experts
    rank*E .. rank*E + E-1 (E: its weight's experts) and the other slots are zeros."""
    w = env.node_weight(op)
    flat = ids.reshape(-1).astype(np.int64)
    if rank_sharded(op) is not None:
        flat = flat - env.group.rank * w.shape[0]
    k = ids.shape[-1]
    rows = [x[i // k] if per_token else x[i] for i in range(flat.size)]
    out = [_mm(r[None, :], w[e])[0] if 0 <= e < w.shape[0] else np.zeros(w.shape[-2], np.float32)
           for r, e in zip(rows, flat)]
    return np.stack(out).astype(np.float32)


def _write_kv(op, k: np.ndarray, v: np.ndarray, env: Env) -> None:
    names = [e.state.data for e in (op.effects.data if op.effects else ()) if e.effect.data == "write"]
    if getattr(op, "slots", None):
        names = [s.data for s, e in zip(op.slots.data, op.effects.data) if e.effect.data == "write"]
    kn, vn = (names + ["k", "v"][len(names):])[:2]
    for name, x in ((kn, k), (vn, v)):
        if name not in env.state:
            raise BlueprintRunError(f"{op.name}: no state buffer '{name}'")
        buf = env.state[name]
        buf[env.pos:env.pos + x.shape[0]] = x.astype(buf.dtype)


def _attend(op, q: np.ndarray, n_new: int, env: Env) -> np.ndarray:
    names = [e.state.data for e in (op.effects.data if op.effects else ()) if e.effect.data == "read"]
    if getattr(op, "slots", None):
        names = [s.data for s, e in zip(op.slots.data, op.effects.data) if e.effect.data == "read"]
    kn, vn = (names + ["k", "v"][len(names):])[:2]
    hd = env.dim("head_dim")
    end = env.pos + n_new
    if "scale" in op.attributes:  # the op level's flash attention over the cache rows written so far
        kc = env.state[kn][:end].reshape(end, -1, hd).transpose(1, 0, 2)
        vc = env.state[vn][:end].reshape(end, -1, hd).transpose(1, 0, 2)
        qh = np.asarray(q, np.float32).reshape(n_new, -1, hd).transpose(1, 0, 2)
        mask = K.host_input("kq_mask", np.zeros(n_new, np.int32), env.pos, end)
        out = K.flash_attn_ext(qh, kc, vc, mask, float(op.attributes["scale"].value.data))
        return out.reshape(n_new, -1)
    kc = env.state[kn][:end].astype(np.float32).reshape(end, -1, hd).transpose(1, 0, 2)[None]
    vc = env.state[vn][:end].astype(np.float32).reshape(end, -1, hd).transpose(1, 0, 2)[None]
    qh = np.asarray(q, np.float32).reshape(n_new, -1, hd).transpose(1, 0, 2)[None]
    pos = env.pos + np.arange(n_new)
    return causal_attention(qh, kc, vc, pos)[0].astype(np.float32)


@register_impls
@dataclass
class BlueprintFunctions(InterpreterFunctions):
    """The blueprint level's semantics, node by node, on `env` (weights, state, dims, position).
    `emulate_precision=False` leaves activations and outputs in f32 (weights still take their
    format): the reference the CUDA kernels are compared with."""

    env: Env
    emulate_precision: bool = True

    # ---------------------------------------------------------------------------------------------
    # Row-wise nodes

    @impl(B.EmbedOp)
    @node
    def run_embed(self, interpreter: Interpreter, op: B.EmbedOp, a: V) -> V:
        table, ids = self.env.node_weight(op), a[0].reshape(-1).astype(np.int64)
        if rank_sharded(op) is None:
            return (table[ids],)
        return (K.get_rows_sharded(table, ids, self.env.group.rank),)  # this rank's rows of the vocabulary

    @node
    def _rms_norm(self, interpreter: Interpreter, op: Operation, a: V) -> V:
        return (K.rms_norm(a[0], self.env.eps_of(op)) * self.env.node_weight(op),)

    run_rms_norm = impl(B.RmsNormOp)(_rms_norm)
    run_final_norm = impl(B.FinalNormOp)(_rms_norm)

    @impl(B.QkNormOp)
    @node
    def run_qk_norm(self, interpreter: Interpreter, op: B.QkNormOp, a: V) -> V:
        w = self.env.node_weight(op)
        x = a[0].reshape(a[0].shape[0], -1, w.shape[-1])
        return ((K.rms_norm(x, self.env.eps_of(op)) * w).reshape(a[0].shape),)

    @impl(B.L2NormOp)
    @node
    def run_l2_norm(self, interpreter: Interpreter, op: B.L2NormOp, a: V) -> V:
        hk, dk = self.env.dim("lin_k_heads"), self.env.dim("lin_k_dim")
        x = np.array(a[0], dtype=np.float32)
        n = x.shape[0]
        qk = x[:, :2 * hk * dk].reshape(n, 2 * hk, dk)
        if "eps" in op.attributes:
            # as the op level computes it: rms_norm(x, eps) / sqrt(dk) = x / sqrt(|x|^2 + dk * eps)
            x[:, :2 * hk * dk] = K.scale(K.rms_norm(qk, self.env.eps_of(op)), 1.0 / np.sqrt(dk)).reshape(n, -1)
        else:
            x[:, :2 * hk * dk] = l2_normalize(qk).reshape(n, -1)
        return (x,)

    @node
    def _linear(self, interpreter: Interpreter, op: Operation, a: V) -> V:
        y = _mm(a[0], self.env.node_weight(op))
        bias = op.attributes.get("bias")
        return (y + self.env.raw(bias.data).astype(np.float32) if bias is not None else y,)

    run_linear = impl(B.LinearOp)(_linear)
    run_lm_head = impl(B.LmHeadOp)(_linear)
    run_router = impl(B.RouterOp)(_linear)

    @impl(B.ArgmaxOp)
    @node
    def run_argmax(self, interpreter: Interpreter, op: B.ArgmaxOp, a: V) -> V:
        return (np.argmax(a[0], axis=-1).astype(np.int32)[:, None],)

    @impl(B.SampleOp)
    @node
    def run_sample(self, interpreter: Interpreter, op: B.SampleOp, a: V) -> V:
        # Edges are [rows, dim]: the key one row of two, the step and each parameter a column.
        logits, key, step, *rest = a
        params = [np.asarray(p).reshape(-1) for p in rest[:7]]
        counts = rest[7:9] if op.prompt_counts is not None else (None, None)
        mask = rest[-1] if op.mask is not None else None
        ids = S.sample(logits, np.asarray(key).reshape(-1), int(np.asarray(step).reshape(-1)[0]), *params,
                       prompt_counts=counts[0], output_counts=counts[1], mask=mask)
        return (ids[:, None],)

    @impl(B.ResidualAddOp)
    @node
    def run_residual_add(self, interpreter: Interpreter, op: B.ResidualAddOp, a: V) -> V:
        return (np.asarray(a[0], np.float32) + np.asarray(a[1], np.float32),)

    @impl(B.SigmoidGateMulOp)
    @node
    def run_sigmoid_gate_mul(self, interpreter: Interpreter, op: B.SigmoidGateMulOp, a: V) -> V:
        return (K.sigmoid(a[0]) * np.asarray(a[1], np.float32),)

    @impl(B.SiluMulOp)
    @node
    def run_silu_mul(self, interpreter: Interpreter, op: B.SiluMulOp, a: V) -> V:
        half = a[0].shape[-1] // 2
        return (K.silu(a[0][:, :half]) * np.asarray(a[0][:, half:], np.float32),)

    @impl(B.SplitOp)
    @node
    def run_split(self, interpreter: Interpreter, op: B.SplitOp, a: V) -> V:
        hd = self.env.dim("head_dim")
        x = a[0].reshape(a[0].shape[0], -1, 2, hd)
        n = x.shape[0]
        return (np.ascontiguousarray(x[:, :, 0]).reshape(n, -1), np.ascontiguousarray(x[:, :, 1]).reshape(n, -1))

    @impl(B.SwigluFfnOp)
    @node
    def run_swiglu_ffn(self, interpreter: Interpreter, op: B.SwigluFfnOp, a: V) -> V:
        g, u, d = (self.env.weight(op, n) for n in _names(op))
        return (_mm(K.silu(_mm(a[0], g)) * _mm(a[0], u), d),)

    @impl(B.RopeOp)
    @node
    def run_rope(self, interpreter: Interpreter, op: B.RopeOp, a: V) -> V:
        if "mode" not in op.attributes:
            return (_rope(a[0], self.env), _rope(a[1], self.env))
        # The op level's rope (ggml's modes, M-RoPE sections) at the op level's host positions.
        attrs = op.attributes
        mode = attrs["mode"].data
        n = a[0].shape[0]
        kind = "mrope_positions" if mode in ("mrope", "imrope") else "positions"
        pos = K.host_input(kind, np.zeros(n, np.int32), self.env.pos, 0)
        sections = attrs["sections"].get_values() if "sections" in attrs else None
        hd = self.env.dim("head_dim")

        def rot(x: np.ndarray) -> np.ndarray:
            factors = attrs["freq_factors"].get_values() if "freq_factors" in attrs else None
            y = K.rope(np.asarray(x, np.float32).reshape(n, -1, hd), pos, int(attrs["n_dims"].value.data), mode,
                       float(attrs["freq_base"].value.data), float(attrs["freq_scale"].value.data), factors, sections)
            return y.reshape(n, -1)

        return (rot(a[0]), rot(a[1]))

    # ---------------------------------------------------------------------------------------------
    # Gated DeltaNet

    @impl(B.GdnGatesOp)
    @node
    def run_gdn_gates(self, interpreter: Interpreter, op: B.GdnGatesOp, a: V) -> V:
        decay_rate, dt_bias = (self.env.weight(op, n) for n in _names(op))  # A = -exp(A_log), as llama.cpp's ssm_a
        hv = a[0].shape[-1] // 2
        b, al = a[0][:, :hv].astype(np.float32), a[0][:, hv:].astype(np.float32)
        g = K.softplus(al + np.asarray(dt_bias, np.float32)) * np.asarray(decay_rate, np.float32)
        return (g.astype(np.float32), K.sigmoid(b))

    @impl(B.Conv1dUpdateOp)
    @node
    def run_conv1d_update(self, interpreter: Interpreter, op: B.Conv1dUpdateOp, a: V) -> V:
        w = self.env.node_weight(op)
        w = w.reshape(w.shape[0], w.shape[-1])  # [C, K] (HF's [C, 1, K] too)
        c, k = w.shape
        name, buf = self.env.buffer(op, "conv", "update")
        st = buf.reshape(c, k - 1)  # a view: the op level keeps it flat, [1, C*(K-1)]
        x = np.asarray(a[0][:, :c], np.float32)
        s = x.shape[0]
        full = np.concatenate([st.astype(np.float32), x.T], axis=-1)  # [C, K-1+S]
        out = np.zeros((c, s), np.float32)
        for j in range(k):  # tap j reads input t + j (torch's conv1d cross-correlation)
            out += w[:, j:j + 1] * full[:, j:j + s]
        st[...] = full[:, full.shape[-1] - (k - 1):].astype(st.dtype)
        return (K.silu(out.T),)

    @impl(B.StateSnapshotOp)
    @node
    def run_state_snapshot(self, interpreter: Interpreter, op: B.StateSnapshotOp, a: V) -> V:
        name, st = self.env.buffer(op, "conv", "snapshot")
        self.env.state[name + ".snapshot"] = st.copy()
        return ()

    @impl(B.GdnRecurrenceOp)
    @node
    def run_gdn_recurrence(self, interpreter: Interpreter, op: B.GdnRecurrenceOp, a: V) -> V:
        hk, dk = self.env.dim("lin_k_heads"), self.env.dim("lin_k_dim")
        hv, dv = self.env.dim("lin_v_heads"), self.env.dim("lin_v_dim")
        g, beta, mixed = (np.asarray(x, np.float32) for x in a)
        n = mixed.shape[0]
        q = mixed[:, :hk * dk].reshape(n, hk, dk) * np.float32(dk ** -0.5)
        k = mixed[:, hk * dk:2 * hk * dk].reshape(n, hk, dk)
        v = mixed[:, 2 * hk * dk:2 * hk * dk + hv * dv].reshape(n, hv, dv)
        r = hv // hk
        q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)
        name, buf = self.env.buffer(op, "h", "update")
        if getattr(op, "slots", None):
            # The op level's buffer and kernel (ggml's GATED_DELTA_NET: state[h, j, i] = S[h][i, j]).
            q0 = mixed[:, :hk * dk].reshape(n, hk, dk)
            k0 = mixed[:, hk * dk:2 * hk * dk].reshape(n, hk, dk)
            st = buf.reshape(hv, dv, dk)
            res = K.gated_delta_net(q0, k0, v, g.reshape(n, hv, 1), beta.reshape(n, hv, 1), st,
                                    grouped="grouped" in op.attributes)
            st[...] = res[n:].reshape(hv, dv, dk).astype(st.dtype)
            return (res[:n].copy(),)
        h = buf.astype(np.float32)
        out = np.empty((n, hv, dv), np.float32)
        for t in range(n):
            h = h * np.exp(g[t])[:, None, None]
            u = (v[t] - np.einsum("hkv,hk->hv", h, k[t])) * beta[t][:, None]
            h = h + k[t][:, :, None] * u[:, None, :]
            out[t] = np.einsum("hkv,hk->hv", h, q[t])
        buf[...] = h.astype(buf.dtype)
        return (out.reshape(n, hv * dv),)

    @impl(B.GatedRmsNormOp)
    @node
    def run_gated_rms_norm(self, interpreter: Interpreter, op: B.GatedRmsNormOp, a: V) -> V:
        w = self.env.node_weight(op)
        core = np.asarray(a[1], np.float32)
        n, width = core.shape
        z = np.asarray(a[0][:, a[0].shape[-1] - width:], np.float32)
        x = core.reshape(n, -1, w.shape[-1])
        return ((K.rms_norm(x, self.env.eps_of(op)) * w).reshape(n, width) * K.silu(z),)

    # ---------------------------------------------------------------------------------------------
    # Mixture of experts

    @impl(B.TopKOp)
    @node
    def run_top_k(self, interpreter: Interpreter, op: B.TopKOp, a: V) -> V:
        k = self.env.dim("top_k")
        x = np.asarray(a[0], np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
        w = np.take_along_axis(p, ids, axis=-1)
        if ("norm" in op.attributes) if "node" in op.attributes else self.env.norm_topk_prob:
            # as llama.cpp: the sum clamped at 2^-14
            w = w / np.maximum(w.sum(axis=-1, keepdims=True, dtype=np.float32), np.float32(6.103515625e-05))
        return (w.astype(np.float32), ids.astype(np.int32))

    @impl(B.ExpertGateUpOp)
    @node
    def run_expert_gate_up(self, interpreter: Interpreter, op: B.ExpertGateUpOp, a: V) -> V:
        return (_experts(op, np.asarray(a[0], np.float32), a[1], self.env, per_token=True),)

    @impl(B.ExpertDownOp)
    @node
    def run_expert_down(self, interpreter: Interpreter, op: B.ExpertDownOp, a: V) -> V:
        return (_experts(op, np.asarray(a[0], np.float32), a[1], self.env, per_token=False),)

    @impl(B.BlendOp)
    @node
    def run_blend(self, interpreter: Interpreter, op: B.BlendOp, a: V) -> V:
        w, ed = (np.asarray(x, np.float32) for x in a[:2])
        n, k = w.shape
        routed = np.einsum("nk,nkh->nh", w, ed.reshape(n, k, -1))
        if len(a) == 4:
            sd, sg = (np.asarray(x, np.float32) for x in a[2:])
            routed = routed + K.sigmoid(sg) * sd
        return (routed.astype(np.float32),)

    # ---------------------------------------------------------------------------------------------
    # Attention

    @impl(B.KvWriteOp)
    @node
    def run_kv_write(self, interpreter: Interpreter, op: B.KvWriteOp, a: V) -> V:
        _write_kv(op, a[0], a[1], self.env)
        return ()

    @impl(B.PagedAttentionOp)
    @node
    def run_paged_attention(self, interpreter: Interpreter, op: B.PagedAttentionOp, a: V) -> V:
        return (_attend(op, a[0], a[0].shape[0], self.env),)

    @impl(B.AttentionOp)
    @node
    def run_attention(self, interpreter: Interpreter, op: B.AttentionOp, a: V) -> V:
        wq, wk, wv, wo = (self.env.weight(op, n) for n in _names(op))
        x = a[0]
        q, k = _rope(_mm(x, wq), self.env), _rope(_mm(x, wk), self.env)
        _write_kv(op, k, _mm(x, wv), self.env)
        return (_mm(_attend(op, q, x.shape[0], self.env), wo),)

    # ---------------------------------------------------------------------------------------------
    # Collectives: this rank's part; the group (simulated ranks, or one) joins the others

    @impl(B.AllReduceOp)
    @node
    def run_all_reduce(self, interpreter: Interpreter, op: B.AllReduceOp, a: V) -> V:
        return (self.env.group.all_reduce(np.asarray(a[0], np.float32)),)

    @impl(B.AllGatherOp)
    @node
    def run_all_gather(self, interpreter: Interpreter, op: B.AllGatherOp, a: V) -> V:
        return (self.env.group.all_gather(np.asarray(a[0]), -1),)

    # ---------------------------------------------------------------------------------------------
    # Groups

    @impl(B.GroupOp)
    def run_group(self, interpreter: Interpreter, op: B.GroupOp, a: V) -> V:
        """The group's body, reading the edges around it; its results are what it yields."""
        return interpreter.run_ssacfg_region(op.body, (), "blueprint.group")

    @impl_terminator(B.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: B.YieldOp, a: V) -> tuple[TerminatorValue, V]:
        """The end of a group's body: the group's results."""
        return ReturnedValues(a), ()


#: op class -> its semantics (the `@impl` methods of `BlueprintFunctions`).
BLUEPRINT_INTERPRETER: Implementations = implementations("blueprint interpreter", BlueprintFunctions)


# ---------------------------------------------------------------------------------------------
# Functions and groups


def run_blueprint(fn: func.FuncOp, weights: Any, state: dict[str, np.ndarray],
                  inputs: Sequence[np.ndarray], *, dims: Mapping[str, int] | None = None, pos: int = 0,
                  eps: float = 1e-6, rope_theta: float = 10000.0, norm_topk_prob: bool = True,
                  cache: dict | None = None,
                  observe: Callable[[Operation, tuple], None] | None = None, group: Any = None) -> list[np.ndarray]:
    """Run the blueprint function `fn` on `inputs` (one array [rows, dim] per argument) at
    position `pos`; returns the values of its `func.return`.

    `weights` maps param names to arrays (a dict or a `WeightStore`); `state` maps state names
    to buffers, updated in place. `cache` (a dict) keeps quantized weights across calls (one
    per rank). `observe`, if given, is called with each node and its results right after it
    runs. A tensor-parallel blueprint (`blueprint.ranks` = N) runs as one rank of `group` (of N:
    `strata.semantics.ranks.run_ranks` simulates them)."""
    args = fn.body.block.args
    if len(inputs) != len(args):
        raise BlueprintRunError(f"@{fn.sym_name.data}: takes {len(args)} inputs, got {len(inputs)}")
    unknown = first_unimplemented(fn, BLUEPRINT_INTERPRETER)
    if unknown is not None:
        raise BlueprintRunError(f"no blueprint semantics for op '{unknown.name}'")
    ranks = fn.attributes.get("blueprint.ranks")
    size = int(ranks.value.data) if ranks is not None else 1  # type: ignore[attr-defined]
    group = group if group is not None else SoloGroup()
    if group.size != size:
        raise BlueprintRunError(f"@{fn.sym_name.data} runs on {size} ranks, the group has {group.size}")
    env = Env(weights, state, function_dims(fn) | dict(dims or {}), pos, eps, rope_theta, norm_topk_prob,
              cache if cache is not None else {}, function_weights(fn), group)
    values = []
    for x in inputs:
        x = np.asarray(x)
        values.append(x.astype(np.float32) if x.dtype.kind == "f" else x)
    listeners = [Observer(observe, skip=(B.GroupOp,))] if observe is not None else []
    return list(run_body(fn, [BlueprintFunctions(env)], values, listeners))


def run_group(group: B.GroupOp, values: Mapping[SSAValue, np.ndarray], env: Env, *,
              emulate_precision: bool = True) -> list[np.ndarray]:
    """The values one group yields, given the edges it reads from outside (`values`)."""
    interpreter = interpreter_for(group, [BlueprintFunctions(env, emulate_precision)])
    interpreter.set_values(values.items())
    with one_line_errors():
        return list(interpreter.run_op(group, ()))
