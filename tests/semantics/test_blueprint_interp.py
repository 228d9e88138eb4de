"""The blueprint interpreter: each node against numpy/torch references in f32,
its precision emulation (bf16, fp8 block weights, int4 asymmetric weights), groups, and one
decode step of a tiny Gated DeltaNet (linear attention) layer + MoE under f32 and fp8 weights."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from xdsl.dialects import func

from strata.dialects import parse_ir
from blueprint_step import C, DIMS, DK, DV, HID, HK, HV, INTER, KCONV, NE, TOPK, VOCAB, _decode_fn, _decode_text, _tiny_state, _tiny_weights  # noqa: F401
from ort_int4 import ort_dequantize_int4, ort_quantize_int4
from strata.dialects.blueprint import NODE_OPS, Blueprint, GroupOp, YieldOp
from strata.ir import fp8
from strata.ir.int4 import pack_int4
from strata.semantics.blueprint_interp import (
    BLUEPRINT_INTERPRETER,
    BlueprintRunError,
    dequantize_int4_block,
    quantize_int4_block,
    roundf,
    run_blueprint,
)
from strata.semantics.module_hybrid import GatedDeltaNet

RNG = np.random.default_rng(0)
BF16_REL = 2.0 ** -8  # bf16's relative rounding error bound (8-bit significand)


def E(rows: str, dim: str, el: str = "f32") -> str:
    return f'!blueprint.edge<"{rows}", "{dim}", {el}>'


def fn_of(args: list[tuple[str, str]], body: str, rets: list[tuple[str, str]]) -> func.FuncOp:
    sig = ", ".join(f"%{n}: {t}" for n, t in args)
    out = ", ".join(t for _, t in rets)
    ret = f"func.return {', '.join('%' + n for n, _ in rets)} : {out}" if rets else "func.return"
    text = f"func.func @f({sig}) -> ({out}) {{\n{body}\n{ret}\n}}"
    mod = parse_ir(text)
    fns = [op for op in mod.walk() if isinstance(op, func.FuncOp)]
    return fns[0]


def r(*shape, scale=1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def silu(x):
    return x / (1 + np.exp(-x))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def rmsn(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


# ---------------------------------------------------------------------------------------------
# Registry


def test_every_blueprint_op_has_an_implementation():
    assert len(NODE_OPS) >= 27
    assert BLUEPRINT_INTERPRETER.missing(Blueprint) == []
    assert set(BLUEPRINT_INTERPRETER.keys()) == set(Blueprint.operations)
    assert GroupOp in BLUEPRINT_INTERPRETER and YieldOp in BLUEPRINT_INTERPRETER


# ---------------------------------------------------------------------------------------------
# Row-wise nodes, f32


def test_embed_and_argmax():
    table = r(10, 8)
    fn = fn_of([("t", E("n", "1", "i32"))],
               f'%h = blueprint.embed %t weight "emb" : {E("n", "1", "i32")} -> {E("n", "hidden")}\n'
               f'%a = blueprint.argmax %h : {E("n", "hidden")} -> {E("n", "1", "i32")}',
               [("h", E("n", "hidden")), ("a", E("n", "1", "i32"))])
    ids = np.array([[3], [7], [3]], np.int32)
    h, a = run_blueprint(fn, {"emb": table}, {}, [ids])
    np.testing.assert_array_equal(h, table[[3, 7, 3]])
    np.testing.assert_array_equal(a[:, 0], table[[3, 7, 3]].argmax(-1))
    assert a.dtype == np.int32 and a.shape == (3, 1)


@pytest.mark.parametrize("kind", ["rms_norm", "final_norm"])
def test_norms(kind):
    x, w = r(3, 16), r(16)
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.{kind} %x weight "w" : {E("n", "h")} -> {E("n", "h")}',
               [("y", E("n", "h"))])
    (y,) = run_blueprint(fn, {"w": w}, {}, [x])
    ref = torch.nn.functional.rms_norm(torch.tensor(x), (16,), torch.tensor(w), eps=1e-6).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_qk_norm_per_head():
    x, w = r(2, 3 * 8), r(8)
    fn = fn_of([("x", E("n", "q"))], f'%y = blueprint.qk_norm %x weight "w" : {E("n", "q")} -> {E("n", "q")}',
               [("y", E("n", "q"))])
    (y,) = run_blueprint(fn, {"w": w}, {}, [x])
    np.testing.assert_allclose(y, rmsn(x.reshape(2, 3, 8), w).reshape(2, 24), rtol=1e-5, atol=1e-6)


def test_l2_norm_q_and_k_heads_only():
    hk, dk, hv, dv = 2, 4, 4, 3
    x = r(2, 2 * hk * dk + hv * dv)
    fn = fn_of([("x", E("n", "c"))], f'%y = blueprint.l2_norm %x : {E("n", "c")} -> {E("n", "c")}', [("y", E("n", "c"))])
    (y,) = run_blueprint(fn, {}, {}, [x], dims=dict(lin_k_heads=hk, lin_k_dim=dk))
    qk = torch.nn.functional.normalize(torch.tensor(x[:, :16].reshape(2, 4, 4)), dim=-1, eps=1e-6).numpy()
    np.testing.assert_allclose(y[:, :16], qk.reshape(2, 16), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[:, 16:], x[:, 16:])


@pytest.mark.parametrize("kind", ["linear", "lm_head", "router"])
def test_projections(kind):
    x, w = r(3, 16), r(12, 16)
    role = ' role "q"' if kind == "linear" else ""
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.{kind} %x weight "w"{role} : {E("n", "h")} -> {E("n", "o")}',
               [("y", E("n", "o"))])
    (y,) = run_blueprint(fn, {"w": w}, {}, [x])
    np.testing.assert_allclose(y, torch.nn.functional.linear(torch.tensor(x), torch.tensor(w)).numpy(), rtol=1e-5, atol=1e-5)


def test_elementwise_nodes():
    a, b, gu = r(2, 8), r(2, 8), r(2, 16)
    T = E("n", "d")
    fn = fn_of([("a", T), ("b", T), ("gu", E("n", "d2"))],
               f"%s = blueprint.residual_add %a, %b : {T}, {T} -> {T}\n"
               f"%g = blueprint.sigmoid_gate_mul %a, %b : {T}, {T} -> {T}\n"
               f'%m = blueprint.silu_mul %gu : {E("n", "d2")} -> {T}',
               [("s", T), ("g", T), ("m", T)])
    s, g, m = run_blueprint(fn, {}, {}, [a, b, gu])
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_allclose(g, torch.sigmoid(torch.tensor(a)).numpy() * b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m, torch.nn.functional.silu(torch.tensor(gu[:, :8])).numpy() * gu[:, 8:], rtol=1e-6, atol=1e-7)


def test_split_deinterleaves_query_and_gate():
    heads, hd = 2, 4
    x = r(3, heads * hd * 2)
    fn = fn_of([("x", E("n", "qg"))], f'%q, %g = blueprint.split %x : {E("n", "qg")} -> {E("n", "q")}, {E("n", "q")}',
               [("q", E("n", "q")), ("g", E("n", "q"))])
    q, g = run_blueprint(fn, {}, {}, [x], dims=dict(head_dim=hd))
    per = x.reshape(3, heads, 2 * hd)
    np.testing.assert_array_equal(q, per[:, :, :hd].reshape(3, -1))
    np.testing.assert_array_equal(g, per[:, :, hd:].reshape(3, -1))


def test_swiglu_ffn():
    x, wg, wu, wd = r(2, 8), r(6, 8), r(6, 8), r(8, 6)
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.swiglu_ffn %x weights ["g", "u", "d"] : {E("n", "h")} -> {E("n", "h")}',
               [("y", E("n", "h"))])
    (y,) = run_blueprint(fn, {"g": wg, "u": wu, "d": wd}, {}, [x])
    t = torch.tensor
    F = torch.nn.functional
    ref = F.linear(F.silu(F.linear(t(x), t(wg))) * F.linear(t(x), t(wu)), t(wd)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def _rope_ref(x, heads, hd, pos, theta):
    """HF's rotate_half rope, in torch."""
    n = x.shape[0]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(pos, pos + n, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().float()[:, None], emb.sin().float()[:, None]
    t = torch.tensor(x).reshape(n, heads, hd)
    rot = torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], -1)
    return (t * cos + rot * sin).reshape(n, -1).numpy()


