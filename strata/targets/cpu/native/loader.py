"""Load the native kernel library with ctypes and call it on numpy arrays. Copied into generated
modules as the numpy kernels are (`strata.targets.cpu.kernel_library`): top-level, self-contained
functions that import only ctypes and numpy, no module constants, nothing from strata.

    lib = native_load("/stage/libstrata_kernels-0123.so")
    native_set_threads(lib, 2)
    y = native_mul_mat(lib, 2, w, 1536, 576, 324, x)        # ggml type 2 = Q4_0; w: uint8 [rows, 324]

Weights are uint8 arrays of GGUF's bytes (a memory map is fine): row r at byte r * row_bytes.
A non-zero return (bad arguments) raises ValueError naming the call.
"""

from __future__ import annotations

import numpy as np


def native_load(path):
    """The library at `path` (ctypes.CDLL) with every entry's argument types declared."""
    import ctypes

    lib = ctypes.CDLL(str(path))
    i64, i32, p, f32 = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_float
    signatures = {
        "strata_abi_version": [],
        "strata_set_threads": [i32],
        "strata_get_threads": [],
        "strata_mul_mat": [i32, p, i64, i64, i64, p, i64, p],
        "strata_mul_mat_repacked": [i32, p, i64, i64, i64, p, i64, p],
        "strata_mul_mat_ggml": [i32, p, i64, i64, i64, p, i64, p],
        "strata_get_rows": [i32, p, i64, i64, i64, p, i64, p],
        "strata_mul_mat_id": [i32, p, i64, i64, i64, i64, p, i64, p, i64, p],
        "strata_mul_mat_id_b": [i32, p, i64, i64, i64, i64, p, i64, i64, p, i64, p],
        "strata_mul_mat_id_repacked": [i32, p, i64, i64, i64, i64, p, i64, i64, p, i64, p],
        "strata_flash_attn_f16": [p, i64, i64, i64, p, p, i64, i64, i64, p, f32, p],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = i32
    if lib.strata_abi_version() != 1:
        raise ValueError(f"native kernel library {path}: ABI version {lib.strata_abi_version()}, expected 1")
    return lib


def native_check(rc, what):
    """Raise ValueError when a native call returned non-zero."""
    if rc != 0:
        raise ValueError(f"native kernel {what}: bad arguments (code {rc})")


def native_set_threads(lib, n):
    """Size the library's thread pool (one pool for the life of the library)."""
    native_check(lib.strata_set_threads(int(n)), "strata_set_threads")


def native_ptr(a):
    """The data address of a C-contiguous numpy array (None for an empty one)."""
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("native kernel: array is not C-contiguous")
    return a.ctypes.data if a.size else None


def native_mul_mat(lib, ggml_type, w, rows, k, row_bytes, x):
    """x [..., k] times the packed weight [rows, k]^T -> [..., rows] float32 (ggml's MUL_MAT)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size // k if k else 0
    y = np.empty(x.shape[:-1] + (rows,), dtype=np.float32)
    native_check(lib.strata_mul_mat(int(ggml_type), native_ptr(w), rows, k, row_bytes, native_ptr(x), n,
                                    native_ptr(y)), "strata_mul_mat")
    return y


def native_mul_mat_ggml(lib, ggml_type, w, rows, k, row_bytes, x):
    """What ggml-cpu's MUL_MAT gives for a weight it does not repack: native_mul_mat for one
    activation row; llamafile's tinyBLAS order for more on F32, F16, BF16 and IQ4_NL."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size // k if k else 0
    y = np.empty(x.shape[:-1] + (rows,), dtype=np.float32)
    native_check(lib.strata_mul_mat_ggml(int(ggml_type), native_ptr(w), rows, k, row_bytes, native_ptr(x), n,
                                         native_ptr(y)), "strata_mul_mat_ggml")
    return y


def native_mul_mat_repacked(lib, ggml_type, w, rows, k, row_bytes, x):
    """native_mul_mat in the order of ggml-cpu's repacked Q4_0 / IQ4_NL / Q4_K kernels
    (llama.cpp's CPU_REPACK on x86 with AVX2, for such weights of a multiple of 8 rows)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size // k if k else 0
    y = np.empty(x.shape[:-1] + (rows,), dtype=np.float32)
    native_check(lib.strata_mul_mat_repacked(int(ggml_type), native_ptr(w), rows, k, row_bytes, native_ptr(x), n,
                                             native_ptr(y)), "strata_mul_mat_repacked")
    return y


def native_get_rows(lib, ggml_type, w, rows, k, row_bytes, ids):
    """Rows `ids` of the packed weight [rows, k], dequantized -> [len(ids), k] float32."""
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    out = np.empty(ids.shape + (k,), dtype=np.float32)
    native_check(lib.strata_get_rows(int(ggml_type), native_ptr(w), rows, k, row_bytes, native_ptr(ids),
                                     ids.size, native_ptr(out)), "strata_get_rows")
    return out


def native_mul_mat_id(lib, ggml_type, w, experts, rows, k, row_bytes, x, ids, repacked=False):
    """MUL_MAT_ID on packed experts [experts, rows, k]: x [T, Nb, k] (Nb 1 or U), ids [T, U]
    -> [T, U, rows]; slot (t, j) is expert ids[t, j] times x[t, j % Nb]. `repacked`: in the
    order of ggml-cpu's repacked GEMV (Q4_0, IQ4_NL, Q4_K)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    t, used = ids.shape
    y = np.empty((t, used, rows), dtype=np.float32)
    fn = lib.strata_mul_mat_id_repacked if repacked else lib.strata_mul_mat_id_b
    native_check(fn(int(ggml_type), native_ptr(w), experts, rows, k, row_bytes, native_ptr(x), t, x.shape[1],
                    native_ptr(ids), used, native_ptr(y)), "strata_mul_mat_id")
    return y


def native_flash_attn_f16(lib, q, k, v, mask, scale):
    """FLASH_ATTN_EXT over float16 K [Hkv, N, D] and V [Hkv, N, Dv] as ggml-cpu computes it:
    q [Hq, S, D] float32, mask [S, N] or None -> [S, Hq, Dv] float32."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float16)
    v = np.ascontiguousarray(v, dtype=np.float16)
    hq, s, d = q.shape
    hkv, n, dv = v.shape
    m = None if mask is None else np.ascontiguousarray(mask, dtype=np.float32)
    out = np.empty((s, hq, dv), dtype=np.float32)
    native_check(lib.strata_flash_attn_f16(native_ptr(q), hq, s, d, native_ptr(k), native_ptr(v), hkv, n, dv,
                                           None if m is None else native_ptr(m), float(scale), native_ptr(out)),
                 "strata_flash_attn_f16")
    return out
