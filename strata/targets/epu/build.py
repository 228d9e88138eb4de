"""Building the EPU target's C++ with g++ and running its driver.

    exe = build_epu(out)                                  # OUT/build/model, g++ -O2 -std=c++17
    ids, logits, frac = run_epu(out, [1, 2, 3], 4)        # the driver's whole autoregressive loop

The driver also steps under a host (`./model weights.bin --steps`, see `program.py`), which is
how `strata run --target epu` drives it through the runtime's generation loop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strata.targets.epu.stages import EpuError, digest, file_digests, note


def build_epu(out: str | Path, gxx: str = "g++") -> Path:
    """OUT/build/model from OUT/cpp with `g++ -O2 -std=c++17` (reused while the sources match)."""
    out = Path(out)
    cpp = out / "cpp"
    if not (cpp / "main.cpp").is_file():
        raise EpuError(f"{out}: no cpp/main.cpp; compile it first (strata compile MODEL --target epu -o {out})")
    exe = shutil.which(gxx)
    if exe is None:
        raise EpuError(f"{gxx} is not on PATH: the EPU target's C++ needs a C++17 compiler (g++ -O2 -std=c++17)")
    build = out / "build"
    build.mkdir(exist_ok=True)
    stamp = digest(file_digests(cpp))
    binary, stamp_file = build / "model", build / "model.sha256"
    if binary.is_file() and stamp_file.is_file() and stamp_file.read_text().strip() == stamp:
        return binary
    note(f"[epu] g++ -O2 -std=c++17 {cpp / 'main.cpp'}")
    t0 = time.perf_counter()
    tmp = build / ".model.tmp"
    r = subprocess.run([exe, "-O2", "-std=c++17", "-o", str(tmp.resolve()), "main.cpp"], cwd=cpp, capture_output=True, text=True)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["(no message)"])[0]
        raise EpuError(f"{cpp / 'main.cpp'}: g++ failed: {first[:300]}")
    os.replace(tmp, binary)
    stamp_file.write_text(stamp + "\n")
    note(f"[epu] built {binary} in {time.perf_counter() - t0:.1f} s")
    return binary


def read_logits(path: str | Path) -> tuple[np.ndarray, int]:
    """The driver's logits file: (int32 [steps, vocab], frac)."""
    raw = Path(path).read_bytes()
    if len(raw) < 20 or raw[:8] != b"STRLOGT1":
        raise EpuError(f"{path}: not a logits file of the EPU driver")
    steps, vocab, frac = np.frombuffer(raw[8:20], "<i4")
    data = np.frombuffer(raw[20:], "<i4")
    if data.size != int(steps) * int(vocab):
        raise EpuError(f"{path}: {data.size} logits, expected {int(steps)} x {int(vocab)}")
    return data.reshape(int(steps), int(vocab)).astype(np.int64), int(frac)


def run_epu(out: str | Path, prompt: Sequence[int], n_new: int, logits: str | Path | None = None) -> tuple[list[int], np.ndarray, int]:
    """Run the built driver: (the generated ids, each step's logits as integers, their frac)."""
    out = Path(out)
    binary = build_epu(out)
    target = Path(logits) if logits is not None else out / "build" / "logits.bin"
    r = subprocess.run([str(binary.resolve()), str((out / "cpp" / "weights.bin").resolve()), ",".join(map(str, prompt)),
                        str(int(n_new)), str(target.resolve())], capture_output=True, text=True)
    if r.returncode != 0:
        raise EpuError(f"{binary}: {(r.stderr.strip().splitlines() or ['failed'])[-1][:300]}")
    ids = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    data, frac = read_logits(target)
    return ids, data, frac


