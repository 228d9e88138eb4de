"""Module-interpreter semantics of the hybrid and MoE block kinds (Qwen3-MoE, Qwen3.5,
Qwen3.5-MoE, Qwen3-Next), registered in `BLOCK_SEMANTICS` next to the dense kinds of
`module_blocks`:

    std.nn.gated_norm          rms(x)·w·silu(z) over the last dim (HF's *RMSNormGated)
    std.attn.gated             gated full attention: q_proj gives [query | gate] per head,
                               zero-centred q/k norms, partial NeoX rope, o_proj(attn ⊙ σ(gate))
    std.attn.gated_delta_net   Gated DeltaNet linear attention with conv and recurrent state
    std.moe.sparse             softmax router, top-k experts (SwiGLU each), optional shared expert

Like `module_blocks`, this is a reference written from HF transformers' formulas in plain
numpy, independently of the op-level kernels: float32 throughout, activations [B, S, H],
states in the module's layouts. The op level is checked against it, and it against HF.

State and positions. The KV cache of `std.attn.gated` is written at `pos..pos+S` like
GroupedQueryAttention's. The Gated DeltaNet has no positions: its state is whatever the
tokens so far left behind. So a `prefill` or `decode` at pos 0 starts a sequence (conv and
recurrent states are zeroed first), and one at pos > 0 continues from the stored state:
a prompt prefilled in chunks (0..7, then 8..15) gives what one prefill of 0..15 gives.
`forward` uses zero states and leaves the stored ones alone.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, UnitAttr

from strata.semantics.module_blocks import (
    BLOCK_SEMANTICS,
    Block,
    GroupedQueryAttention,
    ModuleRunError,
    rope_inv_freq,
    rotate_half,
)

#: HF's l2norm (and FLA's) adds this inside the rsqrt of Σx².
L2NORM_EPS = 1e-6


# ---------------------------------------------------------------------------
# Element-wise helpers (float32; no overflow warnings for large |x|)


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x gives 0, as it should
        return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), stable for large x (torch switches to x itself above 20; the gap is < 1e-8)."""
    return np.logaddexp(np.float32(0), x).astype(np.float32)


def rms_normalize(x: np.ndarray, eps: float) -> np.ndarray:
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(variance + np.float32(eps)))


def l2_normalize(x: np.ndarray) -> np.ndarray:
    return x * (1.0 / np.sqrt(np.sum(np.square(x), axis=-1, keepdims=True) + np.float32(L2NORM_EPS)))


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray) -> np.ndarray:
    """Softmax attention of q [B, Heads, S, D] at positions q_pos over keys 0..N-1 ([B, KvHeads, N, D]);
    returns [B, S, Heads * D], before any output projection."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # KV head j serves heads j*rep..
    scores = (q @ np.swapaxes(k, -1, -2)) / np.float32(math.sqrt(q.shape[-1]))
    causal = np.arange(k.shape[2])[None, :] <= q_pos[:, None]
    scores = np.where(causal, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    out = (e / e.sum(axis=-1, keepdims=True)) @ v  # [B, Heads, S, D]
    b, h, s, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def bool_attr(block: Block, name: str) -> bool:
    """A flag attribute: a UnitAttr present, or an IntegerAttr (i1 or i64) that is not 0."""
    a = block.inst.attr(name)
    if a is None:
        return False
    if isinstance(a, UnitAttr):
        return True
    if isinstance(a, IntegerAttr):
        return a.value.data != 0
    raise ModuleRunError(f"{block.inst.name} ({block.inst.kind}): attribute '{name}' is {a}, not a flag")


# ---------------------------------------------------------------------------
# std.nn.gated_norm


@BLOCK_SEMANTICS.register("std.nn.gated_norm")
class GatedRmsNorm(Block):
    """HF's Qwen3_5RMSNormGated: the norm first, then the SiLU gate (weight is plain, not 1 + w)."""

    def forward(self, x: np.ndarray, z: np.ndarray) -> np.ndarray:
        return rms_normalize(x, self.attr("eps")) * self.w("weight") * silu(z)


# ---------------------------------------------------------------------------
# std.attn.gated


