"""`strata verify` against llama.cpp's own logs of tiny checkpoints kept in tests/verify/data
(made by data/make_refs.py: transformers wrote each HF directory, llama.cpp's converter its
GGUF, llama-eval-callback the logs), from the HF directory and from the GGUF."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from strata.cli import main

DATA = Path(__file__).resolve().parent / "data"
LLAMAS = ("llama-tiny", "llama3-tiny")
ENTRIES = ("prefill", "decode")


def verify(model: Path, log: Path, capsys) -> tuple[int, str]:
    rc = main(["verify", str(model), "--against", str(log)])
    return rc, capsys.readouterr().out.strip()


def copy_with(tmp_path: Path, name: str, **fields) -> Path:
    """The HF directory of `name`, its config.json updated with `fields`."""
    d = tmp_path / name
    shutil.copytree(DATA / name, d, ignore=shutil.ignore_patterns("*.gguf", "*.log"))
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **fields}, indent=2))
    return d


@pytest.mark.parametrize("source", ["hf", "gguf"])
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", LLAMAS)
def test_llama_agrees_op_for_op(name, entry, source, capsys):
    """llama.cpp's llama names its o_proj `attn_out` and keeps the output row in the last layer
    for one token too; from the GGUF, a llama3 rope_freqs with a single smoothed pair is read."""
    d = DATA / name
    rc, out = verify(d if source == "hf" else d / "model.gguf", d / f"{entry}.callback.log", capsys)
    assert rc == 0 and out.startswith("all 68 ops agree"), out


def test_llama3_scaling_shows_in_the_values(tmp_path, capsys):
    """The llama3 logs tell a scaled RoPE from a plain one: the check above is not vacuous."""
    d = copy_with(tmp_path, "llama3-tiny", rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    rc, out = verify(d, DATA / "llama3-tiny" / "prefill.callback.log", capsys)
    assert rc == 1 and "ops 1-5 agree; op 6 diverges: ROPE 'Qcur-0'" in out, out