def test_rope():
    q, k = r(3, 2 * 8), r(3, 1 * 8)
    fn = fn_of([("q", E("n", "q")), ("k", E("n", "k"))],
               f'%qr, %kr = blueprint.rope %q, %k : {E("n", "q")}, {E("n", "k")} -> {E("n", "q")}, {E("n", "k")}',
               [("qr", E("n", "q")), ("kr", E("n", "k"))])
    qr, kr = run_blueprint(fn, {}, {}, [q, k], dims=dict(head_dim=8), pos=5, rope_theta=1e4)
    np.testing.assert_allclose(qr, _rope_ref(q, 2, 8, 5, 1e4), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kr, _rope_ref(k, 1, 8, 5, 1e4), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet, f32


def test_gdn_gates():
    hv = 3
    ba, a_log, dt = r(2, 2 * hv), r(hv), r(hv)
    fn = fn_of([("ba", E("n", "ba"))],
               f'%d, %b = blueprint.gdn_gates %ba weights ["A", "dt"] : {E("n", "ba")} -> {E("n", "hv")}, {E("n", "hv")}',
               [("d", E("n", "hv")), ("b", E("n", "hv"))])
    d, b = run_blueprint(fn, {"A": -np.exp(a_log), "dt": dt}, {}, [ba])  # A as llama.cpp's ssm_a
    t = torch.tensor
    np.testing.assert_allclose(b, torch.sigmoid(t(ba[:, :hv])).numpy(), rtol=1e-6)
    ref = (-t(a_log).exp() * torch.nn.functional.softplus(t(ba[:, hv:]) + t(dt))).numpy()
    np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-6)


