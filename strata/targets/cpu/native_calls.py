"""The generated cpu module's side of the native kernels: the ctypes calls into the library the
compile put beside it (`strata.targets.cpu.native`), copied into a module that uses them as the
numpy kernels are (numpy and ctypes only, self-contained functions, no module constants).

A weight the native kernels read is bound by `bind_packed` as a tuple

    (ggml type id, uint8 blocks [rows, row bytes] (a view of the memory-mapped file), the IR's
     shape, row bytes, row order or None, the blocks' address)

checked against the shape and type the program was compiled for, so that the library never
reads past the mapping. When the weight store cannot give a weight's blocks (a store of
arrays), the weight is bound as an array and each call runs the numpy kernel instead: the
portable reference, the same op.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from strata.semantics.kernels import get_rows, mul_mat, mul_mat_id
from strata.semantics.kernels_ggml import flash_attn_ext_f16, mul_mat_id_quantized, mul_mat_quantized


def native_library(path: str, threads):
    """The native library at `path`, its functions typed, its thread pool sized `threads` (None:
    $STRATA_THREADS, the CLI's -t, else the cores this process may use)."""
    if not threads:
        threads = os.environ.get("STRATA_THREADS", "")
        threads = int(threads) if threads.isdigit() and int(threads) > 0 else \
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    lib = ctypes.CDLL(path)
    ptr, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
    signatures = {
        "strata_set_threads": [i32],
        "strata_mul_mat": [i32, ptr, i64, i64, i64, ptr, i64, ptr],
        "strata_get_rows": [i32, ptr, i64, i64, i64, ptr, i64, ptr],
        "strata_flash_attn_f16": [ptr, i64, i64, i64, ptr, ptr, i64, i64, i64, ptr, f32, ptr],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = i32
    if lib.strata_set_threads(int(threads)) != 0:
        raise ValueError(f"the native kernels refuse {threads} threads")
    return lib


def bind_packed(weights, name, ggml_type, shape, row_bytes):
    """Weight `name` as its packed blocks (see the module docstring), or None when the store
    cannot give them; the blocks must be `ggml_type`'s, `row_bytes` per row of `shape`."""
    packed = getattr(weights, "packed", None)
    found = packed(name) if packed is not None else None
    if found is None:
        return None
    kind, blocks, order = found
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    if int(kind) != ggml_type:
        raise ValueError(f"weight {name!r} is stored as ggml type {int(kind)}; the program was compiled for {ggml_type}")
    if blocks.dtype != np.uint8 or blocks.shape != (rows, row_bytes) or not blocks.flags.c_contiguous:
        raise ValueError(f"weight {name!r} holds {list(blocks.shape)} bytes, expected {rows} rows of {row_bytes}")
    if order is not None:
        order = np.ascontiguousarray(order, dtype=np.int64)
        if order.shape != (rows,) or sorted(order.tolist()) != list(range(rows)):
            raise ValueError(f"weight {name!r}: its row order is not an order of its {rows} rows")
    return (int(kind), blocks, tuple(int(d) for d in shape), row_bytes, order, blocks.ctypes.data)


def native_check(rc, what):
    if rc != 0:
        raise ValueError(f"native {what}: the kernel refused its arguments (code {rc})")


def native_mul_mat(lib, w, x, act=None, order=None):
    """MUL_MAT of weight `w` [M, K] by `x` [..., N, K] -> [..., N, M] float32 (see module docstring)."""
    if isinstance(w, np.ndarray):
        return mul_mat(w, x) if act is None else mul_mat_quantized(w, x, act, order)
    kind, _, shape, row_bytes, rows_order, address = w
    m, k = shape
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size // k
    y = np.empty((*x.shape[:-1], m), dtype=np.float32)
    if n:
        native_check(lib.strata_mul_mat(kind, address, m, k, row_bytes, x.ctypes.data, n, y.ctypes.data), "mul_mat")
    return y if rows_order is None else np.ascontiguousarray(y[..., rows_order])


def native_mul_mat_id(lib, experts, b, ids, act=None, order=None):
    """MUL_MAT_ID of packed experts [E, M, K] by `b` [T, Nb, K] with `ids` [T, U] -> [T, U, M]:
    each routed expert multiplies its rows at once (its blocks: rows e*M .. e*M + M-1)."""
    if isinstance(experts, np.ndarray):
        return mul_mat_id(experts, b, ids) if act is None else mul_mat_id_quantized(experts, b, ids, act, order)
    kind, _, shape, row_bytes, _, address = experts
    e, m, k = shape
    ids = np.asarray(ids, dtype=np.int64)
    t, u = ids.shape
    n_b = b.shape[1]
    out = np.empty((t * u, m), dtype=np.float32)
    flat = ids.reshape(-1)
    if flat.size == 0:
        return out.reshape(t, u, m)
    if flat.min() < 0 or flat.max() >= e:
        raise ValueError(f"mul_mat_id: expert ids must be in [0, {e}), got {flat.min()}..{flat.max()}")
    slots = np.argsort(flat, kind="stable")
    rows = np.ascontiguousarray(np.asarray(b, dtype=np.float32)[slots // u, (slots % u) % n_b])
    sorted_ids = flat[slots]
    cuts = np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1
    y = np.empty((flat.size, m), dtype=np.float32)
    for s0, s1 in zip([0, *cuts.tolist()], [*cuts.tolist(), flat.size]):
        expert = int(sorted_ids[s0])
        native_check(lib.strata_mul_mat(kind, address + expert * m * row_bytes, m, k, row_bytes,
                                        rows[s0:].ctypes.data, s1 - s0, y[s0:].ctypes.data), "mul_mat_id")
    out[slots] = y
    return out.reshape(t, u, m)


def native_get_rows(lib, table, ids):
    """GET_ROWS of packed `table` [R, C] by `ids` [N] -> [N, C] float32 (a negative id: zeros)."""
    if isinstance(table, np.ndarray):
        return get_rows(table, ids)
    kind, _, shape, row_bytes, rows_order, address = table
    r, c = shape
    ids = np.asarray(ids, dtype=np.int64)
    flat = ids.reshape(-1)
    missing = flat < 0
    if flat.size and flat.max() >= r:
        raise ValueError(f"get_rows: ids must be below {r}, got {flat.max()}")
    stored = np.where(missing, 0, flat)
    if rows_order is not None:
        stored = rows_order[stored]
    stored = np.ascontiguousarray(stored, dtype=np.int32)
    out = np.empty((flat.size, c), dtype=np.float32)
    if flat.size:
        native_check(lib.strata_get_rows(kind, address, r, c, row_bytes, stored.ctypes.data, flat.size,
                                         out.ctypes.data), "get_rows")
    out[missing] = 0
    return out.reshape(*ids.shape, c)


def native_flash_attn_f16(lib, q, k, v, mask, scale):
    """FLASH_ATTN_EXT over float16 K and V as ggml-cpu computes it (kernels_ggml's
    flash_attn_ext_f16, in the library) -> [S, Hq, Dv] float32."""
    if lib is None:
        return flash_attn_ext_f16(q, k, v, mask, scale)
    q = np.ascontiguousarray(q, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float16)
    v = np.ascontiguousarray(v, dtype=np.float16)
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    if k.shape != (hkv, n, d) or hq % hkv:
        raise ValueError(f"flash_attn_ext_f16: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} do not fit")
    m = None
    if mask is not None:
        m = np.ascontiguousarray(np.asarray(mask, dtype=np.float32)[:s, :n])
        if m.shape != (s, n):
            raise ValueError(f"flash_attn_ext_f16: mask {list(np.shape(mask))} for {s} rows over {n} positions")
    out = np.empty((s, hq, dv), dtype=np.float32)
    native_check(lib.strata_flash_attn_f16(q.ctypes.data, hq, s, d, k.ctypes.data, v.ctypes.data, hkv, n, dv,
                                           None if m is None else m.ctypes.data, float(scale), out.ctypes.data),
                 "flash_attn_f16")
    return out
