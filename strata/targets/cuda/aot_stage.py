"""`strata compile --target cuda --aot sm_90a`: every kernel launch of a compiled model compiled
for Hopper into the stage `OUT/aot` (PTX, cubin, report.json), with the verdict on its limits."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from strata.artifacts.stage import check_destination, locked, manifest_bytes, write_stage
from strata.errors import StrataError, say


def write_aot(out: Path, params: Mapping[str, tuple[int, ...]], arch: str, allow_spills: bool) -> Path:
    """Compile the kernels of the cuda stage `out` for `arch` into the stage `out/aot`; print the
    report; raise (one line) if a kernel exceeds the limits (spills allowed with `allow_spills`)."""
    from strata.targets.cuda.aot_model import compile_model_kernels, report, verdict

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata-aot-") as tmp:
        results = compile_model_kernels(out, params, arch=arch, aot_dir=tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    files["report.json"] = (json.dumps([asdict(r) for r in results], indent=1) + "\n").encode()
    inputs = {"stage": json.loads((out / "manifest.json").read_text())["outputs"], "arch": arch}
    files["manifest.json"] = manifest_bytes("cuda-aot", inputs, files)
    dest = out / "aot"
    check_destination(dest, set(files))
    with locked(dest):
        write_stage(dest, files)
    sys.stdout.write(report(results))
    say(f"compiled {len(results)} kernel launches for {arch} in {time.perf_counter() - t0:.1f} s into {dest}")
    problem = verdict(results, allow_spills)
    if problem is not None:
        raise StrataError(problem)
    return dest
