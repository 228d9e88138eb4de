"""`strata bench`: llama-bench's markdown table on standard output (or JSON with -o json), nothing
of progress when piped, one-line errors."""

from __future__ import annotations

import json
import re
import shutil

from strata.cli import main
from support import ROOT, run_tool

GGUF = ROOT / "tests" / "runtime" / "data" / "tiny-llama-spm-f32.gguf"


def test_json_piped(tmp_path) -> None:
    r = run_tool("bench", str(GGUF), "-p", "4", "-n", "2", "-b", "1,2", "-r", "2", "-o", "json",
                 "--cache-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [(d["batch"], d["test"], len(d["samples_ts"])) for d in data] == [
        (1, "pp4", 2), (1, "tg2", 2), (2, "pp4", 2), (2, "tg2", 2)]
    assert "\r" not in r.stderr


def test_the_table(tmp_path, capsys) -> None:
    assert main(["bench", str(GGUF), "-p", "3", "-n", "1", "-b", "2", "-r", "1", "--cache-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["| model | batch | test | t/s |", "| --- | ---: | ---: | ---: |"]
    assert [re.fullmatch(r"\| tiny-llama-spm-f32\.gguf \| 2 \| (pp3|tg1) \| [0-9.]+ ± [0-9.]+ \|", x).group(1)
            for x in lines[2:]] == ["pp3", "tg1"]


def test_bad_input_is_one_line(capsys) -> None:
    for argv, message in ((["-b", "2,x"], "got 'x'"), (["-p", "300"], "beyond the model's context of 256"),
                          (["--set", "Batch=4"], "Batch are the bench's own"),
                          (["--target", "epu"], "--target epu does not compile the batched entries the bench runs"),
                          (["--interpret"], "--interpret does not apply to --target cpu")):
        assert main(["bench", str(GGUF), *argv]) == 1
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and message in err, err


def test_bench_then_generate_on_the_same_gguf(tmp_path, capsys) -> None:
    """Each program has its own folder in the model's cache: bench's do not stand where the plain
    compile's goes, so neither refuses the other."""
    gguf = str(shutil.copy(GGUF, tmp_path / "m.gguf"))
    assert main(["bench", gguf, "-p", "3", "-n", "1", "-b", "1", "-r", "1"]) == 0
    assert main(["generate", gguf, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]) == 0, capsys.readouterr().err
    assert main(["bench", gguf, "-p", "3", "-n", "1", "-b", "1", "-r", "1"]) == 0
    err = capsys.readouterr().err
    assert "reusing the compiled model" in err and "error" not in err
    assert sorted(p.name for p in (tmp_path / ".strata-cache" / "m.gguf").iterdir()) == ["cpu", "cpu-bench-b1"]
