"""Bad input to every command, as a hostile user gives it: one line naming the flag, file or
field, exit 1, no traceback; no flag silently ignored."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from strata.cli import main
from support import TINY, write_checkpoint

DATA = Path(__file__).resolve().parents[1] / "frontends" / "data"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("bad-input") / "tiny")


def refused(capsys, argv: list[str], *fragments: str) -> str:
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("strata: error: "), err
    for fragment in fragments:
        assert fragment in err, err
    return err


# ---------------------------------------------------------------------------------------------
# Tracebacks


@pytest.mark.parametrize("ids, words", [("1,200", "token id 200 is outside the vocabulary [0, 48)"),
                                        ("-1", "token id -1 is outside the vocabulary"),
                                        ("a,b", "'a' is not an integer token id")])
def test_blueprint_errors_names_a_bad_prompt(model, capsys, ids, words):
    err = refused(capsys, ["blueprint", str(model), "--recipe", "bf16", "--errors", ids, "--steps", "1"], words)
    assert "--errors" in err and "--prompt-ids" not in err


def test_blueprint_errors_fits_the_context(model, capsys):
    refused(capsys, ["blueprint", str(model), "--errors", "1,2", "--steps", "200"],
            "200 greedy steps need 202 positions, more than the model's context of 128")


def test_a_verify_log_whose_prompt_is_not_this_model_s(model, tmp_path, capsys):
    log = tmp_path / "prefill.callback.log"
    log.write_text("0.00.024.277 I number of input tokens = 2\n0.00.024.277 I   5\n0.00.024.277 I   999\n"
                   "common_debug_cb_eval:   inp_embd = (f32)   GET_ROWS(x{1, 1, 1, 1}, }) = {1, 1, 1, 1}\n"
                   "    sum = 1.0\n")
    refused(capsys, ["verify", str(model), "--against", str(log)], str(log), "token id 999 is outside the vocabulary")


def test_a_gguf_compiles_and_runs_for_the_epu(tmp_path, capsys):
    """The EPU target reads a GGUF's weights like a checkpoint's (it hashed only safetensors files before)."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    gguf = str(shutil.copy(DATA / "llama-f32.gguf", tmp_path / "m.gguf"))
    knobs = ["--set", "ctx=16", "--set", "calib_prompts=2", "--set", "calib_len=4"]
    assert main(["compile", gguf, "--target", "epu", "-o", str(tmp_path / "epu"), *knobs]) == 0
    assert f"compiled {gguf} for epu" in capsys.readouterr().err
    dump = tmp_path / "logits.npy"
    assert main(["run", gguf, "--target", "epu", "--prompt-ids", "1,2,3", "--max-new-tokens", "2",
                 "--cache-dir", str(tmp_path / "epu"), "--dump-logits", str(dump), *knobs]) == 0
    ids = [int(t) for t in capsys.readouterr().out.strip().splitlines()[-1].removeprefix("ids=").split(",")]
    assert ids == [int(np.argmax(row)) for row in np.load(dump)]


# ---------------------------------------------------------------------------------------------
# One check per value, whichever entry point it comes through

MODULE_LEVEL = Path(__file__).resolve().parents[1] / "lit" / "passes" / "Inputs" / "llama2l.mlir"


def opt_refused(capsys, argv: list[str], *fragments: str) -> str:
    from strata.cli.opt import main as opt_main

    capsys.readouterr()
    assert opt_main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("strata-opt: error: "), err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_prefill_tokens_beyond_the_context_are_refused_at_any_start(model, capsys):
    """strata ir and strata-opt reach the same check, with start known or not."""
    refused(capsys, ["ir", str(model), "--level", "op", "--tokens", "1000000000"],
            "1000000000 tokens exceed the context of 128")
    refused(capsys, ["ir", str(model), "--level", "op", "--tokens", "200", "--start", "-1"],
            "200 tokens exceed the context of 128")
    opt_refused(capsys, [MODULE_LEVEL, "-p", "convert-module-to-op{tokens=1000000000}"],
                "convert-module-to-op: 1000000000 tokens exceed the context of 64")


@pytest.mark.parametrize("argv", [
    ["inspect", "--level", "blueprint", "--rows", "100000"],
    ["blueprint", "--rows", "129", "--format", "table"],
    ["view", "--level", "blueprint", "--rows", "1000"],
    ["ir", "--level", "blueprint", "--tokens", "1000"],
])
def test_blueprint_rows_beyond_the_context_are_refused(model, capsys, argv):
    refused(capsys, [argv[0], str(model), *argv[1:]], "rows exceed the model's context of 128 (MaxSeq)")


