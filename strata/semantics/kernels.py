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
    """GET_ROWS: rows `ids` [N] of `table` [R, C] -> [N, C] float32; with batch dims,
    table [B..., R, C] and ids [B..., N] -> [B..., N, C], batch b gathering from table[b].
    A negative id gives a row of zeros."""
    ids = np.asarray(ids, dtype=np.int64)
    missing = ids < 0
    if missing.any():
        out = get_rows(table, np.where(missing, 0, ids))
        out[missing] = 0
        return out
    # Gather first, then upcast: only N rows of a (possibly huge, bf16) table are converted.
    if table.ndim == 2:
        return np.asarray(table[ids], dtype=np.float32)
    batch = np.indices(ids.shape, sparse=True)[:-1]  # one broadcasting index per batch dim
    return np.asarray(table[(*batch, ids)], dtype=np.float32)


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


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """DIV: a / b with b broadcast (ggml repeat) to a's shape, float32 (x/0 is inf or NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _ggml_repeat_binary(np.divide, a, b)


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


def mul_mat_id(experts: np.ndarray, b: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """MUL_MAT_ID: result[t, j] = experts[ids[t, j]] @ b[t, j % Nb] -> [T, U, M] float32.

    experts [E, M, K] (weights stored [out, in]), b [T, Nb, K], ids [T, U]. The rows are
    grouped by expert and each routed expert multiplies its rows at once: only the routed
    experts are read (and upcast), never all E.
    """
    ids = np.asarray(ids, dtype=np.int64)
    t, u = ids.shape
    n_b = b.shape[1]
    m = experts.shape[1]
    out = np.empty((t * u, m), dtype=np.float32)
    if ids.size == 0:
        return out.reshape(t, u, m)
    flat = ids.reshape(-1)
    if flat.min() < 0 or flat.max() >= experts.shape[0]:
        raise ValueError(f"mul_mat_id: expert ids must be in [0, {experts.shape[0]}), got {flat.min()}..{flat.max()}")
    # Slot r = t * U + j reads row (t, j % Nb) of b. Sort the slots by expert (stably).
    order = np.argsort(flat, kind="stable")
    rows = np.asarray(b, dtype=np.float32)[order // u, (order % u) % n_b]  # [T*U, K], grouped
    sorted_ids = flat[order]
    cuts = np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [flat.size]))
    for s0, s1 in zip(starts.tolist(), ends.tolist()):
        out[order[s0:s1]] = mul_mat(experts[sorted_ids[s0]], rows[s0:s1])
    return out.reshape(t, u, m)


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


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """CLAMP: MAX(MIN(x, hi), lo) with ggml's comparisons (a NaN becomes hi), float32."""
    x = np.asarray(x, dtype=np.float32)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    y = np.where(x < hi32, x, hi32)
    return np.where(y > lo32, y, lo32).astype(np.float32, copy=False)


def silu(x: np.ndarray) -> np.ndarray:
    """SILU: x / (1 + exp(-x)), float32 (exp's overflow for x < -88 gives the correct -0)."""
    x = np.asarray(x, dtype=np.float32)
    d = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(d, out=d)
    d += np.float32(1.0)
    np.divide(x, d, out=d)
    return d


def sigmoid(x: np.ndarray) -> np.ndarray:
    """SIGMOID: 1 / (1 + exp(-x)), float32."""
    d = np.negative(np.asarray(x, dtype=np.float32))
    with np.errstate(over="ignore"):
        np.exp(d, out=d)
    d += np.float32(1.0)
    np.reciprocal(d, out=d)
    return d


def softplus(x: np.ndarray) -> np.ndarray:
    """SOFTPLUS as ggml: x where x > 20, else log(1 + exp(x)), float32."""
    x = np.asarray(x, dtype=np.float32)
    y = np.exp(np.minimum(x, np.float32(20.0)))  # no overflow: the large ones are x itself
    y += np.float32(1.0)
    np.log(y, out=y)
    return np.where(x > np.float32(20.0), x, y)


def sum_rows(x: np.ndarray) -> np.ndarray:
    """SUM_ROWS: the sum over the last dim, kept as a dim of 1: [..., C] -> [..., 1] float32."""
    return np.sum(np.asarray(x, dtype=np.float32), axis=-1, keepdims=True, dtype=np.float32)


