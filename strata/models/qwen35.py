"""The Qwen3 MoE and hybrid families: Qwen3-MoE, Qwen3.5, Qwen3.5/3.6-MoE and Qwen3-Next.

A config reader, a builder and the name table. The builder composes standard block kinds:
the layers are an array whose elements are of up to four kinds (linear or full attention,
dense or sparse FFN), picked per layer by the sub's `pattern` from `layer_types`,
`mlp_only_layers` and `decoder_sparse_step`.

| architecture | token mixer | FFN | norms |
|---|---|---|---|
| Qwen3MoeForCausalLM | grouped-query attention, q/k norm | routed experts | plain |
| Qwen3_5ForCausalLM | Gated DeltaNet / gated attention | SwiGLU | zero-centred |
| Qwen3_5MoeForCausalLM | Gated DeltaNet / gated attention | routed + shared experts | zero-centred |
| Qwen3NextForCausalLM | as Qwen3.5-MoE, in_proj grouped per k-head, plain rotary | routed + shared | zero-centred |
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute

from strata.dialects import module as M
from strata.frontends.hf_config import ConfigError, Fields, read_dtype
from strata.models.module_blocks import DTYPES, RECURRENT_SEQ_FNS, SEQ_FNS, SHARDING, block, fn, model_fns, symbol

ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM")
#: The hub's multimodal checkpoint of Qwen3.5/3.6-MoE: its text part is read.
CONDITIONAL = {"Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM",
               "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM"}
LAYER_TYPES = ("linear_attention", "full_attention")
#: Stored tensors that are not the language model: read past, not reported as unused.
IGNORED_WEIGHTS = ("model.visual.", "mtp.")

#: (block, sub or param) -> (llama.cpp segment, HF segment) of the tensor names below it.
NAMES: dict[tuple[str, str], tuple[str, str]] = {
    ("Model", "embedding"): ("token_embd", "model.embed_tokens"),
    ("Model", "layers"): ("blk", "model.layers"),
    ("Model", "norm"): ("output_norm", "model.norm"),
    ("Model", "lm_head"): ("output", "lm_head"),
    ("Layer", "attention_norm"): ("attn_norm", "input_layernorm"),
    ("Layer", "linear_attention"): ("", "linear_attn"),
    ("Layer", "full_attention"): ("", "self_attn"),
    ("Layer", "mlp"): ("", "mlp"),
    ("GatedDeltaNet", "in_proj_qkv"): ("attn_qkv", "in_proj_qkv"),
    ("GatedDeltaNet", "in_proj_z"): ("attn_gate", "in_proj_z"),
    ("GatedDeltaNet", "in_proj_b"): ("ssm_beta", "in_proj_b"),
    ("GatedDeltaNet", "in_proj_a"): ("ssm_alpha", "in_proj_a"),
    ("GatedDeltaNet", "in_proj_qkvz"): ("ssm_in", "in_proj_qkvz"),
    ("GatedDeltaNet", "in_proj_ba"): ("ssm_ba", "in_proj_ba"),
    ("GatedDeltaNet", "conv1d"): ("ssm_conv1d.weight", "conv1d.weight"),
    ("GatedDeltaNet", "dt_bias"): ("ssm_dt.bias", "dt_bias"),
    ("GatedDeltaNet", "A_log"): ("ssm_a", "A_log"),
    ("GatedDeltaNet", "norm"): ("ssm_norm", "norm"),
    ("GatedDeltaNet", "out_proj"): ("ssm_out", "out_proj"),
    ("Attention", "q_proj"): ("attn_q", "q_proj"),
    ("Attention", "k_proj"): ("attn_k", "k_proj"),
    ("Attention", "v_proj"): ("attn_v", "v_proj"),
    ("Attention", "o_proj"): ("attn_output", "o_proj"),
    ("Attention", "q_norm"): ("attn_q_norm", "q_norm"),
    ("Attention", "k_norm"): ("attn_k_norm", "k_norm"),
    ("SwiGlu", "gate"): ("ffn_gate", "gate_proj"),
    ("SwiGlu", "up"): ("ffn_up", "up_proj"),
    ("SwiGlu", "down"): ("ffn_down", "down_proj"),
    ("SharedExpert", "gate"): ("ffn_gate_shexp", "gate_proj"),
    ("SharedExpert", "up"): ("ffn_up_shexp", "up_proj"),
    ("SharedExpert", "down"): ("ffn_down_shexp", "down_proj"),
    ("SparseMoe", "router"): ("ffn_gate_inp", "gate"),
    ("SparseMoe", "shared_expert"): ("", "shared_expert"),
    ("SparseMoe", "shared_expert_gate"): ("ffn_gate_inp_shexp", "shared_expert_gate"),
    ("SparseMoe", "gate_exps"): ("ffn_gate_exps.weight", "experts.*.gate_proj.weight"),
    ("SparseMoe", "up_exps"): ("ffn_up_exps.weight", "experts.*.up_proj.weight"),
    ("SparseMoe", "down_exps"): ("ffn_down_exps.weight", "experts.*.down_proj.weight"),
}
#: The post-attention norm is `ffn_norm` in llama.cpp's Qwen3-MoE, `post_attention_norm` in the hybrids.
POST_NORM = {"Qwen3MoeForCausalLM": "ffn_norm"}

# Facts of llama.cpp's graph builders (src/models/qwen3moe.cpp, qwen35.cpp, qwen35moe.cpp,
# qwen3next.cpp), stamped on the blocks for convert-module-to-op: names, and which of two
# equivalent graphs the builder makes.
#: The graph inputs' names (this llama.cpp names them; llama.cpp's Qwen3-8B graph left them leaf_N).
GGML_INPUTS = {"positions": "inp_pos", "k_rows": "attn_inp_k_idxs", "v_rows": "attn_inp_v_idxs",
               "out_ids": "out_ids", "state_copy": "rs_s_copy"}
#: The embedding's output name.
EMBD_NAME = {"Qwen3MoeForCausalLM": "embd", "Qwen3_5ForCausalLM": "model.input_embed",
             "Qwen3_5MoeForCausalLM": "model.input_embed", "Qwen3NextForCausalLM": "model.embed_tokens"}
#: Qwen3.5's rope is always interleaved M-RoPE; llama.cpp's converter writes these sections when
#: the config has none.
MROPE_DEFAULT = (11, 11, 10)
QWEN35 = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
#: transformers 5's merged experts: the alternative to the hub's one-by-one tensors.
MERGED = {"gate_exps": "experts.gate_up_proj:0/2", "up_exps": "experts.gate_up_proj:1/2",
          "down_exps": "experts.down_proj:0/1"}


@dataclass(frozen=True)
class Qwen35Config:
    """The hyper-parameters of one model of these families."""

    arch: str
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    layer_types: tuple[str, ...]
    moe_layers: tuple[bool, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rotary_dim: int
    mrope_section: tuple[int, ...]
    mrope_interleaved: bool
    max_position_embeddings: int
    tie_word_embeddings: bool
    dtype: str
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 0
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    norm_topk_prob: bool = True
    #: M-RoPE's fourth stream for text: "position" (HF: every pair turns by the position) or
    #: "zero" (llama.cpp, for a GGUF: pairs the sections send there do not turn).
    mrope_extra_stream: str = "position"

    @property
    def hybrid(self) -> bool:
        return self.arch != "Qwen3MoeForCausalLM"

    def to_hf_dict(self) -> dict[str, Any]:
        """A config.json that transformers' config class for `arch` reads as this config."""
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.hybrid:
            rope["partial_rotary_factor"] = self.rotary_dim / self.head_dim
        if self.mrope_section:
            rope.update(mrope_section=list(self.mrope_section), mrope_interleaved=self.mrope_interleaved)
        model_type = {"Qwen3MoeForCausalLM": "qwen3_moe", "Qwen3_5ForCausalLM": "qwen3_5_text",
                      "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text", "Qwen3NextForCausalLM": "qwen3_next"}[self.arch]
        d: dict[str, Any] = {
            "architectures": [self.arch], "model_type": model_type, "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": rope, "dtype": self.dtype, "attention_bias": False,
        }
        if self.intermediate_size:
            d["intermediate_size"] = self.intermediate_size
        if self.hybrid:
            d.update(layer_types=list(self.layer_types), linear_num_key_heads=self.lin_k_heads,
                     linear_num_value_heads=self.lin_v_heads, linear_key_head_dim=self.lin_k_dim,
                     linear_value_head_dim=self.lin_v_dim, linear_conv_kernel_dim=self.conv_kernel)
        if any(self.moe_layers):
            d.update(num_experts=self.num_experts, num_experts_per_tok=self.top_k,
                     moe_intermediate_size=self.moe_intermediate_size, norm_topk_prob=self.norm_topk_prob)
            if self.shared_intermediate_size:
                d["shared_expert_intermediate_size"] = self.shared_intermediate_size
            if self.arch in ("Qwen3MoeForCausalLM", "Qwen3NextForCausalLM"):
                d.update(decoder_sparse_step=1, mlp_only_layers=[i for i, m in enumerate(self.moe_layers) if not m])
        return d


