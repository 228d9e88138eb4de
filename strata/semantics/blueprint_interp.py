"""Execute a blueprint-level function node by node in numpy, emulating each node's precision
(issue 8 item 5).

    outs = run_blueprint(fn, weights, state, [tokens], dims={"top_k": 2, ...}, pos=7)

Each node's semantics is registered with `BLUEPRINT_INTERPRETER` (one function per op class,
as `op_interp.INTERPRETER`); `blueprint.group` runs its body and yields its results.

Precision, from a node's `precision` attribute (absent: f32 throughout, no rounding):

- `weight`: `fp8` with a block -> quantized with `strata.ir.fp8.quantize_fp8_block` and
  dequantized (per expert for 3-D expert weights); `int4` with a 1-D block and `asymmetric` ->
  ONNX Runtime's block-wise asymmetric 4-bit formula along the last axis (`strata.ir.int4`);
  `int8` and `int4` symmetric with block [32] -> ggml's Q8_0 and Q4_0 (`strata.ir.ggml_blocks`);
  `bf16` / `f16` -> rounded through that type. Each quantized weight is cached per (name, format).
- `activation`: the node's float inputs are rounded through it (bf16 via ml_dtypes).
- `output`: the node's float results are rounded through it.
- accumulation is f32 (every product and sum is computed in float32).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from strata.dialects import blueprint as B
from strata.dialects.blueprint.attrs import FormatAttr
from strata.errors import StrataError
from strata.ir import fp8, ggml_blocks
from strata.ir.int4 import dequantize_int4_block, quantize_int4_block, roundf  # noqa: F401 - re-exported
from strata.ir.impls import Implementations
from strata.semantics import kernels as K
from strata.semantics import sampling as S
from strata.semantics.module_hybrid import causal_attention, l2_normalize

BF16 = np.dtype(ml_dtypes.bfloat16)


class BlueprintRunError(StrataError):
    """A blueprint function that cannot be executed (missing weight, state, dim or format)."""


# ---------------------------------------------------------------------------------------------
# Formats


def _fmt_key(f: FormatAttr) -> tuple:
    return (f.elem.data, f.block_sizes, f.is_asymmetric)


def round_activation(x: np.ndarray, f: FormatAttr | None) -> np.ndarray:
    """A float edge rounded through an activation/output format (f32 back)."""
    if f is None or x.dtype.kind != "f":
        return x
    elem = f.elem.data
    if elem in ("f32",):
        return x.astype(np.float32)
    if elem in ("bf16", "f16"):
        t = BF16 if elem == "bf16" else np.dtype(np.float16)
        return np.asarray(x, np.float32).astype(t).astype(np.float32)
    raise BlueprintRunError(f"activation/output format '{elem}' is not emulated (bf16, f16, f32 are)")


def quantize_weight(w: np.ndarray, f: FormatAttr | None) -> np.ndarray:
    """A weight as the node sees it after its weight format: f32."""
    w = np.asarray(w, dtype=np.float32)
    if f is None:
        return w
    elem, block = f.elem.data, f.block_sizes
    if elem == "f32":
        return w
    if elem in ("bf16", "f16"):
        return round_activation(w, f)
    if elem == "fp8":
        blk = block if len(block) == 2 else fp8.BLOCK
        if w.ndim == 1:
            return fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w[None, :], blk), blk)[0]
        if w.ndim == 2:
            return fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w, blk), blk)
        flat = w.reshape(-1, *w.shape[-2:])
        return np.stack([fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(m, blk), blk) for m in flat]).reshape(w.shape)
    if elem in ("int8", "int4") and not f.is_asymmetric and block == (ggml_blocks.BLOCK,):
        if w.shape[-1] % ggml_blocks.BLOCK:
            raise BlueprintRunError(f"{elem}/block{ggml_blocks.BLOCK}: input dim {w.shape[-1]} is not a multiple of it")
        return ggml_blocks.round_blocks(w, elem)
    if elem == "int4":
        if not f.is_asymmetric:
            raise BlueprintRunError(f"symmetric int4 weights are emulated with block [{ggml_blocks.BLOCK}] only (Q4_0)")
        blk = block[0] if block else 128
        return dequantize_int4_block(*quantize_int4_block(w, blk), blk)
    raise BlueprintRunError(f"weight format '{elem}' is not emulated (fp8, int4 asymmetric, int8 and int4 with "
                            f"block [{ggml_blocks.BLOCK}], bf16, f16, f32 are)")



# ---------------------------------------------------------------------------------------------
# Environment


@dataclass
class Env:
    weights: Any  # a Mapping[str, ndarray] or an object with .get(name) (a WeightStore)
    state: dict[str, np.ndarray]
    dims: Mapping[str, int]
    pos: int = 0
    eps: float = 1e-6
    rope_theta: float = 10000.0
    norm_topk_prob: bool = True
    cache: dict[tuple, np.ndarray] = field(default_factory=dict)
    #: weight name -> its stored name and conversion (the function's `blueprint.weights`)
    table: Mapping[str, Any] = field(default_factory=dict)
    observe: Callable[[Operation, tuple], None] | None = None

    def dim(self, name: str) -> int:
        if name not in self.dims:
            raise BlueprintRunError(f"dim '{name}' is not bound (pass dims={{'{name}': ...}})")
        return int(self.dims[name])

    def raw(self, name: str, fmt: FormatAttr | None = None) -> np.ndarray:
        """The weight `name`: its stored tensor, in the format `fmt` (quantized as stored, as a
        quantized checkpoint holds it: one scale grid per stored tensor), then converted as the
        weight table says."""
        info = self.table.get(name)
        stored = info.data["source"].data if info is not None and "source" in info.data else name
        try:
            w = self.weights[stored] if isinstance(self.weights, Mapping) else self.weights.get(stored)
        except (KeyError, StrataError):
            w = None
        if w is None:
            raise BlueprintRunError(f"no weight '{stored}'")
        if fmt is not None:
            w = quantize_weight(np.asarray(w), fmt)
        if info is not None and "convert" in info.data:
            from strata.semantics.op_interp import PARAM_CONVERSIONS

            args = tuple(info.data["convert_args"].get_values()) if "convert_args" in info.data else ()
            w = PARAM_CONVERSIONS[info.data["convert"].data](w, args)
        return np.asarray(w)

    def node_weight(self, op: Operation) -> np.ndarray:
        """The weight of a `weight "param"` node: `param`'s rows, then those of each `concat`
        weight (a merged projection), in the node's weight format."""
        names = [op.param.data] + [c.data for c in (op.concat.data if op.concat else ())]  # type: ignore[attr-defined]
        if len(names) == 1:
            return self.weight(op, names[0])
        f = _precision(op).get("weight")
        key = (tuple(names), None if f is None else _fmt_key(f))
        if key not in self.cache:  # each part keeps its own scales, as separate checkpoint tensors do
            self.cache[key] = np.concatenate([self.weight(op, n) for n in names], axis=-2)
        return self.cache[key]

    def eps_of(self, op: Operation) -> float:
        e = op.attributes.get("eps")
        return float(e.value.data) if e is not None else self.eps  # type: ignore[attr-defined]

    def weight(self, op: Operation, name: str) -> np.ndarray:
        """The weight `name` as `op`'s weight format makes it (cached per name and format)."""
        f = _precision(op).get("weight")
        key = (name, None if f is None else _fmt_key(f))
        if key not in self.cache:
            self.cache[key] = self.raw(name, f)
        return self.cache[key]

    def buffer(self, op: Operation, default: str, effect: str | None = None) -> tuple[str, np.ndarray]:
        """The buffer of `op`'s state effect `effect`: its slot if it names one, else the effect's state."""
        effects = list(op.effects.data) if getattr(op, "effects", None) else []  # type: ignore[attr-defined]
        slots = [s.data for s in op.slots.data] if getattr(op, "slots", None) else [e.state.data for e in effects]  # type: ignore[attr-defined]
        names = [slot for e, slot in zip(effects, slots) if effect is None or e.effect.data == effect]
        name = names[0] if names else default
        if name not in self.state:
            raise BlueprintRunError(f"{op.name}: no state buffer '{name}'")
        return name, self.state[name]


