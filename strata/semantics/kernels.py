"""Reference semantics of the op-level ops: one pure-numpy function per op.

These functions are the CPU target's kernels as well as the semantics: the CPU code
generator copies their source (``inspect.getsource``) into standalone generated
modules. Hence the rules of this file:

* import only ``numpy`` and ``ml_dtypes``, never strata;
* every function is self-contained: the only globals it may use are ``np``,
  ``ml_dtypes`` and the other top-level functions of this file (a copier reads which
  from the function's syntax tree and emits those too);
* no module-level constants.

Numerics: all float compute is done in float32; f16 and bf16 inputs are upcast
first (bf16 arrays carry ml_dtypes' dtype, whose casts numpy knows). Layout ops
(reshape, view, permute, transpose, cont) keep the element type, as ggml's do.
Shapes are row-major (see ``strata.dialects.op``).
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy; generated modules import it too)
import numpy as np

def get_rows(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """GET_ROWS: rows `ids` [N] of `table` [R, C] -> [N, C] float32."""
    # Gather first, then upcast: only N rows of a (possibly huge, bf16) table are converted.
    return np.asarray(table[np.asarray(ids, dtype=np.int64)], dtype=np.float32)


def rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """RMS_NORM over the last dim: x / sqrt(mean(x^2) + eps), float32."""
    x = np.asarray(x, dtype=np.float32)
    # einsum computes the row sums of squares without a temporary x*x array.
    ms = np.einsum("...i,...i->...", x, x)[..., None] / np.float32(x.shape[-1])
    return x / np.sqrt(ms + np.float32(eps))


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MUL: a * b with b broadcast (ggml repeat) to a's shape, float32."""
    return _ggml_repeat_binary(np.multiply, a, b)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ADD: a + b with b broadcast (ggml repeat) to a's shape, float32."""
    return _ggml_repeat_binary(np.add, a, b)


