"""The fixed level's decode ops (strata/dialects/fixed_kv.py): the int8 KV cache persists across
calls, and attention over it gives the very integers of fixed.attention over the same rows."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

from strata.dialects import parse_ir
from strata.semantics.fixed_arith import to_fixed
from strata.semantics.fixed_interp import FixedRunError, from_fixed, run_fixed

RNG = np.random.default_rng(3)
HD, HQ, HKV, N = 8, 4, 2, 6
SCALE = float(1 / np.sqrt(HD))


def T(shape, el) -> str:
    return "tensor<" + "x".join(map(str, shape)) + "x" + el + ">"


def F(shape, frac) -> str:
    return T(shape, f"!fixed.fp32<{frac}>")


def fn_of(text: str) -> func.FuncOp:
    return next(o for o in parse_ir(text).walk() if isinstance(o, func.FuncOp))


ATT = (f"func.func @f(%q: {F((N, HQ * HD), 27)}, %k: {F((N, HKV * HD), 27)}, %v: {F((N, HKV * HD), 28)}) -> {F((N, HQ * HD), 28)} {{\n"
       f"  %y = fixed.attention %q, %k, %v {{head_dim = {HD} : i64, scale = {SCALE!r} : f64, sfrac = 26 : i64}} : "
       f"{F((N, HQ * HD), 27)}, {F((N, HKV * HD), 27)}, {F((N, HKV * HD), 28)} -> {F((N, HQ * HD), 28)}\n"
       f"  func.return %y : {F((N, HQ * HD), 28)}\n}}")


def step_fn(rows: int, ctx: int) -> func.FuncOp:
    """q, k, v rows at %pos: k and v to int8 (one scale per head) into the caches, attention over them."""
    s = int(to_fixed(np.array(4.0 / 127), 31))
    q, kv = F((rows, HQ * HD), 27), F((rows, HKV * HD), 27)
    vv = F((rows, HKV * HD), 28)
    return fn_of(f"""func.func @f(%q: {q}, %k: {kv}, %v: {vv}, %pos: tensor<1xi32>) -> {F((rows, HQ * HD), 28)} {{
  %s = fixed.const {{value = array<i64: {s}, {s}>}} : {F((HKV,), 31)}
  %kc = fixed.kv_state "cache_k_l0" : tensor<{ctx}x{HKV * HD}xi8>
  %vc = fixed.kv_state "cache_v_l0" : tensor<{ctx}x{HKV * HD}xi8>
  %k8 = fixed.quant_int8 %k, %s {{head_dim = {HD} : i64}} : {kv}, {F((HKV,), 31)} -> tensor<{rows}x{HKV * HD}xi8>
  %v8 = fixed.quant_int8 %v, %s {{head_dim = {HD} : i64}} : {vv}, {F((HKV,), 31)} -> tensor<{rows}x{HKV * HD}xi8>
  fixed.cache_write %kc, %k8, %pos : tensor<{ctx}x{HKV * HD}xi8>, tensor<{rows}x{HKV * HD}xi8>, tensor<1xi32>
  fixed.cache_write %vc, %v8, %pos : tensor<{ctx}x{HKV * HD}xi8>, tensor<{rows}x{HKV * HD}xi8>, tensor<1xi32>
  %kd = fixed.dequant_int8 %kc, %s {{head_dim = {HD} : i64}} : tensor<{ctx}x{HKV * HD}xi8>, {F((HKV,), 31)} -> {F((ctx, HKV * HD), 27)}
  %vd = fixed.dequant_int8 %vc, %s {{head_dim = {HD} : i64}} : tensor<{ctx}x{HKV * HD}xi8>, {F((HKV,), 31)} -> {F((ctx, HKV * HD), 28)}
  %y = fixed.cache_attention %q, %kd, %vd, %pos {{head_dim = {HD} : i64, scale = {SCALE!r} : f64, sfrac = 26 : i64}} : {q}, {F((ctx, HKV * HD), 27)}, {F((ctx, HKV * HD), 28)}, tensor<1xi32> -> {F((rows, HQ * HD), 28)}
  func.return %y : {F((rows, HQ * HD), 28)}
}}""")


def rows(shape, frac, scale=1.0):
    return to_fixed(RNG.uniform(-scale, scale, shape), frac)


def test_decode_through_the_cache_is_prefill_attention_on_the_int8_rows():
    q, k, v = rows((N, HQ * HD), 27), rows((N, HKV * HD), 27, 3.5), rows((N, HKV * HD), 28, 3.5)
    # two entries beyond the int8 range (127 steps of 4/127), which fixed.quant_int8 must clip
    k[0, 0], k[1, 3] = to_fixed(np.array(6.0), 27), to_fixed(np.array(-6.0), 27)
    s = int(to_fixed(np.array(4.0 / 127), 31))
    state: dict = {}
    stepped = []
    for i in range(N):  # one row per call, the cache of N positions persisting in `state`
        (y,) = run_fixed(step_fn(1, N), {}, [q[i:i + 1], k[i:i + 1], v[i:i + 1], np.array([i], np.int32)], state=state)
        stepped.append(y[0])
    assert set(state) == {"cache_k_l0", "cache_v_l0"} and state["cache_k_l0"].dtype == np.int8
    # what the cache holds: each row divided by its head's scale, rounded, clipped to +-127
    for name, x, frac in (("cache_k_l0", k, 27), ("cache_v_l0", v, 28)):
        want = np.clip(np.round(from_fixed(x, frac) / from_fixed(np.array(s), 31)), -127, 127)
        np.testing.assert_array_equal(state[name], want.astype(np.int8), err_msg=name)
    assert (state["cache_k_l0"][0, 0], state["cache_k_l0"][1, 3]) == (127, -127)
    # the same integers as fixed.attention over the dequantized cache rows, causal, from position 0
    (kd,) = run_fixed(fn_of(f"""func.func @f(%c: tensor<{N}x{HKV * HD}xi8>, %s: {F((HKV,), 31)}) -> {F((N, HKV * HD), 27)} {{
  %y = fixed.dequant_int8 %c, %s {{head_dim = {HD} : i64}} : tensor<{N}x{HKV * HD}xi8>, {F((HKV,), 31)} -> {F((N, HKV * HD), 27)}
  func.return %y : {F((N, HKV * HD), 27)}
}}"""), {}, [state["cache_k_l0"], np.array([s, s])])
    (vd,) = run_fixed(fn_of(f"""func.func @f(%c: tensor<{N}x{HKV * HD}xi8>, %s: {F((HKV,), 31)}) -> {F((N, HKV * HD), 28)} {{
  %y = fixed.dequant_int8 %c, %s {{head_dim = {HD} : i64}} : tensor<{N}x{HKV * HD}xi8>, {F((HKV,), 31)} -> {F((N, HKV * HD), 28)}
  func.return %y : {F((N, HKV * HD), 28)}
}}"""), {}, [state["cache_v_l0"], np.array([s, s])])
    (ref,) = run_fixed(fn_of(ATT), {}, [q, kd, vd])
    np.testing.assert_array_equal(np.array(stepped), ref)
    # several rows at once at a later position give the rows the one-by-one calls gave
    state2: dict = {}
    run_fixed(step_fn(2, N), {}, [q[:2], k[:2], v[:2], np.array([0], np.int32)], state=state2)
    (y,) = run_fixed(step_fn(2, N), {}, [q[2:4], k[2:4], v[2:4], np.array([2], np.int32)], state=state2)
    np.testing.assert_array_equal(y, ref[2:4])


def test_cache_attention_against_float():
    ctx = 16
    q, k, v = rows((1, HQ * HD), 27), rows((5, HKV * HD), 27, 3.5), rows((5, HKV * HD), 28, 3.5)
    state: dict = {}
    for i in range(5):
        (y,) = run_fixed(step_fn(1, ctx), {}, [q, k[i:i + 1], v[i:i + 1], np.array([i], np.int32)], state=state)
    sc = 4.0 / 127
    kq = np.clip(np.round(from_fixed(k, 27) / sc), -127, 127) * sc
    vq = np.clip(np.round(from_fixed(v, 28) / sc), -127, 127) * sc
    qf = from_fixed(q, 27).reshape(HQ, HD)
    ref = np.empty((HQ, HD))
    for h in range(HQ):
        j = h // (HQ // HKV)
        s = kq[:, j * HD:(j + 1) * HD] @ qf[h] * SCALE
        p = np.exp(s - s.max())
        ref[h] = (p / p.sum()) @ vq[:, j * HD:(j + 1) * HD]
    # int8 rows are the same on both sides; what is left is the fixed arithmetic (scores at
    # 2^-26, Q31 probabilities, p.v products pre-shifted by log2(ctx) = 4 bits at frac 28)
    assert np.abs(from_fixed(y, 28).reshape(HQ, HD) - ref).max() < 1e-6


def test_cache_bounds_and_verifier():
    with pytest.raises(FixedRunError, match="outside the cache's 4 positions"):
        run_fixed(step_fn(1, 4), {}, [rows((1, HQ * HD), 27), rows((1, HKV * HD), 27), rows((1, HKV * HD), 28),
                                      np.array([4], np.int32)])
    with pytest.raises(Exception, match="fixed.const: 1 values for a result of 2 elements"):
        parse_ir(f"func.func @f() {{\n  %s = fixed.const {{value = array<i64: 1>}} : {F((2,), 31)}\n  func.return\n}}").verify()