def test_conv1d_update_and_snapshot():
    c, kk, extra = 6, 4, 3
    w = r(c, 1, kk)
    conv0 = r(c, kk - 1)
    x = r(2, c + extra)
    fx = E("n", "cz")
    fn = fn_of([("x", fx)],
               f'%y = blueprint.conv1d_update %x weight "w" {{effects = [#blueprint.effect<conv:update>]}} : {fx} -> {E("n", "c")}\n'
               f'blueprint.state_snapshot %y {{effects = [#blueprint.effect<conv:snapshot>]}} : {E("n", "c")}',
               [("y", E("n", "c"))])
    state = {"conv": conv0.copy()}
    (y,) = run_blueprint(fn, {"w": w}, state, [x])
    full = torch.tensor(np.concatenate([conv0, x[:, :c].T], -1))[None]  # [1, C, K-1+S]
    ref = torch.nn.functional.silu(torch.nn.functional.conv1d(full, torch.tensor(w), groups=c))[0].T.numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(state["conv"], full[0, :, -(kk - 1):].numpy())
    np.testing.assert_array_equal(state["conv.snapshot"], state["conv"])
    assert state["conv.snapshot"] is not state["conv"]


def test_gdn_recurrence_matches_the_module_level():
    hk, dk, hv, dv = 1, 4, 2, 3
    mixed = r(3, 2 * hk * dk + hv * dv)
    g, beta = -np.abs(r(3, hv)), sigmoid(r(3, hv)).astype(np.float32)
    h0 = r(hv, dk, dv, scale=0.1)
    fn = fn_of([("g", E("n", "hv")), ("b", E("n", "hv")), ("m", E("n", "c"))],
               f'%o = blueprint.gdn_recurrence %g, %b, %m {{effects = [#blueprint.effect<h:update>]}} : '
               f'{E("n", "hv")}, {E("n", "hv")}, {E("n", "c")} -> {E("n", "v")}',
               [("o", E("n", "v"))])
    state = {"h": h0.copy()}
    (o,) = run_blueprint(fn, {}, state, [g, beta, mixed], dims=dict(lin_k_heads=hk, lin_k_dim=dk, lin_v_heads=hv, lin_v_dim=dv))
    q = mixed[:, :dk].reshape(1, 3, hk, dk) * dk ** -0.5
    k = mixed[:, dk:2 * dk].reshape(1, 3, hk, dk)
    v = mixed[:, 2 * dk:].reshape(1, 3, hv, dv)
    ref, h = GatedDeltaNet._recur(np.repeat(q, 2, 2), np.repeat(k, 2, 2), v, beta[None], g[None], h0[None])
    np.testing.assert_allclose(o, ref[0].reshape(3, -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["h"], h[0], rtol=1e-5, atol=1e-6)


def test_gated_rms_norm():
    hv, dv = 2, 4
    qkvz, core, w = r(2, 10 + hv * dv), r(2, hv * dv), r(dv)
    fn = fn_of([("a", E("n", "z")), ("c", E("n", "v"))],
               f'%y = blueprint.gated_rms_norm %a, %c weight "w" : {E("n", "z")}, {E("n", "v")} -> {E("n", "v")}',
               [("y", E("n", "v"))])
    (y,) = run_blueprint(fn, {"w": w}, {}, [qkvz, core])
    ref = rmsn(core.reshape(2, hv, dv), w).reshape(2, -1) * silu(qkvz[:, 10:])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# MoE, f32


def test_moe_nodes():
    n, h, inter, ne, k = 2, 8, 4, 5, 2
    x, wr = r(n, h), r(ne, h)
    gate_up, down = r(ne, 2 * inter, h), r(ne, h, inter)
    shared, sg = r(n, h), r(n, 1)
    fn = fn_of([("x", E("n", "h")), ("sd", E("n", "h")), ("sg", E("n", "1"))],
               f'%l = blueprint.router %x weight "r" : {E("n", "h")} -> {E("n", "e")}\n'
               f'%w, %ids = blueprint.top_k %l : {E("n", "e")} -> {E("n", "k")}, {E("n", "k", "i32")}\n'
               f'%gu = blueprint.expert_gate_up %x, %ids weight "gu" : {E("n", "h")}, {E("n", "k", "i32")} -> {E("n*k", "i2")}\n'
               f'%a = blueprint.silu_mul %gu : {E("n*k", "i2")} -> {E("n*k", "i")}\n'
               f'%ed = blueprint.expert_down %a, %ids weight "d" : {E("n*k", "i")}, {E("n", "k", "i32")} -> {E("n*k", "h")}\n'
               f'%f = blueprint.blend %w, %ed, %sd, %sg : {E("n", "k")}, {E("n*k", "h")}, {E("n", "h")}, {E("n", "1")} -> {E("n", "h")}',
               [("w", E("n", "k")), ("ids", E("n", "k", "i32")), ("f", E("n", "h"))])
    w, ids, f = run_blueprint(fn, {"r": wr, "gu": gate_up, "d": down}, {}, [x, shared, sg], dims=dict(top_k=k))
    p = torch.softmax(torch.tensor(x @ wr.T), -1)
    tw, tid = torch.topk(p, k, -1)
    tw = tw / tw.sum(-1, keepdim=True)
    np.testing.assert_array_equal(ids, tid.numpy())
    np.testing.assert_allclose(w, tw.numpy(), rtol=1e-5)
    ref = np.zeros((n, h), np.float32)
    for i in range(n):
        for j in range(k):
            e = tid[i, j].item()
            gu = gate_up[e] @ x[i]
            ref[i] += tw[i, j].item() * (down[e] @ (silu(gu[:inter]) * gu[inter:]))
    ref += sigmoid(sg) * shared
    np.testing.assert_allclose(f, ref, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Attention, f32


def _sdpa(q, kc, vc, heads, kvh, hd, pos):
    n = q.shape[0]
    qt = torch.tensor(q).reshape(n, heads, hd).transpose(0, 1)
    kt = torch.tensor(kc).reshape(-1, kvh, hd).transpose(0, 1).repeat_interleave(heads // kvh, 0)
    vt = torch.tensor(vc).reshape(-1, kvh, hd).transpose(0, 1).repeat_interleave(heads // kvh, 0)
    mask = torch.arange(kt.shape[1])[None, :] <= (pos + torch.arange(n))[:, None]
    o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
    return o.transpose(0, 1).reshape(n, -1).numpy()


def test_kv_write_and_paged_attention():
    heads, kvh, hd, ctx, pos = 4, 2, 8, 16, 5
    cache = {"k": r(ctx, kvh * hd), "v": r(ctx, kvh * hd)}
    old = {k: v.copy() for k, v in cache.items()}
    q, k, v = r(2, heads * hd), r(2, kvh * hd), r(2, kvh * hd)
    Q, KV = E("n", "q"), E("n", "kv")
    fn = fn_of([("q", Q), ("k", KV), ("v", KV)],
               f"blueprint.kv_write %k, %v {{effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>]}} : {KV}, {KV}\n"
               f"%a = blueprint.paged_attention %q, %k, %v {{effects = [#blueprint.effect<k:read>, #blueprint.effect<v:read>]}} : {Q}, {KV}, {KV} -> {Q}",
               [("a", Q)])
    (a,) = run_blueprint(fn, {}, cache, [q, k, v], dims=dict(head_dim=hd), pos=pos)
    np.testing.assert_array_equal(cache["k"][pos:pos + 2], k)
    np.testing.assert_array_equal(cache["v"][:pos], old["v"][:pos])
    np.testing.assert_array_equal(cache["k"][pos + 2:], old["k"][pos + 2:])
    ref = _sdpa(q, cache["k"][:pos + 2], cache["v"][:pos + 2], heads, kvh, hd, pos)
    np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-5)


def test_dense_attention():
    heads, kvh, hd, h, pos = 2, 1, 4, 8, 3
    wq, wk, wv, wo = r(heads * hd, h), r(kvh * hd, h), r(kvh * hd, h), r(h, heads * hd)
    cache = {"k": r(8, kvh * hd), "v": r(8, kvh * hd)}
    x = r(1, h)
    T = E("n", "h")
    fn = fn_of([("x", T)],
               f'%o = blueprint.attention %x weights ["q", "k", "v", "o"] {{effects = [#blueprint.effect<k:write>, '
               f'#blueprint.effect<v:write>, #blueprint.effect<k:read>, #blueprint.effect<v:read>]}} : {T} -> {T}',
               [("o", T)])
    past = {k: v[:pos].copy() for k, v in cache.items()}
    (o,) = run_blueprint(fn, {"q": wq, "k": wk, "v": wv, "o": wo}, cache, [x], dims=dict(head_dim=hd), pos=pos, rope_theta=1e4)
    q, k, v = _rope_ref(x @ wq.T, heads, hd, pos, 1e4), _rope_ref(x @ wk.T, kvh, hd, pos, 1e4), x @ wv.T
    np.testing.assert_allclose(cache["k"][pos], k[0], rtol=1e-5, atol=1e-5)
    ref = _sdpa(q, np.concatenate([past["k"], k]), np.concatenate([past["v"], v]), heads, kvh, hd, pos) @ wo.T
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)


def test_group_runs_its_body_and_yields():
    a, b, w = r(2, 8), r(2, 8), r(8)
    T = E("n", "h", "bf16")
    fn = fn_of([("a", T), ("b", T)],
               f'%y, %xn = blueprint.group "cross_layer_add_norm" on device {{\n'
               f"  %1 = blueprint.residual_add %a, %b : {T}, {T} -> {T}\n"
               f'  %2 = blueprint.rms_norm %1 weight "w" : {T} -> {T}\n'
               f"  blueprint.yield %1, %2 : {T}, {T}\n"
               f"}} : {T}, {T}",
               [("y", T), ("xn", T)])
    y, xn = run_blueprint(fn, {"w": w}, {}, [a, b])
    np.testing.assert_array_equal(y, a + b)
    np.testing.assert_allclose(xn, rmsn(a + b, w), rtol=1e-5, atol=1e-6)


def test_missing_weight_state_and_dim_are_named():
    x = r(1, 4)
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.linear %x weight "nope" role "q" : {E("n", "h")} -> {E("n", "o")}',
               [("y", E("n", "o"))])
    with pytest.raises(BlueprintRunError, match="no weight 'nope'"):
        run_blueprint(fn, {}, {}, [x])
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.l2_norm %x : {E("n", "h")} -> {E("n", "h")}', [("y", E("n", "h"))])
    with pytest.raises(BlueprintRunError, match="dim 'lin_k_heads'"):
        run_blueprint(fn, {}, {}, [x])


# ---------------------------------------------------------------------------------------------
# Precision emulation

FP8W = "#blueprint.format<fp8, block = [128, 128]>"
BF16F = "#blueprint.format<bf16>"
INT4W = "#blueprint.format<int4, block = [128], asymmetric>"


def bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _linear_fn(prec: str | None):
    attrs = f" {{precision = #blueprint.precision<{prec}>}}" if prec else ""
    return fn_of([("x", E("n", "h"))], f'%y = blueprint.linear %x weight "w" role "o"{attrs} : {E("n", "h")} -> {E("n", "o")}',
                 [("y", E("n", "o"))])


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_bf16_activation_and_output():
    x, w = r(4, 256), r(64, 256, scale=0.05)
    (y32,) = run_blueprint(_linear_fn(None), {"w": w}, {}, [x])
    (y,) = run_blueprint(_linear_fn(f"activation = {BF16F}, output = {BF16F}"), {"w": w}, {}, [x])
    np.testing.assert_array_equal(y, bf16(bf16(x) @ w.T))  # f32 accumulation of bf16 inputs, output rounded
    assert not np.array_equal(y, y32)
    assert np.all(np.abs(y - y32) <= 3 * BF16_REL * np.abs(x).max() * np.abs(w).sum(-1).max())
    np.testing.assert_array_equal(bf16(y), y)  # every output is a bf16 value
    # a weight-less node: rms_norm's output rounded to bf16, within half a bf16 step
    xn, wn = r(3, 64), r(64)
    fn = fn_of([("x", E("n", "h"))], f'%y = blueprint.rms_norm %x weight "w" {{precision = #blueprint.precision<output = {BF16F}>}} : '
               f'{E("n", "h")} -> {E("n", "h")}', [("y", E("n", "h"))])
    (yn,) = run_blueprint(fn, {"w": wn}, {}, [xn])
    ref = rmsn(xn, wn)
    assert not np.array_equal(yn, ref)
    assert np.all(np.abs(yn - ref) <= BF16_REL * np.abs(ref) + 1e-30)


def test_fp8_block_weights():
    x, w = r(4, 256), r(192, 256, scale=0.05)
    w[:128, :128] *= 10  # blocks of different scales
    (y32,) = run_blueprint(_linear_fn(None), {"w": w}, {}, [x])
    cache: dict = {}
    (y,) = run_blueprint(_linear_fn(f"weight = {FP8W}"), {"w": w}, {}, [x], cache=cache)
    wq = fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w))
    np.testing.assert_allclose(y, x @ wq.T, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(y, y32)
    # e4m3 rounds each weight within 2^-4 of itself (normal range); the output error is bounded by that
    assert np.all(np.abs(wq - w) <= 2.0 ** -4 * np.abs(w) + fp8.E4M3_MIN_NORMAL * 2.0 ** -3 * np.abs(w).max())
    bound = 2.0 ** -4 * (np.abs(x) @ np.abs(w).T) + 1e-3
    assert np.all(np.abs(y - y32) <= bound)
    rel = _rel(y, y32)
    assert 1e-4 < rel < 0.05, rel
    assert len(cache) == 1  # quantized once, per weight and format
    run_blueprint(_linear_fn(f"weight = {FP8W}"), {"w": w}, {}, [x], cache=cache)
    assert len(cache) == 1


def test_fp8_expert_weights_per_expert():
    ne, h, inter = 3, 16, 8
    gate_up = r(ne, 2 * inter, h)
    gate_up[1] *= 100  # an expert's scale does not leak into another's
    x, ids = r(1, h), np.array([[1, 2]], np.int32)
    prec = f" {{precision = #blueprint.precision<weight = {FP8W}>}}"
    fn = fn_of([("x", E("n", "h")), ("ids", E("n", "k", "i32"))],
               f'%gu = blueprint.expert_gate_up %x, %ids weight "gu"{prec} : {E("n", "h")}, {E("n", "k", "i32")} -> {E("n*k", "i2")}',
               [("gu", E("n*k", "i2"))])
    (gu,) = run_blueprint(fn, {"gu": gate_up}, {}, [x, ids])
    for j, e in enumerate([1, 2]):
        wq = fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(gate_up[e]))
        np.testing.assert_allclose(gu[j], wq @ x[0], rtol=1e-5, atol=1e-5)
        assert not np.allclose(gu[j], gate_up[e] @ x[0], rtol=1e-7, atol=0)


