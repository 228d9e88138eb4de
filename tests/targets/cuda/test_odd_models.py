"""Whole odd-size models (conftest.py: head dims 12, 80 and 96, hidden 48 and 80, 6 and 60
experts, vocab 150, intermediates 20 and 96) through the CUDA target: generation in Triton's
interpreter as `strata run --target cuda --interpret` runs it, against the CPU target; every
kernel launch of their bf16 / fp8 / int4 builds compiled for sm_90a without spills; and an error
that escapes a kernel launch reaching the user as one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("triton", reason="the CUDA target tests need triton (the `test` extra)")
pytest.importorskip("torch", reason="the CUDA target tests need torch (the `test` extra)")

from support import ROOT, cpu_generate, write_checkpoint  # noqa: E402
from strata.errors import run_tool  # noqa: E402
from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.runtime.generate import generate  # noqa: E402
from strata.targets.cpu.program import load_compiled  # noqa: E402
from strata.targets.cuda import program as cuda_program  # noqa: E402

PROMPT = [3, 1, 4]
LONG_PROMPT = [5, 9, 1, 2, 7, 3, 3, 8, 1, 0, 4, 6]  # 12 rows: the prefill's projections take the GEMM
STEPS = 2  # the prefill's token and a decode step


@pytest.mark.parametrize("cfg,prompt", [("odd_qwen35_moe", PROMPT), ("odd_qwen3_next", PROMPT), ("odd_qwen3", PROMPT),
                                        ("odd_llama", LONG_PROMPT)])
def test_greedy_matches_cpu_target_at_odd_sizes(odd_checkpoints, tmp_path, cfg, prompt):
    """Prefill and a decode step through the generated kernels (f32, the interpreter's recipe) in
    the runtime's one loop, as `strata run --target cuda --interpret` runs them: the CPU target's
    ids, logits within 1e-4 of its largest."""
    model = load_model(odd_checkpoints[cfg])
    store = model.open_weights(quiet=True)
    want_ids, want = cpu_generate(load_compiled(compile_model(model, "cpu", tmp_path / "cpu", {"ctx": 32})), store,
                                  prompt, STEPS)
    out = compile_model(model, "cuda", tmp_path / "cuda", {"ctx": 32, "recipe": "f32"})
    got = generate(cuda_program.load(out, store, interpret=True), prompt, STEPS, keep_logits=True)
    assert got.ids == want_ids
    assert float(np.abs(got.logits - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_a_failing_kernel_launch_is_one_line(odd_checkpoints, tmp_path, monkeypatch, capsys):
    """An exception raised inside a kernel launch (here the interpreter refusing the norm's block of
    48 lanes, as the templates did before they padded to a power of two) reaches `strata run` as one
    line naming the entry, the group and the launcher, without a traceback, exit code 1."""
    model = load_model(odd_checkpoints["odd_llama"])
    out = compile_model(model, "cuda", tmp_path / "c", {"ctx": 32, "recipe": "f32"})
    program = cuda_program.load(out, model.open_weights(quiet=True), interpret=True)
    module, kernels = program.module, program.model.kernels

    def unpadded_norm(x, w, eps, *, out=None, **_):
        n, c = x.shape
        kernels.rms_norm_kernel[(n,)](x, x, w, out, out, c, x.stride(0), x.stride(0), out.stride(0), out.stride(0), eps,
                                      HAS_RES=False, BLOCK=c)
        return out

    monkeypatch.setattr(kernels, "launch_rms_norm", unpadded_norm)
    with pytest.raises(module.ModelError) as info:  # the generated model's own error, the original its cause
        program.model.prefill(PROMPT, 0)
    assert type(info.value.__cause__).__name__ == "InterpreterError"
    assert run_tool("strata", lambda: generate(program, PROMPT, STEPS)) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("strata: error: @prefill: a kernel launch failed in group input_norm_residual")
    assert "launch_rms_norm" in err and "power of 2" in err


# ---------------------------------------------------------------------------------------------
# Ahead of time, for sm_90a (in a subprocess: TRITON_INTERPRET must be unset)

#: Each model in bf16 (as a bf16 checkpoint compiles), fp8 weights on 60 experts, int4 on 6.
AOT_BUILDS = [("odd_qwen35_moe", "bf16"), ("odd_qwen3_next", "bf16"), ("odd_qwen3", "bf16"), ("odd_llama", "bf16"),
              ("odd_qwen3_next", "fp8-bf16head"), ("odd_qwen35_moe", "w4a16")]
#: Prefills of 80 rows (the 64-row GEMM and attention tiles, two delta-rule chunks), 9 (the 16-row
#: GEMM tile, 32-row attention blocks) and 5 (the GEMV, 16-row attention blocks); then a decode step.
AOT_ROWS = (80, 9, 5)

_AOT_SCRIPT = """
import json, sys
from pathlib import Path
from strata.pipeline import compile_model, load_model
from strata.targets.cuda.aot_model import compile_launches, launch_key, record_launches
from strata.targets.cuda.kernels import attention, elementwise, gdn, gemm, moe, norms

builds, rows, out = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2])), Path(sys.argv[3])
launches = {}
for name, directory, recipe in builds:
    model = load_model(Path(directory))
    stage = compile_model(model, "cuda", out / f"{name}-{recipe}", {"ctx": 96, "recipe": recipe})
    params = {n: tuple(t.shape) for n, t in model.params().items()}
    for spec in record_launches(stage, params, rows):
        launches.setdefault(launch_key(spec), (stage / "kernels.py", spec, f"{name}/{recipe}"))
