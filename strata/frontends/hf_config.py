"""Read a HuggingFace ``config.json`` of the llama family into a frozen dataclass.

Supported: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` and ``Qwen3ForCausalLM``. They share one
graph (RMSNorm, GQA attention with RoPE, SwiGLU MLP) and differ only in the flags recorded here:
attention biases, the o_proj bias, and Qwen3's per-head q/k RMSNorm.

Both spellings of the rope settings are accepted: transformers <= 4 writes top-level
``rope_theta`` plus ``rope_scaling``; transformers 5 writes one ``rope_parameters`` object
(``{"rope_theta": ..., "rope_type": "default" | "llama3", ...}``).

Every error is a :class:`ConfigError` whose one-line message names the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.errors import StrataError

#: architecture class name -> HF ``model_type``
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
_BY_MODEL_TYPE = {mt: arch for arch, mt in ARCHITECTURES.items()}

DTYPES = ("float32", "float16", "bfloat16")

# Defaults of the transformers 5 config classes, used when a key is absent, so that we read a
# file exactly as transformers would.
_DEFAULT_MAX_POS = {"llama": 2048, "qwen2": 32768, "qwen3": 32768}
_DEFAULT_RMS_EPS = 1e-6
_DEFAULT_ROPE_THETA = 10000.0
# Qwen3Config declares ``head_dim: int = 128``; an absent key therefore means 128, not
# hidden_size // num_heads (an explicit null still means the derived value).
_QWEN3_DEFAULT_HEAD_DIM = 128

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


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 style frequency-dependent RoPE scaling (the only kind supported)."""

    rope_type: str
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of one llama-family decoder-only model."""

    arch: str
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # bias on q, k, v projections
    o_bias: bool  # bias on the o projection
    qk_norm: bool  # per-head RMSNorm of q and k (Qwen3)
    dtype: str

    def __post_init__(self) -> None:
        # Catch programmatic configs that no HF class could express.
        where = f"config of {self.name!r}"
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"{where}: unknown architecture {self.arch!r} ({_supported()})")
        if self.dtype not in DTYPES:
            raise ConfigError(f"{where}: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        mt = self.model_type
        if mt == "qwen2" and (not self.attention_bias or self.o_bias):
            raise ConfigError(f"{where}: Qwen2 always has q/k/v biases and no o_proj bias")
        if mt in ("llama", "qwen3") and self.o_bias != self.attention_bias:
            raise ConfigError(f"{where}: {self.arch} uses one 'attention_bias' for q, k, v and o")
        if self.qk_norm != (mt == "qwen3"):
            raise ConfigError(f"{where}: qk_norm is set exactly for Qwen3")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{where}: num_heads {self.num_heads} is not a multiple of "
                              f"num_kv_heads {self.num_kv_heads}")

    @property
    def model_type(self) -> str:
        """The HF ``model_type`` (``llama``, ``qwen2`` or ``qwen3``)."""
        return ARCHITECTURES[self.arch]

    def to_hf_dict(self) -> dict[str, Any]:
        """A ``config.json`` dict that transformers' config classes accept (v5 spelling)."""
        rope: dict[str, Any] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        if self.rope_scaling is not None:
            rs = self.rope_scaling
            rope.update(rope_type=rs.rope_type, factor=rs.factor,
                        low_freq_factor=rs.low_freq_factor, high_freq_factor=rs.high_freq_factor,
                        original_max_position_embeddings=rs.original_max_position_embeddings)
        d: dict[str, Any] = {
            "architectures": [self.arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": rope,
            "dtype": self.dtype,
        }
        if self.model_type == "llama":
            d.update(attention_bias=self.attention_bias, mlp_bias=False)
        elif self.model_type == "qwen3":
            d.update(attention_bias=self.attention_bias, use_sliding_window=False)
        else:
            d.update(use_sliding_window=False)
        return d


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


def architecture_of(data: Any, file: str) -> str:
    """The `architectures[0]` of a parsed config (or what its `model_type` implies); the
    family that reads it says whether it is supported."""
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object at the top level, got {_kind(data)}")
    archs = data.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return _architecture(Fields(file, data))


def load_hf_config(path: str | Path) -> LlamaConfig:
    """Read ``path`` (a model directory holding ``config.json``, or the json file itself)."""
    data, file, name = read_config_file(path)
    return from_hf_dict(data, file=file, name=name)


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


def from_hf_dict(data: Any, file: str = "config.json", name: str = "model") -> LlamaConfig:
    """Build a :class:`LlamaConfig` from a parsed ``config.json``; ``file`` labels errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object at the top level, got {_kind(data)}")
    f = Fields(file, data)
    arch = _architecture(f)
    mt = ARCHITECTURES[arch]

    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ConfigError(f"{file}: field 'num_attention_heads' ({heads}) must be a multiple of "
                          f"'num_key_value_heads' ({kv_heads})")
    absent_head_dim = _QWEN3_DEFAULT_HEAD_DIM if mt == "qwen3" and "head_dim" not in data else None
    head_dim = f.integer("head_dim", default=absent_head_dim)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(f"{file}: field 'num_attention_heads' ({heads}) must divide "
                              f"'hidden_size' ({hidden})")
        head_dim = hidden // heads
    if head_dim % 2:
        raise ConfigError(f"{file}: field 'head_dim' is {head_dim}; RoPE rotates pairs of dims, "
                          "so it must be even")
    layers = f.integer("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise f.error("num_hidden_layers", f"is {layers}, above the limit of {MAX_LAYERS}")

    _check_unsupported(f, mt)
    rope_theta, rope_scaling = _rope(f)
    attn_bias = True if mt == "qwen2" else f.flag("attention_bias", default=False)
    return LlamaConfig(
        arch=arch,
        name=name,
        vocab_size=f.integer("vocab_size"),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=f.integer("intermediate_size"),
        rms_norm_eps=f.number("rms_norm_eps", default=_DEFAULT_RMS_EPS),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=f.integer("max_position_embeddings", default=_DEFAULT_MAX_POS[mt]),
        tie_word_embeddings=f.flag("tie_word_embeddings", default=False),
        attention_bias=attn_bias,
        o_bias=False if mt == "qwen2" else attn_bias,
        qk_norm=mt == "qwen3",
        dtype=read_dtype(f),
    )


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
            raise self.error(key, f"must be an integer, got {_show(value)}")
        if _as_float(value) <= 0:
            raise self.error(key, f"must be a positive integer, got {_show(value)}")
        if isinstance(value, _LongInteger) or value > MAX_DIM:
            raise self.error(key, f"is {_show(value)}, above the limit of {MAX_DIM} (2**31 - 1)")
        return value

    def number(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if value is default:
            return value
        if not isinstance(value, (int, float, _LongInteger)) or isinstance(value, bool):
            raise self.error(key, f"must be a number, got {_show(value)}")
        number = _as_float(value)
        if not math.isfinite(number) or number <= 0:
            raise self.error(key, f"must be a finite positive number, got {_show(value)}")
        return number

    def flag(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_show(value)}")
        return value

    def text(self, key: str, default: Any = ...) -> Any:
        value = self._get(key, default, default is ...)
        if value is not default and not isinstance(value, str):
            raise self.error(key, f"must be a string, got {_show(value)}")
        return value


def _architecture(f: Fields) -> str:
    archs = f.data.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise f.error("architectures",
                          f"must be a non-empty list of strings, got {_show(archs)}")
        if archs[0] not in ARCHITECTURES:
            raise ConfigError(f"{f.file}: unknown architecture {archs[0]!r} ({_supported()})")
        return archs[0]
    mt = f.text("model_type", default=None)
    if mt is None:
        raise ConfigError(f"{f.file}: field 'architectures' is missing (and so is 'model_type')")
    if mt not in _BY_MODEL_TYPE:
        raise ConfigError(f"{f.file}: unknown model_type {mt!r} (supported: "
                          f"{', '.join(_BY_MODEL_TYPE)})")
    return _BY_MODEL_TYPE[mt]


def _check_unsupported(f: Fields, mt: str) -> None:
    """Refuse flags that change the graph in ways strata does not model."""
    act = f.text("hidden_act", default="silu")
    if act != "silu":
        raise f.error("hidden_act", f"is {act!r}; only 'silu' is supported")
    if mt == "llama" and f.flag("mlp_bias", default=False):
        raise f.error("mlp_bias", "is true; MLP biases are not supported")
    if mt in ("qwen2", "qwen3") and f.flag("use_sliding_window", default=False):
        raise f.error("use_sliding_window", "is true; sliding-window attention is not supported")


def _rope(f: Fields) -> tuple[float, RopeScaling | None]:
    """rope_theta and scaling from ``rope_parameters`` (transformers 5) or the older keys."""
    params = f.data.get("rope_parameters")
    if params is not None:
        key = "rope_parameters"
        if not isinstance(params, dict):
            raise f.error(key, f"must be an object, got {_show(params)}")
        # Some v5 models nest one set of parameters per layer type; llama-family ones never do.
        if params and all(isinstance(v, dict) for v in params.values()):
            raise f.error(key, "has per-layer-type rope parameters; only one set is supported")
    else:
        key = "rope_scaling"
        params = f.data.get("rope_scaling") or {}
        if not isinstance(params, dict):
            raise f.error(key, f"must be an object or null, got {_show(params)}")
    top_theta = f.number("rope_theta", default=_DEFAULT_ROPE_THETA)
    sub = Fields(f.file, params, prefix=key + ".")
    theta = sub.number("rope_theta", default=top_theta)
    # "type" is the pre-4.45 spelling of "rope_type".
    type_key = "rope_type" if "rope_type" in params or "type" not in params else "type"
    rope_type = sub.text(type_key, default="default")
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise sub.error(type_key, f"is {rope_type!r} (supported: 'default', 'llama3')")
    scaling = RopeScaling(
        rope_type="llama3",
        factor=sub.number("factor"),
        low_freq_factor=sub.number("low_freq_factor"),
        high_freq_factor=sub.number("high_freq_factor"),
        original_max_position_embeddings=sub.integer("original_max_position_embeddings"),
    )
    # The llama3 formula divides by (high - low).
    if scaling.high_freq_factor <= scaling.low_freq_factor:
        raise sub.error("high_freq_factor", f"({scaling.high_freq_factor}) must be greater than "
                        f"'low_freq_factor' ({scaling.low_freq_factor})")
    return theta, scaling


def read_dtype(f: Fields) -> str:
    # transformers 5 writes "dtype"; older versions wrote "torch_dtype".
    key = "dtype" if f.data.get("dtype") is not None else "torch_dtype"
    value = f.text(key, default="float32")
    if value not in DTYPES:
        raise f.error(key, f"is {value!r} (supported: {', '.join(DTYPES)})")
    return value


def _as_float(value: int | float | _LongInteger) -> float:
    """``value`` as a float; inf for integers beyond the float range (JSON allows them)."""
    if isinstance(value, _LongInteger):
        return -math.inf if value.negative else math.inf
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _supported() -> str:
    return "supported: " + ", ".join(ARCHITECTURES)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _show(value: Any) -> str:
    """``value`` as the JSON it came from, shortened to fit in a one-line message."""
    if isinstance(value, _LongInteger):
        return str(value)
    text = json.dumps(value, default=str)
    if isinstance(value, int) and not isinstance(value, bool) and len(text) > 40:
        return str(_LongInteger(text))  # digits cut short would misstate the value
    return text if len(text) <= 40 else text[:37] + "..."
