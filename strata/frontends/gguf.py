"""Read llama.cpp's GGUF files: the metadata gives the config, the tensors give the weights.

    g = GgufFile("tiny.gguf")
    fields = hf_config_dict(g)                      # the metadata as the HF config fields it stands for
    store = GgufWeights(g, config, params, ...)     # what `Model.open_weights` returns for a GGUF

The pipeline reads `fields` by the family they name (`strata.pipeline.model.gguf_config`).

The file is parsed by the `gguf` package's `GGUFReader` and quantized tensors are dequantized by
`gguf.quants.dequantize` (an optional dependency, imported only here). Types read: F32, F16 and
BF16 (zero-copy views), Q8_0, Q4_0 and Q6_K (dequantized once to f32 on first use and kept,
for the op level and the CPU target). At the blueprint level Q8_0 and Q4_0 are weight formats
(`int8/block32`, `int4/block32`; the recipes `q8_0`, `q4_0`), which round a GGUF of that type
to itself (`strata.ir.ggml_blocks`).

**The metadata.** `general.architecture` names the family (`ARCHITECTURES`); its keys
(`{arch}.block_count`, `embedding_length`, `attention.head_count`, ...) are mapped to an HF
`config.json` dict, which the family's own config reader reads, so a GGUF model is checked as
strictly as a checkpoint directory. What GGUF does not carry is what llama.cpp assumes:
tied embeddings when there is no `output.weight`, q/k/v biases when `blk.0.attn_q.bias` is
there, sparse layers where `blk.N.ffn_gate_inp.weight` is, and renormalised top-k expert
weights (llama.cpp's MoE graphs always renormalise). Llama 3's RoPE scaling is stored only as
its frequency factors (`rope_freqs.weight`): its parameters are fitted to them (`llama3_scaling`).

**The tensors.** The op level addresses weights by llama.cpp's names, but with the checkpoint's
(HF's) values: where llama.cpp's converter changes a tensor, the op level's `op.param` says how
(`convert = plus_one | neg_exp | squeeze | ungroup_rows`) and applies it itself. So the GGUF store
gives every param in the form the IR expects, undoing the converter's changes explicitly:

* llama: `attn_q` / `attn_k` rows (and biases) were permuted for llama.cpp's "norm" RoPE
  (`LlamaModel.permute`); the op level ropes NeoX-style on HF's order, so they are permuted back;
* zero-centred norms (the hybrids' RmsNorm, `weight_offset` in the IR) were stored `1 + w`;
  the store gives `w` (op.param's `plus_one` adds the 1 again; f32 makes that exact);
* Gated DeltaNet's `A_log` was stored as `ssm_a = -exp(A_log)`; the store gives `log(-ssm_a)`
  (op.param's `neg_exp`);
* the conv1d `[C, 1, K]` was squeezed to `[C, K]`; the store gives it back with its 1;
* Qwen3.5's linear-attention value heads were reordered from grouped (by key head) to tiled
  (`_LinearAttentionVReorderBase`): the v rows of attn_qkv, attn_gate, ssm_beta, ssm_alpha,
  ssm_a, ssm_dt.bias, the v channels of the conv1d and the columns of ssm_out are put back;
* Qwen3-Next's grouped `in_proj_qkvz` was split into `attn_qkv` and `attn_gate`; the store
  regroups them as the IR's `ssm_in` (which op.param's `ungroup_rows` splits again).

Every error is a one-line `GgufError` naming the file and the key or tensor.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.ir.split import split_piece

MAGIC = b"GGUF"
#: general.architecture -> the HF architecture whose family reads it.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "qwen35": "Qwen3_5ForCausalLM",
    "qwen35moe": "Qwen3_5MoeForCausalLM",
    "qwen3next": "Qwen3NextForCausalLM",
}
HYBRID = ("qwen35", "qwen35moe", "qwen3next")
MOE = ("qwen3moe", "qwen35moe", "qwen3next")
#: The architectures llama.cpp ropes with IMROPE (interleaved M-RoPE sections).
IMROPE_ARCHS = ("qwen35", "qwen35moe")
#: The tensor types read (ggml type names). Q6_K is what llama-quantize gives the output tensor
#: (or tied embedding) of a Q4_0 file whose rows split into its 256-blocks.
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q6_K")
#: general.file_type -> the model's element type (quantized files compute in f32).
_FILE_DTYPES = {0: "float32", 1: "float16", 32: "bfloat16"}


class GgufError(StrataError):
    """A GGUF file that strata cannot read or does not support."""


def is_gguf(path: str | Path) -> bool:
    """Whether `path` is a file that starts with GGUF's magic (or is named *.gguf)."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return True
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


