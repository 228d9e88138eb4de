"""The op-level numpy kernels (strata.semantics.kernels) against independent torch code."""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from strata.semantics import kernels as K
from strata.semantics import kernels_ggml as KG
from strata.targets.cpu.kernel_library import CPU_KERNEL_MODULES, KernelLibrary

#: The files the CPU target copies functions from (kernels_seq, kernels_ggml, host_inputs and the sampler beside kernels).
KERNEL_FILES = CPU_KERNEL_MODULES

BF16 = ml_dtypes.bfloat16


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape: int, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def t(x: np.ndarray) -> torch.Tensor:
    """A float32 torch tensor of x (bf16 arrays go through float32 exactly)."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=np.float32)))


def close(got: np.ndarray, want: torch.Tensor | np.ndarray, atol: float = 1e-5) -> None:
    want = want.numpy() if isinstance(want, torch.Tensor) else want
    assert got.dtype == np.float32, got.dtype
    assert got.shape == tuple(want.shape), (got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)


# ---------------------------------------------------------------------------
# The rules that let the code generator copy kernels


@pytest.mark.parametrize("module", KERNEL_FILES, ids=lambda m: m.__name__)
def test_kernels_import_only_numpy_and_ml_dtypes(module) -> None:
    """numpy, ml_dtypes, and functions of the other kernel files (which the copier resolves); the
    native kernels' binding and its callers (the cpu target's) also ctypes and os, imported in
    the functions that need them."""
    tree = ast.parse(inspect.getsource(module))
    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    kernel_modules = {m.__name__ for m in KERNEL_FILES}
    native = {"ctypes", "os"} if module.__name__.startswith("strata.targets.cpu.") else set()
    assert {i.split(".")[0] if i not in kernel_modules else "kernels" for i in imported} <= {
        "numpy", "ml_dtypes", "__future__", "kernels"} | native, imported
    assert not [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.ClassDef))], \
        "module-level names other than functions"


def _kernel_functions() -> dict:
    """Every function the CPU target may copy (the sampler's too: it is copied as they are)."""
    return {n: f for m in CPU_KERNEL_MODULES for n, f in vars(m).items() if inspect.isfunction(f) and f.__module__ == m.__name__}


def test_dependencies_are_complete_and_exact() -> None:
    every = _kernel_functions()
    functions = set(every)
    deps = KernelLibrary().dependencies
    assert set(deps) == functions
    for name in functions:
        fn = every[name]
        # Free names of the source (attribute names such as `x.reshape` are not names).
        nodes = list(ast.walk(ast.parse(inspect.getsource(fn))))
        loads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
        bound |= {(a.asname or a.name).split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
        free = loads - bound - set(dir(builtins))
        assert free - functions <= {"np", "ml_dtypes"}, (name, free)
        assert sorted(free & functions - {name}) == deps[name], name


def _copied(name: str) -> dict:
    """Exec `name` and its dependencies' source in a namespace holding only np and ml_dtypes."""
    ns: dict = {"np": np, "ml_dtypes": ml_dtypes}
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            exec(compile(inspect.getsource(_kernel_functions()[n]), n, "exec"), ns)  # noqa: S102
            todo += KernelLibrary().dependencies[n]
    return ns


def test_copied_source_runs_standalone() -> None:
    q, k, v = randn(4, 3, 8, seed=1), randn(2, 5, 8, seed=2), randn(2, 5, 8, seed=3)
    mask = K.host_input("kq_mask", np.arange(3), 2, 5)
    ns = _copied("flash_attn_ext")
    np.testing.assert_array_equal(ns["flash_attn_ext"](q, k, v, mask, 0.3), K.flash_attn_ext(q, k, v, mask, 0.3))
    x = randn(5, 16)
    np.testing.assert_array_equal(_copied("mul")["mul"](x, x[0]), K.mul(x, x[0]))
    w, x = randn(8, 256, seed=4), randn(3, 256, seed=5)
    got = _copied("mul_mat_quantized")["mul_mat_quantized"](w, x, "q8_K", (2, 2, 64))
    np.testing.assert_array_equal(got, KG.mul_mat_quantized(w, x, "q8_K", (2, 2, 64)))


# ---------------------------------------------------------------------------
# Element-wise and normalization


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_get_rows(dtype) -> None:
    table = randn(32, 16, dtype=dtype)
    ids = np.array([3, 0, 31, 3], dtype=np.int32)
    close(K.get_rows(table, ids), F.embedding(torch.from_numpy(ids).long(), t(table)), atol=0)


@pytest.mark.parametrize("shape", [(5, 16), (5, 4, 8)])
def test_rms_norm(shape) -> None:
    x = randn(*shape) * 3
    close(K.rms_norm(x, 1e-5), F.rms_norm(t(x), (shape[-1],), eps=1e-5))
    close(K.rms_norm(x.astype(BF16), 1e-6), F.rms_norm(t(x.astype(BF16)), (shape[-1],), eps=1e-6))


@pytest.mark.parametrize("a_shape, b_shape", [((5, 16), (16,)), ((5, 4, 8), (8,)), ((5, 16), (5, 16)),
                                               ((6, 4), (2, 4)), ((6, 4, 3), (1, 2, 3))])
def test_mul_add_repeat(a_shape, b_shape) -> None:
    a, b = randn(*a_shape, seed=1), randn(*b_shape, seed=2)
    tb = t(b).reshape((1,) * (len(a_shape) - len(b_shape)) + b_shape)
    reps = [da // db for da, db in zip(a_shape, tb.shape)]
    tiled = tb.repeat(*reps)  # ggml_repeat tiles
    close(K.mul(a, b), t(a) * tiled)
    close(K.add(a, b), t(a) + tiled)
    close(K.mul(a, b.astype(BF16)), t(a) * tiled.to(torch.bfloat16).float())


def test_scale_swiglu_argmax() -> None:
    x = randn(5, 40) * 4
    close(K.scale(x, 0.125), t(x) * 0.125)
    g, u = randn(5, 40, seed=1) * 4, randn(5, 40, seed=2)
    g[0, :4] = [-1000.0, -90.0, 90.0, 1000.0]  # exp overflows in a naive silu
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = K.swiglu(g, u)
    close(got, F.silu(t(g)) * t(u))
    close(K.swiglu(g.astype(BF16), u), F.silu(t(g.astype(BF16))) * t(u))
    am = K.argmax(x)
    assert am.dtype == np.int32
    np.testing.assert_array_equal(am, torch.argmax(t(x), dim=-1).numpy())


@pytest.mark.parametrize("with_mask", [True, False])
def test_soft_max(with_mask: bool) -> None:
    x = randn(4, 5, 8) * 3
    mask = K.host_input("kq_mask", np.arange(5), 3, 8) if with_mask else None
    want = t(x) * 0.5 + (t(mask) if with_mask else 0)
    close(K.soft_max(x, mask, 0.5), torch.softmax(want, dim=-1))


# ---------------------------------------------------------------------------
# Matrix products


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_mul_mat_weight(dtype) -> None:
    w, x = randn(24, 16, seed=1, dtype=dtype), randn(5, 16, seed=2)
    close(K.mul_mat(w, x), F.linear(t(x), t(w)), atol=1e-4)
    # a weight over a batched operand (rank a < rank b)
    x3 = randn(3, 5, 16, seed=3)
    close(K.mul_mat(w, x3), F.linear(t(x3), t(w)), atol=1e-4)


def test_mul_mat_weight_is_not_copied() -> None:
    w = randn(24, 16)
    w.flags.writeable = False  # like a memory-mapped weight
    assert np.shares_memory(np.asarray(w, dtype=np.float32), w)
    close(K.mul_mat(w, randn(2, 16)), F.linear(t(randn(2, 16)), t(w.copy())))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 7, 8), (4, 5, 8)),  # GQA: 2 query heads per KV head
                                               ((4, 7, 8), (4, 5, 8)),
                                               ((2, 1, 7, 8), (2, 3, 5, 8)),
                                               ((1, 7, 8), (3, 5, 8))])