def test_int4_formula_is_onnx_runtimes():
    # Blocks of 16 (ORT's smallest), the rest of each block 0, which min(., 0) and max(., 0) include anyway.
    w = np.zeros((1, 16), np.float32)
    w[0, :4] = [-1.5, 0.5, 6.0, 13.5]
    q, scale, zp = quantize_int4_block(w, 16)
    # mn = -1.5, mx = 13.5, scale = 1, zp = roundf(1.5) = 2; q = roundf(x + 2) half away from
    # zero (0.5 -> 1, 2.5 -> 3), clamped to 15 (15.5 -> 16 -> 15)
    np.testing.assert_array_equal(scale, [[1.0]])
    assert zp.tolist() == [[2]]
    assert q[0, :4].tolist() == [1, 3, 8, 15]
    np.testing.assert_array_equal(dequantize_int4_block(q, scale, zp, 16)[0, :4], [-1.0, 1.0, 6.0, 13.0])
    assert roundf(np.array([0.5, -0.5, 1.5, 2.5, -2.5])).tolist() == [1, -1, 2, 3, -3]
    _assert_onnx_runtime_agrees(w, q, scale, zp)
    # all positive: mn is clamped to 0, so zp = 0; all zero: scale 0, dequantizes to 0
    w = np.zeros((2, 16), np.float32)
    w[0, :2] = [1.0, 3.0]
    q, scale, zp = quantize_int4_block(w, 16)
    assert zp.tolist() == [[0], [0]] and q[0, :2].tolist() == [5, 15] and not q[1].any()
    assert not dequantize_int4_block(q, scale, zp, 16)[1].any()
    _assert_onnx_runtime_agrees(w, q, scale, zp)


