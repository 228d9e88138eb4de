"""The errors of the text path: each is one line that names the file, the field or the line.

    try:
        tok = load_tokenizer("model.gguf")
    except TokenizerError as e:
        print(e)            # "model.gguf: tokenizer.ggml.pre 'foo' is not a pre-tokenizer strata knows ..."
"""

from __future__ import annotations

from strata.errors import StrataError


class TokenizerError(StrataError):
    """A tokenizer file (tokenizer.json, tokenizer_config.json, a GGUF vocabulary) that cannot be used."""


class ChatTemplateError(StrataError):
    """A chat template that does not parse, or that raises (or fails) while it renders."""


class TextInputError(StrataError):
    """Text given to the tokenizer that is not valid UTF-8."""
