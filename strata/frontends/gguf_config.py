"""A GGUF's metadata as the HF config it stands for: `general.architecture` names the family, its
keys (`{arch}.block_count`, `embedding_length`, `attention.head_count`, ...) are the HF
`config.json` fields the family's own config reader reads (`strata.pipeline.model.gguf_config`),
so a GGUF model is checked as strictly as a checkpoint directory.

    fields = hf_config_dict(GgufFile("tiny.gguf"))

What GGUF does not carry is what llama.cpp assumes (see `strata.frontends.gguf`'s docstring);
Llama 3's RoPE scaling is stored only as its frequency factors (`rope_freqs.weight`): its
parameters are fitted to them (`llama3_scaling`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from strata.frontends.gguf import _FILE_DTYPES, ARCHITECTURES, HYBRID, IMROPE_ARCHS, MOE, GgufError, GgufFile, _show



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
