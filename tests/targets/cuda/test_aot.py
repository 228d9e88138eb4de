"""Ahead-of-time compilation of every CUDA kernel for Hopper (sm_90a) without a GPU:
`python -m strata.targets.cuda.aot` compiles each spec of `aot.SPECS` (the kernels at Qwen3-8B's
and Qwen3.6-35B-A3B's sizes) with triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))
and reads registers, shared and local memory from the cubin. It runs in a subprocess without
TRITON_INTERPRET: the interpreter tests set it, and interpreted kernels cannot be compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="AOT compilation needs triton (the `test` extra)")

from support import ROOT  # noqa: E402
from strata.targets.cuda import aot, kernel_table  # noqa: E402


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "strata.targets.cuda.aot", "--json", "--jobs", "2"], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    out = {r["name"]: r for r in json.loads(proc.stdout)}
    for r in out.values():  # the report (pytest -s shows it)
        print(f"{r['name']:32} {r['target']:7} regs {r['regs']:3} shared {r['shared']:6} local {r['local']:5} "
              f"{'ok' if r['ok'] else '; '.join(r['problems'])}")
    return out


def test_every_spec_compiles_for_sm90a(results):
    assert set(results) == {s.name for s in aot.SPECS}
    for name, r in results.items():
        assert not any(p.startswith("compile failed") for p in r["problems"]), (name, r["problems"])
        assert r["target"] == "sm_90a", name


def test_within_h200_limits(results):
    """<= 255 registers per thread, <= 227 KiB of shared memory, no local memory (spills), except
    the known spills (none now: the chunked delta rule's kernels fit), which must still spill (so
    that a fix removes them from KNOWN_SPILLS)."""
    for name in ("q36.gdn_chunk_prep", "q36.gdn_chunk_state"):
        assert name not in aot.KNOWN_SPILLS and results[name]["local"] == 0, (name, results[name])
    for name, r in results.items():
        assert r["regs"] <= aot.MAX_REGS and r["shared"] <= aot.MAX_SHARED, (name, r)
        if name in aot.KNOWN_SPILLS:
            assert r["local"] > 0 and not r["ok"], f"{name} no longer spills: drop it from aot.KNOWN_SPILLS"
        else:
            assert r["ok"], (name, r["problems"])


def test_every_kernel_of_the_table_has_a_spec():
    specced = {s.kernel for s in aot.SPECS}
    used = {k for e in kernel_table.ENTRIES for k in e.kernels}
    used |= {k for _, ks in kernel_table.SINGLE.values() for k in ks.split()}
    assert used <= specced, sorted(used - specced)
