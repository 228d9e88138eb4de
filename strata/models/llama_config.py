"""The llama family's config: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` and
``Qwen3ForCausalLM`` read from a parsed HuggingFace ``config.json`` into a frozen dataclass.

    cfg = read_config(data, "models/tiny/config.json", "tiny")

They share one graph (RMSNorm, GQA attention with RoPE, SwiGLU MLP) and differ only in the
flags recorded here: attention biases, the o_proj bias, and Qwen3's per-head q/k RMSNorm.

Both spellings of the rope settings are accepted: transformers <= 4 writes top-level
``rope_theta`` plus ``rope_scaling``; transformers 5 writes one ``rope_parameters`` object
(``{"rope_theta": ..., "rope_type": "default" | "llama3", ...}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strata.frontends.hf_config import DTYPES, MAX_LAYERS, ConfigError, Fields, kind, read_dtype, show

#: architecture class name -> HF ``model_type``
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
_BY_MODEL_TYPE = {mt: arch for arch, mt in ARCHITECTURES.items()}

# Defaults of the transformers 5 config classes, used when a key is absent, so that we read a
# file exactly as transformers would.
_DEFAULT_MAX_POS = {"llama": 2048, "qwen2": 32768, "qwen3": 32768}
_DEFAULT_RMS_EPS = 1e-6
_DEFAULT_ROPE_THETA = 10000.0
# Qwen3Config declares ``head_dim: int = 128``; an absent key therefore means 128, not
# hidden_size // num_heads (an explicit null still means the derived value).
_QWEN3_DEFAULT_HEAD_DIM = 128


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


def read_config(data: Any, file: str = "config.json", name: str = "model") -> LlamaConfig:
    """Build a :class:`LlamaConfig` from a parsed ``config.json``; ``file`` labels errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object at the top level, got {kind(data)}")
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


def _architecture(f: Fields) -> str:
    archs = f.data.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise f.error("architectures",
                          f"must be a non-empty list of strings, got {show(archs)}")
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
            raise f.error(key, f"must be an object, got {show(params)}")
        # Some v5 models nest one set of parameters per layer type; llama-family ones never do.
        if params and all(isinstance(v, dict) for v in params.values()):
            raise f.error(key, "has per-layer-type rope parameters; only one set is supported")
    else:
        key = "rope_scaling"
        params = f.data.get("rope_scaling") or {}
        if not isinstance(params, dict):
            raise f.error(key, f"must be an object or null, got {show(params)}")
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


def _supported() -> str:
    return "supported: " + ", ".join(ARCHITECTURES)
