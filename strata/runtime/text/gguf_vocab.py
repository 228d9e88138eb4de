"""A GGUF's own vocabulary (`tokenizer.ggml.*`) built into an HF `tokenizers` object, as llama.cpp reads it.

    tok = tokenizer_from_gguf("ggml-vocab-qwen2.gguf")      # a `Tokenizer`; no weights are read
    tok.encode("Hello world", add_special=False)            # [9707, 1879]

Two vocabulary kinds (`tokenizer.ggml.model`):

* `llama`: SentencePiece with byte fallback. llama.cpp escapes spaces as U+2581, puts one before
  the text (and after every special token: `add_space_prefix`, on unless the file says otherwise)
  and merges the pair whose joined piece has the highest score. That is a BPE model whose merges
  are every (left, right) split of a normal piece into two normal pieces, ranked by the joined
  piece's score (HF's SentencePiece conversion ranks them the same way; where two pieces score
  the same, the lower id first, where llama.cpp would take the leftmost pair); `<0xNN>` pieces
  are the byte fallback. The normalizer prepends and escapes; the decoder unescapes, joins byte pieces and
  drops the one leading space.
* `gpt2`: byte-level BPE with the file's merges (ranked in file order), after the Split regexes
  that `tokenizer.ggml.pre` names (`strata.runtime.text.pretokenizers`).

Token types (`tokenizer.ggml.token_type`) decide the added tokens, matched in the raw text before
the model runs: control and unknown tokens are special (matched only when special tokens are
parsed, skipped by `decode(..., skip_special=True)`), user-defined tokens are always matched.
llama.cpp also treats tokens whose text names an end of generation or a fill-in-the-middle
separator (`<|im_end|>`, `<|eot_id|>`, `<|file_sep|>`, ... : the lists below are llama.cpp's) as
control tokens, and they end generation (`end_of_generation_ids`), as the eos/eot/eom ids do.

Every problem with the file is one `TokenizerError` naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from strata.runtime.text.errors import TokenizerError
from strata.runtime.text.gguf_header import GgufMetadata, read_gguf_metadata
from strata.runtime.text.pretokenizers import pre_tokenizer_spec
from strata.runtime.text.tokenizer import Tokenizer

# llama.cpp's token types (gguf.TokenType; llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

K = "tokenizer.ggml."
#: The metadata keys of the special token ids, and the names templates see them under.
_SPECIAL_ID_KEYS = {
    "bos_token": K + "bos_token_id",
    "eos_token": K + "eos_token_id",
    "unk_token": K + "unknown_token_id",
    "sep_token": K + "seperator_token_id",  # sic: the key is spelt so in GGUF
    "pad_token": K + "padding_token_id",
    "mask_token": K + "mask_token_id",
}
#: Ids that end generation besides the eos id (llama.cpp's eot, eom and FIM separator keys).
_END_ID_KEYS = (K + "eot_token_id", K + "eom_token_id", K + "fim_pad_token_id", K + "fim_rep_token_id",
                K + "fim_sep_token_id")
#: llama.cpp's texts of end-of-generation tokens (`special_eog_ids`, found by the token's text).
_END_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
))
#: llama.cpp's texts of the fill-in-the-middle pad, repo and file separators, which also end generation.
_FIM_END_TEXTS = (
    ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    ("<|file_sep|>",),
)
#: llama.cpp's other special-looking texts it marks as control tokens (fill-in-the-middle markers).
_FIM_TEXTS = frozenset((
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
    "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>",
    "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>",
    "<|code_middle|>", "<|middle|>",
))
_SPACE = "\u2581"


def tokenizer_from_gguf(path: str | Path, meta: GgufMetadata | None = None) -> Tokenizer:
    """The tokenizer of the GGUF file at `path` (its metadata may be given, already read)."""
    path = Path(path)
    meta = read_gguf_metadata(path) if meta is None else meta
    vocab = _Vocab(path, meta)
    if vocab.model == "llama":
        backend = _sentencepiece(vocab)
    elif vocab.model == "gpt2":
        backend = _byte_level_bpe(vocab)
    else:
        raise TokenizerError(f"{path}: {K}model '{vocab.model}' is not a vocabulary kind strata reads "
                             f"(it reads 'llama' and 'gpt2')")
    _add_special_tokens(backend, vocab)
    _post_processor(backend, vocab)
    return Tokenizer(
        backend,
        source=str(path),
        bos_id=vocab.ids.get("bos_token"),
        eos_id=vocab.ids.get("eos_token"),
        end_of_generation_ids=vocab.end_ids,
        special_tokens={name: vocab.tokens[i] for name, i in vocab.ids.items()},
        chat_templates=vocab.chat_templates(),
    )


class _Vocab:
    """The tokenizer.ggml.* metadata, checked, with llama.cpp's defaults filled in."""

    def __init__(self, path: Path, meta: GgufMetadata) -> None:
        self.path, self.meta = path, meta
        self.model = self.text(K + "model")
        self.tokens: list[str] = self.strings(K + "tokens")
        n = len(self.tokens)
        if n == 0:
            raise TokenizerError(f"{path}: {K}tokens is empty")
        self.types = self.numbers(K + "token_type", n, np.full(n, NORMAL, dtype=np.int32))
        self.scores = self.numbers(K + "scores", n, np.zeros(n, dtype=np.float32))
        for i, t in enumerate(self.tokens):
            if t == "":  # llama.cpp names empty tokens so that every id has a distinct text
                self.tokens[i] = f"[EMPTY_{i}]"
        self.index: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            if self.index.setdefault(t, i) != i:
                raise TokenizerError(f"{path}: {K}tokens has {t!r} twice (ids {self.index[t]} and {i})")
        self.types = self.types.copy()
        self._mark_llamacpp_control_texts()
        self.spec = pre_tokenizer_spec(self.text(K + "pre", None), path) if self.model == "gpt2" else None
        spm = self.model == "llama"
        defaults = {"bos_token": 1, "eos_token": 2, "unk_token": 0} if spm else {}
        self.ids: dict[str, int] = {}
        for name, key in _SPECIAL_ID_KEYS.items():
            default = defaults.get(name)
            i = self.token_id(key, default if default is not None and default < n else None)
            if i is not None:
                self.ids[name] = i
        if self.spec is not None and not self.spec.has_bos:
            self.ids.pop("bos_token", None)
        # A BOS that only the defaults ask for is dropped where the file has no BOS token.
        default_bos = (spm or (self.spec is not None and self.spec.add_bos)) and "bos_token" in self.ids
        self.add_bos = self.flag(K + "add_bos_token", default_bos)
        self.add_eos = self.flag(K + "add_eos_token", False)
        self.add_space_prefix = self.flag(K + "add_space_prefix", spm)
        for flag, name in ((self.add_bos, "bos_token"), (self.add_eos, "eos_token")):
            if flag and name not in self.ids:
                raise TokenizerError(f"{path}: {K}add_{name} is true but the file has no {name.replace('_token', '')} "
                                     f"token id")
        self.end_ids = self._end_of_generation_ids()

    # -- typed reads ------------------------------------------------------------------------

    def text(self, key: str, default: Any = ...) -> Any:
        v = self.meta.get(key, default)
        if v is ...:
            raise TokenizerError(f"{self.path}: metadata key '{key}' is missing (not a GGUF with a vocabulary)")
        if v is not default and not isinstance(v, str):
            raise TokenizerError(f"{self.path}: metadata key '{key}' must be a string")
        return v

    def strings(self, key: str) -> list[str]:
        v = self.meta.get(key)
        if v is None:
            raise TokenizerError(f"{self.path}: metadata key '{key}' is missing (not a GGUF with a vocabulary)")
        if not isinstance(v, list) or any(not isinstance(s, str) for s in v):
            raise TokenizerError(f"{self.path}: metadata key '{key}' must be an array of strings")
        return list(v)

    def numbers(self, key: str, n: int, default: np.ndarray) -> np.ndarray:
        v = self.meta.get(key)
        if v is None:
            return default
        if not isinstance(v, np.ndarray) or v.ndim != 1:
            raise TokenizerError(f"{self.path}: metadata key '{key}' must be an array of numbers")
        if len(v) < n:
            raise TokenizerError(f"{self.path}: metadata key '{key}' has {len(v)} entries for {n} tokens")
        return v[:n]

    def flag(self, key: str, default: bool) -> bool:
        v = self.meta.get(key, default)
        if not isinstance(v, (bool, np.bool_)):
            raise TokenizerError(f"{self.path}: metadata key '{key}' must be a boolean")
        return bool(v)

    def token_id(self, key: str, default: int | None) -> int | None:
        v = self.meta.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TokenizerError(f"{self.path}: metadata key '{key}' must be a token id")
        if not 0 <= v < len(self.tokens):
            raise TokenizerError(f"{self.path}: metadata key '{key}' is {v}, outside the vocabulary "
                                 f"({len(self.tokens)} tokens)")
        return int(v)

    # -- llama.cpp's rules ------------------------------------------------------------------

    def _mark_llamacpp_control_texts(self) -> None:
        for text in _END_TEXTS | _FIM_TEXTS | {t for group in _FIM_END_TEXTS for t in group}:
            i = self.index.get(text)
            if i is not None and self.types[i] not in (CONTROL, UNKNOWN):
                self.types[i] = CONTROL

    def _end_of_generation_ids(self) -> frozenset[int]:
        ends = {self.ids["eos_token"]} if "eos_token" in self.ids else set()
        ends |= {i for key in _END_ID_KEYS if (i := self.token_id(key, None)) is not None}
        ends |= {self.index[t] for t in _END_TEXTS if t in self.index}
        for group in _FIM_END_TEXTS:
            found = [self.index[t] for t in group if t in self.index]
            if found:
                ends.add(min(found))
        return frozenset(ends)

    def chat_templates(self) -> dict[str, tuple[str, str]]:
        """name -> (template source, where it came from); 'default' is tokenizer.chat_template."""
        out: dict[str, tuple[str, str]] = {}
        key = "tokenizer.chat_template"
        if key in self.meta:
            out["default"] = (self.text(key), f"{self.path}: {key}")
        names = self.meta.get("tokenizer.chat_templates")
        if names is not None:
            if not isinstance(names, list) or any(not isinstance(s, str) for s in names):
                raise TokenizerError(f"{self.path}: metadata key 'tokenizer.chat_templates' must be an array "
                                     f"of strings")
            for name in names:
                named = f"{key}.{name}"
                if named in self.meta:
                    out[name] = (self.text(named), f"{self.path}: {named}")
        return out


