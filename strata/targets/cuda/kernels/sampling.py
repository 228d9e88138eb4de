"""Token sampling on device: penalties, temperature, top-k, top-p, min-p and one Philox draw per
row, drawing exactly the ids of the numpy reference (`strata.semantics.sampling`, whose
docstring defines the semantics and the (key, step, row) -> Philox mapping).

Exact by construction: every float operation is an IEEE f32 operation that numpy performs too
(`div_rn` for the divisions, `sample_exp` for exp; the launch turns off FMA contraction and
libdevice's flush-to-zero); probabilities are int64 masses (trunc(exp(z - max z) * 2**40)), so
the sums below agree with numpy's in any order; the uniform is `tl.randint`'s 32-bit word.

One program per row, in passes over the row in blocks (the vocabulary padded to a multiple of the
block, the tail masked), with no sort: a 150k-entry row does not fit in one program's registers,
and the filters only need order statistics, which a search over the values finds exactly with
counts and integer masses. Keys are the 32-bit order-preserving integers of the f32 z; each
search pass tests 16 pivots at once ([SEARCH, 16] tiles), so 32 bits take 8 passes.

    pass 1   the token mask (a disallowed token's logit is -inf), penalties, temperature: z (stored in the scratch row), max z and its first index,
             min key. Temperature 0 stops here: the id is the first index of the max (greedy).
    top-k    the k-th largest z: the largest key t with count(key >= t) >= k (none when k <= 0
             or k >= vocab).
    top-p    HF drops, in ascending (z, index) order, the tokens whose prefix mass is <= thr =
             (1 - top_p) * W. The search finds the cut value v: the least key with
             mass(z <= v) > thr. Tokens above v are kept, below dropped; of the n tokens tied
             at v (equal masses w), in index order, the r-th is kept when
             mass(z < v) + r * w > thr: from rank r_min = (thr - mass(z < v)) // w + 1 on.
    min-p    keep exp(z - max z) >= min_p.
    draw     the kept mass W and the target floor(bits * W / 2**32); the first token in index
             order whose prefix mass exceeds it (prefix sums: tl.cumsum of int64 per block
             plus a carry; tie ranks the same way).

At most 1 + 8 + 1 + 8 + 1 + 2 = 21 passes over the row; the z scratch row is the launcher's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def sample_key(z):
    """An int32 whose signed order is z's (f32 without -0.0 or NaN): a negative float's
    magnitude bits are flipped."""
    b = z.to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def sample_exp(x):
    """exp(x) for x <= 0, the operations of the reference's exp_f32 in its order (Cephes' expf)."""
    xc = tl.maximum(x, -80.0)
    n = tl.floor(xc * 1.4426950408889634 + 0.5)
    r = xc - n * 0.693359375
    r = r - n * -2.12194440e-4
    p = 1.9875691500e-4 * r + 1.3981999507e-3
    p = p * r + 8.3334519073e-3
    p = p * r + 4.1665795894e-2
    p = p * r + 1.6666665459e-1
    p = p * r + 5.0000001201e-1
    y = p * (r * r) + r + 1.0
    scale = ((n.to(tl.int32) + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(x < -80.0, 0.0, y * scale)


@triton.jit
def sample_mass(z, top):
    """The integer mass trunc(exp(z - top) * 2**40) (int64; the reference's `w`)."""
    return (sample_exp(z - top) * 1099511627776.0).to(tl.int64)


@triton.jit
def sample_kth_key(z_row, n_cols, low, top_key, k, SEARCH: tl.constexpr):
    """Top-k: the largest key t with count(key >= t) >= k, given count(key >= low) >= k >
    count(key > top_key). Each pass tests 16 pivots spread over (lo, hi]: 8 passes for 32 bits."""
    lo = low.to(tl.int64)
    hi = top_key.to(tl.int64) + 1
    j = tl.arange(0, 16).to(tl.int64) + 1
    while hi - lo > 1:
        piv = lo + (((hi - lo) * j) >> 4)
        cnt = tl.zeros([16], tl.int32)
        for c0 in range(0, n_cols, SEARCH):
            cols = c0 + tl.arange(0, SEARCH)
            m = cols < n_cols
            zk = sample_key(tl.load(z_row + cols, mask=m, other=0.0)).to(tl.int64)
            cnt += tl.sum(((zk[:, None] >= piv[None, :]) & m[:, None]).to(tl.int32), axis=0)
        ok = cnt >= k  # true for the low pivots, false for the high ones
        lo = tl.max(tl.where(ok, piv, lo), axis=0)
        hi = tl.min(tl.where(ok, hi, piv), axis=0)
    return lo.to(tl.int32)


@triton.jit
def sample_cut_key(z_row, n_cols, top, kth, thr, SEARCH: tl.constexpr):
    """Top-p: the least key t with mass(kth <= key <= t) > thr (the top key when none is), 16
    pivots per pass."""
    lo = kth.to(tl.int64) - 1
    hi = sample_key(top).to(tl.int64)
    j = tl.arange(0, 16).to(tl.int64) + 1
    while hi - lo > 1:
        piv = lo + (((hi - lo) * j) >> 4)
        mass = tl.zeros([16], tl.int64)
        for c0 in range(0, n_cols, SEARCH):
            cols = c0 + tl.arange(0, SEARCH)
            m = cols < n_cols
            z = tl.load(z_row + cols, mask=m, other=-float("inf"))
            zk = sample_key(z).to(tl.int64)
            w = tl.where(m & (zk >= kth), sample_mass(z, top), 0)
            mass += tl.sum(tl.where(zk[:, None] <= piv[None, :], w[:, None], 0), axis=0)
        ok = mass > thr  # false for the low pivots, true for the high ones
        hi = tl.min(tl.where(ok, piv, hi), axis=0)
        lo = tl.max(tl.where(ok, lo, piv), axis=0)
    return hi.to(tl.int32)


@triton.jit
def sample_kept(z, m, top, cut, r_min, min_p, seen):
    """The masses of a block's kept tokens (0 for the others) and the count of tokens tied at the
    cut so far (`seen` before the block): kept are keys above the cut, tied tokens from rank
    r_min on (in index order), then those with exp(z - top) >= min_p."""
    zk = sample_key(z)
    e = sample_exp(z - top)
    tie = m & (zk == cut)
    rank = seen + tl.cumsum(tie.to(tl.int64), axis=0)
    keep = m & ((zk > cut) | (tie & (rank >= r_min))) & (e >= min_p)
    return tl.where(keep, (e * 1099511627776.0).to(tl.int64), 0), seen + tl.sum(tie.to(tl.int64), axis=0)


@triton.jit
def sample_kernel(x_ptr, key_ptr, temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, rep_ptr, pres_ptr, freq_ptr,
                  pc_ptr, oc_ptr, mask_ptr, z_ptr, y_ptr, n_cols, x_rs, c_rs, m_rs, z_rs, step,
                  HAS_COUNTS: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr, SEARCH: tl.constexpr):
    """Row `program_id(0)`: one token id into y_ptr[row] (the module docstring's passes). BLOCK is
    the width of the linear passes, SEARCH that of the 16-pivot searches ([SEARCH, 16] tiles).
    With HAS_MASK, mask_ptr is the row's bitmask (bit j of word w allows token 32 * w + j)."""
    row = tl.program_id(0).to(tl.int64)
    temp = tl.load(temp_ptr + row)
    rep = tl.load(rep_ptr + row)
    pres = tl.load(pres_ptr + row)
    freq = tl.load(freq_ptr + row)
    lanes = tl.arange(0, BLOCK)
    z_row = z_ptr + row * z_rs
    # pass 1: z = penalized logits / temperature into the scratch row; max, its first index, min key
    best = -float("inf")
    best_i = 0
    low = 2147483647
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + lanes
        m = cols < n_cols
        z = tl.load(x_ptr + row * x_rs + cols, mask=m, other=0.0).to(tl.float32)
        if HAS_MASK:
            word = tl.load(mask_ptr + row * m_rs + (cols >> 5), mask=m, other=0)
            z = tl.where(((word >> (cols & 31)) & 1) != 0, z, -float("inf"))
        if HAS_COUNTS:
            pc = tl.load(pc_ptr + row * c_rs + cols, mask=m, other=0)
            oc = tl.load(oc_ptr + row * c_rs + cols, mask=m, other=0)
            z = tl.where(pc + oc > 0, tl.where(z < 0, z * rep, tl.math.div_rn(z, rep)), z)
            z = z - freq * oc.to(tl.float32)
            z = tl.where(oc > 0, z - pres, z)
        z = tl.where(temp > 0, tl.math.div_rn(z, tl.where(temp > 0, temp, 1.0)), z)
        z = tl.where(z == 0.0, 0.0, z)  # -0.0 -> +0.0: one key per value
        tl.store(z_row + cols, z, mask=m)
        zm = tl.where(m, z, -float("inf"))
        bm = tl.max(zm, axis=0)
        bi = tl.min(tl.where(zm == bm, cols, n_cols), axis=0)
        take = bm > best
        best_i = tl.where(take, bi, best_i)
        best = tl.where(take, bm, best)
        low = tl.minimum(low, tl.min(tl.where(m, sample_key(z), 2147483647), axis=0))
    tok = best_i
    if temp > 0:
        top = best
        k = tl.load(top_k_ptr + row)
        kth = low
        if (k > 0) & (k < n_cols):
            kth = sample_kth_key(z_row, n_cols, low, sample_key(top), k, SEARCH)
        # top-p: the cut key and, among the tokens tied at it, the first kept rank
        top_p = tl.load(top_p_ptr + row)
        cut = kth
        r_min = tl.zeros([], tl.int64) + 1
        if top_p < 1.0:
            wk = tl.zeros([], tl.int64)
            for c0 in range(0, n_cols, BLOCK):
                cols = c0 + lanes
                m = cols < n_cols
                z = tl.load(z_row + cols, mask=m, other=-float("inf"))
                wk += tl.sum(tl.where(m & (sample_key(z) >= kth), sample_mass(z, top), 0), axis=0)
            thr = ((1.0 - top_p.to(tl.float64)) * wk.to(tl.float64)).to(tl.int64)
            cut = sample_cut_key(z_row, n_cols, top, kth, thr, SEARCH)
            below = tl.zeros([], tl.int64)
            ties = tl.zeros([], tl.int64)
            w_tie = tl.zeros([], tl.int64)
            for c0 in range(0, n_cols, BLOCK):
                cols = c0 + lanes
                m = cols < n_cols
                z = tl.load(z_row + cols, mask=m, other=-float("inf"))
                zk = sample_key(z)
                w = sample_mass(z, top)
                below += tl.sum(tl.where(m & (zk >= kth) & (zk < cut), w, 0), axis=0)
                ties += tl.sum((m & (zk == cut)).to(tl.int64), axis=0)
                w_tie = tl.maximum(w_tie, tl.max(tl.where(m & (zk == cut), w, 0), axis=0))
            r_min = tl.minimum(tl.maximum((thr - below) // w_tie + 1, 1), ties)
        # min-p, then the kept mass and the draw's target mass
        min_p = tl.load(min_p_ptr + row)
        total = tl.zeros([], tl.int64)
        seen = tl.zeros([], tl.int64)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + lanes
            m = cols < n_cols
            w, seen = sample_kept(tl.load(z_row + cols, mask=m, other=-float("inf")), m, top, cut, r_min, min_p, seen)
            total += tl.sum(w, axis=0)
        offset = tl.load(key_ptr + 1) + (step.to(tl.int64) << 32) + row
        bits = tl.randint(tl.load(key_ptr), offset).to(tl.uint64)
        wu = total.to(tl.uint64)
        target = (bits * (wu >> 32) + ((bits * (wu & 0xFFFFFFFF)) >> 32)).to(tl.int64)
        # the draw: the first index whose prefix mass exceeds the target
        tok = n_cols
        acc = tl.zeros([], tl.int64)
        seen = tl.zeros([], tl.int64)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + lanes
            m = cols < n_cols
            w, seen = sample_kept(tl.load(z_row + cols, mask=m, other=-float("inf")), m, top, cut, r_min, min_p, seen)
            prefix = acc + tl.cumsum(w, axis=0)
            acc += tl.sum(w, axis=0)
            tok = tl.minimum(tok, tl.min(tl.where(m & (prefix > target), cols, n_cols), axis=0))
    tl.store(y_ptr + row, tok)


def _per_row(value, rows: int, dtype: torch.dtype, device) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=dtype, device=device)
    return t.expand(rows).contiguous() if t.dim() == 0 else t.reshape(rows).contiguous()


def launch_sample(logits: torch.Tensor, key, step: int, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                  repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                  prompt_counts: torch.Tensor | None = None, output_counts: torch.Tensor | None = None,
                  mask: torch.Tensor | None = None, out: torch.Tensor | None = None, work: torch.Tensor | None = None, block: int = 1024,
                  search_block: int = 128) -> torch.Tensor:
    """`sample`: one token id per row of `logits` [rows, vocab] (f32 or bf16), int32 [rows, 1], the
    ids `strata.semantics.sampling.sample` draws for the same arguments. `key` is two int64 (a
    tensor on the logits' device, or a pair of ints); the parameters are scalars or [rows] tensors
    (top_k <= 0: off; temperature 0: greedy); the counts are each token's occurrences in each row's
    prompt / output so far (int [rows, vocab]); `mask` the allowed tokens' bitmask (int32 [rows,
    ceil(vocab/32)]; None: every token, and the kernel reads none). `work` is the f32 [rows, vocab] scratch the kernel
    keeps z in (allocated when not given: pass one to launch without allocating, as in a graph)."""
    rows, vocab = logits.shape
    dev = logits.device
    if not 0 <= int(step) < 2**31:
        raise ValueError(f"the sampling step must be in [0, 2**31) on device (an i32 argument), not {step}")
    for name, c in (("prompt_counts", prompt_counts), ("output_counts", output_counts)):
        if c is not None and tuple(c.shape) != (rows, vocab):
            raise ValueError(f"{name} {tuple(c.shape)} do not match the logits {(rows, vocab)}")
    words = (vocab + 31) // 32
    if mask is not None:
        if tuple(mask.shape) != (rows, words):
            raise ValueError(f"the token mask {tuple(mask.shape)} is not one bit per token: [{rows}, {words}]")
        mask = mask.to(device=dev, dtype=torch.int32).contiguous()
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    key = torch.as_tensor(key, dtype=torch.int64, device=dev).reshape(2)
    f32 = [_per_row(v, rows, torch.float32, dev) for v in (temperature, top_p, min_p, repetition_penalty,
                                                           presence_penalty, frequency_penalty)]
    top_k = _per_row(top_k, rows, torch.int32, dev)
    has_counts = prompt_counts is not None or output_counts is not None
    if has_counts:
        zeros = torch.zeros((rows, vocab), dtype=torch.int32, device=dev)
        pc = zeros if prompt_counts is None else prompt_counts.to(device=dev, dtype=torch.int32).contiguous()
        oc = zeros if output_counts is None else output_counts.to(device=dev, dtype=torch.int32).contiguous()
    else:
        pc = oc = top_k  # not read
    z = work if work is not None else torch.empty((rows, vocab), dtype=torch.float32, device=dev)
    if z.dtype != torch.float32 or z.shape[0] < rows or z.shape[1] < vocab or z.stride(1) != 1:
        raise ValueError(f"the sampling scratch must be f32 [>= {rows}, >= {vocab}] with unit column stride")
    out = out if out is not None else torch.empty((rows, 1), dtype=torch.int32, device=dev)
    temp, top_p, min_p, rep, pres, freq = f32
    sample_kernel[(rows,)](logits, key, temp, top_k, top_p, min_p, rep, pres, freq, pc, oc,
                           mask if mask is not None else top_k, z, out, vocab, logits.stride(0), vocab, words,
                           z.stride(0), int(step), HAS_COUNTS=has_counts, HAS_MASK=mask is not None,
                           BLOCK=min(block, triton.next_power_of_2(vocab)),
                           SEARCH=min(search_block, triton.next_power_of_2(vocab)),
                           enable_fp_fusion=False, enable_reflect_ftz=False)
    return out
