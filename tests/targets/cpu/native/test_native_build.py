"""Building and loading the native kernels: content-addressed names, the missing-compiler line, a
loader that needs nothing of strata, and a run under AddressSanitizer."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from native_support import have_compiler
from strata.targets.cpu.kernel_library import KernelLibrary
from strata.targets.cpu.native import build, loader

needs_compiler = pytest.mark.skipif(not have_compiler(), reason="no g++ (nor clang++, $CXX or ziglang)")


@needs_compiler
def test_build_is_content_addressed_and_reused(tmp_path):
    first = build.build_library(tmp_path)
    assert first is not None and first.name.startswith("libstrata_kernels-") and first.suffix == ".so"
    mtime = first.stat().st_mtime_ns
    again = build.build_library(tmp_path)
    assert again == first and again.stat().st_mtime_ns == mtime  # not rebuilt
    portable = build.build_library(tmp_path, portable=True)
    assert portable is not None and portable != first  # other flags, other name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, portable.name])  # no temp files left


def test_no_compiler_gives_none_and_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "ziglang", None)  # importing it fails
    assert build.build_library(tmp_path / "out") is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no C++ compiler found" in err
    assert not (tmp_path / "out").exists()


@needs_compiler
def test_a_compile_error_gives_none_and_one_line(tmp_path, capsys):
    assert build.build_library(tmp_path, extra_flags=("-include", "no_such_header.h")) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not compile" in err
    assert list(tmp_path.iterdir()) == []


def test_loader_is_self_contained():
    """Only ctypes and numpy: generated modules carry its functions without strata installed."""
    tree = ast.parse(Path(loader.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "ctypes", "numpy"}
    library = KernelLibrary(Path(loader.__file__).read_text())
    needed = library.closure({"native_load", "native_mul_mat", "native_get_rows", "native_mul_mat_id",
                              "native_flash_attn_f16", "native_set_threads"})
    assert {"native_check", "native_ptr"} <= set(needed)


@needs_compiler
def test_copied_loader_runs_in_a_namespace_holding_only_np(tmp_path):
    import numpy as np

    library = KernelLibrary(Path(loader.__file__).read_text())
    names = library.closure({"native_load", "native_mul_mat", "native_set_threads"})
    namespace = {"np": np}
    exec("\n\n".join(library.text(n) for n in names), namespace)  # noqa: S102 - our own source
    lib = namespace["native_load"](build.build_library(tmp_path))
    namespace["native_set_threads"](lib, 2)
    w = np.ones((3, 4), np.float32).view(np.uint8)  # F32 [3, 4]
    y = namespace["native_mul_mat"](lib, 0, w, 3, 4, 16, np.arange(8, dtype=np.float32).reshape(2, 4))
    assert np.array_equal(y, [[6, 6, 6], [22, 22, 22]])


ASAN_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path[:0] = [sys.argv[2], sys.argv[3]]
    from native_support import TYPES, random_weight
    from strata.targets.cpu.native.loader import *
    lib = native_load(sys.argv[1])
    native_set_threads(lib, 2)
    rng = np.random.default_rng(0)
    for t, (name, block, nbytes, _) in TYPES.items():
        k = 512
        w = np.array(random_weight(t, 5, k, rng))  # exactly rows * row_bytes, its own allocation
        x = rng.standard_normal((3, k)).astype(np.float32)
        native_mul_mat(lib, t, w, 5, k, w.shape[1], x)
        native_get_rows(lib, t, w, 5, k, w.shape[1], np.array([4, 0], np.int32))
        native_mul_mat_id(lib, t, w, 5, 1, k, w.shape[1], x[:, None], np.array([[4], [0], [2]], np.int32))
    q = rng.standard_normal((4, 3, 64)).astype(np.float32)
    kv = rng.standard_normal((2, 9, 64)).astype(np.float16)
    native_flash_attn_f16(lib, q, kv, kv, np.zeros((3, 9), np.float32), 0.125)
    print("ok")
""")


@needs_compiler
def test_kernels_run_clean_under_address_sanitizer(tmp_path):
    cxx = build.find_compiler()[0]
    runtime = subprocess.run([*cxx, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not runtime or not os.path.isabs(runtime) or not os.path.exists(runtime):
        pytest.skip("no libasan.so for the C++ compiler")
    lib = build.build_library(tmp_path, extra_flags=("-fsanitize=address", "-fno-omit-frame-pointer", "-g"))
    assert lib is not None
    script = tmp_path / "run.py"
    script.write_text(ASAN_SCRIPT)
    root = Path(__file__).resolve().parents[4]
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, str(script), str(lib), str(root), str(root / "tests")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert "AddressSanitizer" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


FORK_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path[:0] = [sys.argv[2], sys.argv[3]]
    from native_support import random_weight
    from strata.targets.cpu.native.loader import *
    lib = native_load(sys.argv[1])
    native_set_threads(lib, 2)
    w = random_weight(2, 64, 256, np.random.default_rng(0))
    x = np.ones((1, 256), np.float32)
    a = native_mul_mat(lib, 2, w, 64, 256, w.shape[1], x)
    pid = os.fork()
    if pid == 0:  # the pool's workers stayed in the parent
        b = native_mul_mat(lib, 2, w, 64, 256, w.shape[1], x)
        native_set_threads(lib, 2)
        c = native_mul_mat(lib, 2, w, 64, 256, w.shape[1], x)
        os._exit(0 if np.array_equal(a, b) and np.array_equal(a, c) else 3)
    print(os.waitpid(pid, 0)[1] >> 8)
""")


@needs_compiler
def test_a_forked_child_computes_without_the_parents_workers(tmp_path):
    lib = build.build_library(tmp_path)
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    root = Path(__file__).resolve().parents[4]
    done = subprocess.run([sys.executable, str(script), str(lib), str(root), str(root / "tests")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(root)))
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr[-2000:]
