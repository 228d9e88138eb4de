"""Reading a HuggingFace ``config.json``: the file itself (refusing what cannot be a config),
and typed access to its fields. Each family (`strata.models`) reads its own fields with these.

    data, file, name = read_config_file("models/tiny")      # the parsed JSON, for errors, the model
    f = Fields(file, data)
    hidden = f.integer("hidden_size")                        # errors name the file and the field

Every error is a :class:`ConfigError` whose one-line message names the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

from strata.errors import StrataError

DTYPES = ("float32", "float16", "bfloat16")

#: The largest size or count a config may give. No dimension of a real model comes close, and
#: it keeps the product of any two dims (vocab x hidden, heads x head_dim) well inside the IR's
#: int64.
MAX_DIM = 2**31 - 1
#: The most layers a config may have: every layer is built and listed, and the deepest models
#: have a few hundred.
MAX_LAYERS = 4096
# Real config.json files are a few kilobytes. The cap keeps a weights file passed by mistake
# from being read whole.
_MAX_CONFIG_BYTES = 16 * 1024 * 1024
_MODEL_HINT = "MODEL must be the model directory (holding config.json) or a config.json file"


class ConfigError(StrataError):
    """A model config that strata cannot read or does not support."""


def write_hf_config(cfg: Any, directory: str | Path) -> Path:
    """Write ``cfg`` as ``directory/config.json`` (creating the directory); returns the file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(cfg.to_hf_dict(), indent=2, sort_keys=True) + "\n")
    return path


def read_config_file(path: str | Path) -> tuple[Any, str, str]:
    """(the parsed JSON, the file's name for errors, the model's name) of ``path``: a model
    directory holding ``config.json``, or the json file itself."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    data = _parse_json(file, _read_config_text(file))
    name = file.resolve().parent.name or "model"
    return data, str(file), name


def architecture_of(data: Any, file: str) -> tuple[str | None, str | None]:
    """(`architectures[0]`, `model_type`) of a parsed config, either None when absent; the
    families say which they read."""
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object at the top level, got {kind(data)}")
    f = Fields(file, data)
    archs = data.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise f.error("architectures", f"must be a non-empty list of strings, got {show(archs)}")
        return archs[0], f.text("model_type", default=None)
    return None, f.text("model_type", default=None)


def _read_config_text(file: Path) -> str:
    """The text of ``file``; what cannot be a config is refused with the reason."""
    try:
        with open(file, "rb") as fh:
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(_why_missing(file)) from None
    except IsADirectoryError:
        raise ConfigError(f"{file}: is a directory, not a config file") from None
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e.strerror or e}") from None
    if _looks_like_safetensors(raw):
        raise ConfigError(f"{file}: is a safetensors weights file; {_MODEL_HINT}")
    if len(raw) > _MAX_CONFIG_BYTES:
        raise ConfigError(f"{file}: is larger than {_MAX_CONFIG_BYTES // 2**20} MiB, too large "
                          f"for a config file; {_MODEL_HINT}")
    text = _text_of(raw)
    if text is None:
        raise ConfigError(f"{file}: is a binary file, not JSON; {_MODEL_HINT}")
    if not text.strip():
        raise ConfigError(f"{file}: is empty")
    return text


def _why_missing(file: Path) -> str:
    """A dangling link on the way to ``file`` would read as 'no such file'; name it instead."""
    for p in (file, *file.parents):
        if p.is_symlink() and not p.exists():
            return f"{p}: dangling symbolic link to '{os.readlink(p)}'"
    return f"{file}: no such file"


def _looks_like_safetensors(raw: bytes) -> bool:
    # A little-endian u64 header length, then the header's opening brace.
    return len(raw) > 8 and raw[8:9] == b"{" and 0 < struct.unpack("<Q", raw[:8])[0] < len(raw)


def _text_of(raw: bytes) -> str | None:
    """``raw`` decoded as UTF-8, or None for binary data."""
    # NUL is valid UTF-8 but never appears in a JSON text; it is the mark of binary data.
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _parse_json(file: Path, text: str) -> Any:
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{file}: invalid JSON: nested too deeply") from None


class _LongInteger:
    """A JSON integer with more digits than Python converts (a guard against quadratic work).

    Parsing keeps it as this marker rather than failing, so that the error can name the field
    that holds it; a field strata never reads may hold one.
    """

    def __init__(self, literal: str) -> None:
        self.negative = literal.startswith("-")
        self.digits = len(literal) - self.negative

    def __str__(self) -> str:
        sign = "negative " if self.negative else ""
        return f"a {sign}{self.digits}-digit integer"


def _parse_int(literal: str) -> int | _LongInteger:
    try:
        return int(literal)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return _LongInteger(literal)


# ---------------------------------------------------------------------------------------------
# Field readers


class Fields:
    """Typed access to the keys of one JSON object; errors name the file and the field."""

    def __init__(self, file: str, data: dict[str, Any], prefix: str = "") -> None:
        self.file, self.data, self.prefix = file, data, prefix

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.file}: field '{self.prefix}{key}' {problem}")

    def _get(self, key: str, default: Any, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "is missing")
            return default
        value = self.data[key]
        return default if value is None and not required else value

    def integer(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if value is default:
            return value
        # bool is a subclass of int in Python, but `true` is never a valid count.
        if not isinstance(value, (int, _LongInteger)) or isinstance(value, bool):
            raise self.error(key, f"must be an integer, got {show(value)}")
        if as_float(value) <= 0:
            raise self.error(key, f"must be a positive integer, got {show(value)}")
        if isinstance(value, _LongInteger) or value > MAX_DIM:
            raise self.error(key, f"is {show(value)}, above the limit of {MAX_DIM} (2**31 - 1)")
        return value

    def number(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if value is default:
            return value
        if not isinstance(value, (int, float, _LongInteger)) or isinstance(value, bool):
            raise self.error(key, f"must be a number, got {show(value)}")
        number = as_float(value)
        if not math.isfinite(number) or number <= 0:
            raise self.error(key, f"must be a finite positive number, got {show(value)}")
        return number

    def flag(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {show(value)}")
        return value

    def text(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if value is not default and not isinstance(value, str):
            raise self.error(key, f"must be a string, got {show(value)}")
        return value


def read_dtype(f: Fields) -> str:
    # transformers 5 writes "dtype"; older versions wrote "torch_dtype".
    key = "dtype" if f.data.get("dtype") is not None else "torch_dtype"
    value = f.text(key, default="float32")
    if value not in DTYPES:
        raise f.error(key, f"is {value!r} (supported: {', '.join(DTYPES)})")
    return value


def as_float(value: int | float | _LongInteger) -> float:
    """``value`` as a float; inf for integers beyond the float range (JSON allows them)."""
    if isinstance(value, _LongInteger):
        return -math.inf if value.negative else math.inf
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def show(value: Any) -> str:
    """``value`` as the JSON it came from, shortened to fit in a one-line message."""
    if isinstance(value, _LongInteger):
        return str(value)
    text = json.dumps(value, default=str)
    if isinstance(value, int) and not isinstance(value, bool) and len(text) > 40:
        return str(_LongInteger(text))  # digits cut short would misstate the value
    return text if len(text) <= 40 else text[:37] + "..."