def test_the_largest_blueprint_the_context_holds_is_accepted(model, capsys):
    assert main(["inspect", str(model), "--level", "blueprint", "--mode", "prefill", "--rows", "128"]) == 0


def test_a_blueprint_function_s_rows_are_checked_by_every_pass_and_printer(model, tmp_path, capsys):
    assert main(["ir", str(model), "--level", "blueprint", "--tokens", "3"]) == 0
    text = capsys.readouterr().out
    assert "blueprint.rows = 3 : i64" in text
    bad = tmp_path / "bad.mlir"
    bad.write_text(text.replace("blueprint.rows = 3 : i64", "blueprint.rows = -5 : i64"))
    for tool in (["-p", "blueprint-fuse"], ["-p", "blueprint-place-state"], ["-p", "blueprint-collapse"],
                 ["-t", "kbp-graph"], ["-t", "blueprint-table"], ["-t", "blueprint-dot"]):
        opt_refused(capsys, [bad, *tool], "@prefill: mode prefill takes 0 to 2147483647 rows, got -5")
    draft = tmp_path / "draft.mlir"
    draft.write_text(text.replace('blueprint.mode = "prefill"', 'blueprint.mode = "draft"'))
    opt_refused(capsys, [draft, "-p", "blueprint-fuse"], "mode draft takes exactly 1 row, got 3")


# ---------------------------------------------------------------------------------------------
# No flag silently ignored: a flag the command would not read in this use is refused


