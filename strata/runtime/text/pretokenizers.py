"""The pre-tokenizers that a GGUF's `tokenizer.ggml.pre` names, as llama.cpp defines them.

    spec = pre_tokenizer_spec("qwen2", "model.gguf")
    spec.regexes          # the Split regexes, applied in turn (each splits the pieces of the last)
    spec.ignore_merges    # a word that is itself a token is taken whole (Llama 3, Tekken, ...)
    spec.add_bos          # llama.cpp's default when the file has no tokenizer.ggml.add_bos_token

The table is llama.cpp's `src/llama-vocab.cpp` (`llm_tokenizer_bpe` and the name switch of
`llama_vocab::impl::load`). Where llama.cpp rewrote a tokenizer.json regex for its own regex engine
(`(?i:'s|...)` as `'[sS]|...`, `\\p{Lu}` classes as look-aheads), the tokenizer.json original is
used here: HF's `tokenizers` runs Oniguruma, which reads it, and the reference ids were made by HF.

Not here (an error names them): pre-tokenizers that llama.cpp implements in custom code rather than
regexes (`kimi-k2`, `afmoe`), the SentencePiece-style BPEs without byte-level encoding (`gemma4`,
`sarvam-moe`, `whitespace`), `superbpe` (a zero-width split) and `granite-embed-multi-97m` (whose
tokenizer.json regex llama.cpp does not give).
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.runtime.text.errors import TokenizerError

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (_CONTRACTIONS
           + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_CASED_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{c}"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{c}")
_DEEPSEEK3_WORDS = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
                    r"| ?[\p{P}\p{S}]+{nl}|\s+(?!\S)|\s+")

_HAN_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_HAN_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

#: llama.cpp's pre-tokenizer types -> their regexes.
REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "llama3": (_LLAMA3,),
    "jais2": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)"
              r"|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",),
    "deepseek_llm": (
        r"[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
        "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
        "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
        "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
        "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-"
        "\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
        "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
        "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
        "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
        "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
        "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        r"\s+$",
        _HAN_HANGUL,
        r"\p{N}+",
    ),
    "deepseek3_llm": (r"\p{N}{1,3}", _HAN_KANA,
                      _DEEPSEEK3_WORDS.replace("{nl}", r"[\r\n]*|\s*[\r\n]+")),
    "spark2_5": (r"\p{N}{1,3}", _HAN_KANA,
                 _DEEPSEEK3_WORDS.replace("{nl}", r"|[\r\n]"), r"\p{N}"),
    "youtu": (
        "[\uac00-\ud7a3\u3131-\u318e]+"
        "|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
        "|[\u3105-\u312f]+|" + _HAN_KANA,
        _CASED_WORDS.replace("{c}", _CONTRACTIONS + "?")
        + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "deepseek_coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _HAN_HANGUL, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", _GPT2),
    "gpt2": (_GPT2,),
    "qwen2": (_QWEN2,),
    "qwen35": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+",),
    "bloom": (" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",),
    "viking": (" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", r"\p{N}"),
    "tekken": (_CASED_WORDS.replace("{c}", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "chameleon": (
        r"<sentinel:[0-9]+>",
        r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        r"([\t\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        _GPT2,
    ),
    "gpt4o": (_CASED_WORDS.replace("{c}", _CONTRACTIONS + "?")
              + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "tiny_aya": (r"\d{1,3}(?=(?:\d{3})*\b)",
                 _CASED_WORDS.replace("{c}", _CONTRACTIONS + "?")
                 + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "bailingmoe": (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]"
                   r"|\s+(?!\S)|\s+",),
    "seed_coder": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                   r"|\s+(?!\S)|\s+",),
    "ufakzeka": (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "laguna": (r"[^\n]+|[\n]+", _QWEN2),
    "exaone_moe": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",),
    "minicpm5": (r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How llama.cpp pre-tokenizes for one `tokenizer.ggml.pre` name."""

    name: str
    regexes: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False
    #: False where llama.cpp has no BOS token for the type (ChatGLM), whatever the file says.
    has_bos: bool = True


def _names() -> dict[str, tuple[str, dict[str, bool]]]:
    table: dict[str, tuple[str, dict[str, bool]]] = {}

    def add(kind: str, names: str, **flags: bool) -> None:
        for name in names.split():
            table[name] = (kind, flags)

    add("default", "default")
    add("minicpm5", "minicpm5", ignore_merges=True)
    add("llama3", "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        ignore_merges=True, add_bos=True)
    add("llama3", "dbrx smaug-bpe")
    add("deepseek_llm", "deepseek-llm")
    add("deepseek_coder", "deepseek-coder")
    add("deepseek3_llm", "deepseek-v3 hunyuan-dense hy_v4 joyai-llm")
    add("spark2_5", "spark2_5")
    add("youtu", "youtu", ignore_merges=True)
    add("falcon", "falcon")
    add("gpt2", "mpt gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
               "olmo jais exaone4 trillion granite-docling")
    add("starcoder", "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2")
    add("jais2", "jais-2")
    add("qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open")
    add("qwen35", "qwen35")
    add("bloom", "poro-chat bloom gpt3-finnish")
    add("llama3", "chatglm-bpe", has_bos=False)  # llama.cpp's CHATGLM4 regex is Llama 3's
    add("llama3", "glm4 glm5", has_bos=False, ignore_merges=True)
    add("viking", "viking")
    add("tekken", "tekken", ignore_merges=True, add_bos=True)
    add("chameleon", "chameleon", add_bos=True)
    add("gpt4o", "gpt-4o llama4 kanana2 talkie minimax-m2")
    add("tiny_aya", "tiny_aya cohere2moe")
    add("bailingmoe", "bailingmoe bailingmoe2 llada-moe")
    add("seed_coder", "seed-coder")
    add("ufakzeka", "ufakzeka")
    add("qwen2", "grok-2")  # llama.cpp's GROK_2 regex is Qwen2's
    add("laguna", "laguna")
    add("exaone_moe", "exaone-moe")
    return table


#: tokenizer.ggml.pre -> (the regex set, llama.cpp's flags for it).
NAMES = _names()


def pre_tokenizer_spec(name: str | None, path: object) -> PreTokenizerSpec:
    """The pre-tokenizer that `name` (tokenizer.ggml.pre; None when absent) selects for the file `path`.

    An absent name is llama.cpp's `default` (which it warns about); an unknown one is an error.
    """
    if name is None:
        name = "default"
    entry = NAMES.get(name)
    if entry is None:
        raise TokenizerError(f"{path}: tokenizer.ggml.pre '{name}' is not a pre-tokenizer strata supports")
    kind, flags = entry
    return PreTokenizerSpec(name=name, regexes=REGEXES[kind], **flags)
