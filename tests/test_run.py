"""`strata run` and `strata compile` through the real CLI: output files, the run cache, concurrent
compiles, bad weights, the context limit, and what --help and --print-pipeline say.

Most runs are in-process (`strata.cli.main`, with capsys / monkeypatch); the concurrent
compiles are separate processes. Every model is a tiny llama written per test.
"""

from __future__ import annotations

import errno
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from strata.cli import main
from strata.ir.weights import SINGLE_FILE, WeightStore, write_safetensors
from strata.artifacts.stage import FORMAT, MANIFEST, sha256_file
from support import run_tool, tiny, write_checkpoint

CTX = 16
STAGE_FILES = ["manifest.json", "model.py", "op.mlir"]


@pytest.fixture
def model(tmp_path) -> Path:
    return write_checkpoint(tiny("llama"), tmp_path / "model")


def cli(capsys, *args) -> tuple[int, str, str]:
    """`strata ARGS` in-process: (exit code, stdout, stderr)."""
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run(capsys, model: Path, *extra, prompt: str = "1,2,3", new: int = 3, ctx: int | None = CTX):
    args = ["run", model, "--prompt-ids", prompt, "--max-new-tokens", new, *extra]
    if ctx is not None:
        args += ["--ctx", ctx]
    return cli(capsys, *args)


def ids_of(stdout: str) -> list[int]:
    lines = [line for line in stdout.splitlines() if line.startswith("ids=")]
    assert len(lines) == 1, stdout
    return [int(t) for t in lines[0][4:].split(",")]


def clean_error(rc: int, err: str) -> None:
    """A user error: exit 1 and one `strata: error:` line, no traceback."""
    assert rc == 1, err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("strata: error:")]) == 1, err


def edit_weights(model_dir: Path, change) -> None:
    """Rewrite model.safetensors after `change(tensors)` (HF names -> arrays)."""
    store = WeightStore.open(model_dir)
    tensors = {name: np.array(store.get(name)) for name in store.names()}
    del store
    change(tensors)
    tmp = model_dir / "new.safetensors.tmp"
    write_safetensors(tmp, tensors, {"format": "pt"})
    os.replace(tmp, model_dir / SINGLE_FILE)


def default_cache(model_dir: Path) -> Path:
    return model_dir / ".strata-cache" / "cpu"


# ---------------------------------------------------------------------------------------------
# --dump-logits


def test_dump_logits_into_a_missing_directory_fails_before_any_work(model, tmp_path, capsys, monkeypatch):
    import strata.pipeline.compile

    def no_compile(*a, **k):
        raise AssertionError("compiled although the output path is bad")

    monkeypatch.setattr(strata.pipeline, "cached_compile", no_compile)
    dump = tmp_path / "no" / "such" / "logits.npy"
    rc, out, err = run(capsys, model, "--dump-logits", dump)
    clean_error(rc, err)
    assert str(dump) in err and "does not exist" in err
    assert out == ""  # nothing generated
    assert not (model / ".strata-cache").exists()
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("existing", [True, False], ids=["over-a-file", "new-file"])
def test_full_disk_while_writing_logits(model, tmp_path, capsys, monkeypatch, existing):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dump = out_dir / "logits.npy"
    rc, _, err = run(capsys, model, "--dump-logits", dump)  # compiles the run cache, and a first file
    assert rc == 0, err
    before = dump.read_bytes()
    if not existing:
        dump.unlink()

    import strata.artifacts.files

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(strata.artifacts.files.os, "fsync", full)
    rc, out, err = run(capsys, model, "--dump-logits", dump, prompt="4,5", new=2)
    clean_error(rc, err)
    assert len(ids_of(out)) == 2  # the result is printed even though the file could not be written
    assert str(dump) in err and "No space left on device" in err and "disk full" in err
    if existing:
        assert dump.read_bytes() == before  # the old file is intact
    assert sorted(os.listdir(out_dir)) == (["logits.npy"] if existing else [])  # no temp file beside it