# attention past the models' head dims: heads of 160 and 256 shared by 1, 3 or 5 query heads, at each row block
from strata.targets.cuda.aot import Spec
bf16 = {p: "*bf16" for p in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")} | {"bt_ptr": "*i32", "pos_ptr": "*i32"}
any_kernels = next(iter(launches.values()))[0]
for group in (1, 3, 5):
    for head_dim in (160, 256):
        for q_rows in (8, 24, 48):
            bm, bn, warps = attention.attention_tiles(q_rows, head_dim, group, True)
            spec = Spec("attention_kernel", "attention_kernel", dict(
                GROUP=group, HEAD_DIM=head_dim, BLOCK_D=256, BLOCK_M=bm, BLOCK_N=bn, PAGED=False, PAGE=16,
                DOT_BF16=True, POS_DEV=bm == 16), bf16, warps, 3)
            launches.setdefault(launch_key(spec), (any_kernels, spec, f"heads of {head_dim}"))
results = compile_launches([(k, s) for k, s, _ in launches.values()], jobs=2)
library = sorted(n for m in (attention, elementwise, gdn, gemm, moe, norms) for n, f in vars(m).items()
                 if type(f).__name__ == "JITFunction" and n.endswith("_kernel"))
report = [dict(vars(r), build=b, constexprs=s.constexprs, warps=s.num_warps)
          for r, (_, s, b) in zip(results, launches.values())]
print(json.dumps({"library": library, "results": report}))
"""


@pytest.fixture(scope="module")
def aot(odd_configs, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("odd_aot")
    builds = []
    for name, recipe in AOT_BUILDS:
        directory = root / name
        if not directory.exists():  # bf16 weights and config: what a downloaded model compiles from
            write_checkpoint(dataclasses.replace(odd_configs[name], dtype="bfloat16"), directory, dtype="bfloat16")
        builds.append((name, str(directory), recipe))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _AOT_SCRIPT, json.dumps(builds), json.dumps(AOT_ROWS),
                           str(root / "out")], env=env, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    for r in report["results"]:  # the report (pytest -s shows it)
        sizes = {k: v for k, v in r["constexprs"].items()
                 if k.startswith(("BLOCK", "HEAD", "DK", "DV", "GROUP", "FMT"))}
        print(f"{r['build']:28} {r['kernel']:24} regs {r['regs']:3} shared {r['shared']:6} local {r['local']:4} "
              f"warps {r['warps']} {sizes} {'ok' if r['ok'] else '; '.join(r['problems'])}")
    return report


def test_every_odd_size_launch_compiles_for_sm90a_without_spills(aot):
    """Every distinct launch of the odd-size builds (and attention_tiles' tiles for heads of 160 and
    256 shared by 1, 3 or 5 query heads): compiled for sm_90a, <= 255 registers, <= 227 KiB of
    shared memory, no local memory (spills or stack)."""
    bad = [(r["build"], r["name"], r["constexprs"], r["problems"]) for r in aot["results"] if not r["ok"]]
    assert not bad, bad
    assert all(r["target"] == "sm_90a" and r["local"] == 0 and r["regs"] <= 255 for r in aot["results"])


def test_the_odd_size_builds_launch_every_kernel_template(aot):
    """The sweep reaches every @triton.jit kernel of the modules the groups launch (attention,
    elementwise, gdn, gemm, moe, norms), the ones that take a head dim at an odd one. (The
    sampling module's kernel is launched by no group yet; test_sampling_kernel.py tests it.)"""
    launched = {r["kernel"] for r in aot["results"]}
    assert set(aot["library"]) <= launched, sorted(set(aot["library"]) - launched)
    odd = {r["kernel"] for r in aot["results"]
           if any(r["constexprs"].get(k, 16) & (r["constexprs"].get(k, 16) - 1) for k in ("HEAD_DIM", "DK", "GROUP"))}
    assert {"attention_kernel", "rope_kernel", "conv_l2_kernel", "gdn_step_kernel", "gdn_chunk_prep_kernel",
            "gdn_chunk_state_kernel", "gated_rms_norm_kernel", "split_qg_kernel"} <= odd, odd
