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
    """ggml-cpu's own from_float and vec_dot for a type (ggml_get_type_traits_cpu)."""

    class Traits(ctypes.Structure):
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                    ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]

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
