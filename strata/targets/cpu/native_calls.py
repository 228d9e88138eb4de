"""The generated cpu module's side of the native kernels: the op-level kernels on packed weights,
calling the library the compile put beside it through its ctypes binding
(`strata.targets.cpu.native.loader`); copied into a module that uses them as the numpy kernels
are (numpy only at the top, self-contained functions, no module constants).

A weight the native kernels read is bound by `bind_packed` as a tuple

    (ggml type id, uint8 blocks [rows, row bytes] (a view of the memory-mapped file), the IR's
     shape, row bytes, row order or None, the blocks' address)

checked against the shape and type the program was compiled for, so that the library never
reads past the mapping. When the weight store cannot give a weight's blocks (a store of
arrays), the weight is bound as an array and each call runs the numpy kernel instead: the
portable reference, the same op.
"""

from __future__ import annotations

import numpy as np

from strata.semantics.kernels import get_rows, mul_mat, mul_mat_id
from strata.semantics.kernels_ggml import mul_mat_id_quantized, mul_mat_quantized
from strata.targets.cpu.native.loader import (native_flash_attn_f16, native_get_rows, native_load,
                                              native_mul_mat_ggml, native_mul_mat_id, native_mul_mat_repacked,
                                              native_set_threads)


def load_native_kernels(path, threads):
    """The native library at `path` (`native_load`), its thread pool sized `threads` (None:
    $STRATA_THREADS, the CLI's -t, else the cores this process may use)."""
    import os

    if not threads:
        threads = os.environ.get("STRATA_THREADS", "")
        threads = int(threads) if threads.isdigit() and int(threads) > 0 else \
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    lib = native_load(path)
    native_set_threads(lib, threads)
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


def packed_mul_mat(lib, w, x, act=None, order=None, repacked=False):
    """MUL_MAT of weight `w` [M, K] by `x` [..., N, K] -> [..., N, M] float32: the native kernel
    on packed blocks, summed as ggml-cpu's MUL_MAT sums (vec_dot, or llamafile's tinyBLAS for
    several rows of the types it takes; `repacked`: the order of ggml-cpu's repacked Q4_0 /
    IQ4_NL kernels), the numpy one on an array (`act`, `order`: its activations' blocks)."""
    if isinstance(w, np.ndarray):
        return mul_mat(w, x) if act is None else mul_mat_quantized(w, x, act, order)
    kind, blocks, shape, row_bytes, rows_order, _ = w
    product = native_mul_mat_repacked if repacked else native_mul_mat_ggml
    y = product(lib, kind, blocks, shape[0], shape[1], row_bytes, x)
    return y if rows_order is None else np.ascontiguousarray(y[..., rows_order])


def packed_mul_mat_id(lib, experts, b, ids, act=None, order=None):
    """MUL_MAT_ID of experts [E, M, K] by `b` [T, Nb, K] with `ids` [T, U] -> [T, U, M]: the
    native kernel on packed blocks, the numpy one on an array."""
    if isinstance(experts, np.ndarray):
        return mul_mat_id(experts, b, ids) if act is None else mul_mat_id_quantized(experts, b, ids, act, order)
    kind, blocks, shape, row_bytes, _, _ = experts
    e, m, k = shape
    flat = np.asarray(ids).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= e):
        raise ValueError(f"mul_mat_id: expert ids must be in [0, {e}), got {flat.min()}..{flat.max()}")
    return native_mul_mat_id(lib, kind, blocks, e, m, k, row_bytes, b, ids)


def packed_get_rows(lib, table, ids):
    """GET_ROWS of `table` [R, C] by `ids` [N] -> [N, C] float32 (a negative id: zeros): the
    native kernel on packed blocks, the numpy one on an array."""
    if isinstance(table, np.ndarray):
        return get_rows(table, ids)
    kind, blocks, shape, row_bytes, rows_order, _ = table
    r, c = shape
    ids = np.asarray(ids, dtype=np.int64)
    flat = ids.reshape(-1)
    if flat.size and flat.max() >= r:
        raise ValueError(f"get_rows: ids must be below {r}, got {flat.max()}")
    missing = flat < 0
    stored = np.where(missing, 0, flat)
    if rows_order is not None:
        stored = rows_order[stored]
    out = native_get_rows(lib, kind, blocks, r, c, row_bytes, stored)
    out[missing] = 0
    return out.reshape(*ids.shape, c)


def attention_f16(lib, q, k, v, mask, scale):
    """FLASH_ATTN_EXT over float16 K and V as ggml-cpu computes it (kernels_ggml's
    flash_attn_ext_f16) -> [S, Hq, Dv] float32, in the library."""
    s, n = q.shape[1], v.shape[1]
    if mask is not None:
        mask = np.asarray(mask, dtype=np.float32)
        if mask.shape != (s, n):
            raise ValueError(f"flash_attn_ext_f16: mask {list(mask.shape)} for {s} rows over {n} positions")
    return native_flash_attn_f16(lib, q, k, v, mask, scale)


def bind_native_entry(lib, function, weights, kinds):
    """The printed entry `function` of the library with its weights' addresses bound once
    ({"call": the function, "weights" and "orders": address arrays}); None, saying why in one
    line on stderr, when a weight is not bound as the entry reads it (`kinds[i]`: the i-th as
    "packed" blocks, or a contiguous "float32", "float16" or "bfloat16" array): the Python host runs that
    entry then."""
    import ctypes
    import os

    addresses, orders, why = [], [], None
    for w, kind in zip(weights, kinds):
        blocks = kind == "packed"
        if blocks and isinstance(w, np.ndarray):
            why = "a weight is bound as an array (the weight store gives no packed blocks)"
        elif not blocks and not (isinstance(w, np.ndarray) and w.dtype.name == kind and w.flags.c_contiguous):
            why = f"a weight is not a contiguous {kind} array"
        if why is not None:
            os.write(2, f"strata: {function}: the python host runs it: {why}\n".encode())
            return None
        addresses.append(w[5] if blocks else w.ctypes.data)
        orders.append(w[4].ctypes.data if blocks and w[4] is not None else None)  # w[4]: int64, kept by w
    fn = getattr(lib, function)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    n = max(len(addresses), 1)
    return {"call": fn, "weights": (ctypes.c_void_p * n)(*addresses), "orders": (ctypes.c_void_p * n)(*orders)}


def native_addresses(arrays):
    """A ctypes array of the data addresses of C-contiguous numpy arrays (the state buffers)."""
    import ctypes

    for a in arrays:
        if not a.flags.c_contiguous:
            raise ValueError("native entry: a state buffer is not C-contiguous")
    return (ctypes.c_void_p * max(len(arrays), 1))(*(a.ctypes.data for a in arrays))


def run_native_entry(entry, states, token, pos, shape, what):
    """One call of a printed entry: token at pos -> its logits of `shape` (float32)."""
    import ctypes

    logits = np.empty(shape, dtype=np.float32)
    rc = entry["call"](ctypes.addressof(entry["weights"]), ctypes.addressof(entry["orders"]), ctypes.addressof(states),
                       int(token), int(pos), logits.ctypes.data)
    if rc == 3:
        raise ValueError(f"{what}: token {int(token)} is outside the embedding table")
    if rc != 0:
        raise ValueError(f"{what}: the native entry failed (code {rc})")
    return logits
