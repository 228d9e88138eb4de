"""Exact semantics of the `fixed` dialect's decode ops (`strata.dialects.fixed_kv`): the `@impl`
methods of `FixedKvFunctions`, which `run_fixed` runs beside the compute ops'. The KV state
lives in the run's `Env.state` (by name, int8 numpy arrays, zero when first read) and persists
across `run_fixed` calls given the same `state` dict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls

from strata.dialects import fixed_kv as KV
from strata.dialects.fixed import frac_of
from strata.ir.checks import shape_of
from strata.semantics.fixed_arith import I64, ceil_log2, rshift_round, sat32, shift, softmax_q31, to_fixed
from strata.semantics.fixed_env import Env, FixedRunError

V = PythonValues


def cache_attention_fixed(q, k, v, pos: int, hd: int, fq: int, fk: int, fv: int, fy: int, sf: int,
                          scale: float) -> np.ndarray:
    """fixed.cache_attention (see its docstring) on integer arrays."""
    q, k, v = (np.asarray(t, I64) for t in (q, k, v))
    n, ctx = q.shape[0], k.shape[0]
    hq, hkv = q.shape[1] // hd, k.shape[1] // hd
    sc, fsc = attention_scale(scale)
    gd, gj = ceil_log2(hd), ceil_log2(ctx)
    valid = np.arange(ctx)[None, :] <= pos + np.arange(n)[:, None]
    out = np.empty((n, hq, hd), I64)
    qh, kh, vh = q.reshape(n, hq, hd), k.reshape(ctx, hkv, hd), v.reshape(ctx, hkv, hd)
    for h in range(hq):
        j = h // (hq // hkv)
        raw = rshift_round(qh[:, h, None, :] * kh[None, :, j, :], gd).sum(axis=-1)  # < 2^62
        scores = sat32(shift(raw, fq + fk - gd - sf))
        scores = sat32(shift(scores * sc, fsc))
        p = softmax_q31(scores, sf, valid)
        acc = rshift_round(p[:, :, None] * vh[None, :, j, :], gj).sum(axis=1)
        out[:, h, :] = sat32(shift(acc, 31 + fv - gj - fy))
    return out.reshape(n, hq * hd)


def attention_scale(scale: float) -> tuple[int, int]:
    """The attention scale as an integer and its frac (as fixed.attention takes it)."""
    fsc = 31 if scale < 1 else 30 - ceil_log2(int(np.ceil(scale)))
    return int(to_fixed(np.array(scale), fsc)), fsc


@register_impls
@dataclass
class FixedKvFunctions(InterpreterFunctions):
    """The decode ops (constants, the int8 KV state, cache writes, attention over the cache) on
    `env` (its `state` holds the caches)."""

    env: Env

    @impl(KV.ConstOp)
    def run_const(self, interpreter: Interpreter, op: KV.ConstOp, a: V) -> V:
        return (np.asarray(op.integers(), I64).reshape(shape_of(op.result)),)

    @impl(KV.KvStateOp)
    def run_kv_state(self, interpreter: Interpreter, op: KV.KvStateOp, a: V) -> V:
        name = op.state.data
        shape = shape_of(op.result)
        buf = self.env.state.get(name)
        if buf is None:
            buf = self.env.state[name] = np.zeros(shape, np.int8)
        elif buf.shape != shape:
            raise FixedRunError(f"fixed.kv_state '{name}': the state has shape {list(buf.shape)}, the IR says {list(shape)}")
        return (buf,)

    @impl(KV.CacheWriteOp)
    def run_cache_write(self, interpreter: Interpreter, op: KV.CacheWriteOp, a: V) -> V:
        cache, rows, pos = a[0], np.asarray(a[1]), int(np.asarray(a[2]).reshape(-1)[0])
        if not 0 <= pos <= cache.shape[0] - rows.shape[0]:
            raise FixedRunError(f"fixed.cache_write: rows {pos}..{pos + rows.shape[0] - 1} are outside the cache's "
                                f"{cache.shape[0]} positions")
        cache[pos:pos + rows.shape[0]] = rows  # in place: the state persists
        return ()

    @impl(KV.CacheAttentionOp)
    def run_cache_attention(self, interpreter: Interpreter, op: KV.CacheAttentionOp, a: V) -> V:
        pos = int(np.asarray(a[3]).reshape(-1)[0])
        n, ctx = shape_of(op.q)[0], shape_of(op.k)[0]
        if not 0 <= pos <= ctx - n:
            raise FixedRunError(f"fixed.cache_attention: positions {pos}..{pos + n - 1} are outside the cache's {ctx}")
        return (cache_attention_fixed(a[0], a[1], a[2], pos, op.head_dim.value.data, frac_of(op.q), frac_of(op.k),
                                      frac_of(op.v), frac_of(op.result), op.sfrac.value.data, float(op.scale.value.data)),)
