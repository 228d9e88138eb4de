"""`strata perplexity`: the running estimates and the final one on standard output as
llama-perplexity words them, nothing of progress when piped, and one-line errors (a missing
file, an empty or too-short text saying how many tokens it needs, a context beyond the model's)."""

from __future__ import annotations

import re

import pytest

from strata.cli import main
from support import ROOT, run_tool

DATA = ROOT / "tests" / "runtime" / "data"
GGUF = DATA / "tiny-llama-spm-f32.gguf"
TEXT = DATA / "perplexity.txt"


def test_prints_the_running_and_final_estimates(tmp_path) -> None:
    r = run_tool("perplexity", str(GGUF), "-f", str(TEXT), "--ctx", "64", "--batch", "5",
                 "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [re.fullmatch(r"\[(\d+)\][0-9.]+ \+/- [0-9.]+", line).group(1) for line in lines[:-1]] == \
        [str(i) for i in range(1, 9)]
    final = re.fullmatch(r"Final estimate: PPL = ([0-9.]+) \+/- [0-9.]+", lines[-1])
    assert final and lines[-2].startswith(f"[8]{final.group(1)} ")
    assert "\r" not in r.stderr and "scored" not in r.stderr.replace("scored each", "")


@pytest.mark.parametrize("make, ctx, message", [
    (None, "64", r"nothing\.txt: no such file"),
    ("", "64", r"empty\.txt: the text is empty"),
    ("Once upon a time " * 20, "64", r"short\.txt tokenizes to \d+ token\(s\); .* context of 64 needs at least 128"),
    ("x", "512", r"--ctx 512 is beyond the model's context of 256 tokens"),
], ids=["missing", "empty", "too-short", "ctx-beyond"])
def test_bad_input_is_one_line(tmp_path, capsys, make, ctx, message) -> None:
    name = {None: "nothing.txt", "": "empty.txt", "x": "x.txt"}.get(make, "short.txt")
    if make is not None:
        (tmp_path / name).write_text(make, encoding="utf-8")
    rc = main(["perplexity", str(GGUF), "-f", str(tmp_path / name), "--ctx", ctx, "--cache-dir", str(tmp_path / "c")])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("strata: error: ") and re.search(message, err), err
    assert not (tmp_path / "c").exists()  # refused before compiling


def test_kl_divergence_needs_a_base(capsys) -> None:
    assert main(["perplexity", str(GGUF), "-f", str(TEXT), "--kl-divergence"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "strata: error: --kl-divergence compares with a saved base: give --kl-divergence-base FILE\n"