_DEFAULTS = {  # transformers 5's defaults for absent keys
    "Qwen3MoeForCausalLM": {"head_dim": None, "max_position_embeddings": 32768, "norm_topk_prob": False,
                            "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
    "Qwen3_5ForCausalLM": {"head_dim": 256, "max_position_embeddings": 32768, "norm_topk_prob": True,
                           "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "Qwen3_5MoeForCausalLM": {"head_dim": 256, "max_position_embeddings": 32768, "norm_topk_prob": True,
                              "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "Qwen3NextForCausalLM": {"head_dim": 256, "max_position_embeddings": 32768, "norm_topk_prob": True,
                             "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
}


def read_config(data: Any, file: str, name: str) -> Qwen35Config:
    """The config of one of ARCHITECTURES (or a hub ConditionalGeneration wrapper of one)."""
    archs = data.get("architectures") if isinstance(data, dict) else None
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch in CONDITIONAL:
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(f"{file}: field 'text_config' must be an object for {arch}")
        merged = {k: v for k, v in data.items() if k not in ("text_config", "vision_config")}
        data, arch = {**merged, **text, "architectures": [CONDITIONAL[arch]]}, CONDITIONAL[arch]
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{file}: unknown architecture {arch!r} (supported: {', '.join(ARCHITECTURES)})")
    f = Fields(file, data)
    d = _DEFAULTS[arch]
    hidden, heads = f.integer("hidden_size"), f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise f.error("num_attention_heads", f"({heads}) must be a multiple of 'num_key_value_heads' ({kv_heads})")
    head_dim = f.integer("head_dim", default=d["head_dim"]) or hidden // heads
    layers = f.integer("num_hidden_layers")
    act = f.text("hidden_act", default="silu")
    if act != "silu":
        raise f.error("hidden_act", f"is {act!r}; only 'silu' is supported")
    if f.flag("attention_bias", default=False):
        raise f.error("attention_bias", "is true; attention biases are not supported for this family")
    if arch == "Qwen3MoeForCausalLM" and f.flag("use_sliding_window", default=False):
        raise f.error("use_sliding_window", "is true; sliding-window attention is not supported")
    theta, partial, section, interleaved = _rope(f, d)
    if arch == "Qwen3MoeForCausalLM":  # its default RoPE (HF's and llama.cpp's) turns every dim
        partial = 1.0
    rotary = int(head_dim * partial)
    if rotary <= 0 or rotary % 2:
        key = "rope_parameters.partial_rotary_factor" if "partial_rotary_factor" in (
            f.data.get("rope_parameters") or {}) else "partial_rotary_factor"
        raise ConfigError(f"{file}: field '{key}' is {partial}, which gives {head_dim} x {partial} = {rotary} "
                          "rotary dims; RoPE rotates pairs, so that must be a positive even number")
    cfg = dict(arch=arch, name=name, vocab_size=f.integer("vocab_size"), hidden_size=hidden, num_layers=layers,
               num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
               rms_norm_eps=f.number("rms_norm_eps", default=1e-6), rope_theta=theta, rotary_dim=rotary,
               mrope_section=section, mrope_interleaved=interleaved,
               max_position_embeddings=f.integer("max_position_embeddings", default=d["max_position_embeddings"]),
               tie_word_embeddings=f.flag("tie_word_embeddings", default=False), dtype=read_dtype(f))
    cfg["layer_types"] = _layer_types(f, arch, layers)
    if "linear_attention" in cfg["layer_types"]:
        cfg.update(_linear_attention(f))
    moe = arch != "Qwen3_5ForCausalLM"
    cfg["moe_layers"] = _moe_layers(f, arch, layers) if moe else (False,) * layers
    if any(cfg["moe_layers"]):
        cfg.update(_experts(f, arch, d))
    needs_dense = not all(cfg["moe_layers"])
    cfg["intermediate_size"] = f.integer("intermediate_size") if needs_dense else f.integer("intermediate_size", default=0) or 0
    return Qwen35Config(**cfg)


def _rope(f: Fields, d: dict) -> tuple[float, float, tuple[int, ...], bool]:
    params = f.data.get("rope_parameters")
    sub = Fields(f.file, params, prefix="rope_parameters.") if isinstance(params, dict) else None
    if params is not None and sub is None:
        raise f.error("rope_parameters", "must be an object")
    top_theta = f.number("rope_theta", default=d["rope_theta"])
    top_partial = f.number("partial_rotary_factor", default=d["partial_rotary_factor"])
    theta = sub.number("rope_theta", default=top_theta) if sub else top_theta
    partial = sub.number("partial_rotary_factor", default=top_partial) if sub else top_partial
    rope_type = sub.text("rope_type", default="default") if sub else "default"
    if rope_type != "default":
        raise sub.error("rope_type", f"is {rope_type!r}; only 'default' is supported for this family")
    section: tuple[int, ...] = ()
    interleaved = False
    if sub is not None and "mrope_section" in params:
        raw = params["mrope_section"]
        if not isinstance(raw, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw):
            raise sub.error("mrope_section", "must be a list of non-negative integers")
        section = tuple(raw)
        interleaved = sub.flag("mrope_interleaved", default=False)
    return theta, partial, section, interleaved


def _layer_types(f: Fields, arch: str, layers: int) -> tuple[str, ...]:
    if arch == "Qwen3MoeForCausalLM":
        return ("full_attention",) * layers
    raw = f.data.get("layer_types")
    if raw is None:
        interval = f.integer("full_attention_interval", default=4)
        return tuple("linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers))
    if not isinstance(raw, list) or len(raw) != layers:
        raise f.error("layer_types", f"must be a list of {layers} layer types (one per layer)")
    for i, t in enumerate(raw):
        if t not in LAYER_TYPES:
            raise f.error("layer_types", f"entry {i} is {str(t)[:40]!r}; known layer types: {', '.join(LAYER_TYPES)}")
    return tuple(raw)


def _linear_attention(f: Fields) -> dict:
    k_heads, v_heads = f.integer("linear_num_key_heads"), f.integer("linear_num_value_heads")
    if v_heads % k_heads:
        raise f.error("linear_num_value_heads", f"({v_heads}) must be a multiple of 'linear_num_key_heads' ({k_heads})")
    k_dim, v_dim = f.integer("linear_key_head_dim"), f.integer("linear_value_head_dim")
    if k_dim != v_dim:
        raise f.error("linear_value_head_dim", f"({v_dim}) must equal 'linear_key_head_dim' ({k_dim})")
    kernel = f.integer("linear_conv_kernel_dim", default=4)
    return dict(lin_k_heads=k_heads, lin_v_heads=v_heads, lin_k_dim=k_dim, lin_v_dim=v_dim, conv_kernel=kernel)


def _moe_layers(f: Fields, arch: str, layers: int) -> tuple[bool, ...]:
    if arch == "Qwen3_5MoeForCausalLM":
        return (True,) * layers
    step = f.integer("decoder_sparse_step", default=1)
    only = f.data.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise f.error("mlp_only_layers", "must be a list of layer indices")
    return tuple(i not in only and (i + 1) % step == 0 for i in range(layers))


def _experts(f: Fields, arch: str, d: dict) -> dict:
    key = "num_experts" if "num_experts" in f.data or arch != "Qwen3MoeForCausalLM" else "num_local_experts"
    experts, top_k = f.integer(key), f.integer("num_experts_per_tok")
    if top_k > experts:
        raise f.error("num_experts_per_tok", f"({top_k}) exceeds '{key}' ({experts})")
    shared = f.integer("shared_expert_intermediate_size") if arch != "Qwen3MoeForCausalLM" else 0
    # Qwen3.5-MoE always renormalises the top-k weights; the others follow norm_topk_prob.
    norm = True if arch == "Qwen3_5MoeForCausalLM" else f.flag("norm_topk_prob", default=d["norm_topk_prob"])
    return dict(num_experts=experts, top_k=top_k, moe_intermediate_size=f.integer("moe_intermediate_size"),
                shared_intermediate_size=shared, norm_topk_prob=norm)


# ---------------------------------------------------------------------------------------------
# The builder


def _named(owner: str, name: str, typ: str, cls=M.SubOp, **attrs: Attribute):
    ggml, hf = NAMES[(owner, name)]
    return cls(name, typ, ggml=StringAttr(ggml), hf=StringAttr(hf), **attrs)


def _linear(out: str, inp: str = "H") -> str:
    return f"Linear<{inp}, {out}, T>"


_DIMS = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "LinKHeads: Dim", "LinVHeads: Dim",
         "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim",
         "SharedInner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float"]
_DIM_ARGS = "H, Heads, KvHeads, HeadDim, Inner, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Experts, TopK, " \
            "MoeInner, SharedInner, Batch, MaxSeq, T, Shards, PageSize"
_CONV_DIM = "2 * LinKHeads * LinKDim + LinVHeads * LinVDim"


def _gated_delta_net(cfg: Qwen35Config) -> M.BlockOp:
    b = "GatedDeltaNet"
    grouped = cfg.arch == "Qwen3NextForCausalLM"
    proj = [_named(b, "in_proj_qkvz", _linear("2 * LinKHeads * LinKDim + 2 * LinVHeads * LinVDim")),
            _named(b, "in_proj_ba", _linear("2 * LinVHeads"))] if grouped else [
            _named(b, "in_proj_qkv", _linear(_CONV_DIM)), _named(b, "in_proj_z", _linear("LinVHeads * LinVDim")),
            _named(b, "in_proj_b", _linear("LinVHeads")), _named(b, "in_proj_a", _linear("LinVHeads"))]
    members = proj + [
        _named(b, "conv1d", f"Tensor[{_CONV_DIM}, 1, ConvK; T]", cls=M.ParamOp),
        _named(b, "dt_bias", "Tensor[LinVHeads; T]", cls=M.ParamOp),
        _named(b, "A_log", "Tensor[LinVHeads; T]", cls=M.ParamOp),
        _named(b, "norm", "GatedRmsNorm<LinVDim, T>"),
        _named(b, "out_proj", _linear("H", "LinVHeads * LinVDim")),
        M.StateOp("conv_state", f"Tensor[Batch, {_CONV_DIM}, ConvK - 1; T]"),
        M.StateOp("recurrent_state", "Tensor[Batch, LinVHeads, LinKDim, LinVDim; T]"),
        *[fn(n, s) for n, s in RECURRENT_SEQ_FNS.items()],
    ]
    generics = ["H: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim",
                "Batch: Dim", "T: Float"]
    attrs: dict[str, Attribute] = {}
    if grouped:
        # llama.cpp's converter splits in_proj_qkvz into attn_qkv and attn_gate, and its
        # builder repeats the q/k heads for their value heads before GATED_DELTA_NET.
        attrs = {"ggml_split": DictionaryAttr({"qkv": StringAttr("attn_qkv"), "z": StringAttr("attn_gate")}),
                 "qk_repeat": IntegerAttr(1, i64)}
    return block(b, generics, "std.attn.gated_delta_net", members,
                  layout=StringAttr("grouped" if grouped else "separate"), eps=FloatAttr(1e-6, f64), **attrs)


def _attention(cfg: Qwen35Config) -> M.BlockOp:
    b = "Attention"
    gated = cfg.hybrid
    q_out = "(Heads / Shards) * HeadDim" + (" * 2" if gated else "")
    members = [
        _named(b, "q_proj", _linear(q_out)),
        _named(b, "k_proj", _linear("(KvHeads / Shards) * HeadDim")),
        _named(b, "v_proj", _linear("(KvHeads / Shards) * HeadDim")),
        _named(b, "o_proj", _linear("H", "(Heads / Shards) * HeadDim")),
        _named(b, "q_norm", "RmsNorm<HeadDim, T>"),
        _named(b, "k_norm", "RmsNorm<HeadDim, T>"),
        M.StateOp("cache_k", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        M.StateOp("cache_v", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        *[fn(n, s) for n, s in SEQ_FNS.items()],
    ]
    generics = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float",
                *SHARDING]
    attrs: dict[str, Attribute] = {"rope_theta": FloatAttr(cfg.rope_theta, f64)}
    if gated:
        attrs["rotary_dim"] = IntegerAttr(cfg.rotary_dim, i64)
        section = cfg.mrope_section or (MROPE_DEFAULT if cfg.arch in QWEN35 else ())
        if section:
            attrs["mrope_section"] = DenseArrayBase.from_list(i64, section)
            attrs["mrope_interleaved"] = IntegerAttr(int(cfg.mrope_interleaved or cfg.arch in QWEN35), i64)
            if cfg.mrope_extra_stream != "position":
                attrs["mrope_extra_stream"] = StringAttr(cfg.mrope_extra_stream)
        # llama.cpp: Qwen3.5 ropes with IMROPE (four position streams) and views q and its gate
        # straight out of q_proj's output; Qwen3-Next ropes plainly and reshapes first.
        attrs["rope_mode"] = StringAttr("imrope" if cfg.arch in QWEN35 else "neox")
        if cfg.arch not in QWEN35:
            attrs["ggml_q_split"] = StringAttr("reshape")
    return block(b, generics, "std.attn.gated" if gated else "std.attn.grouped_query", members, **attrs)


def _mlp(name: str, inner: str) -> M.BlockOp:
    members = [_named(name, "gate", _linear(inner)), _named(name, "up", _linear(inner)),
               _named(name, "down", _linear("H", inner)),
               fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]")]
    return block(name, ["H: Dim", f"{inner}: Dim", "T: Float = bf16"], "std.nn.mlp", members)


def _sparse_moe(cfg: Qwen35Config) -> M.BlockOp:
    b = "SparseMoe"
    members: list[M.MemberOp] = [_named(b, "router", _linear("Experts"))]
    for param, typ in (("gate_exps", "Experts, MoeInner, H"), ("up_exps", "Experts, MoeInner, H"),
                       ("down_exps", "Experts, H, MoeInner")):
        members.append(_named(b, param, f"Tensor[{typ}; T]", cls=M.ParamOp, hf_merged=StringAttr(MERGED[param])))
    if cfg.shared_intermediate_size:
        members += [_named(b, "shared_expert", "SharedExpert<H, SharedInner, T>"),
                    _named(b, "shared_expert_gate", _linear("1"))]
    members.append(fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]"))
    generics = ["H: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "T: Float"]
    return block(b, generics, "std.moe.sparse", members, norm_topk_prob=IntegerAttr(int(cfg.norm_topk_prob), i64))


def _layer(cfg: Qwen35Config, mixer: str, moe: bool) -> M.BlockOp:
    """A decoder layer: the token mixer (linear or full attention) and the FFN (dense or sparse)."""
    mixer_type = ("GatedDeltaNet<H, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Batch, T>" if mixer == "linear_attention"
                  else "Attention<H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize>")
    ffn = "SparseMoe<H, Experts, TopK, MoeInner, SharedInner, T>" if moe else "SwiGlu<H, Inner, T>"
    post = POST_NORM.get(cfg.arch, "post_attention_norm")
    ggml_mixer, hf_mixer = NAMES[("Layer", mixer)]
    members = [
        _named("Layer", "attention_norm", "RmsNorm<H, T>"),
        M.SubOp("attention", mixer_type, ggml=StringAttr(ggml_mixer), hf=StringAttr(hf_mixer)),
        M.SubOp("mlp_norm", "RmsNorm<H, T>", ggml=StringAttr(post), hf=StringAttr("post_attention_layernorm")),
        _named("Layer", "mlp", ffn),
        *[fn(n, s) for n, s in (RECURRENT_SEQ_FNS if cfg.hybrid else SEQ_FNS).items()],
    ]
    name = ("Linear" if mixer == "linear_attention" else "Attention") + ("Moe" if moe else "Dense") + "Layer"
    attrs: dict[str, Attribute] = {}
    if cfg.hybrid:  # llama.cpp's qwen35/qwen3next builders name the residual stream their own way
        attrs["ggml_names"] = DictionaryAttr({"residual": StringAttr("attn_residual"),
                                              "mlp_norm": StringAttr("attn_post_norm"),
                                              "mlp_out": StringAttr("ffn_out")})
    return block(name, _DIMS + SHARDING, "std.layer.decoder", members, **attrs)


def build(cfg: Qwen35Config, max_seq: int | None = None) -> ModuleOp:
    """The module-level program of a model of these families."""
    kinds = list(dict.fromkeys(zip(cfg.layer_types, cfg.moe_layers)))  # in order of first use
    layers = [_layer(cfg, mixer, moe) for mixer, moe in kinds]
    pattern = [kinds.index(k) for k in zip(cfg.layer_types, cfg.moe_layers)]
    layer_type = " | ".join(f"{blk.block_name}<{_DIM_ARGS}>" for blk in layers)
    lm_head = {"tied": StringAttr("embedding.weight")} if cfg.tie_word_embeddings else {}
    root = block("Model", ["Vocab: Dim", *_DIMS[:-1], "Layers: Dim", "T: Float = bf16", *SHARDING],
                  "std.model.causal_lm", [
                      _named("Model", "embedding", "Embedding<Vocab, H, T>"),
                      _named("Model", "layers", f"[{layer_type}; Layers]",
                             pattern=DenseArrayBase.from_list(i64, pattern)),
                      _named("Model", "norm", "RmsNorm<H, T>"),
                      _named("Model", "lm_head", "Linear<H, Vocab / Shards, T>", **lm_head),
                      *model_fns(),
                  ], ggml_names=DictionaryAttr({"embd": StringAttr(EMBD_NAME[cfg.arch])}),
                  ggml_inputs=DictionaryAttr({k: StringAttr(v) for k, v in GGML_INPUTS.items()}),
                  # The hybrids gather the output rows after the final norm (h_nextn); Qwen3-MoE in
                  # its last layer; this llama.cpp does either for one token too.
                  ggml_output_rows=StringAttr("after_norm" if cfg.hybrid else "last_layer"))
    # Qwen3.5 and Qwen3-Next norms are zero-centred: x * rsqrt(mean x^2 + eps) * (1 + w).
    norm_attrs: dict[str, Attribute] = {"eps": FloatAttr(cfg.rms_norm_eps, f64)}
    if cfg.hybrid:
        norm_attrs["weight_offset"] = FloatAttr(1.0, f64)
    blocks: list[M.BlockOp] = [root, *layers, _attention(cfg)]
    if "linear_attention" in cfg.layer_types:
        blocks += [_gated_delta_net(cfg), block("GatedRmsNorm", ["H: Dim", "T: Float = bf16"], "std.nn.gated_norm",
                                                 [M.ParamOp("weight", "Tensor[H; T]")], eps=FloatAttr(cfg.rms_norm_eps, f64))]
    if any(cfg.moe_layers):
        blocks.append(_sparse_moe(cfg))
        if cfg.shared_intermediate_size:
            blocks.append(_mlp("SharedExpert", "Inner"))
    if not all(cfg.moe_layers):
        blocks.append(_mlp("SwiGlu", "Inner"))
    blocks += [
        block("Linear", ["In: Dim", "Out: Dim", "T: Float = bf16"], "std.nn.linear",
               [M.ParamOp("weight", "Tensor[Out, In; T]"), M.ParamOp("bias", "Tensor[Out; T]", optional=UnitAttr()),
                fn("forward", "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]")]),
        block("RmsNorm", ["H: Dim", "T: Float = bf16"], "std.nn.norm",
               [M.ParamOp("weight", "Tensor[H; T]"), fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]")],
               **norm_attrs),
        block("Embedding", ["Vocab: Dim", "H: Dim", "T: Float = bf16"], "std.nn.embedding",
               [M.ParamOp("weight", "Tensor[Vocab, H; T]"),
                fn("forward", "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]")]),
    ]
    dims = {"Vocab": cfg.vocab_size, "H": cfg.hidden_size, "Heads": cfg.num_heads, "KvHeads": cfg.num_kv_heads,
            "HeadDim": cfg.head_dim, "Inner": cfg.intermediate_size or 1, "LinKHeads": cfg.lin_k_heads or 1,
            "LinVHeads": cfg.lin_v_heads or 1, "LinKDim": cfg.lin_k_dim or 1, "LinVDim": cfg.lin_v_dim or 1,
            "ConvK": cfg.conv_kernel or 2, "Experts": cfg.num_experts or 1, "TopK": cfg.top_k or 1,
            "MoeInner": cfg.moe_intermediate_size or 1, "SharedInner": cfg.shared_intermediate_size or 1,
            "Batch": 1, "MaxSeq": max_seq or cfg.max_position_embeddings, "Layers": cfg.num_layers}
    generics: dict[str, Attribute] = {k: IntegerAttr(v, i64) for k, v in dims.items()}
    generics["T"] = DTYPES[cfg.dtype]
    # The hub's checkpoints also hold the vision tower and the multi-token-prediction head.
    ignored = ArrayAttr([StringAttr(p) for p in IGNORED_WEIGHTS])
    model = M.ModelOp(symbol(cfg.name), cfg.arch, "Model", generics, {"ignored_weights": ignored})
    model.body.block.add_ops(blocks)
    return ModuleOp([model])


def with_dtype(cfg: Qwen35Config, dtype: str) -> Qwen35Config:
    return replace(cfg, dtype=dtype)