def _assert_onnx_runtime_agrees(w, q, scale, zp):
    """ORT's own quantizer writes the bytes ours pack to, and its MatMulNBits dequantizes them as ours does."""
    b, zpp = pack_int4(q, zp, 16)
    ort_b, ort_scale, ort_zp = ort_quantize_int4(w, 16)
    np.testing.assert_array_equal(b, ort_b)
    np.testing.assert_array_equal(scale, ort_scale)
    np.testing.assert_array_equal(zpp, ort_zp)
    np.testing.assert_array_equal(ort_dequantize_int4(b, scale, zpp, 16, w.shape[1]), dequantize_int4_block(q, scale, zp, 16))


def test_int4_weights():
    x, w = r(2, 256), r(32, 256, scale=0.05)
    (y32,) = run_blueprint(_linear_fn(None), {"w": w}, {}, [x])
    (y,) = run_blueprint(_linear_fn(f"weight = {INT4W}"), {"w": w}, {}, [x])
    q, scale, zp = quantize_int4_block(w, 128)
    wq = dequantize_int4_block(q, scale, zp, 128)
    assert np.all(np.abs(wq - w) <= np.repeat(scale, 128, -1) / 2 + 1e-7)  # half a step per weight
    np.testing.assert_allclose(y, x @ wq.T, rtol=1e-5, atol=1e-5)
    rel = _rel(y, y32)
    assert 1e-3 < rel < 0.3, rel


