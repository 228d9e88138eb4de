"""Module-level builder for the llama family (Llama 2/3, TinyLlama, Qwen2, Qwen3).

`build_llama(cfg)` writes the program of blocks of seed 003: Embedding, RmsNorm,
Linear, GroupedQueryAttention, SwiGlu, DecoderLayer and the root Model, with the
checkpoint's generics bound on the `module.model`. Hyperparameters that are not
dims (eps, rope) are attributes of the blocks that use them; instance knobs (qkv
bias, q/k norm, tied lm_head) are attributes or optional members of the subs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import (
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
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
from strata.frontends.hf_config import LlamaConfig
from strata.ir.instances import instantiate

DTYPES: dict[str, Attribute] = {"float32": Float32Type(), "float16": Float16Type(), "bfloat16": BFloat16Type()}

_SHARDING = ["Shards: Dim = 1", "PageSize: Dim = 64"]
_ATTN_GENERICS = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float"]
_ATTN_ARGS = "H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize"
_LAYER_ARGS = "H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards, PageSize"

#: The functions every sequence block (attention, layer) exposes.
_SEQ_FNS = {
    "forward": "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]",
    "decode": "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]",
    "prefill": "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]",
}

#: The model entries (seed 003); the rest of the seed's entries come with later levels.
ENTRIES = {
    "forward": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, Vocab; T]",
    "next_token": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, Vocab; T]",
    "decode": "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
    "prefill": "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
}


def _fn(name: str, sig: str, *, pub: bool = True, entry: bool = False) -> M.FnOp:
    attrs: dict[str, Attribute] = {}
    if pub:
        attrs["pub"] = UnitAttr()
    if entry:
        attrs["entry"] = UnitAttr()
    return M.FnOp(name, sig, **attrs)


def _block(name: str, generics: list[str], path: str, members: list[M.MemberOp], **attrs: Attribute) -> M.BlockOp:
    blk = M.BlockOp(name, generics, {"path": StringAttr(path), **attrs})
    blk.body.block.add_ops(members)
    return blk


def _sub(name: str, typ: str, **attrs: Attribute) -> M.SubOp:
    return M.SubOp(name, typ, **attrs)


def _rope_attrs(cfg: LlamaConfig) -> dict[str, Attribute]:
    attrs: dict[str, Attribute] = {"rope_theta": FloatAttr(float(cfg.rope_theta), f64)}
    rs = cfg.rope_scaling
    if rs is not None:
        attrs["rope_scaling"] = DictionaryAttr(
            {
                "rope_type": StringAttr(rs.rope_type),
                "factor": FloatAttr(float(rs.factor), f64),
                "low_freq_factor": FloatAttr(float(rs.low_freq_factor), f64),
                "high_freq_factor": FloatAttr(float(rs.high_freq_factor), f64),
                "original_max_position_embeddings": IntegerAttr(rs.original_max_position_embeddings, i64),
            }
        )
    return attrs


def build_llama(cfg: LlamaConfig, max_seq: int | None = None) -> ModuleOp:
    """The module-level program of a llama-family checkpoint."""
    eps = {"eps": FloatAttr(float(cfg.rms_norm_eps), f64)}
    seq_fns = [_fn(n, s) for n, s in _SEQ_FNS.items()]
    embedding = _block(
        "Embedding", ["Vocab: Dim", "H: Dim", "T: Float = bf16"], "std.nn.embedding",
        [M.ParamOp("weight", "Tensor[Vocab, H; T]"), _fn("forward", "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]")],
    )
    rms = _block(
        "RmsNorm", ["H: Dim", "T: Float = bf16"], "std.nn.norm",
        [M.ParamOp("weight", "Tensor[H; T]"), _fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]")],
    )
    linear = _block(
        "Linear", ["In: Dim", "Out: Dim", "T: Float = bf16"], "std.nn.linear",
        [
            M.ParamOp("weight", "Tensor[Out, In; T]"),
            M.ParamOp("bias", "Tensor[Out; T]", optional=UnitAttr()),
            _fn("forward", "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]"),
        ],
    )
    swiglu = _block(
        "SwiGlu", ["H: Dim", "Inner: Dim", "T: Float = bf16"], "std.nn.mlp",
        [
            _sub("gate", "Linear<H, Inner, T>"),
            _sub("up", "Linear<H, Inner, T>"),
            _sub("down", "Linear<Inner, H, T>"),
            _fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]"),
        ],
    )
    qkv_bias = {"bias": UnitAttr()} if cfg.attention_bias else {}
    o_bias = {"bias": UnitAttr()} if cfg.o_bias else {}
    attn_members: list[M.MemberOp] = [
        _sub("q_proj", "Linear<H, (Heads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("k_proj", "Linear<H, (KvHeads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("v_proj", "Linear<H, (KvHeads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("o_proj", "Linear<(Heads / Shards) * HeadDim, H, T>", **o_bias),
    ]
    if cfg.qk_norm:
        attn_members += [_sub("q_norm", "RmsNorm<HeadDim, T>"), _sub("k_norm", "RmsNorm<HeadDim, T>")]
    attn_members += [
        M.StateOp("cache_k", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        M.StateOp("cache_v", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        *[_fn(n, s) for n, s in _SEQ_FNS.items()],
    ]
    attention = _block("GroupedQueryAttention", _ATTN_GENERICS + _SHARDING, "llama.attention", attn_members, **_rope_attrs(cfg))
    layer = _block(
        "DecoderLayer", _ATTN_GENERICS[:4] + ["Inner: Dim"] + _ATTN_GENERICS[4:] + _SHARDING, "llama",
        [
            _sub("attention_norm", "RmsNorm<H, T>"),
            _sub("attention", f"GroupedQueryAttention<{_ATTN_ARGS}>"),
            _sub("mlp_norm", "RmsNorm<H, T>"),
            _sub("mlp", "SwiGlu<H, Inner / Shards, T>"),
            *seq_fns,
        ],
    )
    lm_head = {"tied": StringAttr("embedding.weight")} if cfg.tie_word_embeddings else {}
    model_generics = ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim",
                      "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16"] + _SHARDING
    root = _block(
        "Model", model_generics, "llama",
        [
            _sub("embedding", "Embedding<Vocab, H, T>"),
            _sub("layers", f"[DecoderLayer<{_LAYER_ARGS}>; Layers]"),
            _sub("norm", "RmsNorm<H, T>"),
            _sub("lm_head", "Linear<H, Vocab / Shards, T>", **lm_head),
            *[_fn(n, s, entry=True) for n, s in ENTRIES.items()],
            _fn("logits", "<R: Dim>(x: Tensor[R, H; T]) -> Tensor[R, Vocab; T]", pub=False),
            _fn("hidden", "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]", pub=False),
        ],
    )
    # eps lives on the norm instances' block: all norms of a llama share one eps.
    rms.attributes.update(eps)
    generics: dict[str, Attribute] = {
        "Vocab": IntegerAttr(cfg.vocab_size, i64),
        "H": IntegerAttr(cfg.hidden_size, i64),
        "Heads": IntegerAttr(cfg.num_heads, i64),
        "KvHeads": IntegerAttr(cfg.num_kv_heads, i64),
        "HeadDim": IntegerAttr(cfg.head_dim, i64),
        "Inner": IntegerAttr(cfg.intermediate_size, i64),
        "Layers": IntegerAttr(cfg.num_layers, i64),
        "Batch": IntegerAttr(1, i64),
        "MaxSeq": IntegerAttr(max_seq or cfg.max_position_embeddings, i64),
        "T": DTYPES[cfg.dtype],
    }
    model = M.ModelOp(_symbol(cfg.name), cfg.arch, "Model", generics)
    model.body.block.add_ops([root, layer, attention, swiglu, linear, rms, embedding])
    return ModuleOp([model])


def _symbol(name: str) -> str:
    """A model name as a symbol: letters, digits and `_` only."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "m_" + out