# ---------------------------------------------------------------------------------------------
# The two vocabulary kinds


def _sentencepiece(v: _Vocab):
    from tokenizers import Tokenizer as Backend, decoders, models, normalizers

    normal = {t: i for i, t in enumerate(v.tokens) if v.types[i] == NORMAL}
    ranked = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                ranked.append((-float(v.scores[i]), i, normal[left], normal[right], left, right))
    ranked.sort()
    unk = v.ids.get("unk_token")
    try:
        model = models.BPE(vocab=v.index, merges=[(r[4], r[5]) for r in ranked], byte_fallback=True, fuse_unk=True,
                           unk_token=v.tokens[unk] if unk is not None else None)
    except Exception as e:  # noqa: BLE001 - tokenizers reports a bad vocabulary as a plain Exception
        raise TokenizerError(f"{v.path}: {K}tokens cannot make a SentencePiece model ({_first_line(e)})") from None
    backend = Backend(model)
    escape = [normalizers.Replace(" ", _SPACE)]
    backend.normalizer = normalizers.Sequence(([normalizers.Prepend(_SPACE)] if v.add_space_prefix else []) + escape)
    unescape = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(unescape + ([decoders.Strip(" ", 1, 0)] if v.add_space_prefix else []))
    return backend


def _byte_level_bpe(v: _Vocab):
    from tokenizers import Regex, Tokenizer as Backend, decoders, models, pre_tokenizers

    assert v.spec is not None
    if K + "merges" not in v.meta:
        raise TokenizerError(f"{v.path}: metadata key '{K}merges' is missing (a gpt2 vocabulary needs its merges)")
    merges = []
    for n, m in enumerate(v.strings(K + "merges")):
        cut = m.find(" ", 1)  # as llama.cpp splits a merge: at the first space after the first character
        if cut < 0:
            raise TokenizerError(f"{v.path}: {K}merges entry {n} ({m!r}) is not two pieces separated by a space")
        merges.append((m[:cut], m[cut + 1:]))
    try:
        model = models.BPE(vocab=v.index, merges=merges, ignore_merges=v.spec.ignore_merges)
    except Exception as e:  # noqa: BLE001
        raise TokenizerError(f"{v.path}: {K}merges do not fit {K}tokens ({_first_line(e)})") from None
    backend = Backend(model)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in v.spec.regexes]
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    return backend


def _add_special_tokens(backend, v: _Vocab) -> None:
    from tokenizers import AddedToken

    special, user = [], []
    for i, t in enumerate(v.tokens):
        kind = v.types[i]
        if kind in (CONTROL, UNKNOWN):
            special.append(AddedToken(t, special=True, normalized=False))
        elif kind == USER_DEFINED:
            user.append(AddedToken(t, special=False, normalized=False))
    backend.add_special_tokens(special)
    backend.add_tokens(user)


def _post_processor(backend, v: _Vocab) -> None:
    from tokenizers import processors

    pieces: list[str] = ["$A"]
    special = []
    for flag, name, front in ((v.add_bos, "bos_token", True), (v.add_eos, "eos_token", False)):
        if flag:
            i = v.ids[name]
            pieces.insert(0 if front else len(pieces), name)
            # The template names the token by a plain name: its text may hold spaces or colons.
            special.append({"id": name, "ids": [i], "tokens": [v.tokens[i]]})
    backend.post_processor = processors.TemplateProcessing(single=pieces, special_tokens=special)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