def argsort(x: np.ndarray, order: str) -> np.ndarray:
    """ARGSORT over the last dim, int32: "desc" largest first, "asc" smallest first; equal
    values keep their index order (a stable sort)."""
    x = np.asarray(x, dtype=np.float32)
    if order == "desc":
        x = np.negative(x)
    elif order != "asc":
        raise ValueError(f"argsort: unknown order {order!r}")
    return np.argsort(x, axis=-1, kind="stable").astype(np.int32)


def repeat(x: np.ndarray, shape) -> np.ndarray:
    """REPEAT: tile x to `shape` (dims aligned from the last; -1 keeps x's dim), keeping
    the element type."""
    shape = tuple(int(d) for d in shape)
    x = np.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape)
    return np.tile(x, [1 if d == -1 or s == 0 else d // s for d, s in zip(shape, x.shape)])


def concat(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    """CONCAT: a and b joined along the row-major `axis`, keeping the element type."""
    return np.concatenate((a, b), axis=axis)


def cpy(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """CPY: write src's elements into dst's storage (same count), converting the
    element type; returns dst."""
    if dst.size == 0:  # an empty view (llama.cpp's copy of no extra states): nothing to write
        return dst
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
    """SET_ROWS: dst[rows] = src (converted to dst's type), in place, skipping rows given as
    -1; returns dst."""
    rows = np.asarray(rows, dtype=np.int64)
    keep = rows >= 0
    if not keep.all():
        rows, src = rows[keep], np.asarray(src)[keep]
    dst[rows] = np.asarray(src).astype(dst.dtype)
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
         freq_scale: float, freq_factors=None, sections=None) -> np.ndarray:
    """ROPE of x [S, Heads, D] at positions pos, float32.

    Pair i (i < n_dims/2) is rotated by p * freq_scale * freq_base^(-2i/n_dims)
    / freq_factors[i]. "neox" pairs dims (i, i + n_dims/2) (HF rotate_half); "norm"
    pairs (2i, 2i+1) (GGUF llama); pos is [S]. "mrope" and "imrope" pair like "neox"
    and take pos [4*S], four streams (t, h, w, e) one after the other; `sections` [4]
    picks each pair's stream (see _mrope_streams). Dims from n_dims on pass through.
    """
    x = np.asarray(x, dtype=np.float32)
    half = n_dims // 2
    # Angles in float64, then cos/sin rounded to float32: as exact as a float32 table gets.
    inv = float(freq_base) ** (-np.arange(half, dtype=np.float64) * 2.0 / n_dims)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[:half]
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    if mode in ("mrope", "imrope"):
        streams = pos.reshape(4, x.shape[0])  # [4, S]: t, h, w, e
        which = _mrope_streams(half, sections, mode == "imrope")
        p = streams[which].T  # [S, half]: each pair's position
    elif mode in ("neox", "norm"):
        p = np.broadcast_to(pos[:, None], (pos.shape[0], half))
    else:
        raise ValueError(f"rope: unknown mode {mode!r}")
    theta = p * (float(freq_scale) * inv)[None, :]
    cos = np.cos(theta).astype(np.float32)[:, None, :]  # [S, 1, half]: broadcast over heads
    sin = np.sin(theta).astype(np.float32)[:, None, :]
    out = np.empty_like(x)
    out[..., n_dims:] = x[..., n_dims:]  # empty unless the rotary dims are partial
    if mode == "norm":
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    else:
        first, second = np.s_[..., :half], np.s_[..., half:n_dims]
    x0, x1, o0, o1 = x[first], x[second], out[first], out[second]
    # Written into `out` in place: two temporaries instead of six.
    np.multiply(x0, cos, out=o0)
    o0 -= x1 * sin
    np.multiply(x0, sin, out=o1)
    o1 += x1 * cos
    return out


def _mrope_streams(half: int, sections, interleaved: bool) -> np.ndarray:
    """For each rotary pair i < half, its M-RoPE position stream (0 t, 1 h, 2 w, 3 e), as
    ggml_mrope_cache_init: sector = i % sum(sections); plain M-RoPE gives sections in turn,
    interleaved M-RoPE (IMROPE) cycles t, h, w while each section lasts."""
    s0, s1, s2, s3 = (int(v) for v in sections)
    total = s0 + s1 + s2 + s3
    out = np.empty(half, dtype=np.int64)
    for i in range(half):
        sector = i % total
        if interleaved:
            if sector % 3 == 1 and sector < 3 * s1:
                out[i] = 1
            elif sector % 3 == 2 and sector < 3 * s2:
                out[i] = 2
            elif sector % 3 == 0 and sector < 3 * s0:
                out[i] = 0
            else:
                out[i] = 3
        elif sector < s0:
            out[i] = 0
        elif sector < s0 + s1:
            out[i] = 1
        elif sector < s0 + s1 + s2:
            out[i] = 2
        else:
            out[i] = 3
    return out


def flash_attn_ext(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask, scale: float) -> np.ndarray:
    """FLASH_ATTN_EXT: softmax(q k^T * scale + mask) v -> [S, Hq, Dv] float32.

    q [Hq, S, D], k [Hkv, N, D], v [Hkv, N, Dv], mask [S, N] or None; query head h
    uses KV head h // (Hq // Hkv). With a leading dim of R streams (q [R, Hq, S, D], k and
    v [R, Hkv, N, D], mask [R, S, N]) each stream attends over its own keys -> [R, S, Hq, Dv].
    """
    if q.ndim == 4:
        return np.stack([flash_attn_ext(q[r], k[r], v[r], None if mask is None else mask[r], scale)
                         for r in range(q.shape[0])])
    if mask is not None:
        # Like a flash kernel skipping fully masked blocks: drop the cache rows no query
        # sees (rows not written yet, other sequences' rows). One column stays, so that a
        # row masked everywhere still gives softmax's NaN.
        mask = np.asarray(mask, dtype=np.float32)
        live = np.flatnonzero(~np.all(np.isneginf(mask), axis=0))
        if live.size == 0:
            live = np.zeros(1, dtype=np.int64)
        if live.size < mask.shape[1]:
            if live[-1] + 1 == live.size:  # a prefix: views, no copies
                mask, k, v = mask[:, :live.size], k[:, :live.size], v[:, :live.size]
            else:
                mask, k, v = mask[:, live], k[:, live], v[:, live]
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


def ssm_conv(sx: np.ndarray, c: np.ndarray) -> np.ndarray:
    """SSM_CONV: sx [..., C, K-1+T], c [C, K] -> [..., T, C] float32, with
    result[t, ch] = sum_i sx[ch, t + i] * c[ch, i], summed in order of i (as ggml)."""
    sx = np.asarray(sx, dtype=np.float32)
    c = np.asarray(c, dtype=np.float32)
    k = c.shape[1]
    t = sx.shape[-1] - k + 1
    acc = sx[..., 0:t] * c[:, 0:1]  # [..., C, T]
    for i in range(1, k):
        acc += sx[..., i:i + t] * c[:, i:i + 1]
    return np.ascontiguousarray(np.swapaxes(acc, -1, -2))


def gated_delta_net(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                    state: np.ndarray, grouped: bool = False) -> np.ndarray:
    """GATED_DELTA_NET as ggml's fused op -> [T + D, Hv*D] float32: T rows of outputs
    [T, Hv, D], then the final state [Hv, D, D].

    q, k [T, Hk, D]; v [T, Hv, D]; g [T, Hv, 1] (or [T, Hv, D], per channel); beta
    [T, Hv, 1]; state [Hv, D, D] with state[h, j, i] = S[h][i, j] (S is dk x dv). Value
    head h reads q/k head h % Hk (ggml), or h // (Hv / Hk) when `grouped`. Per token:
    S *= exp(g); u = beta (v - S^T k); S += k u^T; o = S^T q / sqrt(D).
    A long sequence with one gate per head is computed in chunks of tokens
    (_gated_delta_net_chunks), the same recurrence as matrix products.
    """
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    t, hk, d = q.shape
    hv = v.shape[1]
    heads = np.arange(hv) // (hv // hk) if grouped else np.arange(hv) % hk
    out = np.empty((t + d, hv * d), dtype=np.float32)
    s = out.reshape(-1)[t * hv * d:].reshape(hv, d, d)  # the state, updated in place
    s[...] = np.asarray(state, dtype=np.float32)
    o = out[:t].reshape(t, hv, d)
    scale = np.float32(1.0 / np.sqrt(np.float32(d)))
    if t >= 16 and np.shape(g)[-1] == 1:
        _gated_delta_net_chunks(q, k, v, g, beta, heads, s, o, scale)
        return out
    qh, kh = q[:, heads], k[:, heads]  # [T, Hv, D]: each value head's q and k
    decay = np.exp(np.asarray(g, dtype=np.float32))  # [T, Hv, 1 or D]
    b = np.asarray(beta, dtype=np.float32)  # [T, Hv, 1]
    for i in range(t):
        # s[h, j, :] is column j of S: the decay of row r of S scales s[h, :, r].
        s *= decay[i][:, None, :]
        sk = np.matmul(s, kh[i][:, :, None])[..., 0]  # [Hv, D]: S^T k
        u = (v[i] - sk) * b[i]
        s += u[:, :, None] * kh[i][:, None, :]
        np.multiply(np.matmul(s, qh[i][:, :, None])[..., 0], scale, out=o[i])
    return out


def _gated_delta_net_chunks(q, k, v, g, beta, heads, s, o, scale) -> None:
    """The gated delta rule with one gate per head, 16 tokens at a time: writes the outputs
    into o [T, Hv, D] and advances s [Hv, D, D] (S^T per head) in place.

    In a chunk, with G_t the cumulative sum of g from its start and S0 the state before it,
    U = (I + A)^-1 (beta V - beta exp(G) K S0) where A[t, s] = beta_t exp(G_t - G_s) k_t.k_s
    (s < t); then o_t = (exp(G_t) S0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t.k_s) u_s) / sqrt(D)
    and S <- exp(G_n) S0 + sum_s exp(G_n - G_s) k_s u_s^T. (I + A)^-1 is the product of
    (I + (-A)^(2^j)), A being nilpotent. Factors below 1e-30 (exp of less than -60, and products
    of them) are flushed to 0: they are far below float32's resolution of the results, and
    denormal numbers make every operation on them a hundred times slower.
    """
    t, hv, d = v.shape
    tiny = np.float32(1e-30)
    gg = np.asarray(g, dtype=np.float32)[..., 0].T  # [Hv, T]
    bb = np.asarray(beta, dtype=np.float32)[..., 0].T  # [Hv, T]
    qh = q.transpose(1, 0, 2)[heads]  # [Hv, T, D]
    kh = k.transpose(1, 0, 2)[heads]
    vh = v.transpose(1, 0, 2)
    for c0 in range(0, t, 16):
        c1 = min(c0 + 16, t)
        n = c1 - c0
        kc, qc, vc = kh[:, c0:c1], qh[:, c0:c1], vh[:, c0:c1]
        b = bb[:, c0:c1, None]  # [Hv, n, 1]
        cum = np.cumsum(gg[:, c0:c1], axis=1, dtype=np.float32)  # [Hv, n]
        lower = np.tri(n, dtype=bool)  # s <= t
        diff = np.where(lower, cum[:, :, None] - cum[:, None, :], np.float32(-np.inf))
        decay = np.exp(np.where(diff < np.float32(-60.0), np.float32(-np.inf), diff))  # [Hv, n, n]
        e_cum = np.exp(np.where(cum < np.float32(-60.0), np.float32(-np.inf), cum))[:, :, None]  # [Hv, n, 1]
        minus_a = np.matmul(kc, kc.transpose(0, 2, 1))
        minus_a *= decay
        minus_a *= -b
        minus_a[:, np.arange(n), np.arange(n)] = 0  # strictly lower
        inv = minus_a + np.eye(n, dtype=np.float32)
        power, span = minus_a, 2
        while span < n:
            power = np.matmul(power, power)
            power[np.abs(power) < tiny] = 0
            inv += np.matmul(inv, power)
            span *= 2
        inv[np.abs(inv) < tiny] = 0
        s0 = s.transpose(0, 2, 1)  # S per head, [Hv, dk, dv]
        u = np.matmul(inv, vc * b - np.matmul(kc * (b * e_cum), s0))  # [Hv, n, dv]
        qk = np.matmul(qc, kc.transpose(0, 2, 1))
        qk *= decay
        oc = np.matmul(qc * e_cum, s0)
        oc += np.matmul(qk, u)
        oc *= scale
        o[c0:c1] = oc.transpose(1, 0, 2)
        last = cum[:, -1:] - cum  # [Hv, n]: G_n - G_s
        last = np.exp(np.where(last < np.float32(-60.0), np.float32(-np.inf), last))[:, :, None]
        s *= e_cum[:, -1:, :]
        s += np.matmul(u.transpose(0, 2, 1), kc * last)


def convert_plus_one(w: np.ndarray, args=()) -> np.ndarray:
    """op.param's `plus_one`: 1 + w in float32 (a zero-centred norm weight as llama.cpp uses it)."""
    return np.asarray(w, dtype=np.float32) + np.float32(1.0)


def convert_neg_exp(w: np.ndarray, args=()) -> np.ndarray:
    """op.param's `neg_exp`: -exp(w) in float32 (Gated DeltaNet's A_log as llama.cpp's ssm_a)."""
    return np.negative(np.exp(np.asarray(w, dtype=np.float32)))


def convert_squeeze(w: np.ndarray, args=()) -> np.ndarray:
    """op.param's `squeeze`: w without its size-1 dims (a view; the conv1d [C, 1, K] as [C, K])."""
    return np.squeeze(np.asarray(w))


def convert_ungroup_rows(w: np.ndarray, args) -> np.ndarray:
    """op.param's `ungroup_rows`, args [G, lo, hi, s_0, ...]: w's rows are G groups of parts
    of s_0, s_1, ... rows; returns parts lo..hi-1, part by part, each part's rows from every
    group in turn (keeping w's element type)."""
    g, lo, hi = int(args[0]), int(args[1]), int(args[2])
    sizes = [int(a) for a in args[3:]]
    w = np.asarray(w)
    groups = w.reshape((g, sum(sizes)) + w.shape[1:])
    starts = np.cumsum([0] + sizes)
    parts = [groups[:, starts[j]:starts[j + 1]].reshape((-1,) + w.shape[1:]) for j in range(lo, hi)]
    return np.concatenate(parts, axis=0)


def get_rows_sharded(table: np.ndarray, ids: np.ndarray, rank: int) -> np.ndarray:
    """op.get_rows_sharded: GET_ROWS from rank `rank`'s piece of a row-split table, its rows
    rank*R .. rank*R + R-1 of the whole; other ids give zero rows (float32)."""
    ids = np.asarray(ids, dtype=np.int64) - rank * table.shape[0]
    mine = (ids >= 0) & (ids < table.shape[0])
    rows = np.asarray(table[np.where(mine, ids, 0)], dtype=np.float32)
    rows[~mine] = 0.0
    return rows


def mul_mat_id_sharded(experts: np.ndarray, b: np.ndarray, ids: np.ndarray, rank: int) -> np.ndarray:
    """op.mul_mat_id_sharded: MUL_MAT_ID over rank `rank`'s experts, ids rank*E .. rank*E + E-1
    of the whole set (E: experts' first dim); a slot routed elsewhere gives zeros, uncomputed."""
    ids = np.asarray(ids, dtype=np.int64) - rank * experts.shape[0]
    t, u = ids.shape
    out = np.zeros((t, u, experts.shape[1]), dtype=np.float32)
    mine = (ids >= 0) & (ids < experts.shape[0])
    rows, slots = np.nonzero(mine)
    if rows.size:  # each of this rank's slots as a token of its own: its row of b, its expert
        picked = np.asarray(b)[rows, slots % b.shape[1]][:, None, :]
        out[rows, slots] = mul_mat_id(experts, picked, ids[rows, slots][:, None])[:, 0]
    return out


def host_input(kind: str, tokens: np.ndarray, start: int, n_kv: int) -> np.ndarray:
    """The host-prepared input `kind` for a call on `tokens` [S] at position `start`.

    tokens: the ids (int32); positions: start + i (int32); kv_rows: the cache rows
    written, start + i (int64); kq_mask [S, n_kv] float32: 0 where cache row
    j <= start + i, else -inf (causal, and hides rows not yet written); out_ids: the
    row whose logits are returned, [S - 1] (int32); mrope_positions [4*S] int32: the
    positions three times then S zeros (M-RoPE's streams for text); state_copy [1]
    int32: the recurrent-state slot the sequence reads, 0.
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
    if kind == "mrope_positions":
        p = start + np.arange(s)
        return np.concatenate((p, p, p, np.zeros(s, dtype=p.dtype))).astype(np.int32)
    if kind == "state_copy":
        return np.zeros(1, dtype=np.int32)
    raise ValueError(f"host_input: unknown kind {kind!r}")
