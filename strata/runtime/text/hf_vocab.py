"""An HF tokenizer directory read as transformers reads it: tokenizer.json and its companions.

    tok = tokenizer_from_hf("path/to/model")       # or the path of a tokenizer.json
    tok.special_tokens["eos_token"], tok.end_of_generation_ids, tok.chat_template

What is read, all optional but tokenizer.json:

* `tokenizer.json`: the `tokenizers` pipeline itself (`tokenizers.Tokenizer.from_file`).
* `tokenizer_config.json`: the named special tokens (`bos_token`, `eos_token`, `unk_token`,
  `pad_token`, ...; a string or an AddedToken dict), a dict of `extra_special_tokens`, and
  `chat_template` (a string, or a list of named templates).
  `special_tokens_map.json` overrides the named tokens where the config has no
  `added_tokens_decoder` (transformers' legacy rule).
* `chat_template.jinja` and `additional_chat_templates/NAME.jinja`: where present they are the
  templates (the first is 'default'), in place of the config's.
* `config.json` (also its `text_config`) and `generation_config.json`: `eos_token_id`, an int or a
  list; with the tokenizer's eos token they are the end-of-generation ids.

BOS and EOS: tokenizer.json's post-processor adds them (`encode(..., add_special=True)`); the
config's `add_bos_token` / `add_eos_token` are not read, as transformers 5 drops them whenever
there is a tokenizer.json (`PreTrainedTokenizerBase._from_pretrained`).

The pipeline is tokenizer.json's as it stands. (transformers 5 rebuilds the pipeline of some
tokenizer classes from the vocabulary: its Qwen2Tokenizer adds an NFC normalizer that the file
does not have, so on text that is not in NFC it can tokenize differently; llama.cpp, whose ids
the GGUF path follows, does not normalize either.)

Every problem is one `TokenizerError` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from strata.runtime.text.errors import TokenizerError
from strata.runtime.text.tokenizer import Tokenizer

#: transformers' named special tokens (SPECIAL_TOKENS_ATTRIBUTES), in its order.
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def tokenizer_from_hf(path: str | Path) -> Tokenizer:
    """The tokenizer of the HF directory `path` (or of the tokenizer.json `path` and its directory)."""
    p = Path(path)
    directory, tokenizer_json = (p, p / "tokenizer.json") if p.is_dir() else (p.parent, p)
    if not tokenizer_json.is_file():
        raise TokenizerError(f"{directory}: no tokenizer.json (an HF tokenizer directory needs one; a GGUF "
                             f"file carries its own vocabulary)")
    from tokenizers import Tokenizer as Backend

    try:
        backend = Backend.from_file(str(tokenizer_json))
    except Exception as e:  # noqa: BLE001 - tokenizers reports every bad file as a plain Exception
        raise TokenizerError(f"{tokenizer_json}: not a valid tokenizer.json ({_first_line(e)})") from None

    config_path = directory / "tokenizer_config.json"
    config = _read_json_object(config_path) or {}
    named = _named_special_tokens(config, config_path)
    legacy_map = directory / "special_tokens_map.json"
    if "added_tokens_decoder" not in config and legacy_map.is_file():
        named.update(_named_special_tokens(_read_json_object(legacy_map) or {}, legacy_map))
    named = {k: v for k, v in named.items() if v is not None}
    ids = {name: backend.token_to_id(text) for name, text in named.items()}

    ends = {ids["eos_token"]} if ids.get("eos_token") is not None else set()
    model_config = directory / "config.json"
    cfg = _read_json_object(model_config) or {}
    ends |= _eos_ids(cfg, "eos_token_id", model_config)
    if isinstance(cfg.get("text_config"), dict):
        ends |= _eos_ids(cfg["text_config"], "text_config.eos_token_id", model_config)
    generation_config = directory / "generation_config.json"
    ends |= _eos_ids(_read_json_object(generation_config) or {}, "eos_token_id", generation_config)

    return Tokenizer(
        backend,
        source=str(directory if p.is_dir() else tokenizer_json),
        bos_id=ids.get("bos_token"),
        eos_id=ids.get("eos_token"),
        end_of_generation_ids=ends,
        special_tokens=named,
        chat_templates=_chat_templates(directory, config, config_path),
    )


# ---------------------------------------------------------------------------------------------
# The files


def _read_json_object(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read: {e.strerror or e}") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data


def _token_text(value: Any, field: str, path: Path) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]  # an AddedToken, serialised
    raise TokenizerError(f"{path}: {field} must be a token's text (a string or an object with 'content')")


def _named_special_tokens(config: dict[str, Any], path: Path) -> dict[str, str | None]:
    named = {name: _token_text(config[name], name, path) for name in NAMED_SPECIAL_TOKENS if name in config}
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):  # model-specific named tokens (image_token, ...), which templates also see
        for name, value in extra.items():
            named[str(name)] = _token_text(value, f"extra_special_tokens.{name}", path)
    return named


def _eos_ids(config: dict[str, Any], field: str, path: Path) -> set[int]:
    v = config.get(field.rpartition(".")[2])
    if v is None:
        return set()
    values = v if isinstance(v, list) else [v]
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in values):
        raise TokenizerError(f"{path}: {field} must be a token id or a list of token ids")
    return set(values)


def _chat_templates(directory: Path, config: dict[str, Any], config_path: Path) -> dict[str, tuple[str, str]]:
    files: dict[str, Path] = {}
    if (directory / "chat_template.jinja").is_file():
        files["default"] = directory / "chat_template.jinja"
    extra = directory / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            files[f.stem] = f
    if files:
        out = {}
        for name, f in files.items():
            try:
                out[name] = (f.read_text(encoding="utf-8"), str(f))
            except UnicodeDecodeError as e:
                raise TokenizerError(f"{f}: not valid UTF-8 (byte {e.start})") from None
        return out
    value = config.get("chat_template")
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": (value, f"{config_path}: chat_template")}
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: (t["template"], f"{config_path}: chat_template '{t['name']}'") for t in value}
    raise TokenizerError(f"{config_path}: chat_template must be a string or a list of {{name, template}} objects")


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
