"""More of llama.cpp's test vocabularies, when a directory of them is named (opt-in: they are large).

    STRATA_VOCAB_DIR=$LLAMA_CPP/models pytest -q tests/runtime/text/test_more_vocabularies.py

Every `ggml-vocab-NAME.gguf` there with its `.inp` and `.out` must give the `.out` ids for every
case (no BOS, special tokens not parsed, as llama.cpp's test-tokenizer-0 runs them) and round-trip.
A vocabulary of a kind strata does not read (BERT's WordPiece, Gemma 4's BPE) is skipped with the
one-line error that says so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strata.runtime.text import TokenizerError, load_tokenizer

VOCAB_DIR = os.environ.get("STRATA_VOCAB_DIR")
FILES = sorted(p for p in Path(VOCAB_DIR).glob("ggml-vocab-*.gguf")
               if p.with_suffix(".gguf.inp").is_file()) if VOCAB_DIR else []


@pytest.mark.skipif(not VOCAB_DIR, reason="STRATA_VOCAB_DIR is not set (a directory of llama.cpp's ggml-vocab-*.gguf)")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_case_gives_llamacpps_ids(path):
    try:
        tok = load_tokenizer(path)
    except TokenizerError as e:
        pytest.skip(str(e))
    inp = path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    out = path.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
    assert len(inp) == len(out)
    for text, line in zip(inp, out):
        ids = [int(i) for i in line.split()]
        assert tok.encode(text, add_special=False, parse_special=False) == ids, text
        assert tok.decode(ids) == text