def _ggml_repeat_binary(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ufunc(a, b) where b *tiles* a (ggml_repeat), which numpy broadcasting only
    covers when each dim of b is 1 or a's. Tiling b explicitly handles the rest."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if b.ndim < a.ndim:
        b = b.reshape((1,) * (a.ndim - b.ndim) + b.shape)
    if any(db not in (1, da) for da, db in zip(a.shape, b.shape)):
        b = np.tile(b, [da // db for da, db in zip(a.shape, b.shape)])
    return ufunc(a, b)


def mul_mat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MUL_MAT: b @ a^T over the last two dims -> [..., N, M] float32.

    a is [..., M, K], b is [..., N, K]. a's leading dims repeat over b's as in ggml:
    b's dim i is r_i times a's, and b slice j uses a slice j // r_i (consecutive b
    slices share an a slice, as GQA query heads share a KV head).
    """
    a = np.asarray(a, dtype=np.float32)  # no copy when a is already float32 (weights)
    b = np.asarray(b, dtype=np.float32)
    if a.ndim == 2:
        if b.ndim == 2 and b.shape[0] > 1:
            # OpenBLAS runs W @ X^T (weight not transposed) faster than X @ W^T for a batch
            # of rows. The result stays column-major: numpy ops take any layout, and a
            # following mul_mat reads it as X^T without a copy.
            return (a @ b.T).T
        return b @ a.T
    lead_a = (1,) * (b.ndim - a.ndim) + a.shape[:-2]
    lead_b = b.shape[:-2]
    # Split each of b's leading dims into (a_i, r_i) and give a a size-1 axis for r_i,
    # so that numpy broadcasting does the sharing without repeating a.
    b_split: list[int] = []
    a_split: list[int] = []
    for da, db in zip(lead_a, lead_b):
        b_split += [da, db // da]
        a_split += [da, 1]
    a5 = a.reshape(tuple(a_split) + a.shape[-2:])
    b5 = b.reshape(tuple(b_split) + b.shape[-2:])
    out = np.matmul(b5, np.swapaxes(a5, -1, -2))
    return out.reshape(lead_b + (b.shape[-2], a.shape[-2]))


def reshape(x: np.ndarray, shape) -> np.ndarray:
    """RESHAPE: same elements in row-major order, new shape (may contain one -1)."""
    return np.reshape(x, tuple(shape))


def view(x: np.ndarray, shape, offset: int, strides=None) -> np.ndarray:
    """VIEW: a window of x's contiguous storage `offset` elements in, row-major with
    `shape` (one -1 takes the rest of the storage), or with element `strides`.

    The result aliases x (a state buffer viewed after a SET_ROWS sees the write).
    """
    flat = np.reshape(x, -1)  # x is contiguous, so this is a view
    shape = tuple(int(d) for d in shape)
    if strides is None:
        if -1 in shape:
            known = 1
            for d in shape:
                known *= d if d != -1 else 1
            n = (flat.size - offset) // known
            shape = tuple(n if d == -1 else d for d in shape)
        count = 1
        for d in shape:
            count *= d
        return flat[offset:offset + count].reshape(shape)
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[offset:], shape=shape, strides=tuple(int(s) * item for s in strides), writeable=False)


def permute(x: np.ndarray, dims) -> np.ndarray:
    """PERMUTE: result dim i is x's dim dims[i] (a view)."""
    return np.transpose(x, tuple(dims))


def transpose(x: np.ndarray) -> np.ndarray:
    """TRANSPOSE: swap the last two dims (a view)."""
    return np.swapaxes(x, -1, -2)


def cont(x: np.ndarray, shape) -> np.ndarray:
    """CONT: a contiguous copy of x, reshaped to `shape`."""
    return np.ascontiguousarray(x).reshape(tuple(shape))


def scale(x: np.ndarray, s: float) -> np.ndarray:
    """SCALE: x * s, float32."""
    return np.asarray(x, dtype=np.float32) * np.float32(s)


def cpy(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """CPY: write src's elements into dst's storage (same count), converting the
    element type; returns dst."""
    flat = np.reshape(dst, -1)
    if not np.shares_memory(flat, dst):
        raise ValueError("cpy: the destination must be contiguous")
    flat[...] = np.reshape(src, -1).astype(dst.dtype)
    return dst


def argmax(x: np.ndarray) -> np.ndarray:
    """ARGMAX over the last dim, int32."""
    return np.argmax(x, axis=-1).astype(np.int32)


def swiglu(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """SWIGLU: silu(g) * u, float32."""
    g = np.asarray(g, dtype=np.float32)
    u = np.asarray(u, dtype=np.float32)
    # silu(g) = g / (1 + exp(-g)); for g < -88 exp overflows to inf and the quotient is
    # the correct -0, so the overflow warning is silenced. In place: one temporary.
    d = np.negative(g)
    with np.errstate(over="ignore"):
        np.exp(d, out=d)
    d += np.float32(1.0)
    np.divide(g, d, out=d)
    d *= u
    return d


def set_rows(dst: np.ndarray, src: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """SET_ROWS: dst[rows] = src (converted to dst's type), in place; returns dst."""
    dst[np.asarray(rows, dtype=np.int64)] = np.asarray(src).astype(dst.dtype)
    return dst


def soft_max(x: np.ndarray, mask, scale: float) -> np.ndarray:
    """SOFT_MAX: softmax(x * scale + mask) over the last dim, float32; the mask
    (or None) broadcasts over x's leading dims."""
    z = np.multiply(x, np.float32(scale), dtype=np.float32)
    if mask is not None:
        z += np.asarray(mask, dtype=np.float32)
    z -= np.max(z, axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= np.sum(z, axis=-1, keepdims=True)
    return z


def rope(x: np.ndarray, pos: np.ndarray, n_dims: int, mode: str, freq_base: float,
         freq_scale: float, freq_factors=None) -> np.ndarray:
    """ROPE of x [S, Heads, D] at positions pos [S], float32.

    Pair i (i < n_dims/2) is rotated by pos * freq_scale * freq_base^(-2i/n_dims)
    / freq_factors[i]. "neox" pairs dims (i, i + n_dims/2) (HF rotate_half); "norm"
    pairs (2i, 2i+1) (GGUF llama). Dims from n_dims on pass through.
    """
    x = np.asarray(x, dtype=np.float32)
    half = n_dims // 2
    # Angles in float64, then cos/sin rounded to float32: as exact as a float32 table gets.
    inv = float(freq_base) ** (-np.arange(half, dtype=np.float64) * 2.0 / n_dims)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * (float(freq_scale) * inv)[None, :]
    cos = np.cos(theta).astype(np.float32)[:, None, :]  # [S, 1, half]: broadcast over heads
    sin = np.sin(theta).astype(np.float32)[:, None, :]
    out = np.empty_like(x)
    out[..., n_dims:] = x[..., n_dims:]  # usually empty: n_dims == D
    if mode == "neox":
        first, second = np.s_[..., :half], np.s_[..., half:n_dims]
    elif mode == "norm":
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    else:
        raise ValueError(f"rope: unknown mode {mode!r}")
    x0, x1, o0, o1 = x[first], x[second], out[first], out[second]
    # Written into `out` in place: two temporaries instead of six.
    np.multiply(x0, cos, out=o0)
    o0 -= x1 * sin
    np.multiply(x0, sin, out=o1)
    o1 += x1 * cos
    return out


def flash_attn_ext(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask, scale: float) -> np.ndarray:
    """FLASH_ATTN_EXT: softmax(q k^T * scale + mask) v -> [S, Hq, Dv] float32.

    q [Hq, S, D], k [Hkv, N, D], v [Hkv, N, Dv], mask [S, N] or None; query head h
    uses KV head h // (Hq // Hkv).
    """
    if mask is not None:
        # Like a flash kernel skipping fully masked blocks: drop the trailing cache rows
        # no query sees (rows not written yet). One column stays, so that a row masked
        # everywhere still gives softmax's NaN.
        mask = np.asarray(mask, dtype=np.float32)
        live = np.flatnonzero(~np.all(np.isneginf(mask), axis=0))
        n = max(int(live[-1]) + 1 if live.size else 0, 1)
        mask, k, v = mask[:, :n], k[:, :n], v[:, :n]
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    group = hq // hkv
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    # Stack the `group` query heads of each KV head as rows of one matrix: one batched
    # matmul per KV head, no repeated K/V.
    qg = q.reshape(hkv, group * s, d)
    kq = np.matmul(qg, np.swapaxes(k, -1, -2)).reshape(hkv, group, s, n)
    p = soft_max(kq, mask, scale)
    out = np.matmul(p.reshape(hkv, group * s, n), v).reshape(hq, s, dv)
    return np.ascontiguousarray(out.transpose(1, 0, 2))


def host_input(kind: str, tokens: np.ndarray, start: int, n_kv: int) -> np.ndarray:
    """The host-prepared input `kind` for a call on `tokens` [S] at position `start`.

    tokens: the ids (int32); positions: start + i (int32); kv_rows: the cache rows
    written, start + i (int64); kq_mask [S, n_kv] float32: 0 where cache row
    j <= start + i, else -inf (causal, and hides rows not yet written); out_ids: the
    row whose logits are returned, [S - 1] (int32).
    """
    tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
    s = tokens.shape[0]
    if kind == "tokens":
        return tokens
    if kind == "positions":
        return (start + np.arange(s)).astype(np.int32)
    if kind == "kv_rows":
        return (start + np.arange(s)).astype(np.int64)
    if kind == "kq_mask":
        visible = np.arange(n_kv)[None, :] <= (start + np.arange(s))[:, None]
        return np.where(visible, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
    if kind == "out_ids":
        return np.array([s - 1], dtype=np.int32)
    raise ValueError(f"host_input: unknown kind {kind!r}")