def test_dump_logits_through_a_symlink(model, tmp_path, capsys):
    real_dir, link_dir = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    link_dir.mkdir()
    (real_dir / "logits.npy").write_bytes(b"old contents")
    link = link_dir / "logits.npy"
    link.symlink_to(Path("..") / "real" / "logits.npy")
    dangling = link_dir / "new.npy"
    dangling.symlink_to(Path("..") / "real" / "new.npy")

    for path, target in ((link, real_dir / "logits.npy"), (dangling, real_dir / "new.npy")):
        rc, out, err = run(capsys, model, "--dump-logits", path, new=2)
        assert rc == 0, err
        assert path.is_symlink() and os.readlink(path) == str(Path("..") / "real" / target.name)
        logits = np.load(target)
        assert logits.shape == (2, 48) and logits.dtype == np.float32
        assert ids_of(out) == [int(r.argmax()) for r in logits]
    assert sorted(os.listdir(link_dir)) == ["logits.npy", "new.npy"]
    assert sorted(os.listdir(real_dir)) == ["logits.npy", "new.npy"]


# ---------------------------------------------------------------------------------------------
# The run cache


def test_an_earlier_strata_stage_in_the_run_cache_is_rebuilt(model, capsys):
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    first = ids_of(out)
    cache = default_cache(model)
    (cache / MANIFEST).write_bytes(json.dumps({"format": "strata-stage/1", "outputs": {}}).encode())
    found = "format 'strata-stage/1'"

    rc, out, err = run(capsys, model)
    assert rc == 0, err
    assert ids_of(out) == first
    assert "rebuilt" in err and found in err and "reusing" not in err
    assert json.loads((cache / MANIFEST).read_text())["format"] == FORMAT
    assert sorted(os.listdir(cache)) == STAGE_FILES
    rc, _, err = run(capsys, model)  # and the rebuilt stage is reused
    assert rc == 0 and "reusing" in err


BROKEN_MANIFESTS = pytest.mark.parametrize("manifest, found", [
    (b"\x00\xff\xfe\x80 garbage \x9c", "corrupt"),
    (b"{this is not json", "corrupt"),
    (b"[1, 2, 3]\n", "corrupt"),
    (json.dumps({"format": "something-else/7"}).encode(), "format 'something-else/7'"),
], ids=["binary-garbage", "not-json", "not-an-object", "foreign-format"])


@BROKEN_MANIFESTS
def test_a_broken_manifest_in_the_model_s_own_cache_is_rebuilt(model, capsys, manifest, found):
    """The default cache is strata's own: what a kill or an edit broke there is rebuilt."""
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    first = ids_of(out)
    cache = default_cache(model)
    (cache / MANIFEST).write_bytes(manifest)
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    assert ids_of(out) == first
    assert "rebuilt" in err and found in err
    assert sorted(os.listdir(cache)) == STAGE_FILES
    assert json.loads((cache / MANIFEST).read_text())["format"] == FORMAT
    rc, _, err = run(capsys, model)  # and the rebuilt stage is reused
    assert rc == 0 and "reusing" in err


@BROKEN_MANIFESTS
def test_a_manifest_that_is_not_strata_s_marks_nothing_as_strata_s(model, tmp_path, capsys, manifest, found):
    """In a cache the user named, a file named manifest.json does not make a directory strata's:
    what it holds is not replaced."""
    cache = tmp_path / "mine"
    rc, out, err = run(capsys, model, "--cache-dir", cache)
    assert rc == 0, err
    (cache / MANIFEST).write_bytes(manifest)
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    rc, out, err = run(capsys, model, "--cache-dir", cache)
    clean_error(rc, err)
    assert "not a strata output directory" in err and found in err and out == ""
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


