"""The module level's semantics of the dense block kinds, and the base every block kind's shares.

Each block kind (a block's `path`) registers the class that runs an instance of it in
`BLOCK_SEMANTICS`: the dense kinds here (embedding, norm, linear, SwiGLU MLP, grouped-query
attention, decoder layer, causal LM), the hybrid and MoE kinds in `module_hybrid`. A `Block`
reads its params from the weight store by their llama.cpp names, checked against the shapes
the block types give, and zeroes its state; `strata.semantics.module_interp` runs a model of
them (see there for what this reference computes and why it is written apart from the op
level's kernels).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import StringAttr

from strata.dialects.instances import BlockInstance
from strata.errors import StrataError
from strata.ir.dtypes import DTypeError, dtype_named
from strata.ir.impls import Implementations


class ModuleRunError(StrataError):
    """A module-level model that cannot be executed."""


class Weights(Protocol):
    def get(self, name: str) -> np.ndarray: ...


# ---------------------------------------------------------------------------
# Block kinds
# ---------------------------------------------------------------------------

#: block kind (path) -> the class that runs an instance of it.
BLOCK_SEMANTICS: Implementations[type[Block]] = Implementations("module interpreter")


class Block:
    """A running block instance: its params (from the store), state and child blocks."""

    def __init__(self, inst: BlockInstance, weights: Weights):
        self.inst, self.env, self.path = inst, inst.env, inst.path
        self.params: dict[str, np.ndarray] = {}
        self.state: dict[str, np.ndarray] = {}
        self.children: dict[str, Any] = {}
        for name, t in inst.params.items():
            arr = weights.get(t.ggml)
            if tuple(arr.shape) != t.shape:
                raise ModuleRunError(f"param {t.path} ({t.ggml}): stored shape {list(arr.shape)}, "
                                     f"the block type gives {list(t.shape)}")
            self.params[name] = arr
        for name, t in inst.state.items():
            try:
                dtype = dtype_named(t.dtype).numpy
            except DTypeError as e:
                raise ModuleRunError(f"state {t.path}: {e}") from None
            self.state[name] = np.zeros(t.shape, dtype=dtype)
        for name, c in inst.children.items():
            self.children[name] = [make_block(i, weights) for i in c] if isinstance(c, list) else make_block(c, weights)

    def w(self, name: str) -> np.ndarray:
        """Param `name` in float32 (the module computes in f32, like the op level)."""
        return np.asarray(self.params[name], dtype=np.float32)

    def attr(self, name: str) -> float:
        return self.inst.float_attr(name)


def make_block(inst: BlockInstance, weights: Weights) -> Block:
    cls = BLOCK_SEMANTICS.get(inst.kind)
    if cls is None:
        raise ModuleRunError(f"module.block @{inst.block.block_name}: no reference semantics for the block kind "
                             f"'{inst.kind}' (known: {', '.join(sorted(BLOCK_SEMANTICS.keys()))})")
    return cls(inst, weights)


@BLOCK_SEMANTICS.register("std.nn.embedding")
class Embedding(Block):
    def forward(self, ids: np.ndarray) -> np.ndarray:
        return self.w("weight")[ids]


@BLOCK_SEMANTICS.register("std.nn.norm")
class RmsNorm(Block):
    """x·rsqrt(mean(x²) + eps)·(weight_offset + w); zero-centred norms (Qwen3.5, Qwen3-Next)
    store w around 0 and have the block attribute weight_offset = 1.0."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        variance = np.mean(np.square(x), axis=-1, keepdims=True)
        offset = self.inst.float_attr("weight_offset", 0.0)
        scale = self.w("weight") if offset == 0.0 else np.float32(offset) + self.w("weight")
        return scale * (x * (1.0 / np.sqrt(variance + np.float32(self.attr("eps")))))


@BLOCK_SEMANTICS.register("std.nn.linear")
class Linear(Block):
    def forward(self, x: np.ndarray) -> np.ndarray:
        y = np.tensordot(x, self.w("weight"), axes=([-1], [1]))
        if "bias" in self.params:
            y = y + self.w("bias")
        return y


@BLOCK_SEMANTICS.register("std.nn.mlp")
class SwiGlu(Block):
    def forward(self, x: np.ndarray) -> np.ndarray:
        g = self.children["gate"].forward(x)
        with np.errstate(over="ignore"):  # exp(-g) = inf for very negative g gives silu = -0
            act = g / (1.0 + np.exp(-g))
        return self.children["down"].forward(act * self.children["up"].forward(x))


def rope_inv_freq(theta: float, d: int, rs: dict | None) -> np.ndarray:
    """HF's inverse frequencies, with llama3 scaling applied to them (float64)."""
    inv = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    if rs is None:
        return inv
    if rs.get("rope_type") != "llama3":
        raise ModuleRunError(f"rope scaling '{rs.get('rope_type')}' is not supported")
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)  # high frequency: unchanged
        elif wavelen > old / low:
            out.append(f / factor)  # low frequency: scaled
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


