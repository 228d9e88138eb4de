"""strata/stage.py: what counts as a stage strata may replace (a nested stage, such as the CUDA
target's OUT/aot, included; a foreign directory never)."""

from __future__ import annotations

import pytest

from strata.artifacts.stage import StageError, check_destination, is_stage, manifest_bytes


def _stage(d, files):
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    (d / "manifest.json").write_bytes(manifest_bytes("test", {}, files))


def test_nested_stage_is_part_of_the_stage(tmp_path):
    out = tmp_path / "out"
    _stage(out, {"model.py": b"x"})
    _stage(out / "aot", {"k.ptx": b"ptx"})
    assert is_stage(out) and is_stage(out / "aot")
    check_destination(out, {"model.py"})


def test_foreign_directory_blocks(tmp_path):
    out = tmp_path / "out"
    _stage(out, {"model.py": b"x"})
    (out / "mine").mkdir()
    (out / "mine" / "notes.txt").write_text("keep")
    assert not is_stage(out)
    with pytest.raises(StageError, match="refusing to overwrite"):
        check_destination(out, {"model.py"})
