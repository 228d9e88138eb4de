"""Execute a llama-family `module.model` directly: the module level's semantics.

    runner = ModuleRunner(model_op, WeightStore.open(d))
    last = runner.prefill(tokens, start=0)      # [Vocab] logits of the last token
    nxt = runner.decode(int(last.argmax()), pos=len(tokens))
    full = runner.forward(tokens)               # [S, Vocab], no cache

The runner instantiates the model's block tree from the IR: each `module.sub` becomes
an instance of its block kind, with the block's generics bound from the parent's
arguments (so the dims of every param and state come from the block definitions, and
are checked against the weight store). Each block kind has a small numpy class here.

This is deliberately a second reference, written independently of the op-level
kernels (`kernels.py`): activations keep a batch dim [B, S, H], heads are split as
[B, Heads, S, D], K/V heads are repeated explicitly, rope follows HF (rotate_half and
its own llama3 frequency scaling), softmax is the plain textbook one, and the KV
cache has the module's layout [Batch, KvHeads, MaxSeq, HeadDim]. Running both levels
on one input checks the lowering pass between them.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, IntegerAttr

from strata.dialects import module as M
from strata.errors import StrataError
from strata.ir.shapes import Expr, parse_block_generics, parse_sub_type, parse_tensor_type
from strata.semantics.op_interp import InterpreterError, numpy_dtype
from strata.models.llama import LlamaHParams, ggml_name, llama_hparams


class ModuleRunError(StrataError):
    """A module-level model that cannot be executed."""


class Weights(Protocol):
    def get(self, name: str) -> np.ndarray: ...


def ggml_param_name(path: str) -> str:
    """`layers.3.attention.q_proj.weight` -> `blk.3.attn_q.weight` (the weight store's name)."""
    try:
        return ggml_name(path)
    except KeyError as e:
        raise ModuleRunError(str(e.args[0])) from None


def _np_dtype(t: Any) -> np.dtype:
    """A `T` generic: an IR float type, or the name of a default such as 'bf16'."""
    names = {"f32": Float32Type(), "f16": Float16Type(), "bf16": BFloat16Type()}
    try:
        return numpy_dtype(names.get(t, t) if isinstance(t, str) else t)
    except InterpreterError:
        raise ModuleRunError(f"unsupported element type {t}") from None


# ---------------------------------------------------------------------------
# Instantiating the block tree
# ---------------------------------------------------------------------------


class Instance:
    """One block instance: its bound generics, params, state and children."""

    def __init__(self, ctx: "_Builder", block: M.BlockOp, env: dict[str, Any], path: str,
                 sub: M.SubOp | None):
        self.block, self.env, self.path, self.sub = block, env, path, sub
        self.hp = ctx.hp
        self.params: dict[str, np.ndarray] = {}
        self.state: dict[str, np.ndarray] = {}
        self.children: dict[str, Any] = {}
        for member in block.members():
            name = member.member_name
            if isinstance(member, M.ParamOp):
                optional = member.optional is not None
                # An optional param (a bias) exists when the instance says so.
                if optional and not (sub is not None and sub.bias is not None):
                    continue
                self.params[name] = ctx.param(self, name, member)
            elif isinstance(member, M.StateOp):
                t = parse_tensor_type(member.type_text)
                shape = tuple(self.dim(d) for d in t.dims)
                self.state[name] = np.zeros(shape, dtype=_np_dtype(env[t.dtype]))
            elif isinstance(member, M.SubOp):
                self.children[name] = ctx.instantiate_sub(self, member)

    def dim(self, e: Expr | str) -> int:
        if isinstance(e, str):
            raise ModuleRunError(f"{self.path or 'model'}: variadic dim {e} in a param or state type")
        return int(e.evaluate(self.env))

    def w(self, name: str) -> np.ndarray:
        """Param `name` in float32 (the module computes in f32, like the op level)."""
        return np.asarray(self.params[name], dtype=np.float32)


class _Builder:
    def __init__(self, model: M.ModelOp, weights: Weights):
        self.model, self.weights, self.hp = model, weights, llama_hparams(model)

    def root(self) -> Any:
        block = self.model.block(self.model.root.data)
        env = self.bind(block, {k: v for k, v in self.model.generics.data.items()})
        return self.make(block, env, "", None)

    def bind(self, block: M.BlockOp, given: dict[str, Any]) -> dict[str, Any]:
        env: dict[str, Any] = {}
        for g in parse_block_generics([s.data for s in block.generics.data]):
            if g.name in given:
                v = given[g.name]
                env[g.name] = v.value.data if isinstance(v, IntegerAttr) else v
            elif g.default is not None:
                env[g.name] = int(g.default) if g.kind == "Dim" else g.default
            else:
                raise ModuleRunError(f"module.block @{block.block_name}: generic '{g.name}' is not bound")
        return env

    def instantiate_sub(self, parent: Instance, sub: M.SubOp) -> Any:
        kind, args, count = parse_sub_type(sub.type_text)
        block = self.model.block(kind)
        if block is None:
            raise ModuleRunError(f"module.sub @{sub.member_name}: no block '{kind}'")
        names = [g.name for g in parse_block_generics([s.data for s in block.generics.data])]
        given = {n: a.evaluate(parent.env) if isinstance(a, Expr) else a for n, a in zip(names, args)}
        env = self.bind(block, given)
        base = f"{parent.path}.{sub.member_name}" if parent.path else sub.member_name
        if count is None:
            return self.make(block, env, base, sub)
        return [self.make(block, env, f"{base}.{i}", sub) for i in range(parent.dim(count))]

    def make(self, block: M.BlockOp, env: dict[str, Any], path: str, sub: M.SubOp | None) -> Any:
        cls = BLOCK_KINDS.get(block.block_name)
        if cls is None:
            raise ModuleRunError(f"module.block @{block.block_name}: no reference semantics for this block kind")
        return cls(self, block, env, path, sub)

    def param(self, inst: Instance, name: str, member: M.ParamOp) -> np.ndarray:
        path = f"{inst.path}.{name}"
        t = parse_tensor_type(member.type_text)
        shape = tuple(inst.dim(d) for d in t.dims)
        # A tied instance (lm_head {tied = "embedding.weight"}) reads the root's param it names.
        tied = inst.sub.tied.data if inst.sub is not None and inst.sub.tied is not None else None
        store_name = ggml_param_name(tied if tied is not None and name == "weight" else path)
        arr = self.weights.get(store_name)
        if tuple(arr.shape) != shape:
            raise ModuleRunError(f"param {path} ({store_name}): stored shape {list(arr.shape)}, "
                                 f"block type {member.type_text} gives {list(shape)}")
        return arr


# ---------------------------------------------------------------------------
# Block kinds
# ---------------------------------------------------------------------------


class Embedding(Instance):
    def forward(self, ids: np.ndarray) -> np.ndarray:
        return self.w("weight")[ids]


class RmsNorm(Instance):
    def forward(self, x: np.ndarray) -> np.ndarray:
        variance = np.mean(np.square(x), axis=-1, keepdims=True)
        return self.w("weight") * (x * (1.0 / np.sqrt(variance + np.float32(self.hp.eps))))


class Linear(Instance):
    def forward(self, x: np.ndarray) -> np.ndarray:
        y = np.tensordot(x, self.w("weight"), axes=([-1], [1]))
        if "bias" in self.params:
            y = y + self.w("bias")
        return y


class SwiGlu(Instance):
    def forward(self, x: np.ndarray) -> np.ndarray:
        g = self.children["gate"].forward(x)
        with np.errstate(over="ignore"):  # exp(-g) = inf for very negative g gives silu = -0
            act = g / (1.0 + np.exp(-g))
        return self.children["down"].forward(act * self.children["up"].forward(x))


def rope_inv_freq(hp: LlamaHParams) -> np.ndarray:
    """HF's inverse frequencies, with llama3 scaling applied to them (float64)."""
    d = hp.head_dim
    inv = 1.0 / (hp.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    rs = hp.rope_scaling
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


class GroupedQueryAttention(Instance):
    def _heads(self, y: np.ndarray, n: int) -> np.ndarray:
        b, s, _ = y.shape
        return y.reshape(b, s, n, self.hp.head_dim).transpose(0, 2, 1, 3)  # [B, n, S, D]

    def _qkv(self, x: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hp, c = self.hp, self.children
        q = self._heads(c["q_proj"].forward(x), self.env["Heads"] // self.env["Shards"])
        k = self._heads(c["k_proj"].forward(x), self.env["KvHeads"] // self.env["Shards"])
        v = self._heads(c["v_proj"].forward(x), self.env["KvHeads"] // self.env["Shards"])
        if "q_norm" in c:
            q, k = c["q_norm"].forward(q), c["k_norm"].forward(k)
        freqs = positions.astype(np.float64)[:, None] * rope_inv_freq(hp)[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [S, D], as HF builds cos/sin
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray) -> np.ndarray:
        """q [B, Heads, S, D] at positions q_pos over keys at positions 0..N-1."""
        rep = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # KV head j serves heads j*rep..
        scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(self.hp.head_dim)
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


class DecoderLayer(Instance):
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


class Model(Instance):
    def logits(self, x: np.ndarray) -> np.ndarray:
        return self.children["lm_head"].forward(self.children["norm"].forward(x))

    def forward(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [B, S] -> logits [B, S, Vocab]."""
        x = self.children["embedding"].forward(tokens)
        for layer in self.children["layers"]:
            x = layer.forward(x)
        return self.logits(x)

    def prefill(self, tokens: np.ndarray, pos: int) -> np.ndarray:
        """tokens [Batch, S] from position pos -> logits of the last token [Batch, Vocab]."""
        x = self.children["embedding"].forward(tokens)
        for layer in self.children["layers"]:
            x = layer.prefill(x, pos)
        return self.logits(x[:, -1])

    def decode(self, token: np.ndarray, pos: int) -> np.ndarray:
        x = self.children["embedding"].forward(token)
        for layer in self.children["layers"]:
            x = layer.decode(x, pos)
        return self.logits(x[:, -1])


BLOCK_KINDS: dict[str, type[Instance]] = {
    "Embedding": Embedding,
    "RmsNorm": RmsNorm,
    "Linear": Linear,
    "SwiGlu": SwiGlu,
    "GroupedQueryAttention": GroupedQueryAttention,
    "DecoderLayer": DecoderLayer,
    "Model": Model,
}


# ---------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------


class ModuleRunner:
    """Runs the entries of a llama-family `module.model` (Batch = 1) on a weight store."""

    def __init__(self, model_op: M.ModelOp, weights: Weights):
        self.model_op = model_op
        self.hp = llama_hparams(model_op)
        self.root: Model = _Builder(model_op, weights).root()

    def _ids(self, tokens: np.ndarray | list[int]) -> np.ndarray:
        ids = np.asarray(tokens, dtype=np.int64).reshape(1, -1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.hp.vocab):
            raise ModuleRunError(f"token ids must be in [0, {self.hp.vocab})")
        return ids

    def forward(self, tokens: np.ndarray | list[int]) -> np.ndarray:
        """Logits of every position [S, Vocab], without the KV cache."""
        return self.root.forward(self._ids(tokens))[0]

    def prefill(self, tokens: np.ndarray | list[int], start: int = 0) -> np.ndarray:
        """Write the cache rows start.. and return the last position's logits [Vocab]."""
        return self.root.prefill(self._ids(tokens), int(start))[0]

    def decode(self, token: int, pos: int) -> np.ndarray:
        """One token at position pos through the cache; logits [Vocab]."""
        return self.root.decode(self._ids([token]), int(pos))[0]

    def state(self) -> dict[str, np.ndarray]:
        """The KV caches by instance path (`layers.0.attention.cache_k`), [Batch, KvHeads, MaxSeq, D]."""
        out: dict[str, np.ndarray] = {}
        for i, layer in enumerate(self.root.children["layers"]):
            for name, buf in layer.children["attention"].state.items():
                out[f"layers.{i}.attention.{name}"] = buf
        return out

    def reset(self) -> None:
        """Zero the KV caches."""
        for buf in self.state().values():
            buf[...] = 0