@BLOCK_SEMANTICS.register("std.attn.gated")
class GatedAttention(GroupedQueryAttention):
    """Qwen3.5 / Qwen3-Next full attention.

    Rope rotates only the first `rotary_dim` dims of each head (NeoX halves within them).
    Qwen3.5 declares interleaved M-RoPE (`mrope_section`), but for text all three position
    rows are the same 1-D positions, so HF's recomposition (sections of T, H, W frequencies,
    interleaved or not) picks equal values from each: it is plain rope, and the attributes
    change nothing here.
    """

    def _rotary_dim(self) -> int:
        d = self.inst.float_attr("rotary_dim", float(self.env["HeadDim"]))
        rd = int(d)
        if rd != d or rd <= 0 or rd % 2 or rd > self.env["HeadDim"]:
            raise ModuleRunError(f"{self.inst.name} ({self.inst.kind}): rotary_dim {d} is not an even size "
                                 f"<= HeadDim = {self.env['HeadDim']}")
        return rd

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        rd = self._rotary_dim()
        inv = rope_inv_freq(self.attr("rope_theta"), rd, self._scaling())
        freqs = positions.astype(np.float64)[:, None] * inv[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [S, rd], as HF builds cos/sin
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        rot, rest = x[..., :rd], x[..., rd:]
        return np.concatenate([rot * cos + rotate_half(rot) * sin, rest], axis=-1)

    def _project(self, x: np.ndarray, positions: np.ndarray):
        """q, k, v as [B, heads, S, D] (normed, rotated) and the gate [B, S, Heads * D]."""
        c, shards, hd = self.children, self.env["Shards"], self.env["HeadDim"]
        b, s, _ = x.shape
        heads = self.env["Heads"] // shards
        qg = c["q_proj"].forward(x).reshape(b, s, heads, 2 * hd)  # per head [query | gate]
        q = qg[..., :hd].transpose(0, 2, 1, 3)
        gate = qg[..., hd:].reshape(b, s, heads * hd)
        k = self._heads(c["k_proj"].forward(x), self.env["KvHeads"] // shards)
        v = self._heads(c["v_proj"].forward(x), self.env["KvHeads"] // shards)
        q, k = c["q_norm"].forward(q), c["k_norm"].forward(k)
        return self._rope(q, positions), self._rope(k, positions), v, gate

    def _output(self, attn: np.ndarray, gate: np.ndarray) -> np.ndarray:
        return self.children["o_proj"].forward(attn * sigmoid(gate))

    def forward(self, x: np.ndarray) -> np.ndarray:
        pos = np.arange(x.shape[1])
        q, k, v, gate = self._project(x, pos)
        return self._output(causal_attention(q, k, v, pos), gate)

    def prefill(self, x: np.ndarray, pos: int) -> np.ndarray:
        s = x.shape[1]
        if pos + s > self.env["MaxSeq"]:
            raise ModuleRunError(f"{self.path}: {pos} + {s} tokens exceed MaxSeq = {self.env['MaxSeq']}")
        positions = pos + np.arange(s)
        q, k, v, gate = self._project(x, positions)
        ck, cv = self.state["cache_k"], self.state["cache_v"]
        ck[:, :, pos:pos + s] = k.astype(ck.dtype)
        cv[:, :, pos:pos + s] = v.astype(cv.dtype)
        keys = ck[:, :, :pos + s].astype(np.float32)
        values = cv[:, :, :pos + s].astype(np.float32)
        return self._output(causal_attention(q, keys, values, positions), gate)

    def decode(self, x: np.ndarray, pos: int) -> np.ndarray:
        return self.prefill(x, pos)


# ---------------------------------------------------------------------------
# std.attn.gated_delta_net


@BLOCK_SEMANTICS.register("std.attn.gated_delta_net")
class GatedDeltaNet(Block):
    """Gated DeltaNet (HF's Qwen3_5GatedDeltaNet / Qwen3NextGatedDeltaNet).

    Per token t, value head j (reading key head j // (Hv / Hk)), state S of shape [dk, dv]:
        S ← S·exp(g);  u = β(v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq
    with q, k L2-normed per head after the causal conv + SiLU, q scaled by dk^-½,
    β = σ(b), g = −exp(A_log)·softplus(a + dt_bias). Output: out_proj(rms(o)·w·silu(z)).

    `layout` says how the input projections are stored: "separate" (Qwen3.5: in_proj_qkv
    as [q | k | v], in_proj_z, in_proj_b, in_proj_a) or "grouped" (Qwen3-Next: in_proj_qkvz
    and in_proj_ba grouped per key head, [q | k | v·r | z·r] and [b·r | a·r], r = Hv / Hk).
    """

    def _dims(self) -> tuple[int, int, int, int]:
        hk, hv = self.env["LinKHeads"], self.env["LinVHeads"]
        if hv % hk:
            raise ModuleRunError(f"{self.inst.name} ({self.inst.kind}): LinVHeads = {hv} is not a multiple of "
                                 f"LinKHeads = {hk}")
        return hk, hv, self.env["LinKDim"], self.env["LinVDim"]

    def _inputs(self, x: np.ndarray):
        """The conv input [B, S, C] laid out [q | k | v] (heads in order), z [B, S, Hv, dv], b and a [B, S, Hv]."""
        hk, hv, dk, dv = self._dims()
        c = self.children
        b_, s, _ = x.shape
        layout = self.inst.str_attr("layout", "separate")
        if layout == "separate":
            qkv = c["in_proj_qkv"].forward(x)
            z = c["in_proj_z"].forward(x).reshape(b_, s, hv, dv)
            return qkv, z, c["in_proj_b"].forward(x), c["in_proj_a"].forward(x)
        if layout != "grouped":
            raise ModuleRunError(f"{self.inst.name} ({self.inst.kind}): layout '{layout}' is neither 'separate' "
                                 f"nor 'grouped'")
        r = hv // hk
        # HF's fix_query_key_value_ordering: each key head's slice holds its q, k and the
        # values and z of its r value heads.
        qkvz = c["in_proj_qkvz"].forward(x).reshape(b_, s, hk, 2 * dk + 2 * r * dv)
        q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
        v, z = qkvz[..., 2 * dk:2 * dk + r * dv], qkvz[..., 2 * dk + r * dv:]
        ba = c["in_proj_ba"].forward(x).reshape(b_, s, hk, 2 * r)
        qkv = np.concatenate([q.reshape(b_, s, -1), k.reshape(b_, s, -1), v.reshape(b_, s, -1)], axis=-1)
        return qkv, z.reshape(b_, s, hv, dv), ba[..., :r].reshape(b_, s, hv), ba[..., r:].reshape(b_, s, hv)

    def _conv(self, qkv: np.ndarray, conv_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Causal depthwise conv1d (no bias) then SiLU over [conv_state | new columns].

        qkv [B, S, C], conv_state [B, C, K-1] (the last K-1 inputs before these); returns
        the activations [B, S, C] and the new conv state (the last K-1 inputs, old ones
        included when S < K-1)."""
        weight = self.w("conv1d")[:, 0, :]  # [C, K]
        channels, k = weight.shape
        b, s, _ = qkv.shape
        full = np.concatenate([conv_state, np.swapaxes(qkv, 1, 2)], axis=-1)  # [B, C, K-1+S]
        out = np.zeros((b, channels, s), dtype=np.float32)
        for j in range(k):  # cross-correlation, as torch's conv1d: tap j reads input t + j
            out += weight[None, :, j:j + 1] * full[:, :, j:j + s]
        return silu(np.swapaxes(out, 1, 2)), full[:, :, full.shape[-1] - (k - 1):]

    def _gates(self, b: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """β = σ(b) and the log decay g = −exp(A_log)·softplus(a + dt_bias), both [B, S, Hv]."""
        beta = sigmoid(b)
        g = -np.exp(self.w("A_log")) * softplus(a + self.w("dt_bias"))
        return beta, g.astype(np.float32)

    def _split_heads(self, mixed: np.ndarray):
        """q, k [B, S, Hv, dk] (key heads repeated for their value heads), v [B, S, Hv, dv]."""
        hk, hv, dk, dv = self._dims()
        b_, s, _ = mixed.shape
        q = mixed[..., :hk * dk].reshape(b_, s, hk, dk)
        k = mixed[..., hk * dk:2 * hk * dk].reshape(b_, s, hk, dk)
        v = mixed[..., 2 * hk * dk:].reshape(b_, s, hv, dv)
        q, k = l2_normalize(q) * np.float32(dk ** -0.5), l2_normalize(k)
        r = hv // hk  # value head j reads key head j // r
        return np.repeat(q, r, axis=2), np.repeat(k, r, axis=2), v

    @staticmethod
    def _recur(q, k, v, beta, g, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The delta rule, token by token: outputs [B, S, Hv, dv] and the final state [B, Hv, dk, dv]."""
        out = np.empty(v.shape, dtype=np.float32)
        for t in range(q.shape[1]):
            state = state * np.exp(g[:, t])[:, :, None, None]
            kv_mem = np.einsum("bhkv,bhk->bhv", state, k[:, t])  # Sᵀk
            u = (v[:, t] - kv_mem) * beta[:, t][:, :, None]
            state = state + k[:, t][:, :, :, None] * u[:, :, None, :]
            out[:, t] = np.einsum("bhkv,bhk->bhv", state, q[:, t])  # Sᵀq
        return out, state

    def _run(self, x: np.ndarray, conv_state: np.ndarray, rec_state: np.ndarray):
        """The layer's output [B, S, H] and its new conv and recurrent states (float32)."""
        qkv, z, b, a = self._inputs(x)
        mixed, conv_state = self._conv(qkv, conv_state)
        q, k, v = self._split_heads(mixed)
        beta, g = self._gates(b, a)
        o, rec_state = self._recur(q, k, v, beta, g, rec_state)
        o = self.children["norm"].forward(o, z)  # per value head over dv
        return self.children["out_proj"].forward(o.reshape(x.shape[0], x.shape[1], -1)), conv_state, rec_state

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x [B, S, H] for any B (not just the state's Batch): every row starts from zero state."""
        b = x.shape[0]
        conv = np.zeros((b, *self.state["conv_state"].shape[1:]), np.float32)
        rec = np.zeros((b, *self.state["recurrent_state"].shape[1:]), np.float32)
        return self._run(x, conv, rec)[0]

    def prefill(self, x: np.ndarray, pos: int) -> np.ndarray:
        conv, rec = self.state["conv_state"], self.state["recurrent_state"]
        if pos == 0:  # a new sequence: nothing before it (see the module docstring)
            conv[...] = 0
            rec[...] = 0
        y, new_conv, new_rec = self._run(x, conv.astype(np.float32), rec.astype(np.float32))
        conv[...] = new_conv.astype(conv.dtype)
        rec[...] = new_rec.astype(rec.dtype)
        return y

    def decode(self, x: np.ndarray, pos: int) -> np.ndarray:
        return self.prefill(x, pos)


# ---------------------------------------------------------------------------
# std.moe.sparse


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """Indices [N, k] of the k largest probs per row, largest first; among equal values the
    lowest expert index comes first (a stable sort). torch.topk leaves the order of ties
    unspecified (on CPU it does not prefer the lowest index), so an exact tie across the
    k-th place may route differently from HF; random weights never make one."""
    return np.argsort(-probs, axis=-1, kind="stable")[:, :k]


@BLOCK_SEMANTICS.register("std.moe.sparse")
class SparseMoe(Block):
    """Routed SwiGLU experts (HF's Qwen3MoeSparseMoeBlock / Qwen3_5MoeSparseMoeBlock).

    p = softmax(router(x)) in float32; the TopK largest, renormalised to sum 1 when
    `norm_topk_prob`; out = Σ_k p_k·SwiGLU_{e_k}(x), each expert run only on the tokens
    routed to it; plus σ(x·w_sg)·shared(x) where the block has a shared expert.
    """

    def _routes(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Expert indices and weights, both [N, TopK], for tokens x [N, H]."""
        k, n_experts = self.env["TopK"], self.env["Experts"]
        if not 0 < k <= n_experts:
            raise ModuleRunError(f"{self.inst.name} ({self.inst.kind}): TopK = {k} is not in 1..Experts = {n_experts}")
        logits = self.children["router"].forward(x)
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        idx = top_k(probs, k)
        weights = np.take_along_axis(probs, idx, axis=-1)
        if bool_attr(self, "norm_topk_prob"):
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return idx, weights.astype(np.float32)

    def _expert(self, e: int, x: np.ndarray) -> np.ndarray:
        """SwiGLU of expert e on rows x [n, H]; reads only that expert's slices."""
        gate = x @ np.asarray(self.params["gate_exps"][e], dtype=np.float32).T
        up = x @ np.asarray(self.params["up_exps"][e], dtype=np.float32).T
        return (silu(gate) * up) @ np.asarray(self.params["down_exps"][e], dtype=np.float32).T

    def forward(self, x: np.ndarray) -> np.ndarray:
        tokens = x.reshape(-1, x.shape[-1]).astype(np.float32)
        idx, weights = self._routes(tokens)
        out = np.zeros_like(tokens)
        for e in np.unique(idx):  # ascending, as HF adds its experts' contributions
            rows, slot = np.nonzero(idx == e)  # an expert is at most once in a token's top-k
            out[rows] += self._expert(int(e), tokens[rows]) * weights[rows, slot][:, None]
        if "shared_expert" in self.children:
            shared = self.children["shared_expert"].forward(tokens)
            out = out + sigmoid(self.children["shared_expert_gate"].forward(tokens)) * shared
        return out.reshape(x.shape)
