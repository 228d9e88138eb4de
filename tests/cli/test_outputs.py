"""No output of a command lands on one of its inputs, and no command replaces a directory that
is not its own output (recognised by its manifest and digests, never by file names)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from strata.cli import main
from strata.cli.opt import main as opt_main
from support import TINY, write_checkpoint

MODULE_LEVEL = Path(__file__).resolve().parents[1] / "lit" / "passes" / "Inputs" / "llama2l.mlir"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("outputs") / "tiny")


@pytest.fixture
def model(pristine, tmp_path) -> Path:
    """A copy of the tiny model that a test may try to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "M"))


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def refused(capsys, argv: list[str], *fragments: str, tool=main) -> str:
    assert tool(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


# Every command that writes one file, aimed at each file of the model it reads.
SINGLE_FILE_COMMANDS = {
    "blueprint": lambda m, out: ["blueprint", m, "-o", out],
    "blueprint-errors": lambda m, out: ["blueprint", m, "--errors", "1,2", "--steps", "1", "-o", out],
    "view": lambda m, out: ["view", m, "-o", out],
    "export-onnx": lambda m, out: ["export", m, "--format", "onnx", "--tokens", "2", "-o", out],
    "export-tensorviz": lambda m, out: ["export", m, "--format", "tensorviz", "-o", out],
    "calibrate": lambda m, out: ["calibrate", m, "--random", "1", "--length", "2", "-o", out],
    "run-dump-logits": lambda m, out: ["run", m, "--prompt-ids", "1,2", "--max-new-tokens", "1",
                                       "--dump-logits", out],
    "call": lambda m, out: ["call", m, "--calls", str(write_calls(Path(m).parent / "calls.json")), "-o", out],
}


def write_calls(path: Path) -> Path:
    path.write_text('[{"entry": "decode", "inputs": {"tokens": [[1]], "pos": 0}}]')
    return path


@pytest.mark.parametrize("victim", ["config.json", "model.safetensors", "a-link-to-config.json"])
@pytest.mark.parametrize("command", sorted(SINGLE_FILE_COMMANDS))
def test_a_single_file_output_never_replaces_the_model(model, capsys, command, victim):
    (model / "a-link-to-config.json").symlink_to("config.json")
    before = snapshot(model)
    refused(capsys, SINGLE_FILE_COMMANDS[command](str(model), str(model / victim)), "an input of this command")
    assert snapshot(model) == before


def test_a_gguf_input_is_protected(tmp_path, capsys):
    gguf = Path(shutil.copy(Path(__file__).resolve().parents[1] / "frontends" / "data" / "llama-f32.gguf",
                            tmp_path / "m.gguf"))
    before = gguf.read_bytes()
    refused(capsys, ["export", str(gguf), "--format", "tensorviz", "-o", str(gguf)], "GGUF file")
    refused(capsys, ["blueprint", str(gguf), "-o", str(gguf)], "GGUF file")
    assert gguf.read_bytes() == before


def test_calibrate_never_replaces_its_prompts(model, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1,2,3\n")
    refused(capsys, ["calibrate", str(model), "--prompts", str(prompts), "-o", str(prompts)], "the prompts file")
    assert prompts.read_text() == "1,2,3\n"


def test_view_and_export_never_replace_their_ir(tmp_path, capsys):
    ir = Path(shutil.copy(MODULE_LEVEL, tmp_path / "m.mlir"))
    before = ir.read_text()
    refused(capsys, ["view", str(ir), "-o", str(ir)], "the input IR")
    refused(capsys, ["export", str(ir), "--format", "tensorviz", "-o", str(ir)], "the input IR")
    assert ir.read_text() == before


def test_dump_logits_never_lands_in_the_compiled_model(model, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["run", str(model), "--prompt-ids", "1", "--max-new-tokens", "1", "--cache-dir", str(cache)]) == 0
    capsys.readouterr()
    before = snapshot(cache)
    refused(capsys, ["run", str(model), "--prompt-ids", "1", "--max-new-tokens", "1", "--cache-dir", str(cache),
                     "--dump-logits", str(cache / "logits.npy")], "compiled model")
    assert snapshot(cache) == before


def test_strata_opt_never_writes_onto_what_it_reads(tmp_path, capsys):
    ir = Path(shutil.copy(MODULE_LEVEL, tmp_path / "m.mlir"))
    before = ir.read_text()
    refused(capsys, [str(ir), "-o", str(ir)], "strata-opt: error:", "the input file", tool=opt_main)
    assert ir.read_text() == before
    ranges = tmp_path / "ranges.json"
    ranges.write_text('{"format": "strata-ranges/v1"}\n')
    pipeline = f'convert-module-to-op{{entry=decode start=1 ctx=8}},smoothquant{{ranges="{ranges}"}}'
    refused(capsys, [str(ir), "-p", pipeline, "-o", str(ranges)], "the ranges file of smoothquant", tool=opt_main)
    assert ranges.read_text() == '{"format": "strata-ranges/v1"}\n'


# ---------------------------------------------------------------------------------------------
# import --random-weights


@pytest.fixture
def document(pristine, tmp_path) -> Path:
    doc = tmp_path / "tv.json"
    assert main(["export", str(pristine), "--format", "tensorviz", "-o", str(doc)]) == 0
    return doc


def test_import_never_replaces_a_real_checkpoint(model, document, tmp_path, capsys):
    before = snapshot(model)
    refused(capsys, ["import", str(document), "--format", "tensorviz", "-o", str(tmp_path / "x.mlir"),
                     "--random-weights", "1", "--weights-dir", str(model)], "not a checkpoint that strata import wrote")
    assert snapshot(model) == before
    # the default weights directory, OUT/ for OUT.mlir, holding a checkpoint of those very names
    real = Path(shutil.copytree(model, tmp_path / "x"))
    refused(capsys, ["import", str(document), "--format", "tensorviz", "-o", str(tmp_path / "x.mlir"),
                     "--random-weights", "1"], "no manifest.json")
    assert snapshot(real) == before


def test_import_replaces_its_own_checkpoint_only_while_unchanged(document, tmp_path, capsys):
    argv = ["import", str(document), "--format", "tensorviz", "-o", str(tmp_path / "x.mlir"), "--random-weights"]
    weights = tmp_path / "x"
    assert main([*argv, "1"]) == 0
    first = snapshot(weights)
    assert set(first) == {"config.json", "model.safetensors", "manifest.json"}
    assert main(["run", str(weights), "--prompt-ids", "1", "--max-new-tokens", "1"]) == 0  # its cache is strata's
    assert main([*argv, "2"]) == 0
    second = snapshot(weights)
    assert second["model.safetensors"] != first["model.safetensors"]
    capsys.readouterr()
    (weights / "notes.txt").write_text("mine")
    refused(capsys, [*argv, "3"], "'notes.txt'")
    assert snapshot(weights) == {**second, "notes.txt": b"mine"}
    (weights / "notes.txt").unlink()
    (weights / "model.safetensors").write_bytes(first["model.safetensors"])  # the user's own weights now
    mine = snapshot(weights)
    refused(capsys, [*argv, "3"], "model.safetensors was changed after strata import wrote it")
    assert snapshot(weights) == mine


def test_import_never_replaces_its_own_document(document, tmp_path, capsys):
    weights = tmp_path / "w"
    weights.mkdir()
    inside = Path(shutil.copy(document, weights / "tv.json"))
    refused(capsys, ["import", str(inside), "--format", "tensorviz", "--random-weights", "1", "--weights-dir",
                     str(weights)], "the imported document")
    assert inside.read_bytes() == document.read_bytes()


# ---------------------------------------------------------------------------------------------
# Output directories


def test_compile_never_replaces_a_directory_that_only_looks_like_a_stage(model, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"name": "my project"}\n')  # someone else's manifest
    (out / "model.py").write_text("print('mine')\n")
    before = snapshot(out)
    refused(capsys, ["compile", str(model), "-o", str(out)], "not a strata output directory")
    assert snapshot(out) == before


EPU_KNOBS = ["--set", "ctx=8", "--set", "calib_prompts=1", "--set", "calib_len=2"]


@pytest.mark.parametrize("top", ["{}\n", json.dumps({"format": "strata-epu/v1", "stages": {}}) + "\n"])
def test_epu_compile_never_deletes_user_files(model, tmp_path, capsys, top):
    out = tmp_path / "D"
    (out / "cpp").mkdir(parents=True)
    (out / "EPU.json").write_text(top)
    (out / "cpp" / "mine.cpp").write_text("x\n")
    before = snapshot(out)
    refused(capsys, ["compile", str(model), "--target", "epu", "-o", str(out), *EPU_KNOBS],
            "not an EPU output directory")
    assert snapshot(out) == before


def test_epu_compile_rebuilds_its_own_output_but_not_a_file_added_to_it(model, tmp_path, capsys):
    out = tmp_path / "D"
    argv = ["compile", str(model), "--target", "epu", "-o", str(out), *EPU_KNOBS]
    assert main(argv) == 0
    (out / "fixed" / "range_table.txt").write_text("edited\n")  # a stage's own file, edited: rebuilt
    assert main(argv) == 0 and "rebuilt: fixed" in capsys.readouterr().err
    (out / "fixed" / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    refused(capsys, [*argv, "--set", "headroom=3"], "notes.txt")
    assert (out / "fixed" / "notes.txt").read_text() == "mine\n"


def test_call_never_replaces_its_calls_or_the_compiled_model(model, tmp_path, capsys):
    calls = write_calls(tmp_path / "calls.json")
    before = calls.read_text()
    refused(capsys, ["call", str(model), "--calls", str(calls), "-o", str(calls)], "the calls file")
    assert calls.read_text() == before
    cache = tmp_path / "cache"
    cache.mkdir()
    refused(capsys, ["call", str(model), "--calls", str(calls), "--cache-dir", str(cache), "-o",
                     str(cache / "out.npz")], "compiled model")
    assert list(cache.iterdir()) == []


def test_dump_logits_never_lands_in_the_ranks_cache(model, capsys):
    cache = model / ".strata-cache" / "cpu-tp2"  # where --tp 2 compiles, refused before any rank starts
    refused(capsys, ["run", str(model), "--prompt-ids", "1", "--max-new-tokens", "1", "--tp", "2",
                     "--dump-logits", str(cache / "logits.npy")], "compiled models' cache")
    assert not (cache / "logits.npy").exists()