# ---------------------------------------------------------------------------------------------
# One decode step of a tiny Gated DeltaNet (linear attention) layer + MoE (tests/blueprint_step.py)


def _numpy_decode(W, state, tok):
    """The same step in plain numpy (HF's math, written out; none of the interpreter's code)."""
    eps = 1e-6
    h = W["embed"][tok]  # [H]
    xn = rmsn(h, W["ln1"], eps)
    qkvz, ba = W["qkvz"] @ xn, W["ba"] @ xn
    full = np.concatenate([state["conv"], qkvz[:C, None]], 1)  # [C, K]
    conv = silu((full * W["conv"][:, 0]).sum(1))
    state["conv"] = full[:, 1:]
    q, k, v = conv[:DK].reshape(HK, DK), conv[DK:2 * DK].reshape(HK, DK), conv[2 * DK:].reshape(HV, DV)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * DK ** -0.5
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q, k = np.repeat(q, HV // HK, 0), np.repeat(k, HV // HK, 0)
    beta = sigmoid(ba[:HV])
    gdec = W["A"] * np.log1p(np.exp(ba[HV:] + W["dt_bias"]))
    S = state["h"] * np.exp(gdec)[:, None, None]
    core = np.zeros((HV, DV), np.float32)
    for i in range(HV):
        u = (v[i] - S[i].T @ k[i]) * beta[i]
        S[i] = S[i] + np.outer(k[i], u)
        core[i] = S[i].T @ q[i]
    state["h"] = S
    z = qkvz[C:].reshape(HV, DV)
    gn = (rmsn(core, W["gnorm"], eps) * silu(z)).reshape(-1)
    y = h + W["out"] @ gn
    yn = rmsn(y, W["ln2"], eps)
    p = np.exp(W["router"] @ yn - (W["router"] @ yn).max())
    p /= p.sum()
    top = np.argsort(-p, kind="stable")[:TOPK]
    wts = p[top] / p[top].sum()
    moe = np.zeros(HID, np.float32)
    for wt, e in zip(wts, top):
        gu = W["gate_up"][e] @ yn
        moe += wt * (W["down"][e] @ (silu(gu[:INTER]) * gu[INTER:]))
    sgu = W["sh_gate_up"] @ yn
    moe += sigmoid(W["sh_gate"] @ yn) * (W["sh_down"] @ (silu(sgu[:INTER]) * sgu[INTER:]))
    logits = W["lm_head"] @ rmsn(y + moe, W["norm"], eps)
    return logits


def test_decode_step_f32_equals_numpy():
    W, tok = _tiny_weights(), np.array([[7]], np.int32)
    state, ref_state = _tiny_state(), _tiny_state()
    nxt, lg = run_blueprint(_decode_fn(None), W, state, [tok], dims=DIMS)
    ref = _numpy_decode({k: v.astype(np.float64) for k, v in W.items()}, {k: v.astype(np.float64) for k, v in ref_state.items()}, 7)
    np.testing.assert_allclose(lg[0], ref, rtol=1e-4, atol=1e-5)
    assert nxt[0, 0] == int(np.argmax(ref))
    ref_state64 = {k: v.astype(np.float64) for k, v in _tiny_state().items()}
    _numpy_decode({k: v.astype(np.float64) for k, v in W.items()}, ref_state64, 7)
    np.testing.assert_allclose(state["conv"], ref_state64["conv"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["h"], ref_state64["h"], rtol=1e-4, atol=1e-5)


QUANTIZED = ("qkvz", "ba", "out", "gate_up", "down", "sh_gate_up", "sh_down", "lm_head")


def test_decode_step_fp8_weights():
    W, tok = _tiny_weights(), np.array([[7]], np.int32)
    _, lg32 = run_blueprint(_decode_fn(None), W, _tiny_state(), [tok], dims=DIMS)
    _, lg8 = run_blueprint(_decode_fn(FP8W), W, _tiny_state(), [tok], dims=DIMS)
    # the fp8 run is the f32 math on the dequantized weights ...
    Wq = dict(W)
    for name in QUANTIZED:
        w = W[name]
        Wq[name] = (np.stack([fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(m)) for m in w]) if w.ndim == 3
                    else fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w)))
    ref8 = _numpy_decode({k: v.astype(np.float64) for k, v in Wq.items()},
                         {k: v.astype(np.float64) for k, v in _tiny_state().items()}, 7)
    np.testing.assert_allclose(lg8[0], ref8, rtol=1e-4, atol=1e-5)
    # ... and differs from f32 by fp8's quantization error (3-bit mantissa: a few percent at most)
    rel = _rel(lg8, lg32)
    assert 1e-3 < rel < 0.1, rel
    rel_w = max(_rel(Wq[n], W[n]) for n in QUANTIZED)
    assert rel_w <= 2.0 ** -4