def _gguf():
    try:
        import gguf
    except ImportError:
        raise GgufError("reading GGUF files needs the 'gguf' package (pip install 'strata[gguf]')") from None
    return gguf


# ---------------------------------------------------------------------------------------------
# The file


class GgufFile:
    """One GGUF file, parsed by the gguf package's reader: its metadata and its tensors."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        gguf = _gguf()
        if not self.path.is_file():
            raise GgufError(f"{self.path}: no such file" if not self.path.exists() else f"{self.path}: not a file")
        try:
            with open(self.path, "rb") as fh:
                magic = fh.read(4)
            size = self.path.stat().st_size
        except OSError as e:
            raise GgufError(f"{self.path}: cannot read: {e.strerror or e}") from None
        if len(magic) < len(MAGIC) and MAGIC.startswith(magic):
            raise GgufError(f"{self.path}: truncated GGUF file ({size} bytes)")
        if magic != MAGIC:
            raise GgufError(f"{self.path}: not a GGUF file (it does not start with 'GGUF')")
        try:
            reader = gguf.GGUFReader(self.path)
        except Exception as e:  # noqa: BLE001 - the reader reports a bad file with many exception types
            raise GgufError(f"{self.path}: truncated or corrupt GGUF file ({size} bytes; the gguf reader says: "
                            f"{_first_line(e)})") from None
        self.reader = reader
        self.tensors = {t.name: t for t in reader.tensors}
        for t in reader.tensors:
            if t.tensor_type.name not in TYPES:
                raise GgufError(f"{self.path}: tensor '{t.name}' has type {t.tensor_type.name}; "
                                f"strata reads {', '.join(TYPES)}")
        self.arch = self.text("general.architecture")
        #: The indices of the multi-token-prediction layers (set as the config is read).
        self.mtp_layers: range = range(0)
        #: What compiled code depends on: the metadata and tensor infos (not the tensor data).
        self.header_sha256 = hashlib.sha256(np.asarray(reader.data[:reader.data_offset])).hexdigest()

    # -- metadata -------------------------------------------------------------------------

    def value(self, key: str, default: Any = ...) -> Any:
        field = self.reader.get_field(key)
        if field is None:
            if default is ...:
                raise GgufError(f"{self.path}: metadata key '{key}' is missing")
            return default
        try:
            return field.contents()
        except Exception as e:  # noqa: BLE001
            raise GgufError(f"{self.path}: metadata key '{key}' cannot be read ({_first_line(e)})") from None

    def text(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is not default and not isinstance(v, str):
            raise GgufError(f"{self.path}: metadata key '{key}' must be a string, got {_show(v)}")
        return v

    def integer(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is default:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GgufError(f"{self.path}: metadata key '{key}' must be a non-negative integer, got {_show(v)}")
        return v

    def number(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is default:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise GgufError(f"{self.path}: metadata key '{key}' must be a finite number, got {_show(v)}")
        # GGUF stores f32: its shortest decimal is the value the HF config had (1e-05, not 9.99e-06).
        return float(str(np.float32(v)))

    def array(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is not default and not isinstance(v, list):
            raise GgufError(f"{self.path}: metadata key '{key}' must be an array, got {_show(v)}")
        return v

    # -- tensors --------------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...]:
        """Tensor `name`'s shape, row-major (ggml's dims reversed)."""
        return tuple(int(d) for d in reversed(self.tensors[name].shape.tolist()))

    def dtype_name(self, name: str) -> str:
        """The element type the store gives tensor `name` in (f32 for the quantized types)."""
        return {"F16": "f16", "BF16": "bf16"}.get(self.tensors[name].tensor_type.name, "f32")

    def load(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Tensor `name`: a view of the file for F32, F16 and BF16, else dequantized to f32;
        `rows` (lo, hi): only those indices of its first (row-major) dim, of which a block format
        dequantizes nothing else (its blocks lie within a row)."""
        t = self.tensors[name]
        kind, shape = t.tensor_type.name, self.shape(name)
        lo, hi = rows if rows is not None else (0, shape[0])
        try:
            if kind in ("F32", "F16"):
                return t.data.reshape(shape)[lo:hi]
            if kind == "BF16":
                import ml_dtypes

                return t.data.view(ml_dtypes.bfloat16).reshape(shape)[lo:hi]
            data = t.data.reshape(shape[0], -1)[lo:hi]  # the rows' blocks
            out = _gguf().quants.dequantize(data, t.tensor_type).reshape((hi - lo, *shape[1:]))
        except Exception as e:  # noqa: BLE001 - a truncated tensor fails in numpy or the dequantizer
            raise GgufError(f"{self.path}: tensor '{name}' ({kind}) cannot be read ({_first_line(e)})") from None
        out = np.ascontiguousarray(out, dtype=np.float32)
        out.flags.writeable = False
        return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# The metadata as a config


