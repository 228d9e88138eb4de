"""`strata generate` and `strata run --prompt`: text streamed from a prompt, the same ids as the
loop over the prompt's ids, sampling flags applied the same way, and bad input refused in one
line before anything is compiled."""

from __future__ import annotations

import json
import shutil

import pytest

from strata.runtime.text import load_tokenizer
from support import run_tool, write_checkpoint, tiny


def _ids(stdout: str) -> list[int]:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("ids="), stdout
    return [int(t) for t in last[4:].split(",")]


def _gen(model, tmp_path, *flags):
    return run_tool("generate", str(model), "--max-new-tokens", "8", "--ctx", "64",
                    "--cache-dir", str(tmp_path / "cache"), *flags)


def test_text_out_is_the_decode_of_the_ids_of_the_same_request(text_model, tmp_path):
    tok = load_tokenizer(text_model)
    prompt = tok.encode("Once upon a time")
    sample = ("--temperature", "0.9", "--top-k", "50", "--seed", "11")
    for flags in ((), sample):
        text = _gen(text_model, tmp_path, "--prompt", "Once upon a time", "--verbose-prompt", *flags)
        assert text.returncode == 0, text.stderr
        assert f"prompt: {len(prompt)} tokens [{', '.join(map(str, prompt))}]" in text.stderr
        ids = _gen(text_model, tmp_path, "--prompt-ids", ",".join(map(str, prompt)), *flags)
        assert ids.returncode == 0, ids.stderr
        got = _ids(ids.stdout)
        ends = [i for i, t in enumerate(got) if t in tok.end_of_generation_ids]
        reply = got[:ends[0]] if ends else got  # with ids out, only the length stops it
        shown = tok.decode(reply, skip_special=True)
        assert text.stdout == shown + ("" if shown.endswith("\n") else "\n")
        run = run_tool("run", str(text_model), "--prompt", "Once upon a time", "--max-new-tokens", "8", "--ctx", "64",
                       "--cache-dir", str(tmp_path / "cache"), *flags)
        assert run.returncode == 0, run.stderr
        assert _ids(run.stdout) == got  # run --prompt: the same request, ids printed


def test_temperature_zero_equals_the_greedy_ids(text_model, tmp_path):
    greedy = run_tool("run", str(text_model), "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--ctx", "64",
                      "--cache-dir", str(tmp_path / "cache"))
    zero = _gen(text_model, tmp_path, "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--temperature", "0")
    assert greedy.returncode == 0 and zero.returncode == 0
    assert _ids(greedy.stdout) == _ids(zero.stdout)


def test_a_stop_string_and_chat(text_model, tmp_path):
    r = _gen(text_model, tmp_path, "--prompt", "Hello", "--chat", "--system", "Be brief.", "--verbose-prompt")
    assert r.returncode == 0, r.stderr
    tok = load_tokenizer(text_model)
    want = tok.encode_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
                           add_generation_prompt=True)
    assert f"tokens [{', '.join(map(str, want))}]" in r.stderr
    full = _gen(text_model, tmp_path, "--prompt", "Once upon a time", "--max-new-tokens", "12").stdout.rstrip("\n")
    cut = full[len(full) // 2:][:2]
    r = _gen(text_model, tmp_path, "--prompt", "Once upon a time", "--max-new-tokens", "12", "--stop", cut)
    assert r.returncode == 0 and r.stdout.rstrip("\n") == full[:full.index(cut)]
    assert f"stopped: stop string {cut!r}" in r.stderr


def test_a_model_without_a_tokenizer_still_takes_ids(tmp_path):
    bare = write_checkpoint(tiny("llama"), tmp_path / "bare")
    r = _gen(bare, tmp_path, "--prompt", "Hello")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--prompt-ids still works" in r.stderr
    assert not (tmp_path / "cache").exists()
    r = _gen(bare, tmp_path, "--prompt-ids", "1,2,3", "--temperature", "1", "--seed", "2")
    assert r.returncode == 0 and len(_ids(r.stdout)) == 8


def _copy(model, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(model, d, ignore=shutil.ignore_patterns(".strata-cache"))
    return d


def _bad(model, tmp_path, *flags) -> str:
    r = _gen(model, tmp_path, *flags)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "cache").exists() and not (model / ".strata-cache").exists()  # nothing compiled
    return r.stderr


def test_a_malformed_tokenizer_json(text_model, tmp_path):
    d = _copy(text_model, tmp_path)
    (d / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": ', encoding="utf-8")
    assert "tokenizer.json: not a valid tokenizer.json" in _bad(d, tmp_path, "--prompt", "Hello")


@pytest.mark.parametrize("template, message", [
    ("{% for m in messages %}{{ m.content }}{% endfor %}\n{{ raise_exception('no system messages') }}",
     "line 2: raise_exception: no system messages"),
    ("{% for m in messages %}\n{{ m.content }\n{% endfor %}", "line 2: "),
])
def test_a_template_that_raises_or_does_not_parse(text_model, tmp_path, template, message):
    d = _copy(text_model, tmp_path)
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    err = _bad(d, tmp_path, "--prompt", "Hello", "--chat")
    assert "tokenizer_config.json: chat_template: " in err and message in err


def test_invalid_utf8_and_a_prompt_longer_than_the_context(text_model, tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "strata.cli", "generate", str(text_model), "--prompt".encode(),
                        b"caf\xe9", "--cache-dir", str(tmp_path / "cache")], capture_output=True)
    assert r.returncode == 1 and b"--prompt: invalid UTF-8 at byte 3" in r.stderr and b"Traceback" not in r.stderr
    err = _bad(text_model, tmp_path, "--prompt", "Once upon a time " * 40)
    assert "more than the context of 64" in err


def test_the_epu_refuses_sampling_before_compiling(text_model, tmp_path):
    err = _bad(text_model, tmp_path, "--prompt", "Hello", "--target", "epu", "--temperature", "0.8")
    assert "the EPU decodes greedily" in err


def test_an_unknown_gguf_pre_tokenizer(tmp_path):
    from support import ROOT

    data = bytearray((ROOT / "tests" / "frontends" / "data" / "qwen2-f32.gguf").read_bytes())
    at = data.index(b"tokenizer.ggml.pre") + len(b"tokenizer.ggml.pre") + 4 + 8  # type, then the length
    assert data[at:at + 5] == b"qwen2"
    data[at:at + 5] = b"qwenX"
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    err = _bad(bad, tmp_path, "--prompt", "Hello")
    assert "bad.gguf" in err and "qwenX" in err
    r = run_tool("tokenize", str(bad), "--prompt", "Hello")
    assert r.returncode == 1 and "qwenX" in r.stderr and r.stderr.count("\n") == 1
