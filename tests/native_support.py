"""Helpers of the native-kernel tests: the library built once per session, random weight blocks
of every type, and ggml-cpu itself (the oracle's libggml-cpu.so) when it is built."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from strata.targets.cpu.native.build import build_library, find_compiler

#: ggml type id -> (name, values per block, bytes per block, byte offsets of its float16 scales)
TYPES = {
    0: ("f32", 1, 4, ()), 1: ("f16", 1, 2, ()), 30: ("bf16", 1, 2, ()),
    2: ("q4_0", 32, 18, (0,)), 3: ("q4_1", 32, 20, (0, 2)), 6: ("q5_0", 32, 22, (0,)),
    7: ("q5_1", 32, 24, (0, 2)), 8: ("q8_0", 32, 34, (0,)), 10: ("q2_K", 256, 84, (80, 82)),
    11: ("q3_K", 256, 110, (108,)), 12: ("q4_K", 256, 144, (0, 2)), 13: ("q5_K", 256, 176, (0, 2)),
    14: ("q6_K", 256, 210, (208,)), 20: ("iq4_nl", 32, 18, (0,)), 23: ("iq4_xs", 256, 136, (0,)),
}
ACTIVATION = {2: "q8_0", 6: "q8_0", 8: "q8_0", 20: "q8_0", 3: "q8_1", 7: "q8_1"}
LLAMA_CPP_DEFAULT = Path("/root/.cache/llamacpp-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp")


def random_weight(type_id: int, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [rows, row bytes]: random quants with float16 scales of a realistic size."""
    name, block, nbytes, scales = TYPES[type_id]
    if block == 1:
        w = (rng.standard_normal((rows, k)) * 0.05).astype(np.float32)
        if type_id == 1:
            w = w.astype(np.float16)
        elif type_id == 30:
            w = (w.view(np.uint32) >> 16).astype(np.uint16)
        return w.view(np.uint8).reshape(rows, -1)
    raw = rng.integers(0, 256, (rows, k // block, nbytes), dtype=np.uint8)
    for off in scales:
        d = (np.abs(rng.standard_normal((rows, k // block))) * 0.002 + 1e-4).astype(np.float16)
        raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, k // block, 2)
    return raw.reshape(rows, -1)


def build_once(tmp_root: Path, portable: bool = False) -> Path | None:
    return build_library(tmp_root / ("portable" if portable else "native"), portable=portable)


def have_compiler() -> bool:
    return find_compiler() is not None


def llama_cpp_dir() -> Path | None:
    root = Path(os.environ.get("LLAMA_CPP", LLAMA_CPP_DEFAULT))
    return root if (root / "build" / "bin" / "libggml-cpu.so").is_file() else None


class GgmlCpu:
    """ggml-cpu's own from_float and vec_dot for a type (ggml_get_type_traits_cpu), its repacked
    kernels and llamafile's tinyBLAS (llamafile_sgemm, on a one-thread ggml threadpool)."""

    class Traits(ctypes.Structure):
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                    ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]

    class ThreadpoolParams(ctypes.Structure):  # ggml.h's ggml_threadpool_params
        _fields_ = [("cpumask", ctypes.c_bool * 512), ("n_threads", ctypes.c_int), ("prio", ctypes.c_int),
                    ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool)]

    class ComputeParams(ctypes.Structure):  # ggml-cpu-impl.h's ggml_compute_params
        _fields_ = [("ith", ctypes.c_int), ("nth", ctypes.c_int), ("wsize", ctypes.c_size_t),
                    ("wdata", ctypes.c_void_p), ("threadpool", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]

    def __init__(self, root: Path):
        bin_dir = root / "build" / "bin"
        ctypes.CDLL(str(bin_dir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(str(bin_dir / "libggml-cpu.so"))
        self.lib.ggml_cpu_init()
        self.lib.ggml_get_type_traits_cpu.restype = ctypes.POINTER(self.Traits)
        self.lib.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
        base = ctypes.CDLL(str(bin_dir / "libggml-base.so"))
        base.ggml_row_size.restype = ctypes.c_size_t
        base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.base = base

    def activation_rows(self, type_id: int, k: int, x: np.ndarray) -> tuple[int, np.ndarray]:
        """(vec_dot_type, x's rows in it) as ggml-cpu's MUL_MAT makes them."""
        vt = self.lib.ggml_get_type_traits_cpu(type_id).contents.vec_dot_type
        x = np.ascontiguousarray(x, np.float32)
        if vt == 0:
            return vt, x
        from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            self.lib.ggml_get_type_traits_cpu(vt).contents.from_float)
        out = np.zeros((x.shape[0], self.base.ggml_row_size(vt, k)), np.uint8)
        for j in range(x.shape[0]):
            from_float(x[j].ctypes.data, out[j].ctypes.data, k)
        return vt, out

    def sgemm(self, type_id: int, w: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        """y [n, rows] from llamafile_sgemm (tinyBLAS); an AssertionError where it declines."""
        if not hasattr(self, "pool"):
            self.base.ggml_threadpool_params_default.restype = self.ThreadpoolParams
            self.base.ggml_threadpool_params_default.argtypes = [ctypes.c_int]
            tpp = self.base.ggml_threadpool_params_default(1)
            self.lib.ggml_threadpool_new.restype = ctypes.c_void_p
            self.lib.ggml_threadpool_new.argtypes = [ctypes.POINTER(self.ThreadpoolParams)]
            self.pool = self.lib.ggml_threadpool_new(ctypes.byref(tpp))
            i64, p = ctypes.c_int64, ctypes.c_void_p
            self.lib.llamafile_sgemm.restype = ctypes.c_bool
            self.lib.llamafile_sgemm.argtypes = [ctypes.POINTER(self.ComputeParams), i64, i64, i64, p, i64, p, i64,
                                                 p, i64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        vt, b = self.activation_rows(type_id, k, x)
        rows, n, blocks = w.shape[0], x.shape[0], k // TYPES[type_id][1]
        c = np.zeros((n, rows), np.float32)
        params = self.ComputeParams(0, 1, 0, None, self.pool, False)
        assert self.lib.llamafile_sgemm(ctypes.byref(params), rows, n, blocks, w.ctypes.data, blocks, b.ctypes.data,
                                        blocks, c.ctypes.data, rows, type_id, vt, 0)
        return c

    def mul_mat(self, type_id: int, w: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        """y [n, rows]: each activation row through from_float, then vec_dot with each weight row."""
        tr = self.lib.ggml_get_type_traits_cpu(type_id).contents
        act = self.lib.ggml_get_type_traits_cpu(tr.vec_dot_type).contents  # the activation's type
        from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(act.from_float) \
            if tr.vec_dot_type != 0 else None
        vec_dot = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                   ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)(tr.vec_dot)
        x = np.ascontiguousarray(x, np.float32)
        y = np.zeros((x.shape[0], w.shape[0]), np.float32)
        buf = np.zeros(self.base.ggml_row_size(tr.vec_dot_type, k) + 64, np.uint8)
        out = np.zeros(1, np.float32)
        for t in range(x.shape[0]):
            if from_float is None:
                act = x[t]
            else:
                from_float(x[t].ctypes.data, buf.ctypes.data, k)
                act = buf
            for r in range(w.shape[0]):
                row = np.ascontiguousarray(w[r])
                vec_dot(k, out.ctypes.data, 0, row.ctypes.data, 0, act.ctypes.data, 0, 1)
                y[t, r] = out[0]
        return y

    def mul_mat_repacked(self, type_id: int, w: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        """y [n, rows] through ggml-cpu's repacked GEMM / GEMV (ggml_gem[mv]_{q4_0,iq4_nl}_8x8_q8_0) on the
        weight repacked as llama.cpp does (make_block_q4_0x8 / _iq4_nlx8: 8 rows' blocks
        interleaved in 8-byte pieces, Q4_0's nibbles xor 0x88)."""
        rows, nb = w.shape[0], k // 32
        blocks = w.reshape(rows // 8, 8, nb, 18).transpose(0, 2, 1, 3)  # [group, block, row, 18]
        d = blocks[..., 0:2].reshape(rows // 8, nb, 16)
        qs = blocks[..., 2:].reshape(rows // 8, nb, 8, 2, 8)  # row, half, 8 bytes
        pieces = qs.transpose(0, 1, 3, 2, 4).reshape(rows // 8, nb, 128)  # piece i: row i % 8, half i // 8
        if type_id == 2:
            pieces = pieces ^ np.uint8(0x88)
        packed = np.ascontiguousarray(np.concatenate([d, pieces], axis=-1))
        name = {2: "ggml_gemv_q4_0_8x8_q8_0", 20: "ggml_gemv_iq4_nl_8x8_q8_0"}[type_id]
        gemv = getattr(self.lib, name)
        gemv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int, ctypes.c_int]
        q8 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            self.lib.ggml_get_type_traits_cpu(8).contents.from_float)
        x = np.ascontiguousarray(x, np.float32)
        y = np.zeros((x.shape[0], rows), np.float32)
        act = np.zeros(nb * 34, np.uint8)
        # four rows and more: the GEMM on 4 rows at a time (quantize_mat_q8_0: 4 rows interleaved),
        # the GEMV on the rest (ggml-cpu's repack forward_mul_mat)
        gemm = getattr(self.lib, name.replace("gemv", "gemm"))
        gemm.argtypes = gemv.argtypes
        quantize_mat = self.lib.ggml_quantize_mat_q8_0_4x8
        quantize_mat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        n4 = x.shape[0] - x.shape[0] % 4
        act4 = np.zeros(4 * nb * 34, np.uint8)
        for t in range(0, n4, 4):
            rows4 = np.ascontiguousarray(x[t:t + 4])
            quantize_mat(rows4.ctypes.data, act4.ctypes.data, k)
            out = np.zeros((4, rows), np.float32)
            gemm(k, out.ctypes.data, rows, packed.ctypes.data, act4.ctypes.data, 4, rows)
            y[t:t + 4] = out
        for t in range(n4, x.shape[0]):
            q8(x[t].ctypes.data, act.ctypes.data, k)
            out = np.zeros(rows, np.float32)
            gemv(k, out.ctypes.data, 0, packed.ctypes.data, act.ctypes.data, 1, rows)
            y[t] = out
        return y

    def mul_mat_repacked_q4_K(self, w: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
        """y [n, rows] through ggml-cpu's repacked Q4_K GEMM / GEMV (ggml_gem[mv]_q4_K_8x8_q8_K) on the
        weight repacked as make_block_q4_Kx8 does (8 rows' quants in 8-byte pieces, their 6-bit
        scales and mins regrouped by sub-block)."""
        rows, nb = w.shape[0], k // 256
        blocks = w.reshape(rows // 8, 8, nb, 144).transpose(0, 2, 1, 3)  # [group, block, row, 144]
        d, dmin = blocks[..., 0:2], blocks[..., 2:4]
        sc = blocks[..., 4:16].astype(np.int32)  # [g, b, row, 12]
        qs = blocks[..., 16:].reshape(rows // 8, nb, 8, 16, 8)  # row, piece, 8 bytes
        pieces = qs.transpose(0, 1, 3, 2, 4).reshape(rows // 8, nb, 1024)
        out_sc = np.zeros((rows // 8, nb, 96), np.int32)
        for half in range(2):
            for i in range(4):
                if half == 0:
                    s_, m_ = sc[..., i] & 63, sc[..., i + 4] & 63
                else:
                    s_ = ((sc[..., i] & 192) >> 2) | (sc[..., i + 8] & 15)
                    m_ = ((sc[..., i + 4] & 192) >> 2) | ((sc[..., i + 8] & 240) >> 4)
                base = 48 * half + 12 * i
                for j in range(4):
                    out_sc[..., base + j] = (s_[..., j] & 63) + ((s_[..., j + 4] & 48) << 2)
                    out_sc[..., base + 4 + j] = (m_[..., j] & 63) + ((m_[..., j + 4] & 48) << 2)
                    out_sc[..., base + 8 + j] = (s_[..., j + 4] & 15) + ((m_[..., j + 4] & 15) << 4)
        packed = np.ascontiguousarray(np.concatenate(
            [d.reshape(rows // 8, nb, 16), dmin.reshape(rows // 8, nb, 16), (out_sc & 255).astype(np.uint8), pieces],
            axis=-1))
        p = ctypes.c_void_p
        sig = [ctypes.c_int, p, ctypes.c_size_t, p, p, ctypes.c_int, ctypes.c_int]
        gemv, gemm = self.lib.ggml_gemv_q4_K_8x8_q8_K, self.lib.ggml_gemm_q4_K_8x8_q8_K
        gemv.argtypes = gemm.argtypes = sig
        quantize_mat = self.lib.ggml_quantize_mat_q8_K_4x8
        quantize_mat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        q8k = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            self.lib.ggml_get_type_traits_cpu(15).contents.from_float)
        x = np.ascontiguousarray(x, np.float32)
        y = np.zeros((x.shape[0], rows), np.float32)
        n4 = x.shape[0] - x.shape[0] % 4
        act4 = np.zeros(4 * nb * 292 + 64, np.uint8)
        for t in range(0, n4, 4):
            rows4 = np.ascontiguousarray(x[t:t + 4])
            quantize_mat(rows4.ctypes.data, act4.ctypes.data, k)
            out = np.zeros((4, rows), np.float32)
            gemm(k, out.ctypes.data, rows, packed.ctypes.data, act4.ctypes.data, 4, rows)
            y[t:t + 4] = out
        act = np.zeros(nb * 292 + 64, np.uint8)
        for t in range(n4, x.shape[0]):
            q8k(x[t].ctypes.data, act.ctypes.data, k)
            out = np.zeros(rows, np.float32)
            gemv(k, out.ctypes.data, 0, packed.ctypes.data, act.ctypes.data, 1, rows)
            y[t] = out
        return y