@BLOCK_SEMANTICS.register("std.attn.grouped_query")
class GroupedQueryAttention(Block):
    def _heads(self, y: np.ndarray, n: int) -> np.ndarray:
        b, s, _ = y.shape
        return y.reshape(b, s, n, self.env["HeadDim"]).transpose(0, 2, 1, 3)  # [B, n, S, D]

    def _scaling(self) -> dict | None:
        attr = self.inst.attr("rope_scaling")
        if attr is None:
            return None
        return {k: (v.data if isinstance(v, StringAttr) else v.value.data) for k, v in attr.data.items()}

    def _qkv(self, x: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.children
        q = self._heads(c["q_proj"].forward(x), self.env["Heads"] // self.env["Shards"])
        k = self._heads(c["k_proj"].forward(x), self.env["KvHeads"] // self.env["Shards"])
        v = self._heads(c["v_proj"].forward(x), self.env["KvHeads"] // self.env["Shards"])
        if "q_norm" in c:
            q, k = c["q_norm"].forward(q), c["k_norm"].forward(k)
        inv = rope_inv_freq(self.attr("rope_theta"), self.env["HeadDim"], self._scaling())
        freqs = positions.astype(np.float64)[:, None] * inv[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [S, D], as HF builds cos/sin
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray) -> np.ndarray:
        """q [B, Heads, S, D] at positions q_pos over keys at positions 0..N-1."""
        rep = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # KV head j serves heads j*rep..
        scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(self.env["HeadDim"])
        causal = np.arange(k.shape[2])[None, :] <= q_pos[:, None]
        scores = np.where(causal, scores, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        out = probs @ v  # [B, Heads, S, D]
        b, h, s, d = out.shape
        return self.children["o_proj"].forward(out.transpose(0, 2, 1, 3).reshape(b, s, h * d))

    def forward(self, x: np.ndarray) -> np.ndarray:
        pos = np.arange(x.shape[1])
        q, k, v = self._qkv(x, pos)
        return self._attend(q, k, v, pos)

    def prefill(self, x: np.ndarray, pos: int) -> np.ndarray:
        s = x.shape[1]
        if pos + s > self.env["MaxSeq"]:
            raise ModuleRunError(f"{self.path}: {pos} + {s} tokens exceed MaxSeq = {self.env['MaxSeq']}")
        positions = pos + np.arange(s)
        q, k, v = self._qkv(x, positions)
        ck, cv = self.state["cache_k"], self.state["cache_v"]
        ck[:, :, pos:pos + s] = k.astype(ck.dtype)
        cv[:, :, pos:pos + s] = v.astype(cv.dtype)
        keys = ck[:, :, :pos + s].astype(np.float32)
        values = cv[:, :, :pos + s].astype(np.float32)
        return self._attend(q, keys, values, positions)

    def decode(self, x: np.ndarray, pos: int) -> np.ndarray:
        return self.prefill(x, pos)


@BLOCK_SEMANTICS.register("std.layer.decoder")
class DecoderLayer(Block):
    def _run(self, x: np.ndarray, attend) -> np.ndarray:
        c = self.children
        h = x + attend(c["attention_norm"].forward(x))
        return h + c["mlp"].forward(c["mlp_norm"].forward(h))

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self._run(x, self.children["attention"].forward)

    def prefill(self, x: np.ndarray, pos: int) -> np.ndarray:
        return self._run(x, lambda y: self.children["attention"].prefill(y, pos))

    def decode(self, x: np.ndarray, pos: int) -> np.ndarray:
        return self._run(x, lambda y: self.children["attention"].decode(y, pos))


@BLOCK_SEMANTICS.register("std.model.causal_lm")
class Model(Block):
    #: The entries of the module level this kind runs (the runner's `call`, strata.semantics.module_entries).
    ENTRIES = ("forward", "next_token", "decode", "prefill", "decode_rows", "prefill_slots", "loss_packed",
               "log_probs_packed", "hidden_packed", "prefill_packed", "step_packed", "decode_paged", "prefill_paged",
               "step_paged", "generate", "sample", "generate_until")

    def logits(self, x: np.ndarray) -> np.ndarray:
        return self.children["lm_head"].forward(self.children["norm"].forward(x))

    def hidden_states(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [B, S] -> the last layer's output [B, S, H] (before the final norm), no cache."""
        x = self.children["embedding"].forward(tokens)
        for layer in self.children["layers"]:
            x = layer.forward(x)
        return x

    def forward(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [B, S] -> logits [B, S, Vocab]."""
        return self.logits(self.hidden_states(tokens))

    def states(self, tokens: np.ndarray, pos: int) -> np.ndarray:
        """tokens [Batch, S] from position pos through the cache -> the last layer's output [Batch, S, H]."""
        x = self.children["embedding"].forward(tokens)
        for layer in self.children["layers"]:
            x = layer.prefill(x, pos)
        return x

    def prefill(self, tokens: np.ndarray, pos: int) -> np.ndarray:
        """tokens [Batch, S] from position pos -> logits of the last token [Batch, Vocab]."""
        return self.logits(self.states(tokens, pos)[:, -1])

    def decode(self, token: np.ndarray, pos: int) -> np.ndarray:
        x = self.children["embedding"].forward(token)
        for layer in self.children["layers"]:
            x = layer.decode(x, pos)
        return self.logits(x[:, -1])