@dataclass(frozen=True)
class LlamaHParams:
    """What the lowering needs, read back from a module.model (not from the config)."""

    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inner: int
    layers: int
    max_seq: int
    dtype: Attribute
    eps: float
    rope_theta: float
    rope_scaling: dict | None
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    tied: bool


def _float(attr: Attribute | None, what: str) -> float:
    if not isinstance(attr, FloatAttr):
        raise ValueError(f"module.model: missing float attribute '{what}'")
    return float(attr.value.data)


def llama_hparams(model: M.ModelOp) -> LlamaHParams:
    """Read the hyperparameters of a llama-family `module.model`."""
    attn, rms, root = model.block("GroupedQueryAttention"), model.block("RmsNorm"), model.block("Model")
    if attn is None or rms is None or root is None:
        raise ValueError(f"module.model @{model.sym_name.data} is not a llama-family model")
    q_proj, o_proj, lm_head = attn.member("q_proj"), attn.member("o_proj"), root.member("lm_head")
    scaling = attn.attributes.get("rope_scaling")
    rope_scaling = None
    if isinstance(scaling, DictionaryAttr):
        rope_scaling = {k: (v.data if isinstance(v, StringAttr) else v.value.data) for k, v in scaling.data.items()}
    return LlamaHParams(
        vocab=model.dim("Vocab"),
        hidden=model.dim("H"),
        heads=model.dim("Heads"),
        kv_heads=model.dim("KvHeads"),
        head_dim=model.dim("HeadDim"),
        inner=model.dim("Inner"),
        layers=model.dim("Layers"),
        max_seq=model.dim("MaxSeq"),
        dtype=model.generic_value("T"),
        eps=_float(rms.attributes.get("eps"), "RmsNorm.eps"),
        rope_theta=_float(attn.attributes.get("rope_theta"), "GroupedQueryAttention.rope_theta"),
        rope_scaling=rope_scaling,
        qkv_bias=isinstance(q_proj, M.SubOp) and q_proj.bias is not None,
        o_bias=isinstance(o_proj, M.SubOp) and o_proj.bias is not None,
        qk_norm=attn.member("q_norm") is not None,
        tied=isinstance(lm_head, M.SubOp) and lm_head.tied is not None,
    )


