"""bench/gpu_check.sh without a GPU: its syntax, its one-line refusal, and its --dry-run (every
step tiny on the CPU, the cuda target in Triton's interpreter) checked against transformers;
the serve step's runner on the cpu target; the table of a folder whose steps left nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gpu_qwen3_8b  # noqa: E402
import gpu_table  # noqa: E402

SCRIPT = ROOT / "bench" / "gpu_check.sh"
#: The dry run builds, compiles and runs a tiny model in Triton's interpreter on a shared machine: bounded, not timed.
DRY_RUN_TIMEOUT_S = 1200


def _env():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHON"] = sys.executable
    return env


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_refuses_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the check would run")
    r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=_env(),
                       timeout=300)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("gpu_check: needs a CUDA GPU") and "--dry-run" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    pytest.importorskip("transformers", reason="the dry run compares with transformers' Qwen3")
    pytest.importorskip("triton", reason="the dry run runs the cuda target in Triton's interpreter")
    out = tmp_path_factory.mktemp("gpu_check")
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], capture_output=True, text=True, env=_env(),
                       timeout=DRY_RUN_TIMEOUT_S)
    return out, r


def test_dry_run_prints_one_table(dry_run):
    out, r = dry_run
    assert r.returncode == 0, r.stderr[-3000:]
    rows = r.stdout.strip().splitlines()
    assert rows[0].startswith("| check") and all(row.startswith("|") for row in rows)
    labels = [row.split("|")[1].strip() for row in rows[2:]]
    assert labels[0] == "GPU tests (pytest)" and labels[1].startswith("prefill tok/s (qwen3-tiny, f32")
    assert "decode HBM bandwidth" in labels and "greedy ids vs HF eager" in labels
    assert (out / "tests.rc").read_text().strip() == "0"


def test_dry_run_strata_equals_transformers(dry_run):
    """The interpreter's f32 program of the random Qwen3 gives transformers' greedy ids and logits."""
    out, _ = dry_run
    rep = json.loads((out / "qwen3.json").read_text())
    assert rep["ids_agree"] == rep["new"] == 4
    assert rep["first_logits_max_diff"] <= 1e-4
    assert rep["engines"]["strata"]["decode_tok_s"] > 0 and rep["hbm_pct"] is None  # no bandwidth figure on a CPU


def test_dry_run_serve_row(dry_run):
    """`strata serve --target cuda --interpret`: served (tokens/s) or refused in the server's one line."""
    out, _ = dry_run
    rep = json.loads((out / "serve.json").read_text())
    if "error" in rep:
        assert rep["error"].startswith("strata serve exited 1: strata: error: ") and "\n" not in rep["error"]
    else:
        assert [r["clients"] for r in rep["runs"]] == [1, 4] and all(r["tok_s"] > 0 for r in rep["runs"])


def test_serve_runner_on_the_cpu_target(dry_run, tmp_path):
    out, _ = dry_run
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_serve.py"), str(out / "qwen3-tiny"), "--target", "cpu",
                        "--clients", "1,2", "--prompt", "8", "--new", "4", "--start-timeout", "300", "--timeout", "300",
                        "--json", str(tmp_path / "s.json")], capture_output=True, text=True, env=_env(), timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads((tmp_path / "s.json").read_text())
    assert "error" not in rep and [x["clients"] for x in rep["runs"]] == [1, 2]
    assert all(x["tok_s"] > 0 and x["tokens"] > 0 for x in rep["runs"])


def test_table_of_steps_that_left_nothing(tmp_path):
    text = gpu_table.table(tmp_path)
    assert "no pytest summary" in text and "no qwen3.json (see qwen3.log)" in text and "no serve.json" in text


@pytest.mark.parametrize("name,tb_s", [("NVIDIA H200", 4.8), ("NVIDIA H100 80GB HBM3", 3.35),
                                       ("NVIDIA H100 PCIe", 2.0), ("NVIDIA GH200 480GB", 4.9), ("Tesla T4", None)])
def test_hbm_bandwidth_by_device_name(name, tb_s):
    assert gpu_qwen3_8b.hbm_tb_s(name) == tb_s