def test_mul_mat_batched_broadcast(a_shape, b_shape) -> None:
    a, b = randn(*a_shape, seed=1), randn(*b_shape, seed=2)
    ta = t(a)
    for i, (da, db) in enumerate(zip(a_shape[:-2], b_shape[:-2])):
        ta = ta.repeat_interleave(db // da, dim=i)  # consecutive b slices share an a slice
    close(K.mul_mat(a, b), t(b) @ ta.transpose(-1, -2), atol=1e-5)
    # a permuted (non-contiguous) bf16 operand, as a KV-cache view is
    cache = randn(a_shape[-2], *a_shape[:-2], a_shape[-1], seed=3, dtype=BF16)
    perm = list(range(1, len(a_shape) - 1)) + [0, len(a_shape) - 1]
    view = cache.transpose(perm)
    ta = t(np.ascontiguousarray(view))
    for i, (da, db) in enumerate(zip(a_shape[:-2], b_shape[:-2])):
        ta = ta.repeat_interleave(db // da, dim=i)
    close(K.mul_mat(view, b), t(b) @ ta.transpose(-1, -2), atol=1e-5)


# ---------------------------------------------------------------------------
# Layout


def test_layout_ops() -> None:
    x = randn(5, 64)
    tx = t(x)
    np.testing.assert_array_equal(K.reshape(x, (5, 4, 16)), tx.reshape(5, 4, 16).numpy())
    np.testing.assert_array_equal(K.reshape(x, (-1, 4, 16)), tx.reshape(-1, 4, 16).numpy())
    np.testing.assert_array_equal(K.view(x, (4, 2, 8), 16), tx.flatten()[16:80].reshape(4, 2, 8).numpy())
    np.testing.assert_array_equal(K.view(x, (-1, 16), 64), tx.flatten()[64:].reshape(-1, 16).numpy())
    strided = torch.as_strided(tx, (3, 4), (64, 2), 1)
    np.testing.assert_array_equal(K.view(x, (3, 4), 1, [64, 2]), strided.numpy())
    x3 = x.reshape(5, 4, 16)
    p = K.permute(x3, (1, 0, 2))
    np.testing.assert_array_equal(p, t(x3).permute(1, 0, 2).numpy())
    np.testing.assert_array_equal(K.transpose(p), t(x3).permute(1, 2, 0).numpy())
    c = K.cont(K.permute(x3, (1, 0, 2)), (4, 80))
    assert c.flags.c_contiguous
    np.testing.assert_array_equal(c, t(x3).permute(1, 0, 2).contiguous().reshape(4, 80).numpy())
    bf = x.astype(BF16)
    assert K.view(bf, (64, 5), 0).dtype == BF16 and K.cont(K.transpose(bf), (64, 5)).dtype == BF16


def test_view_aliases_state_and_set_rows_writes_in_place() -> None:
    cache = np.zeros((16, 8), dtype=BF16)
    window = K.view(cache, (4, 2, 4), 0)
    src = randn(3, 8)
    out = K.set_rows(cache, src, np.array([5, 1, 2], dtype=np.int64))
    assert out is cache
    want = torch.zeros(16, 8, dtype=torch.bfloat16)
    want[torch.tensor([5, 1, 2])] = t(src).to(torch.bfloat16)
    np.testing.assert_array_equal(cache.astype(np.float32), want.float().numpy())
    np.testing.assert_array_equal(window.reshape(4, 8).astype(np.float32), want[:4].float().numpy())


def test_cpy_converts_into_destination() -> None:
    src = randn(5, 16)
    dst = np.zeros(80, dtype=BF16)
    out = K.cpy(src, dst)
    assert out is dst
    np.testing.assert_array_equal(dst.astype(np.float32), t(src).to(torch.bfloat16).float().flatten().numpy())


# ---------------------------------------------------------------------------
# Rope and attention


def rope_reference(x: torch.Tensor, pos: torch.Tensor, n_dims: int, mode: str, base: float,
                   scale: float, factors: torch.Tensor | None) -> torch.Tensor:
    """Rope by explicit pair loops in float64: neox pairs (i, i + n/2), norm pairs (2i, 2i+1)."""
    x = x.double()
    out = x.clone()
    for i in range(n_dims // 2):
        theta = pos.double() * scale * base ** (-2.0 * i / n_dims)
        if factors is not None:
            theta = theta / float(factors[i])
        c, s = torch.cos(theta)[:, None], torch.sin(theta)[:, None]
        a, b = (i, i + n_dims // 2) if mode == "neox" else (2 * i, 2 * i + 1)
        out[:, :, a] = x[:, :, a] * c - x[:, :, b] * s
        out[:, :, b] = x[:, :, a] * s + x[:, :, b] * c
    return out.float()


@pytest.mark.parametrize("mode", ["neox", "norm"])
@pytest.mark.parametrize("n_dims, factors, scale", [(16, False, 1.0), (16, True, 1.0), (8, False, 0.25)])
def test_rope(mode: str, n_dims: int, factors: bool, scale: float) -> None:
    x = randn(6, 3, 16)
    pos = np.array([0, 1, 2, 7, 40, 1000], dtype=np.int32)
    ff = np.linspace(1.0, 8.0, n_dims // 2).astype(np.float32) if factors else None
    got = K.rope(x, pos, n_dims, mode, 10000.0, scale, ff)
    want = rope_reference(t(x), torch.from_numpy(pos), n_dims, mode, 10000.0, scale,
                          torch.from_numpy(ff) if factors else None)
    close(got, want, atol=2e-5)


def test_rope_neox_is_hf_rotate_half() -> None:
    x = randn(5, 2, 8)
    pos = np.arange(5, dtype=np.int32) + 3
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2).float() / 8))
    freqs = torch.from_numpy(pos).float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)[:, None, :]
    tx = t(x)
    rot = torch.cat([-tx[..., 4:], tx[..., :4]], -1)
    close(K.rope(x, pos, 8, "neox", 10000.0, 1.0), tx * emb.cos() + rot * emb.sin(), atol=1e-5)
    close(K.rope(x.astype(BF16), pos, 8, "neox", 10000.0, 1.0),
          K.rope(x.astype(BF16).astype(np.float32), pos, 8, "neox", 10000.0, 1.0), atol=0)


@pytest.mark.parametrize("hq, hkv", [(4, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize("kv_dtype", [np.float32, BF16])
def test_flash_attn_ext(hq: int, hkv: int, kv_dtype) -> None:
    s, n, d = 3, 9, 8
    q = randn(hq, s, d, seed=1)
    k, v = randn(hkv, n, d, seed=2, dtype=kv_dtype), randn(hkv, n, d, seed=3, dtype=kv_dtype)
    mask = K.host_input("kq_mask", np.arange(s), 4, n)  # rows 7, 8 not visible yet
    scale = 1 / math.sqrt(d)
    got = K.flash_attn_ext(q, k, v, mask, scale)
    want = F.scaled_dot_product_attention(t(q)[None], t(k)[None], t(v)[None], attn_mask=t(mask),
                                          scale=scale, enable_gqa=True)[0]
    close(got, want.permute(1, 0, 2), atol=1e-5)
    # explicit loop: head h reads KV head h // (hq // hkv)
    for h in range(hq):
        kh, vh = t(k)[h // (hq // hkv)], t(v)[h // (hq // hkv)]
        p = torch.softmax(t(q)[h] @ kh.T * scale + t(mask), -1)
        close(got[:, h], p @ vh, atol=1e-5)
    close(K.flash_attn_ext(q, k, v, None, scale),
          F.scaled_dot_product_attention(t(q)[None], t(k)[None], t(v)[None], scale=scale,
                                         enable_gqa=True)[0].permute(1, 0, 2), atol=1e-5)


def test_flash_attn_ext_skips_only_trailing_masked_rows() -> None:
    """Rows hidden from every query are skipped only at the end; a hidden row in the middle
    still counts as a column of -inf, and a row hidden everywhere gives NaN as softmax does."""
    q, k, v = randn(2, 3, 8, seed=1), randn(1, 6, 8, seed=2), randn(1, 6, 8, seed=3)
    mask = np.zeros((3, 6), np.float32)
    mask[:, 2] = -np.inf  # hidden from all, but row 5 after it is visible
    mask[:, 5] = -np.inf
    mask[1, :] = -np.inf  # query 1 sees nothing
    with np.errstate(invalid="ignore"):  # the row that sees nothing: -inf - -inf
        got = K.flash_attn_ext(q, k, v, mask, 0.5)
    for h in range(2):
        p = torch.softmax(t(q)[h] @ t(k)[0].T * 0.5 + t(mask), -1)
        close(np.nan_to_num(got[:, h], nan=7.0), torch.nan_to_num(p @ t(v)[0], nan=7.0), atol=1e-5)
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()


def test_host_inputs() -> None:
    toks = np.array([5, 9, 2])
    assert K.host_input("tokens", toks, 4, 8).dtype == np.int32
    pos = K.host_input("positions", toks, 4, 8)
    assert pos.dtype == np.int32 and pos.tolist() == [4, 5, 6]
    rows = K.host_input("kv_rows", toks, 4, 8)
    assert rows.dtype == np.int64 and rows.tolist() == [4, 5, 6]
    out = K.host_input("out_ids", toks, 4, 8)
    assert out.dtype == np.int32 and out.tolist() == [2]
    mask = K.host_input("kq_mask", toks, 4, 8)
    want = torch.where(torch.arange(8)[None] <= (4 + torch.arange(3))[:, None], 0.0, float("-inf"))
    assert mask.dtype == np.float32
    np.testing.assert_array_equal(mask, want.numpy())
    with pytest.raises(ValueError, match="unknown kind"):
        K.host_input("bogus", toks, 0, 8)