#: Module-level param path -> llama.cpp's tensor name.
_TOP_NAMES = {"embedding.weight": "token_embd.weight", "norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
_LAYER_NAMES = {
    "attention_norm.weight": "attn_norm.weight",
    "attention.q_proj.weight": "attn_q.weight",
    "attention.q_proj.bias": "attn_q.bias",
    "attention.k_proj.weight": "attn_k.weight",
    "attention.k_proj.bias": "attn_k.bias",
    "attention.v_proj.weight": "attn_v.weight",
    "attention.v_proj.bias": "attn_v.bias",
    "attention.o_proj.weight": "attn_output.weight",
    "attention.o_proj.bias": "attn_output.bias",
    "attention.q_norm.weight": "attn_q_norm.weight",
    "attention.k_norm.weight": "attn_k_norm.weight",
    "mlp_norm.weight": "ffn_norm.weight",
    "mlp.gate.weight": "ffn_gate.weight",
    "mlp.up.weight": "ffn_up.weight",
    "mlp.down.weight": "ffn_down.weight",
}


def ggml_name(path: str) -> str:
    """`layers.3.attention.q_proj.weight` -> `blk.3.attn_q.weight`."""
    if path in _TOP_NAMES:
        return _TOP_NAMES[path]
    parts = path.split(".", 2)
    if len(parts) == 3 and parts[0] == "layers" and parts[2] in _LAYER_NAMES:
        return f"blk.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    raise KeyError(f"no llama.cpp name for the param '{path}'")


def model_params(model: M.ModelOp) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every param instance of the model, read off its blocks: ggml name -> (shape, dtype)."""
    return {ggml_name(i.path): (i.shape, i.dtype) for i in instantiate(model) if i.kind == "param"}