def test_a_folder_in_the_model_s_own_cache_is_replaced_whatever_it_holds(model, capsys):
    cache = default_cache(model)
    (cache / "bench-b1").mkdir(parents=True)  # what `strata bench` kept there before it had folders of its own
    (cache / "notes.txt").write_text("in strata's cache")
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    assert "rebuilt: it has no manifest.json" in err
    assert sorted(os.listdir(cache)) == STAGE_FILES


def test_cache_dir_holding_a_foreign_file_is_refused(model, tmp_path, capsys):
    cache = tmp_path / "mine"
    cache.mkdir(parents=True)
    (cache / "notes.txt").write_text("precious")
    rc, out, err = run(capsys, model, "--cache-dir", cache)
    clean_error(rc, err)
    assert "not a strata output directory" in err and str(cache) in err
    assert out == ""
    assert os.listdir(cache) == ["notes.txt"] and (cache / "notes.txt").read_text() == "precious"


def test_stale_stage_holding_a_foreign_file_is_refused(model, tmp_path, capsys):
    cache = tmp_path / "mine"
    rc, _, err = run(capsys, model, "--cache-dir", cache, ctx=CTX)
    assert rc == 0, err
    (cache / "notes.txt").write_text("precious")
    rc, _, err = run(capsys, model, "--cache-dir", cache, ctx=2 * CTX)  # other knobs: the stage is stale
    assert (cache / "notes.txt").read_text() == "precious"
    clean_error(rc, err)
    assert "notes.txt" in err or "not a strata output directory" in err


def test_unwritable_default_cache_hints_at_cache_dir(model, tmp_path, capsys):
    blocker = model / ".strata-cache"
    blocker.write_text("a file where the cache directory would go")
    rc, out, err = run(capsys, model)
    clean_error(rc, err)
    assert str(blocker) in err and "--cache-dir" in err
    assert out == ""
    assert blocker.read_text() == "a file where the cache directory would go"
    rc, out, err = run(capsys, model, "--cache-dir", tmp_path / "elsewhere")  # and the hint works
    assert rc == 0, err
    assert sorted(os.listdir(tmp_path / "elsewhere")) == STAGE_FILES


# ---------------------------------------------------------------------------------------------
# Concurrent and killed compiles


def test_concurrent_compiles_into_one_directory(model, tmp_path):
    parent = tmp_path / "build"
    parent.mkdir()
    out = parent / "OUT"
    # Three processes at once: one writes while the others wait for the lock, then each
    # replaces the stage before it.
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: run_tool("compile", str(model), "-o", str(out), "--ctx", str(CTX)),
                                range(3)))
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(out) and "Traceback" not in r.stderr
    assert os.listdir(parent) == ["OUT"]  # no .OUT.tmp-* / .OUT.old-* left
    assert sorted(os.listdir(out)) == STAGE_FILES
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["format"] == FORMAT
    assert manifest["outputs"] == {name: sha256_file(out / name) for name in ("model.py", "op.mlir")}

    from strata.pipeline import load_model, resolve_knobs, stage_inputs
    from strata.artifacts.stage import stage_matches
    from strata.targets import target

    m = load_model(model)
    knobs = resolve_knobs(target("cpu"), m, {"ctx": CTX, "flash_attn": True})
    assert stage_matches(out, stage_inputs(m, m.open_weights(quiet=True), target("cpu"), knobs),
                         {"model.py", "op.mlir"}) == (True, "")