def _precision(op: Operation) -> dict[str, FormatAttr]:
    p = op.attributes.get("precision")
    return p.fields() if p is not None else {}  # type: ignore[attr-defined]


def _names(op: Operation) -> list[str]:
    return [s.data for s in op.attributes["weights"].data]  # type: ignore[attr-defined]


def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T, f32 accumulation."""
    return np.asarray(x, np.float32) @ np.asarray(w, np.float32).T


BLUEPRINT_INTERPRETER: Implementations[Callable[[Operation, list, Env], tuple]] = Implementations("blueprint interpreter")
R = BLUEPRINT_INTERPRETER.register


# ---------------------------------------------------------------------------------------------
# Row-wise nodes


@R(B.EmbedOp)
def _embed(op: B.EmbedOp, a: list, env: Env) -> tuple:
    return (env.node_weight(op)[a[0].reshape(-1).astype(np.int64)],)


@R(B.RmsNormOp, B.FinalNormOp)
def _rms_norm(op, a: list, env: Env) -> tuple:
    return (K.rms_norm(a[0], env.eps_of(op)) * env.node_weight(op),)


@R(B.QkNormOp)
def _qk_norm(op: B.QkNormOp, a: list, env: Env) -> tuple:
    w = env.node_weight(op)
    x = a[0].reshape(a[0].shape[0], -1, w.shape[-1])
    return ((K.rms_norm(x, env.eps_of(op)) * w).reshape(a[0].shape),)


@R(B.L2NormOp)
def _l2_norm(op: B.L2NormOp, a: list, env: Env) -> tuple:
    hk, dk = env.dim("lin_k_heads"), env.dim("lin_k_dim")
    x = np.array(a[0], dtype=np.float32)
    n = x.shape[0]
    qk = x[:, :2 * hk * dk].reshape(n, 2 * hk, dk)
    if "eps" in op.attributes:
        # as the op level computes it: rms_norm(x, eps) / sqrt(dk) = x / sqrt(|x|^2 + dk * eps)
        x[:, :2 * hk * dk] = K.scale(K.rms_norm(qk, env.eps_of(op)), 1.0 / np.sqrt(dk)).reshape(n, -1)
    else:
        x[:, :2 * hk * dk] = l2_normalize(qk).reshape(n, -1)
    return (x,)


@R(B.LinearOp, B.LmHeadOp, B.RouterOp)
def _linear(op, a: list, env: Env) -> tuple:
    y = _mm(a[0], env.node_weight(op))
    bias = op.attributes.get("bias")
    return (y + env.raw(bias.data).astype(np.float32) if bias is not None else y,)


@R(B.ArgmaxOp)
def _argmax(op: B.ArgmaxOp, a: list, env: Env) -> tuple:
    return (np.argmax(a[0], axis=-1).astype(np.int32)[:, None],)


@R(B.SampleOp)
def _sample(op: B.SampleOp, a: list, env: Env) -> tuple:
    # Edges are [rows, dim]: the key one row of two, the step and each parameter a column.
    logits, key, step, *rest = a
    params = [np.asarray(p).reshape(-1) for p in rest[:7]]
    counts = rest[7:] if op.prompt_counts is not None else (None, None)
    ids = S.sample(logits, np.asarray(key).reshape(-1), int(np.asarray(step).reshape(-1)[0]), *params,
                   prompt_counts=counts[0], output_counts=counts[1])
    return (ids[:, None],)


@R(B.ResidualAddOp)
def _residual_add(op, a: list, env: Env) -> tuple:
    return (np.asarray(a[0], np.float32) + np.asarray(a[1], np.float32),)


@R(B.SigmoidGateMulOp)
def _sigmoid_gate_mul(op, a: list, env: Env) -> tuple:
    return (K.sigmoid(a[0]) * np.asarray(a[1], np.float32),)


@R(B.SiluMulOp)
def _silu_mul(op, a: list, env: Env) -> tuple:
    half = a[0].shape[-1] // 2
    return (K.silu(a[0][:, :half]) * np.asarray(a[0][:, half:], np.float32),)


@R(B.SplitOp)
def _split(op, a: list, env: Env) -> tuple:
    hd = env.dim("head_dim")
    x = a[0].reshape(a[0].shape[0], -1, 2, hd)
    n = x.shape[0]
    return (np.ascontiguousarray(x[:, :, 0]).reshape(n, -1), np.ascontiguousarray(x[:, :, 1]).reshape(n, -1))


@R(B.SwigluFfnOp)
def _swiglu_ffn(op, a: list, env: Env) -> tuple:
    g, u, d = (env.weight(op, n) for n in _names(op))
    return (_mm(K.silu(_mm(a[0], g)) * _mm(a[0], u), d),)


@R(B.RopeOp)
def _rope_node(op, a: list, env: Env) -> tuple:
    if "mode" not in op.attributes:
        return (_rope(a[0], env), _rope(a[1], env))
    # The op level's rope (ggml's modes, M-RoPE sections) at the op level's host positions.
    attrs = op.attributes
    mode = attrs["mode"].data
    n = a[0].shape[0]
    kind = "mrope_positions" if mode in ("mrope", "imrope") else "positions"
    pos = K.host_input(kind, np.zeros(n, np.int32), env.pos, 0)
    sections = attrs["sections"].get_values() if "sections" in attrs else None
    hd = env.dim("head_dim")

    def rot(x: np.ndarray) -> np.ndarray:
        factors = attrs["freq_factors"].get_values() if "freq_factors" in attrs else None
        y = K.rope(np.asarray(x, np.float32).reshape(n, -1, hd), pos, int(attrs["n_dims"].value.data), mode,
                   float(attrs["freq_base"].value.data), float(attrs["freq_scale"].value.data), factors, sections)
        return y.reshape(n, -1)

    return (rot(a[0]), rot(a[1]))


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


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet


@R(B.GdnGatesOp)
def _gdn_gates(op, a: list, env: Env) -> tuple:
    decay_rate, dt_bias = (env.weight(op, n) for n in _names(op))  # A = -exp(A_log), as llama.cpp's ssm_a
    hv = a[0].shape[-1] // 2
    b, al = a[0][:, :hv].astype(np.float32), a[0][:, hv:].astype(np.float32)
    g = K.softplus(al + np.asarray(dt_bias, np.float32)) * np.asarray(decay_rate, np.float32)
    return (g.astype(np.float32), K.sigmoid(b))


@R(B.Conv1dUpdateOp)
def _conv1d_update(op, a: list, env: Env) -> tuple:
    w = env.node_weight(op)
    w = w.reshape(w.shape[0], w.shape[-1])  # [C, K] (HF's [C, 1, K] too)
    c, k = w.shape
    name, buf = env.buffer(op, "conv", "update")
    st = buf.reshape(c, k - 1)  # a view: the op level keeps it flat, [1, C*(K-1)]
    x = np.asarray(a[0][:, :c], np.float32)
    s = x.shape[0]
    full = np.concatenate([st.astype(np.float32), x.T], axis=-1)  # [C, K-1+S]
    out = np.zeros((c, s), np.float32)
    for j in range(k):  # tap j reads input t + j (torch's conv1d cross-correlation)
        out += w[:, j:j + 1] * full[:, j:j + s]
    st[...] = full[:, full.shape[-1] - (k - 1):].astype(st.dtype)
    return (K.silu(out.T),)


@R(B.StateSnapshotOp)
def _state_snapshot(op, a: list, env: Env) -> tuple:
    name, st = env.buffer(op, "conv", "snapshot")
    env.state[name + ".snapshot"] = st.copy()
    return ()


@R(B.GdnRecurrenceOp)
def _gdn_recurrence(op, a: list, env: Env) -> tuple:
    hk, dk = env.dim("lin_k_heads"), env.dim("lin_k_dim")
    hv, dv = env.dim("lin_v_heads"), env.dim("lin_v_dim")
    g, beta, mixed = (np.asarray(x, np.float32) for x in a)
    n = mixed.shape[0]
    q = mixed[:, :hk * dk].reshape(n, hk, dk) * np.float32(dk ** -0.5)
    k = mixed[:, hk * dk:2 * hk * dk].reshape(n, hk, dk)
    v = mixed[:, 2 * hk * dk:2 * hk * dk + hv * dv].reshape(n, hv, dv)
    r = hv // hk
    q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)
    name, buf = env.buffer(op, "h", "update")
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


@R(B.GatedRmsNormOp)
def _gated_rms_norm(op, a: list, env: Env) -> tuple:
    w = env.node_weight(op)
    core = np.asarray(a[1], np.float32)
    n, width = core.shape
    z = np.asarray(a[0][:, a[0].shape[-1] - width:], np.float32)
    x = core.reshape(n, -1, w.shape[-1])
    return ((K.rms_norm(x, env.eps_of(op)) * w).reshape(n, width) * K.silu(z),)


# ---------------------------------------------------------------------------------------------
# Mixture of experts


@R(B.TopKOp)
def _top_k(op, a: list, env: Env) -> tuple:
    k = env.dim("top_k")
    x = np.asarray(a[0], np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, axis=-1)
    if ("norm" in op.attributes) if "node" in op.attributes else env.norm_topk_prob:
        # as llama.cpp: the sum clamped at 2^-14
        w = w / np.maximum(w.sum(axis=-1, keepdims=True, dtype=np.float32), np.float32(6.103515625e-05))
    return (w.astype(np.float32), ids.astype(np.int32))


def _experts(op, x: np.ndarray, ids: np.ndarray, env: Env, per_token: bool) -> np.ndarray:
    w = env.node_weight(op)
    flat = ids.reshape(-1).astype(np.int64)
    k = ids.shape[-1]
    rows = [x[i // k] if per_token else x[i] for i in range(flat.size)]
    return np.stack([_mm(r[None, :], w[e])[0] for r, e in zip(rows, flat)]).astype(np.float32)


@R(B.ExpertGateUpOp)
def _expert_gate_up(op, a: list, env: Env) -> tuple:
    return (_experts(op, np.asarray(a[0], np.float32), a[1], env, per_token=True),)


@R(B.ExpertDownOp)
def _expert_down(op, a: list, env: Env) -> tuple:
    return (_experts(op, np.asarray(a[0], np.float32), a[1], env, per_token=False),)


@R(B.BlendOp)
def _blend(op, a: list, env: Env) -> tuple:
    w, ed = (np.asarray(x, np.float32) for x in a[:2])
    n, k = w.shape
    routed = np.einsum("nk,nkh->nh", w, ed.reshape(n, k, -1))
    if len(a) == 4:
        sd, sg = (np.asarray(x, np.float32) for x in a[2:])
        routed = routed + K.sigmoid(sg) * sd
    return (routed.astype(np.float32),)


# ---------------------------------------------------------------------------------------------
# Attention


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


@R(B.KvWriteOp)
def _kv_write(op, a: list, env: Env) -> tuple:
    _write_kv(op, a[0], a[1], env)
    return ()


@R(B.PagedAttentionOp)
def _paged_attention(op, a: list, env: Env) -> tuple:
    return (_attend(op, a[0], a[0].shape[0], env),)


@R(B.AttentionOp)
def _attention(op, a: list, env: Env) -> tuple:
    wq, wk, wv, wo = (env.weight(op, n) for n in _names(op))
    x = a[0]
    q, k = _rope(_mm(x, wq), env), _rope(_mm(x, wk), env)
    _write_kv(op, k, _mm(x, wv), env)
    return (_mm(_attend(op, q, x.shape[0], env), wo),)


# ---------------------------------------------------------------------------------------------
# Groups and functions


@R(B.GroupOp)
def _group(op: B.GroupOp, a: list, env: Env, values: dict | None = None) -> tuple:
    assert values is not None
    return _run_block(op.body.block, values, env)


def _run_block(block, values: dict[SSAValue, np.ndarray], env: Env) -> tuple:
    for op in block.ops:
        if isinstance(op, (func.ReturnOp, B.YieldOp)):
            return tuple(values[v] for v in op.operands)
        impl = BLUEPRINT_INTERPRETER.get(type(op))
        if impl is None:
            raise BlueprintRunError(f"no blueprint semantics for op '{op.name}'")
        if isinstance(op, B.GroupOp):
            results = impl(op, [], env, values)
        else:
            prec = _precision(op)
            args = [round_activation(values[v], prec.get("activation")) for v in op.operands]
            results = tuple(round_activation(r, prec.get("output")) for r in impl(op, args, env))
        if len(results) != len(op.results):
            raise BlueprintRunError(f"{op.name}: computed {len(results)} results, the op has {len(op.results)}")
        for v, r in zip(op.results, results):
            values[v] = r
        if env.observe is not None and not isinstance(op, B.GroupOp):
            env.observe(op, results)
    return ()


def run_blueprint(fn: func.FuncOp, weights: Any, state: dict[str, np.ndarray],
                  inputs: Sequence[np.ndarray], *, dims: Mapping[str, int] | None = None, pos: int = 0,
                  eps: float = 1e-6, rope_theta: float = 10000.0, norm_topk_prob: bool = True,
                  cache: dict | None = None,
                  observe: Callable[[Operation, tuple], None] | None = None) -> list[np.ndarray]:
    """Run the blueprint function `fn` on `inputs` (one array [rows, dim] per argument) at
    position `pos`; returns the values of its `func.return`.

    `weights` maps param names to arrays (a dict or a `WeightStore`); `state` maps state names
    to buffers, updated in place. `cache` (a dict) keeps quantized weights across calls.
    `observe`, if given, is called with each node and its results right after it runs."""
    args = fn.body.block.args
    if len(inputs) != len(args):
        raise BlueprintRunError(f"@{fn.sym_name.data}: takes {len(args)} inputs, got {len(inputs)}")
    fn_dims = fn.attributes.get("blueprint.dims")
    bound = {k: int(v.value.data) for k, v in fn_dims.data.items()} if fn_dims is not None else {}  # type: ignore[attr-defined]
    table = fn.attributes.get("blueprint.weights")
    env = Env(weights, state, bound | dict(dims or {}), pos, eps, rope_theta, norm_topk_prob,
              cache if cache is not None else {}, table.data if table is not None else {}, observe)  # type: ignore[attr-defined]
    values: dict[SSAValue, np.ndarray] = {}
    for v, x in zip(args, inputs):
        x = np.asarray(x)
        values[v] = x.astype(np.float32) if x.dtype.kind == "f" else x
    return list(_run_block(fn.body.block, values, env))


@R(B.YieldOp)
def _yield(op: B.YieldOp, a: list, env: Env) -> tuple:
    """Never called by `_run_block` (which ends a body at its yield); the group's results."""
    return tuple(a)
