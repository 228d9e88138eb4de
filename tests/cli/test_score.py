"""`strata score MODEL --target epu --prompt-ids IDS [--steps N]`: the EPU gate as a command. Its
figures are those of the driver's batch mode (`run_epu`) against ONNX Runtime on the int4 graph
over the same context; a gate whose bar is missed exits 1; bad input is one line, refused
before any compile."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from strata.cli import main
from strata.pipeline import load_model
from support import TINY, tiny, write_checkpoint

pytest.importorskip("onnxruntime")

PROMPT = [3, 17, 5, 40]
STEPS = 3
FIGURES = re.compile(r"rank_of_ort_argmax=(\d+) rel_rmse_affine=([0-9.]+) topk_overlap=([0-9.]+)")


def score(*args: str) -> subprocess.CompletedProcess:
    """`strata score` in its own process (the driver is a child of it), bounded in time."""
    return subprocess.run([sys.executable, "-m", "strata.cli", "score", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The tiny llama scored once on STEPS steps: (model dir, cache, the process)."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    root = tmp_path_factory.mktemp("score")
    model = write_checkpoint(TINY["llama"], root / "tiny")
    cache = root / "cache"
    r = score(str(model), "--target", "epu", "--prompt-ids", ",".join(map(str, PROMPT)), "--steps", str(STEPS),
              "--set", "ctx=16", "--cache-dir", str(cache))
    return model, cache, r


def test_the_gate_passes_with_the_figures_last(scored, tmp_path):
    model, cache, r = scored
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    last = FIGURES.match(lines[-1])
    assert last is not None and lines[-1].split(" (")[0].endswith("gate=pass"), lines[-1]
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert len(steps) == STEPS
    printed = [(int(ln.split()[3]), FIGURES.search(ln).groups()) for ln in steps]

    # The same figures, independently: the driver's batch mode (one process, the whole
    # generation) against ORT prefilling the prompt and the tokens chosen before each step.
    from strata.targets.epu.build import run_epu
    from strata.verify.epu_gate import ort_logits
    from strata.verify.metrics import logit_metrics

    m = load_model(model)
    ids, logits, frac = run_epu(cache, PROMPT, STEPS, tmp_path / "logits.bin")
    assert [tok for tok, _ in printed] == ids
    worst = {"rank": 0, "rel": 0.0, "top": 1.0}
    for i, (_, (rank, rel, top)) in enumerate(printed):
        want = logit_metrics(logits[i] * 2.0 ** -frac, ort_logits(m, cache, [*PROMPT, *ids[:i]]))
        assert int(rank) == want["rank_of_ort_argmax"] == 0
        assert float(rel) == pytest.approx(want["rel_rmse_affine"], abs=6e-5)  # printed to 4 places
        assert float(top) == pytest.approx(want["topk_overlap"], abs=6e-3)
        # fixed point and an int8 KV cache: near ORT's float logits, never equal to them
        assert 1e-4 < want["rel_rmse_affine"] <= 0.08
        worst = {"rank": max(worst["rank"], int(rank)), "rel": max(worst["rel"], float(rel)),
                 "top": min(worst["top"], float(top))}
    assert (int(last[1]), float(last[2]), float(last[3])) == (worst["rank"], worst["rel"], worst["top"])


def test_a_missed_bar_fails_the_gate(scored):
    model, cache, first = scored
    measured = float(FIGURES.match(first.stdout.strip().splitlines()[-1])[2])
    r = score(str(model), "--target", "epu", "--prompt-ids", ",".join(map(str, PROMPT)), "--set", "ctx=16",
              "--cache-dir", str(cache), "--max-rel-rmse-affine", f"{measured / 2:.6f}")
    assert r.returncode == 1, r.stderr
    assert "(reused)" in r.stdout  # the stages of the first score
    assert "gate=fail" in r.stdout.strip().splitlines()[-1] and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("score-bad")
    return (write_checkpoint(TINY["llama"], root / "tiny"),
            write_checkpoint(tiny(attention_bias=True, o_bias=True, name="tiny-biased"), root / "biased"))


@pytest.mark.parametrize("extra, message", [
    (["--prompt-ids", "3,48"], "prompt token id 48 is outside the vocabulary [0, 48)"),
    (["--prompt-ids", "3,x"], "--prompt-ids: 'x' is not an integer token id"),
    (["--prompt-ids", "3,4", "--steps", "16", "--set", "ctx=16"], "more than the context of 16"),
    (["--prompt-ids", "3", "--max-rel-rmse-affine", "nan"], "--max-rel-rmse-affine must be a number in (0, 1]"),
    (["--prompt-ids", "3", "--max-rel-rmse-affine", "0"], "--max-rel-rmse-affine must be a number in (0, 1]"),
    (["--prompt-ids", "3", "--set", "alfa=0.5"], "expected KEY=VALUE with KEY a knob of target 'epu'"),
    (["--prompt-ids", "3", "--biased"], "the ONNX judge's graph covers plain Llama layers; this model has attention biases"),
])
def test_bad_input_is_one_line_before_any_compile(model_dirs, tmp_path, capsys, extra, message):
    model = model_dirs[1] if "--biased" in extra else model_dirs[0]
    extra = [e for e in extra if e != "--biased"]
    cache = tmp_path / "cache"
    assert main(["score", str(model), "--target", "epu", *extra, "--cache-dir", str(cache)]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not cache.exists()  # nothing compiled


def test_only_the_epu_has_a_gate(model_dirs, capsys):
    with pytest.raises(SystemExit) as e:
        main(["score", str(model_dirs[0]), "--target", "cpu", "--prompt-ids", "3"])
    assert e.value.code == 2 and "invalid choice: 'cpu'" in capsys.readouterr().err
    from strata.errors import StrataError
    from strata.verify.epu_gate import score_model

    with pytest.raises(StrataError, match="--target cpu has no gate"):
        score_model(model_dirs[0], [3], target_name="cpu")