def test_leftovers_of_a_killed_compile_are_removed(model, tmp_path, capsys):
    from strata.artifacts.directory import MARKER

    parent = tmp_path / "build"
    # what killed writers of OUT left (each beside strata's marker), another output's, and a
    # user's folder that only looks like a leftover (no marker)
    for leftover in (".OUT.tmp-123", ".OUT.old-456/out", ".OTHER.tmp-1", ".OUT.tmp-keep"):
        (parent / leftover).mkdir(parents=True)
        (parent / leftover / "model.py").write_text("half written")
    for marked in (".OUT.tmp-123", ".OUT.old-456", ".OTHER.tmp-1"):
        (parent / (marked + MARKER)).touch()
    rc, out, err = cli(capsys, "compile", model, "-o", parent / "OUT", "--ctx", CTX)
    assert rc == 0, err
    # another output's leftovers are not ours to remove, nor a folder without the marker
    assert sorted(os.listdir(parent)) == [".OTHER.tmp-1", ".OTHER.tmp-1" + MARKER, ".OUT.tmp-keep", "OUT"]
    assert (parent / ".OUT.tmp-keep" / "model.py").read_text() == "half written"
    assert sorted(os.listdir(parent / "OUT")) == STAGE_FILES


# ---------------------------------------------------------------------------------------------
# Weights


@pytest.mark.parametrize("hf, ggml, value, dtype", [
    ("model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", np.nan, "float32"),
    ("model.norm.weight", "output_norm.weight", np.inf, "float32"),
    ("model.embed_tokens.weight", "token_embd.weight", -np.inf, "bfloat16"),
])
def test_nonfinite_weight(tmp_path, capsys, hf, ggml, value, dtype):
    model = write_checkpoint(tiny("llama"), tmp_path / "model", dtype=dtype)

    def poison(tensors):
        tensors[hf].reshape(-1)[-1] = value

    edit_weights(model, poison)
    rc, out, err = run(capsys, model)
    clean_error(rc, err)
    assert f"'{ggml}'" in err and f"'{hf}'" in err and "NaN or infinite" in err and "--allow-nonfinite" in err
    assert out == ""
    assert not (model / ".strata-cache").exists()  # refused before compiling

    rc, out, err = run(capsys, model, "--allow-nonfinite")
    assert rc == 0, err
    assert "warning" in err and f"'{ggml}'" in err and "Traceback" not in err
    assert len(ids_of(out)) == 3


def test_unknown_extra_tensor_warns_and_runs(model, capsys):
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    clean_ids = ids_of(out)
    assert "not used" not in err

    def extra(tensors):
        tensors["model.layers.0.mystery.weight"] = np.ones((3, 4), np.float32)

    edit_weights(model, extra)
    rc, out, err = run(capsys, model)
    assert rc == 0, err
    assert "warning" in err and "'model.layers.0.mystery.weight'" in err and "not used" in err
    assert ids_of(out) == clean_ids


# ---------------------------------------------------------------------------------------------
# The context


def test_the_last_new_token_needs_no_cache_row(model, tmp_path, capsys):
    prompt = "1,2,3,4,5,6,7,8,9,10"
    rc, out, err = run(capsys, model, prompt=prompt, new=8)  # 10 + 8 - 1 = 17 > 16
    clean_error(rc, err)
    assert "17 positions" in err and "context of 16" in err
    assert out == "" and not (model / ".strata-cache").exists()  # refused before compiling

    rc, out, err = run(capsys, model, "--dump-logits", tmp_path / "a.npy", prompt=prompt, new=7)  # 10 + 7 - 1 = 16
    assert rc == 0, err
    ids = ids_of(out)
    assert len(ids) == 7
    # the same as with room to spare: the last decode (position 15) was computed right
    rc, out, err = run(capsys, model, "--dump-logits", tmp_path / "b.npy", "--cache-dir", tmp_path / "c32",
                       prompt=prompt, new=7, ctx=2 * CTX)
    assert rc == 0, err
    assert ids_of(out) == ids
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"), atol=1e-5, rtol=0)


def _little_memory(monkeypatch):
    import strata.pipeline.compile

    monkeypatch.setattr(strata.pipeline.compile, "available_memory", lambda: 4096)


