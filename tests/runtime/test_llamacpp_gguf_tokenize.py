"""The GGUF contract: on a GGUF made by llama.cpp's own converter (a tiny random Llama with Llama 2's
SentencePiece vocabulary: data/tiny-llama-spm.gguf, made by data/make_llamacpp_gguf.py), `strata
generate`, `strata tokenize` and the library tokenize every prompt exactly as `llama-tokenize`
did on that file (data/tiny-llama-spm.tokenize.json; llama.cpp is never run here)."""

from __future__ import annotations

import json
from pathlib import Path

from strata.runtime.commands.textgen import TextPrompt, prepare_request
from support import run_tool

DATA = Path(__file__).resolve().parent / "data"
GGUF = DATA / "tiny-llama-spm.gguf"
CASES = json.loads((DATA / "tiny-llama-spm.tokenize.json").read_text(encoding="utf-8"))


def test_the_data_is_small_and_covers_llamacpps_cases():
    assert GGUF.stat().st_size < 2_000_000
    assert len(CASES) >= 50 and any(not c["prompt"].isascii() for c in CASES)
    assert all(c["ids"][:1] == [1] for c in CASES)  # llama-tokenize adds this vocabulary's BOS


def test_generate_tokenizes_every_prompt_as_llama_tokenize():
    from strata.pipeline import load_model
    from strata.runtime.engine import encode_prompt
    from strata.runtime.opener import model_tokenizer

    tokenizer = model_tokenizer(load_model(GGUF))  # what `strata generate` encodes with
    wrong = [c["prompt"] for c in CASES if encode_prompt(tokenizer, c["prompt"]) != c["ids"]]
    assert wrong == []
    case = CASES[6]  # the whole request, as `strata generate` checks it before compiling
    req = prepare_request(GGUF, TextPrompt(case["prompt"]), 1, target_name="cpu", knobs={"ctx": 256}, interpret=False)
    assert req.ids == case["ids"] and not case["prompt"].isascii()


def test_strata_generate_and_tokenize_on_the_file(tmp_path):
    prompt = next(c for c in CASES if c["prompt"] == "Once upon a time")
    r = run_tool("generate", str(GGUF), "--prompt", prompt["prompt"], "--max-new-tokens", "4", "--verbose-prompt",
                 "--temperature", "0.7", "--seed", "3", "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    shown = "[" + ", ".join(map(str, prompt["ids"])) + "]"
    assert f"prompt: {len(prompt['ids'])} tokens {shown}" in r.stderr
    assert "generated 4 tokens" in r.stderr or "stopped: end-of-generation" in r.stderr
    for case in [CASES[i] for i in (3, 7, 12)]:  # a newline, CJK, the empty text
        r = run_tool("tokenize", str(GGUF), "--prompt", case["prompt"])
        assert r.returncode == 0, r.stderr
        assert r.stdout == "[" + ", ".join(map(str, case["ids"])) + "]\n"
