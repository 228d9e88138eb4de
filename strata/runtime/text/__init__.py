"""Text in and out: the model's own tokenizer, its chat templates, streaming and stop strings.

    from strata.runtime.text import load_tokenizer, StopStrings

    tok = load_tokenizer("model.gguf")                 # or an HF directory with tokenizer.json
    prompt = tok.encode_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    detok, stops = tok.detokenizer(skip_special=True), StopStrings(["\\n\\n"])
    for token_id in generate(prompt):                  # the generation loop's ids
        if token_id in tok.end_of_generation_ids:
            break
        print(stops.push(detok.push(token_id)), end="", flush=True)
        if stops.stopped:
            break

* `load_tokenizer(path) -> Tokenizer`: a GGUF's vocabulary (`gguf_vocab`: SentencePiece or
  byte-level BPE with llama.cpp's pre-tokenizers) or an HF tokenizer directory (`hf_vocab`), both
  run by HF's `tokenizers`; no weights are read.
* `Tokenizer`: `encode`, `decode`, `bos_id`, `eos_id`, `end_of_generation_ids`, `special_tokens`,
  `vocab_size`, `chat_templates`, `render_chat` / `encode_chat`, `detokenizer()`.
* `ChatTemplate`: one Jinja template, rendered as transformers' `apply_chat_template` renders it.
* `IncrementalDetokenizer`: streamed text that joins to the one-shot decode.
* `StopStrings`: user stop strings found in streamed text, with a partial match held back.
* `TextEmitter`: a reply's text from its ids, one at a time (the detokenizer, the stop strings
  and the end-of-generation ids together): the one text layer of `strata generate` and the server.
* `check_utf8(text, where)`: text from the user, or a one-line error at its first bad byte.
* Errors: `TokenizerError` (a tokenizer file), `ChatTemplateError` (a template: its origin and
  line), `TextInputError` (text that is not UTF-8); all `StrataError`s, one line each.
"""

from strata.runtime.text.chat_template import ChatTemplate
from strata.runtime.text.detokenizer import IncrementalDetokenizer
from strata.runtime.text.emitter import Piece, TextEmitter, end_of_generation_ids
from strata.runtime.text.errors import ChatTemplateError, TextInputError, TokenizerError
from strata.runtime.text.stop import StopStrings
from strata.runtime.text.load import load_tokenizer
from strata.runtime.text.tokenizer import Tokenizer, check_utf8

__all__ = [
    "ChatTemplate",
    "ChatTemplateError",
    "IncrementalDetokenizer",
    "Piece",
    "StopStrings",
    "TextEmitter",
    "TextInputError",
    "Tokenizer",
    "TokenizerError",
    "check_utf8",
    "end_of_generation_ids",
    "load_tokenizer",
]
