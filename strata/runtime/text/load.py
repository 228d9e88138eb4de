"""Opening a tokenizer by path: a GGUF file's vocabulary, a tokenizer.json, or an HF directory.

    tok = load_tokenizer("path/to/model")
"""

from __future__ import annotations

from pathlib import Path

from strata.runtime.text.errors import TokenizerError
from strata.runtime.text.gguf_vocab import tokenizer_from_gguf
from strata.runtime.text.hf_vocab import tokenizer_from_hf
from strata.runtime.text.tokenizer import Tokenizer


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer at `path`: a GGUF file (its vocabulary), a tokenizer.json, or a directory with one.

    A directory's tokenizer_config.json, chat_template.jinja, config.json and
    generation_config.json are read too (`strata.runtime.text.hf_vocab`).
    """
    p = Path(path)
    if not p.exists():
        raise TokenizerError(f"{p}: no such file or directory")
    if p.is_file() and _starts_with_gguf_magic(p):
        return tokenizer_from_gguf(p)
    if p.is_file() and p.suffix.lower() == ".gguf":
        raise TokenizerError(f"{p}: not a GGUF file (it does not start with 'GGUF')")
    return tokenizer_from_hf(p)


def _starts_with_gguf_magic(p: Path) -> bool:
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError as e:
        raise TokenizerError(f"{p}: cannot read: {e.strerror or e}") from None
