"""`strata tokenize`: a tokenizer alone (an HF tokenizer directory, a vocabulary-only GGUF, a
model directory), ids printed as llama-tokenize prints them, --decode, --messages with the chat
template (its text or its ids), and one-line errors.

The real vocabularies are llama.cpp's test suite's and Qwen2's, in ../shared/refs/tokenizers beside
the checkout (third-party files the project does not keep); the tests that read them skip, naming
it, when it is absent. The errors are checked on the project's own tiny Llama GGUF."""

from __future__ import annotations

import json

import pytest

from support import REFS, ROOT, run_tool

TOK = REFS / "tokenizers"
needs_refs = pytest.mark.skipif(not TOK.is_dir(), reason="no ../shared/refs/tokenizers beside the checkout")
#: Llama 2's SentencePiece vocabulary on a tiny random model, kept in the project.
TINY_SPM = ROOT / "tests" / "runtime" / "data" / "tiny-llama-spm.gguf"
QWEN_GGUF = TOK / "gguf" / "ggml-vocab-qwen2.gguf"
QWEN_HF = TOK / "hf" / "qwen2"
SPM_GGUF = TOK / "gguf" / "ggml-vocab-llama-spm.gguf"


def _cases(vocab):
    inp = vocab.with_name(vocab.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    out = [list(map(int, line.split())) for line in vocab.with_name(vocab.name + ".out").read_text(
        encoding="utf-8").split("\n")]
    return list(zip(inp, out))


def _ok(*args) -> str:
    r = run_tool("tokenize", *map(str, args))
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_refs
@pytest.mark.parametrize("source", [QWEN_GGUF, QWEN_HF, SPM_GGUF], ids=["qwen2-gguf", "qwen2-hf", "llama-spm-gguf"])
def test_ids_as_llama_tokenize_prints_them(source, tmp_path):
    vocab = SPM_GGUF if source == SPM_GGUF else QWEN_GGUF
    bos = [1] if source == SPM_GGUF else []
    for text, ids in _cases(vocab)[5:7]:
        f = tmp_path / "p.txt"
        f.write_bytes(text.encode("utf-8"))
        assert _ok(source, "--file", f) == "[" + ", ".join(map(str, bos + ids)) + "]\n"
    assert _ok(source, "--prompt", "Hello world", "--no-bos").startswith("[")


@needs_refs
def test_decode_and_a_file_byte_for_byte(tmp_path):
    assert _ok(QWEN_HF, "--decode", "9707,1879") == "Hello world\n"
    assert _ok(QWEN_GGUF, "--decode", "[9707, 1879]") == "Hello world\n"  # what tokenize printed
    f = tmp_path / "p.txt"
    f.write_bytes(b"Hello world\n")
    assert _ok(QWEN_HF, "--file", f) == "[9707, 1879, 198]\n"  # the trailing newline is a token


@needs_refs
def test_messages_through_the_chat_template(tmp_path):
    from strata.runtime.text import load_tokenizer

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    f = tmp_path / "m.json"
    f.write_text(json.dumps(msgs), encoding="utf-8")
    tok = load_tokenizer(QWEN_HF)
    text = _ok(QWEN_HF, "--messages", f, "--text")
    assert text == tok.render_chat(msgs, add_generation_prompt=True) and text.endswith("<|im_start|>assistant\n")
    assert _ok(QWEN_HF, "--messages", f, "--text", "--no-generation-prompt") == tok.render_chat(msgs)
    ids = json.loads(_ok(QWEN_HF, "--messages", f))
    assert ids == tok.encode_chat(msgs, add_generation_prompt=True)
    qwen3 = TOK / "templates" / "Qwen-Qwen3-0.6B.jinja"
    off = _ok(QWEN_HF, "--messages", f, "--text", "--template", qwen3, "--template-kwargs", '{"enable_thinking": false}')
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not _ok(QWEN_HF, "--messages", f, "--text", "--template", qwen3).endswith("</think>\n\n")


@pytest.mark.parametrize("args, message", [
    (("--decode", "9707,999999"), "--decode: id 999999 is outside the vocabulary"),
    (("--messages", "MISSING.json"), "MISSING.json: cannot read"),
    (("--messages", "BAD.json"), "BAD.json: not JSON (line 1"),
    (("--messages", "M.json", "--template-kwargs", "{nope"), "--template-kwargs: not JSON"),
    (("--messages", "M.json", "--template", "T.jinja"), "T.jinja: line 2: "),
    (("--prompt", "x", "--text"), "--text apply to --messages"),
    # Bounded reads: an endless file is one line naming it and the limit, not an out-of-memory.
    (("--file", "/dev/zero"), "/dev/zero: the text file is larger than 64 MiB"),
    (("--messages", "/dev/zero"), "/dev/zero: the messages file is larger than 64 MiB"),
    (("--messages", "M.json", "--template", "/dev/zero"), "/dev/zero: the chat template is larger than 16 MiB"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    (tmp_path / "BAD.json").write_text("[{", encoding="utf-8")
    (tmp_path / "M.json").write_text('[{"role": "user", "content": "Hi"}]', encoding="utf-8")
    (tmp_path / "T.jinja").write_text("{% for m in messages %}\n{{ m.content }\n", encoding="utf-8")
    args = [str(tmp_path / a) if a.endswith((".json", ".jinja")) else a for a in args]
    r = run_tool("tokenize", str(TINY_SPM), *args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_directory_without_a_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    r = run_tool("tokenize", str(tmp_path), "--prompt", "x")
    assert r.returncode == 1 and "no tokenizer.json here" in r.stderr