def hf_config_dict(g: GgufFile) -> dict[str, Any]:
    """The HF config.json that the GGUF's metadata describes (see the module docstring)."""
    arch = g.arch
    if arch not in ARCHITECTURES:
        raise GgufError(f"{g.path}: unknown GGUF architecture {arch!r} (strata reads: {', '.join(ARCHITECTURES)})")
    k = lambda key: f"{arch}.{key}"  # noqa: E731
    if g.value(k("rope.scaling.type"), "none") not in ("none", None):
        raise GgufError(f"{g.path}: metadata key '{k('rope.scaling.type')}' is "
                        f"{_show(g.value(k('rope.scaling.type')))}; strata reads llama3 scaling (rope_freqs) only")
    if "rope_freqs.weight" in g.tensors and arch != "llama":
        raise GgufError(f"{g.path}: tensor 'rope_freqs.weight' (RoPE scaling) is read for llama only, not {arch}")
    if "token_embd.weight" not in g.tensors:
        raise GgufError(f"{g.path}: tensor 'token_embd.weight' is missing")
    hidden, heads = g.integer(k("embedding_length")), g.integer(k("attention.head_count"))
    # block_count counts the multi-token-prediction layers too (the hybrids' converter appends them)
    mtp = g.integer(k("nextn_predict_layers"), 0)
    layers = g.integer(k("block_count")) - mtp
    g.mtp_layers = range(layers, layers + mtp)
    if not heads or not hidden or layers <= 0:
        raise GgufError(f"{g.path}: metadata keys '{k('embedding_length')}', '{k('attention.head_count')}' and "
                        f"'{k('block_count')}' (less '{k('nextn_predict_layers')}') must be positive")
    head_dim = g.integer(k("attention.key_length"), hidden // heads)
    file_type = g.integer("general.file_type", 0)
    d: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "vocab_size": g.integer(k("vocab_size"), g.shape("token_embd.weight")[0]),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": g.integer(k("attention.head_count_kv"), heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": g.number(k("attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": g.integer(k("context_length")),
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "dtype": _FILE_DTYPES.get(file_type, "float32"),
    }
    theta = g.number(k("rope.freq_base"), 10000.0)
    rope_dims = g.integer(k("rope.dimension_count"), head_dim)
    if arch in ("llama", "qwen2", "qwen3", "qwen3moe") and rope_dims != head_dim:  # llama.cpp asserts it too
        raise GgufError(f"{g.path}: metadata key '{k('rope.dimension_count')}' is {rope_dims}; partial RoPE "
                        f"(head dim {head_dim}) is not supported for {arch}")
    if arch in ("llama", "qwen2", "qwen3"):
        d["intermediate_size"] = g.integer(k("feed_forward_length"))
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
        if "rope_freqs.weight" in g.tensors:
            d["rope_parameters"] = {"rope_theta": theta, **llama3_scaling(g, theta, head_dim)}
        if arch == "llama":
            d["attention_bias"] = "blk.0.attn_q.bias" in g.tensors
        return d
    d["rope_parameters"] = rope = {"rope_type": "default", "rope_theta": theta,
                                   "partial_rotary_factor": rope_dims / head_dim}
    sections = g.array(k("rope.dimension_sections"), None)
    if sections is not None:
        sections = [int(s) for s in sections]
        while len(sections) > 3 and sections[-1] == 0:  # ggml pads to 4; HF configs list 3
            sections.pop()
        rope.update(mrope_section=sections, mrope_interleaved=arch in IMROPE_ARCHS)
    sparse = [f"blk.{i}.ffn_gate_inp.weight" in g.tensors for i in range(layers)] if arch in MOE else [False] * layers
    if not all(sparse):
        d["intermediate_size"] = g.integer(k("feed_forward_length"))
    if any(sparse):
        d.update(num_experts=g.integer(k("expert_count")), num_experts_per_tok=g.integer(k("expert_used_count")),
                 moe_intermediate_size=g.integer(k("expert_feed_forward_length")), norm_topk_prob=True)
        if arch != "qwen3moe":
            d["shared_expert_intermediate_size"] = g.integer(k("expert_shared_feed_forward_length"))
        if arch in ("qwen3moe", "qwen3next"):
            d.update(decoder_sparse_step=1, mlp_only_layers=[i for i, s in enumerate(sparse) if not s])
        elif not all(sparse):
            missing = sparse.index(False)
            raise GgufError(f"{g.path}: tensor 'blk.{missing}.ffn_gate_inp.weight' is missing ({arch} layers are all sparse)")
    if arch in HYBRID:
        recurrent = g.array(k("attention.recurrent_layers"), None)
        if recurrent is None:
            interval = g.integer(k("full_attention_interval"), 4)
            recurrent = [(i + 1) % interval != 0 for i in range(layers)]
        if len(recurrent) < layers:
            raise GgufError(f"{g.path}: metadata key '{k('attention.recurrent_layers')}' has {len(recurrent)} "
                            f"entries for {layers} layers")
        v_heads = g.integer(k("ssm.time_step_rank"))
        if not v_heads:
            raise GgufError(f"{g.path}: metadata key '{k('ssm.time_step_rank')}' must be positive")
        d.update(layer_types=["linear_attention" if r else "full_attention" for r in recurrent[:layers]],
                 linear_num_key_heads=g.integer(k("ssm.group_count")), linear_num_value_heads=v_heads,
                 linear_key_head_dim=g.integer(k("ssm.state_size")),
                 linear_value_head_dim=g.integer(k("ssm.inner_size")) // v_heads,
                 linear_conv_kernel_dim=g.integer(k("ssm.conv_kernel")))
    return d


#: The GGUF metadata key (after `ARCH.`) each HF field of `hf_config_dict` is read from, so that a
#: message about a field names what the file holds.
HF_FIELD_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "embedding_length", "num_hidden_layers": "block_count",
    "num_attention_heads": "attention.head_count", "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length", "rms_norm_eps": "attention.layer_norm_rms_epsilon",
    "max_position_embeddings": "context_length", "intermediate_size": "feed_forward_length",
    "rope_parameters.rope_theta": "rope.freq_base", "rope_parameters.partial_rotary_factor": "rope.dimension_count",
    "rope_parameters.mrope_section": "rope.dimension_sections", "num_experts": "expert_count",
    "num_experts_per_tok": "expert_used_count", "moe_intermediate_size": "expert_feed_forward_length",
    "shared_expert_intermediate_size": "expert_shared_feed_forward_length",
    "layer_types": "attention.recurrent_layers", "linear_num_key_heads": "ssm.group_count",
    "linear_num_value_heads": "ssm.time_step_rank", "linear_key_head_dim": "ssm.state_size",
    "linear_value_head_dim": "ssm.inner_size", "linear_conv_kernel_dim": "ssm.conv_kernel",
}


def gguf_message(g: GgufFile, message: str) -> str:
    """A message about the HF fields read from `g`'s metadata, naming the file's keys instead."""
    def key(match: re.Match) -> str:
        field = match.group(2)
        if field not in HF_FIELD_KEYS:
            return match.group(0)
        return f"{'metadata key ' if match.group(1) else ''}'{g.arch}.{HF_FIELD_KEYS[field]}'"

    named = re.sub(r"(field )?'([A-Za-z_][A-Za-z0-9_.]*)'", key, message)
    return named if named != message else f"{message} (read from the GGUF's metadata)"


#: The original context a llama3 RoPE scaling read from `rope_freqs` is given (the converter's
#: default): the factors depend only on original / low_freq_factor and original / high_freq_factor.
LLAMA3_ORIGINAL_CTX = 8192


def llama3_scaling(g: GgufFile, theta: float, head_dim: int) -> dict[str, Any]:
    """The llama3 RoPE scaling (transformers' rope_parameters) whose frequency factors are the
    GGUF's `rope_freqs.weight`: llama.cpp's converter stores only the factors (1 for high
    frequencies, `factor` for low ones, 1 / ((1 - s) / factor + s) between, s linear in
    1 / wavelength), so the parameters are fitted to them and the fit is checked."""
    from strata.passes.convert_module_to_op.attention import llama3_freq_factors

    name = "rope_freqs.weight"
    f = np.asarray(g.load(name), dtype=np.float64).reshape(-1)
    if f.shape != (head_dim // 2,) or not np.isfinite(f).all() or (f <= 0).any():
        raise GgufError(f"{g.path}: tensor '{name}' must hold {head_dim // 2} positive factors (one per rotated pair)")
    factor = float(f[-1])  # the lowest frequency is scaled by the whole factor
    if factor <= 1:
        raise GgufError(f"{g.path}: tensor '{name}' cannot be read as llama3 RoPE scaling: "
                        "its lowest frequency is not scaled down")
    line = _llama3_line(1 / (2 * math.pi * theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)),
                        f, factor)
    why = "no llama3 parameters give them"
    if line is not None:
        a, b = line
        span = LLAMA3_ORIGINAL_CTX / a
        rs = {"rope_type": "llama3", "factor": factor, "low_freq_factor": float(b * span),
              "high_freq_factor": float(b * span + span), "original_max_position_embeddings": LLAMA3_ORIGINAL_CTX}
        if np.allclose(llama3_freq_factors(theta, head_dim, rs), f, rtol=1e-5, atol=0):
            return rs
        why = "they are not llama3's (the fitted parameters do not give them back)"
    raise GgufError(f"{g.path}: tensor '{name}' cannot be read as llama3 RoPE scaling: {why}")


def _llama3_line(x: np.ndarray, f: np.ndarray, factor: float) -> tuple[float, float] | None:
    """(a, b) with a > 0 and b > 0 of the smoothing line s = a x - b (x = 1 / wavelength) that
    llama3 scaling draws through `f`, the factors of frequencies x: s is 1 at the shortest
    scaled wavelength, 0 at the longest unscaled one, and f = 1 / ((1 - s) / factor + s) between.
    Two or more frequencies between fix the line (least squares); one or none leave it free,
    and any line through them that keeps the unscaled ones (s >= 1) and the fully scaled ones
    (s <= 0) on their sides gives the same factors: a tiny head has few pairs."""
    unscaled, full = f <= 1 + 1e-6, f >= factor * (1 - 1e-6)
    mid = ~unscaled & ~full
    s = (1 / f[mid] - 1 / factor) / (1 - 1 / factor)
    x_lo = float(x[full].max())  # the highest fully scaled frequency (the last pair is one)
    # the lowest unscaled frequency, or, when every pair is scaled, one above them all
    x_hi = float(x[unscaled].min()) if unscaled.any() else 2 * float(x.max())
    if mid.sum() >= 2:
        (a, b), *_ = np.linalg.lstsq(np.stack([x[mid], -np.ones(int(mid.sum()))], axis=1), s, rcond=None)
    elif mid.sum() == 1:
        xm, sm = float(x[mid][0]), float(s[0])
        if not x_lo < xm < x_hi:
            return None
        a = max((1 - sm) / (x_hi - xm), sm / (xm - x_lo))
        b = a * xm - sm
    else:
        if not x_lo < x_hi:
            return None
        a = 1 / (x_hi - x_lo)
        b = a * x_lo
    return (float(a), float(b)) if a > 0 and b > 0 else None


def config_overrides(g: GgufFile) -> dict[str, Any]:
    """Fields of the family config that the file's architecture fixes beyond its metadata: what
    llama.cpp computes differently from HF for it (M-RoPE's fourth stream is position 0 for text)."""
    return {"mrope_extra_stream": "zero"} if g.arch in IMROPE_ARCHS else {}


# ---------------------------------------------------------------------------------------------
# The tensors as a weight store


def _reorder_heads(w: np.ndarray, axis: int, outer: int, inner: int, head: int) -> np.ndarray:
    """Along `axis`, heads in order (outer, inner) of `head` each -> order (inner, outer)."""
    shape = list(w.shape)
    split = shape[:axis] + [outer, inner, head] + shape[axis + 1:]
    return np.swapaxes(w.reshape(split), axis, axis + 1).reshape(shape)


def _unpermute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's LlamaModel.permute (rows per head: halves interleaved -> split)."""
    rest = w.shape[1:]
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


@dataclass(frozen=True)
class _Plan:
    """How the store makes one IR tensor: the GGUF tensors it reads, how it joins them (None:
    there is one), then the steps that undo the converter's changes."""

    sources: tuple[str, ...]
    join: Callable[..., np.ndarray] | None = None
    steps: tuple[Callable[[np.ndarray], np.ndarray], ...] = ()

    @property
    def as_stored(self) -> bool:
        return self.join is None and not self.steps


class GgufWeights:
    """The weight store of a model read from a GGUF: addressed by llama.cpp's names, each param in
    the form its `op.param` expects (HF's values; see the module docstring). The interface is
    `strata.ir.weights.WeightStore`'s."""

    def __init__(self, g: GgufFile, config: Any, params: Mapping[str, tuple[tuple[int, ...], str]],
                 centred: set[str]) -> None:
        self.g, self.label, self.config = g, g.path, config
        self._shapes = {name: tuple(shape) for name, (shape, _) in params.items()}
        self._cache: dict[str, np.ndarray] = {}
        self._plans = {name: self._plan(name, name in centred) for name in params}
        used = {s for plan in self._plans.values() for s in plan.sources}
        # rope_freqs.weight was read into the config (its llama3 RoPE scaling); the multi-token-
        # prediction layers' tensors are not the language model's, as HF's mtp.* are not.
        known = {"rope_freqs.weight"} | {n for n in g.tensors for i in g.mtp_layers if n.startswith(f"blk.{i}.")}
        #: Stored tensors the model does not use, sorted.
        self.unused = sorted(n for n in g.tensors if n not in used and n not in known)

    # -- the undoing of the converter -----------------------------------------------------

    def _plan(self, name: str, centred: bool) -> _Plan:
        cfg, arch = self.config, self.g.arch
        parts = name.split(".")
        kind = parts[2] if parts[0] == "blk" and len(parts) > 2 else parts[0]
        if arch == "qwen3next" and kind == "ssm_in":
            prefix = name[: -len("ssm_in.weight")]
            return _Plan((prefix + "attn_qkv.weight", prefix + "attn_gate.weight"), self._regroup_qkvz)
        steps: list[Callable[[np.ndarray], np.ndarray]] = []
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            heads = cfg.num_heads if kind == "attn_q" else cfg.num_kv_heads
            steps.append(lambda w: _unpermute_rope(w, heads))
        if centred:
            steps.append(lambda w: np.asarray(w, dtype=np.float32) - np.float32(1.0))
        if kind == "ssm_a":
            steps.append(lambda w: np.log(np.negative(np.asarray(w, dtype=np.float32))))
        if arch in ("qwen35", "qwen35moe") and cfg.lin_k_heads != cfg.lin_v_heads:
            steps += self._v_heads(kind)
        return _Plan((name,), None, tuple(steps))

    def _v_heads(self, kind: str) -> list[Callable[[np.ndarray], np.ndarray]]:
        """Qwen3.5's value heads back from tiled to grouped order (the inverse of the converter's
        `_reorder_v_heads`: its (k, v-per-k) heads are read as (v-per-k, k))."""
        cfg = self.config
        hk, r, dv = cfg.lin_k_heads, cfg.lin_v_heads // cfg.lin_k_heads, cfg.lin_v_dim
        qk = 2 * cfg.lin_k_heads * cfg.lin_k_dim

        def rows(w: np.ndarray, head: int, skip: int = 0) -> np.ndarray:
            w = np.asarray(w)
            return np.concatenate([w[:skip], _reorder_heads(w[skip:], 0, r, hk, head)], axis=0)

        if kind in ("attn_qkv", "ssm_conv1d"):  # only the v rows / channels, after q and k
            return [lambda w: rows(w, dv, qk)]
        if kind == "attn_gate":
            return [lambda w: rows(w, dv)]
        if kind in ("ssm_beta", "ssm_alpha", "ssm_dt", "ssm_a"):
            return [lambda w: rows(w, 1)]
        if kind == "ssm_out":  # its input columns
            return [lambda w: _reorder_heads(np.asarray(w), 1, r, hk, dv)]
        return []

    def _regroup_qkvz(self, qkv: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Qwen3-Next's in_proj_qkvz, grouped per key head as [q | k | v | z], from llama.cpp's
        attn_qkv [q | k | v] and attn_gate z (the inverse of its converter's split)."""
        cfg = self.config
        hk, dk, vz = cfg.lin_k_heads, cfg.lin_k_dim, cfg.lin_v_heads // cfg.lin_k_heads * cfg.lin_v_dim
        cols = qkv.shape[1]
        if qkv.shape[0] != 2 * hk * dk + hk * vz or z.shape != (hk * vz, cols):
            raise GgufError(f"{self.label}: tensors attn_qkv {list(qkv.shape)} and attn_gate {list(z.shape)} do not "
                            f"split into {hk} key heads of q, k ({dk}) and v, z ({vz})")
        q = qkv[: hk * dk].reshape(hk, dk, cols)
        k = qkv[hk * dk: 2 * hk * dk].reshape(hk, dk, cols)
        v = qkv[2 * hk * dk:].reshape(hk, vz, cols)
        return np.concatenate([q, k, v, np.asarray(z).reshape(hk, vz, cols)], axis=1).reshape(-1, cols)

    # -- the store's interface --------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(n for n in self._plans if n in self)

    def __contains__(self, name: str) -> bool:
        plan = self._plans.get(name)
        return plan is not None and all(s in self.g.tensors for s in plan.sources)

    def stored_name(self, name: str) -> str:
        """The GGUF tensor that IR tensor `name` is read from (the first, when several)."""
        return self._plans[name].sources[0] if name in self._plans else name

    def sources(self, name: str) -> tuple[str, ...]:
        """The GGUF tensors that IR tensor `name` is made from."""
        return self._plans[name].sources if name in self._plans else (name,)

    def info(self, name: str) -> tuple[tuple[int, ...], str]:
        plan = self._plans[name]
        return tuple(self.get(name).shape), self.g.dtype_name(plan.sources[0]) if plan.as_stored else "f32"

    def piece(self, name: str, axis: int, pieces: int, parts: Sequence[int], index: int) -> np.ndarray:
        """This rank's piece of tensor `name` (op.param's `split`, see `strata.ir.split`). A row
        split of a tensor used as stored reads (and dequantizes) only the piece's rows; any other
        is made whole (not kept), then cut."""
        plan = self._plans.get(name) or _Plan((name,))
        if plan.as_stored and axis == 0 and plan.sources[0] in self.g.tensors:
            src = plan.sources[0]
            total = self.g.shape(src)[0]
            sizes = list(parts) or [total // pieces]
            if sum(sizes) * pieces == total:
                out, start = [], 0
                for p in sizes:
                    out.append(self.g.load(src, (start + index * p, start + (index + 1) * p)))
                    start += pieces * p
                return out[0] if len(out) == 1 else np.concatenate(out)
        try:
            out = np.ascontiguousarray(split_piece(self._make(name), axis, pieces, parts, index))
        except ValueError as e:
            raise GgufError(f"{self.label}: tensor '{name}': {e}") from None
        out.flags.writeable = False
        return out

    def get(self, name: str) -> np.ndarray:
        """Tensor `name` in the IR's form: a view of the file, or an array made once and kept."""
        if name not in self._cache:
            self._cache[name] = self._make(name)
        return self._cache[name]

    def _make(self, name: str) -> np.ndarray:
        plan = self._plans.get(name) or _Plan((name,))
        missing = [s for s in plan.sources if s not in self.g.tensors]
        if missing:
            raise GgufError(f"{self.label}: tensor '{missing[0]}' is missing")
        arrays = [self.g.load(s) for s in plan.sources]
        w = plan.join(*arrays) if plan.join is not None else arrays[0]
        shape = self._shapes.get(name)
        if shape is not None and w.shape != shape and [d for d in w.shape if d != 1] == [d for d in shape if d != 1]:
            w = w.reshape(shape)  # a size-1 dim that the converter squeezed (the conv1d's)
        for step in plan.steps:
            w = step(w)
        if not plan.as_stored:
            w = np.ascontiguousarray(w, dtype=np.float32)
            w.flags.writeable = False
        return w

    def check(self, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> None:
        """Check that every tensor of `expected` (name -> (shape, dtype)) is there, of its shape."""
        for name, (shape, _) in expected.items():
            plan = self._plans.get(name) or _Plan((name,))
            for s in plan.sources:
                if s not in self.g.tensors:
                    raise GgufError(f"{self.label}: tensor '{s}' is missing; expected shape {list(shape)}"
                                    if plan.sources == (name,) else f"{self.label}: tensor '{s}' is missing")
            if plan.join is None:
                stored = self.g.shape(plan.sources[0])
                if [d for d in stored if d != 1] != [d for d in shape if d != 1]:
                    raise GgufError(f"{self.label}: tensor '{name}' has shape {list(stored)}, expected {list(shape)}")
            elif tuple(self.get(name).shape) != tuple(shape):
                raise GgufError(f"{self.label}: tensors {', '.join(plan.sources)} make '{name}' of shape "
                                f"{list(self.get(name).shape)}, expected {list(shape)}")

    def fingerprint(self) -> list[dict[str, object]]:
        """The file's name and size and the sha256 of its metadata and tensor infos (tensor data
        is read at run time and not hashed)."""
        return [{"file": self.label.name, "size": self.label.stat().st_size, "header_sha256": self.g.header_sha256}]