def test_ctx_whose_state_cannot_be_allocated(model, capsys, monkeypatch):
    _little_memory(monkeypatch)
    rc, out, err = run(capsys, model, ctx=128)
    clean_error(rc, err)
    line = next(line for line in err.splitlines() if line.startswith("strata: error:"))
    assert "ctx 128" in line and "32.0 KiB" in line and "4.0 KiB" in line and "--ctx" in line
    assert out == ""
    assert not default_cache(model).exists()


def test_ctx_whose_state_cannot_be_allocated_writes_nothing(model, tmp_path, capsys, monkeypatch):
    _little_memory(monkeypatch)
    rc, _, err = run(capsys, model, ctx=128)
    assert rc == 1
    assert sorted(os.listdir(model)) == ["config.json", SINGLE_FILE]
    rc, _, err = run(capsys, model, "--cache-dir", tmp_path / "new" / "cache", ctx=128)
    assert rc == 1
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", ["run", "compile"])
def test_absurd_ctx_is_an_argument_error(model, capsys, command):
    args = [command, model, "--ctx", "99999999999999999999"]
    if command == "run":
        args += ["--prompt-ids", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--ctx" in err and "is not in [1, 2147483647]" in err and "Traceback" not in err
    assert not (model / ".strata-cache").exists()


# ---------------------------------------------------------------------------------------------
# What the driver says


def test_print_pipeline_is_what_compile_runs(model, tmp_path, capsys):
    from strata.dialects import read_ir
    from strata.ir.text import print_ir
    from strata.pipeline import load_model, run_pipeline
    from strata.targets.cpu.emit import emit_cpu

    rc, out, err = cli(capsys, "compile", model, "--print-pipeline", "--ctx", CTX, "--no-flash-attn")
    assert rc == 0, err
    spec = out.strip()
    assert spec.startswith("convert-module-to-op{") and "\n" not in spec
    assert f"ctx={CTX}" in spec and "flash_attn=false" in spec
    assert not (tmp_path / "out").exists()

    m = load_model(model)
    lowered = run_pipeline(m.module.clone(), spec)
    rc, _, err = cli(capsys, "compile", model, "-o", tmp_path / "out", "--ctx", CTX, "--no-flash-attn")
    assert rc == 0, err
    assert (tmp_path / "out" / "model.py").read_bytes() == emit_cpu(lowered, m.name).encode("utf-8")
    assert (tmp_path / "out" / "op.mlir").read_bytes() == print_ir(lowered).encode("utf-8")

    # strata-opt -p runs the same string on the module level's text
    from strata.cli.opt import main as opt_main

    (tmp_path / "module.mlir").write_text(print_ir(m.module))
    assert opt_main([str(tmp_path / "module.mlir"), "-p", spec, "-o", str(tmp_path / "opt.mlir")]) == 0
    assert print_ir(read_ir(tmp_path / "opt.mlir")) == (tmp_path / "out" / "op.mlir").read_text()


def help_entries(text: str) -> dict[str, str]:
    """argparse's option listing: invocation (e.g. `--ctx CTX`, `-o OUT, --output OUT`) -> help text."""
    entries: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^  \S", line):
            invocation, _, rest = line.strip().partition("  ")
            current = invocation
            entries[current] = rest.strip()
        elif current is not None and re.match(r"^\s{3,}\S", line):
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("command, options", [
    ("run", ["MODEL", "--ctx", "--cache-dir", "--target", "--max-new-tokens"]),
    ("compile", ["MODEL", "-o", "--ctx", "--target"]),
])
def test_help_explains_the_options(capsys, command, options):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    entries = help_entries(text)
    for option in options:
        found = [inv for inv in entries if option in re.split(r"[ ,]+", inv)]
        assert len(found) == 1, (option, sorted(entries))
        assert len(entries[found[0]].split()) >= 3, (option, entries[found[0]])  # a sentence, not a word
    if command == "run":
        cache = entries[next(inv for inv in entries if inv.startswith("--cache-dir"))]
        assert ".strata-cache" in cache and "default" in cache