@pytest.mark.parametrize("argv, flag", [
    (["quantize", "-o", "{tmp}/q", "--alpha", "7"], "--alpha"),
    (["quantize", "-o", "{tmp}/q", "--block", "32"], "--block"),
    (["quantize", "-o", "{tmp}/q", "--smoothquant", "{tmp}/ranges.json"], "--smoothquant"),
    (["quantize", "--report-only", "-o", "{tmp}/q"], "-o"),
    (["quantize", "--w4a16", "-o", "{tmp}/q", "--recipe", "bf16"], "--recipe"),
    (["quantize", "--w4a16", "-o", "{tmp}/q", "--alpha", "0.3"], "--alpha"),
    (["inspect", "--rows", "3"], "--rows"),
    (["ir", "--recipe", "bf16"], "--recipe"),
    (["ir", "--level", "op", "--kv", "contiguous"], "--kv"),
    (["ir", "--level", "blueprint", "--ctx", "64"], "--ctx"),
    (["blueprint", "--errors", "1", "--format", "dot"], "--format"),
    (["blueprint", "--errors", "1", "--rows", "2"], "--rows"),
    (["blueprint", "--steps", "3"], "--steps"),
    (["view", "--rows", "2"], "--rows"),
    (["view", "--level", "op", "--mode", "prefill"], "--mode"),
    (["view", "--level", "blueprint", "--entry", "decode"], "--entry"),
    (["view", "--require-dot"], "--require-dot"),
    (["export", "--format", "tensorviz", "--tokens", "3"], "--tokens"),
    (["export", "--format", "onnx", "--entry", "decode", "--tokens", "3", "-o", "{tmp}/x.onnx"], "--tokens"),
    (["calibrate", "--prompts", "{tmp}/prompts.txt", "--length", "3", "-o", "{tmp}/r.json"], "--length"),
    (["run", "--prompt-ids", "1", "--via", "onnxruntime", "--cache-dir", "{tmp}/c"], "--cache-dir"),
    (["compile", "--print-pipeline", "-o", "{tmp}/x"], "-o"),
    (["compile", "-o", "{tmp}/x", "--allow-spills"], "--allow-spills"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_flag_the_command_would_ignore_is_refused(model, tmp_path, capsys, argv, flag):
    (tmp_path / "prompts.txt").write_text("1,2\n")
    (tmp_path / "ranges.json").write_text('{"format": "strata-ranges/v1"}\n')
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    refused(capsys, [argv[0], str(model), *argv[1:]], f"{flag} does not apply")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt", "ranges.json"]  # nothing written


@pytest.mark.parametrize("target, knob", [("cpu", "alpha=0.5"), ("cpu", "recipe=bf16"), ("epu", "kv_pad=4"),
                                          ("cuda", "flash_attn=false")])
def test_a_knob_of_another_target_is_refused(model, tmp_path, capsys, target, knob):
    refused(capsys, ["compile", str(model), "--target", target, "-o", str(tmp_path / "x"), "--set", knob],
            f"--set '{knob}': expected KEY=VALUE with KEY a knob of target '{target}'")


# ---------------------------------------------------------------------------------------------
# Bounded reads and bounded work: each bound named


@pytest.mark.parametrize("argv, words", [
    (["calibrate", "{m}", "--prompts", "/dev/zero", "-o", "{tmp}/r.json"], "/dev/zero:1: a line longer than 1 MiB"),
    (["verify", "{m}", "--against", "/dev/zero"], "/dev/zero:1: a line longer than 1 MiB: not a llama-eval-callback"),
    (["quantize", "{m}", "--w4a16", "--smoothquant", "/dev/zero", "-o", "{tmp}/q"],
     "/dev/zero: the ranges file is larger than 256 MiB"),
    (["view", "{tmp}/zero.mlir"], "the IR file is larger than 256 MiB"),
    (["import", "/dev/zero", "--format", "tensorviz"], "/dev/zero: the tensorviz document is larger than 256 MiB"),
])
def test_an_endless_input_is_refused_naming_the_bound(model, tmp_path, capsys, argv, words):
    (tmp_path / "zero.mlir").symlink_to("/dev/zero")
    argv = [a.replace("{m}", str(model)).replace("{tmp}", str(tmp_path)) for a in argv]
    refused(capsys, argv, words)


def test_strata_opt_reads_a_bounded_input(tmp_path, capsys):
    opt_refused(capsys, ["/dev/zero"], "/dev/zero: the input file is larger than 256 MiB")
    opt_refused(capsys, [tmp_path / "none.mlir"], "none.mlir: no such input file")


@pytest.mark.parametrize("argv, words", [
    (["calibrate", "{m}", "--random", "100000", "-o", "{tmp}/r.json"], "--random must be 1 to 65536 prompts, got 100000"),
    (["calibrate", "{m}", "--length", "129", "-o", "{tmp}/r.json"], "--length must be 1 to 128 tokens (the model's context)"),
    (["calibrate", "{m}", "--prompts", "{tmp}/long.txt", "-o", "{tmp}/r.json"],
     "long.txt:2: the prompt has 129 tokens, more than the model's context of 128"),
    (["compile", "{m}", "--target", "epu", "-o", "{tmp}/e", "--set", "calib_len=100000"],
     "knob calib_len must be 1 to 128 tokens (the model's context), got 100000"),
    (["compile", "{m}", "--target", "epu", "-o", "{tmp}/e", "--set", "calib_prompts=1000000000"],
     "knob calib_prompts must be 1 to 65536 prompts, got 1000000000"),
    (["verify", "{m}", "--against", "{tmp}/p.log", "--ctx", "2000000000"], "ctx 2000000000 needs"),
])
def test_work_beyond_its_bound_is_refused_before_it_starts(model, tmp_path, capsys, argv, words):
    (tmp_path / "long.txt").write_text("1,2\n" + ",".join(["1"] * 129) + "\n")
    (tmp_path / "p.log").write_text("0.00.024.277 I number of input tokens = 1\n0.00.024.277 I   5\n"
                                    "common_debug_cb_eval:   inp_embd = (f32)   GET_ROWS(x{1}) = {1}\n    sum = 1.0\n")
    argv = [a.replace("{m}", str(model)).replace("{tmp}", str(tmp_path)) for a in argv]
    refused(capsys, argv, words)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "e").exists()


@pytest.mark.parametrize("rtol", ["-1", "nan", "inf"])
def test_verify_refuses_a_tolerance_that_is_not_one(model, tmp_path, capsys, rtol):
    log = tmp_path / "p.log"
    log.write_text("0.00.024.277 I number of input tokens = 1\n0.00.024.277 I   5\n"
                   "common_debug_cb_eval:   inp_embd = (f32)   GET_ROWS(x{1}) = {1}\n    sum = 1.0\n")
    refused(capsys, ["verify", str(model), "--against", str(log), "--rtol", rtol], "rtol must be a finite number >= 0")


def test_ranges_of_another_model_are_refused(model, tmp_path, capsys):
    other = Path(shutil.copytree(model, tmp_path / "other"))
    config = other / "config.json"
    config.write_text(config.read_text().replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06'))
    assert main(["calibrate", str(other), "--random", "1", "--length", "2", "-o", str(tmp_path / "r.json")]) == 0
    refused(capsys, ["quantize", str(model), "--w4a16", "--smoothquant", str(tmp_path / "r.json"), "-o",
                     str(tmp_path / "q")], "r.json: these ranges were calibrated on model 'other'")
    assert not (tmp_path / "q").exists()
    copy = Path(shutil.copytree(model, tmp_path / "copy"))  # the same config under another name: its own
    assert main(["quantize", str(copy), "--w4a16", "--smoothquant", str(tmp_path / "r.json"), "-o",
                 str(tmp_path / "q")]) == 1  # (other's ranges still)
    assert main(["calibrate", str(copy), "--random", "1", "--length", "2", "-o", str(tmp_path / "c.json")]) == 0
    assert main(["quantize", str(model), "--w4a16", "--smoothquant", str(tmp_path / "c.json"), "-o",
                 str(tmp_path / "q")]) == 0


def test_convert_blueprint_to_fixed_refuses_an_empty_cache(tmp_path, capsys):
    """kv_ctx: the cache's positions; left out, the prefill form (kv_ctx=0 asked for a cache of none)."""
    opt_refused(capsys, [MODULE_LEVEL, "-p", "convert-module-to-op{entry=prefill tokens=1 start=0 ctx=8},"
                         "convert-op-to-blueprint{mode=prefill rows=1},convert-blueprint-to-fixed{ranges=\"r.json\" "
                         "kv_ctx=0}"], "kv_ctx must be 1 to 2147483647 positions")


# ---------------------------------------------------------------------------------------------
# Messages that name the right thing


@pytest.mark.parametrize("key, value, words", [
    ("llama.attention.head_count", 5,
     "metadata key 'llama.attention.head_count' (5) must be a multiple of 'llama.attention.head_count_kv' (2)"),
    ("llama.context_length", 0, "metadata key 'llama.context_length' must be a positive integer, got 0"),
    ("llama.attention.layer_norm_rms_epsilon", -1.0,
     "metadata key 'llama.attention.layer_norm_rms_epsilon' must be a finite positive number"),
    ("llama.rope.freq_base", -5.0, "metadata key 'llama.rope.freq_base' must be a finite positive number"),
])
def test_gguf_errors_name_the_file_s_keys(tmp_path, capsys, key, value, words):
    import gguf

    from frontends.test_gguf import rewrite  # tests/ is on the path

    kind = gguf.GGUFValueType.FLOAT32 if isinstance(value, float) else gguf.GGUFValueType.UINT32
    path = rewrite(DATA / "llama-f32.gguf", tmp_path / "bad.gguf", fields={key: (value, kind)})
    err = refused(capsys, ["inspect", str(path)], str(path), words)
    assert "num_attention_heads" not in err and "rms_norm_eps" not in err and "rope_theta" not in err


@pytest.mark.parametrize("text, char", [("% x\n", "'%'"), ("#\n", "'#'"), ("!\n", "'!'"), ("^ \n", "'^'")])
def test_garbage_ir_names_the_character(tmp_path, capsys, text, char):
    path = tmp_path / "garbage.mlir"
    path.write_text(text)
    from strata.cli.opt import main as opt_main

    assert opt_main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"Expected suffix identifier after {char}" in err and "{first_char}" not in err
    assert main(["view", str(path)]) == 1
    assert "{first_char}" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["ir", "{m}", "--level", "blueprint", "--recipe", ""], "blueprint-assign-precision: unknown recipe ''"),
    (["ir", "{m}", "--level", "blueprint", "--recipe", "\u00e9 x"], "unknown recipe '\u00e9 x'"),
    (["ir", "{m}", "--level", "blueprint", "--recipe", "a\nb"], "unknown recipe 'a\\nb'"),
    (["compile", "{m}", "--target", "cuda", "--set", "kv=", "--print-pipeline"],
     "blueprint-place-state: kv='' is not one of paged, contiguous"),
    (["compile", "{m}", "--target", "cuda", "--set", "kv=a b}", "--print-pipeline"], "kv='a b}' is not one of"),
    (["compile", "{m}", "--target", "epu", "--set", "headroom=40", "-o", "{tmp}/e"],
     "assign-frac-bits: headroom must be an integer in 0..31, got 40"),
    (["run", "{m}", "--prompt-ids", "1", "--via", "onnxruntime", "--target", "epu"],
     "--via onnxruntime runs the op level exported to ONNX; it takes no --target epu"),
])
def test_a_value_inside_a_pipeline_is_refused_by_its_pass_in_one_line(model, tmp_path, capsys, argv, words):
    argv = [a.replace("{m}", str(model)).replace("{tmp}", str(tmp_path)) for a in argv]
    err = refused(capsys, argv, words)
    assert "^" not in err and "flash_attn" not in err
    assert not (tmp_path / "e").exists()


def test_a_pipeline_s_syntax_error_is_its_column_and_message():
    from strata.passes.pipelines import PipelineError, parsed_pipeline

    with pytest.raises(PipelineError) as e:
        parsed_pipeline("blueprint-fuse{")
    assert str(e.value) == "pass pipeline 'blueprint-fuse{': column 16: Expected argument name here"
