"""One tokenizer API over an HF tokenizer directory and a GGUF's own vocabulary.

    tok = load_tokenizer("path/to/model")        # a directory with tokenizer.json, or a .gguf file
    ids = tok.encode("Hello world")              # with BOS where the model adds one
    tok.decode(ids, skip_special=True)           # 'Hello world'
    tok.end_of_generation_ids                    # every id that ends a reply
    text = tok.render_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = tok.encode(text, add_special=False)    # the template writes its own BOS

Both kinds are an HF `tokenizers.Tokenizer` underneath (`backend`): a tokenizer.json is read as it
is; a GGUF vocabulary is built into one (`strata.runtime.text.gguf_vocab`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from strata.runtime.text.errors import TextInputError

if TYPE_CHECKING:
    from strata.runtime.text.chat_template import ChatTemplate
    from strata.runtime.text.detokenizer import IncrementalDetokenizer


def check_utf8(text: str | bytes, where: str) -> str:
    """`text` as a str, or a `TextInputError` naming `where` and the first byte that is not UTF-8.

    Bytes are decoded strictly. A str may hold what Python made of undecodable bytes (the lone
    surrogates of `surrogateescape`, as in `sys.argv`); those count as invalid too.
    """
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TextInputError(f"{where}: invalid UTF-8 at byte {e.start}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = len(text[:e.start].encode("utf-8"))
        raise TextInputError(f"{where}: invalid UTF-8 at byte {byte}") from None
    return text


class Tokenizer:
    """Text to ids and back, the special tokens, the end-of-generation ids and the chat templates.

    Build one with `load_tokenizer`. `backend` is the `tokenizers.Tokenizer` that does the work.
    """

    def __init__(self, backend: Any, *, source: str, bos_id: int | None, eos_id: int | None,
                 end_of_generation_ids: Iterable[int], special_tokens: Mapping[str, str],
                 chat_templates: Mapping[str, tuple[str, str]]) -> None:
        from strata.runtime.text.chat_template import ChatTemplate

        self.backend = backend
        #: The file or directory the tokenizer was read from.
        self.source = source
        self.bos_id = bos_id
        self.eos_id = eos_id
        #: Every id that ends generation (eos, end-of-turn, ... : see the readers).
        self.end_of_generation_ids = frozenset(end_of_generation_ids)
        #: The named special tokens (bos_token, eos_token, unk_token, pad_token, ...) -> their text,
        #: as a chat template sees them.
        self.special_tokens = dict(special_tokens)
        #: name -> ChatTemplate; the model's own is 'default' (see `chat_template`).
        self.chat_templates = {name: ChatTemplate(src, origin=origin) for name, (src, origin) in chat_templates.items()}
        added = backend.get_added_tokens_decoder()
        #: The ids of the special tokens (control tokens): not parsed from text when
        #: `parse_special=False`, dropped by `decode(..., skip_special=True)`.
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        #: Ids run from 0 to vocab_size - 1 (the model's embedding may have more rows).
        self.vocab_size = max([backend.get_vocab_size(with_added_tokens=True)] + [i + 1 for i in added])
        self._encode_lock = threading.Lock()
        #: Whether `encode(..., add_special=True)` starts with the BOS (a chat template that writes
        #: its own BOS is encoded with add_special=False, or the prompt would start with two).
        self.adds_bos = bos_id is not None and backend.encode("", add_special_tokens=True).ids[:1] == [bos_id]

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size})"

    # -- text <-> ids -----------------------------------------------------------------------

    def encode(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """The ids of `text`.

        `add_special`: add what the model adds around a text (BOS, EOS: the tokenizer's post-processor).
        `parse_special`: special tokens written in the text (`<|im_start|>`) become their ids; if false
        they are tokenized as plain text (llama.cpp's `parse_special`; user-defined added tokens are
        matched either way, as in llama.cpp and HF).
        """
        text = check_utf8(text, "the text to encode")
        with self._encode_lock:  # encode_special_tokens is the backend's state, not an argument
            self.backend.encode_special_tokens = not parse_special
            try:
                return self.backend.encode(text, add_special_tokens=add_special).ids
            finally:
                self.backend.encode_special_tokens = False

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """The text of `ids` (`skip_special`: without the special tokens' text). Ids outside the
        vocabulary (a model's padded embedding rows) decode to nothing, as HF's tokenizers decode them."""
        n = self.vocab_size
        return self.backend.decode([int(i) for i in ids if 0 <= i < n], skip_special_tokens=skip_special)

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose text (as stored in the vocabulary) is `text`."""
        return self.backend.token_to_id(text)

    def id_to_token(self, token_id: int) -> str | None:
        """The stored text of token `token_id` (byte-level or U+2581-escaped, as the vocabulary has it)."""
        return self.backend.id_to_token(token_id)

    def detokenizer(self, *, skip_special: bool = False, context: Sequence[int] = ()) -> IncrementalDetokenizer:
        """A streaming decoder for generated ids (see `IncrementalDetokenizer`)."""
        from strata.runtime.text.detokenizer import IncrementalDetokenizer

        return IncrementalDetokenizer(self, skip_special=skip_special, context=context)

    # -- chat -------------------------------------------------------------------------------

    @property
    def chat_template(self) -> ChatTemplate | None:
        """The model's chat template ('default' of `chat_templates`), or None."""
        return self.chat_templates.get("default")

    def use_chat_template(self, template: ChatTemplate) -> None:
        """Render every chat with `template` from now on, in place of the model's own (--chat-template)."""
        template.check()
        self.chat_templates = {"default": template}

    def select_chat_template(self, template: str | ChatTemplate | None = None, *,
                             tools: Sequence[Any] | None = None) -> ChatTemplate:
        """The template to render: `template` itself, or the one of that name, or the model's
        (its 'tool_use' one when there are tools), as transformers' `get_chat_template` picks it."""
        from strata.runtime.text.chat_template import ChatTemplate, ChatTemplateError

        if isinstance(template, ChatTemplate):
            return template
        if template is not None:
            if template in self.chat_templates:
                return self.chat_templates[template]
            return ChatTemplate(template, origin="the chat template given")
        if tools is not None and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if "default" in self.chat_templates:
            return self.chat_templates["default"]
        if self.chat_templates:
            raise ChatTemplateError(f"{self.source}: the tokenizer has several chat templates and no default "
                                    f"({', '.join(sorted(self.chat_templates))}); name one")
        raise ChatTemplateError(f"{self.source}: the tokenizer has no chat template")

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False,
                    template: str | ChatTemplate | None = None, tools: Sequence[Any] | None = None,
                    **kwargs: Any) -> str:
        """`messages` through the chat template, as transformers' `apply_chat_template(...,
        tokenize=False)`: the special tokens' texts and `kwargs` (`enable_thinking=False`, ...) are
        the template's variables. Encode the result with `add_special=False`."""
        chosen = self.select_chat_template(template, tools=tools)
        return chosen.render(messages, add_generation_prompt=add_generation_prompt, tools=tools,
                             **{**self.special_tokens, **kwargs})

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False,
                    template: str | ChatTemplate | None = None, tools: Sequence[Any] | None = None,
                    **kwargs: Any) -> list[int]:
        """The ids of `render_chat(...)`, as transformers' `apply_chat_template(..., tokenize=True)`."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt, template=template,
                                tools=tools, **kwargs)
        return self.encode(text, add_special=False)
