"""The llama family (Llama 2/3, TinyLlama, Qwen2, Qwen3): a builder and its name table.

`build_llama(cfg)` writes the program of blocks of Llama-3-8B's module level: Embedding, RmsNorm,
Linear, GroupedQueryAttention, SwiGlu, DecoderLayer and the root Model, with the
checkpoint's generics bound on the `module.model`. Each block is an instance of a
standard block kind (its `path`); the kinds' semantics and their expansion to the op
level live with the interpreter and the lowering, not here. Hyperparameters that are
not dims (eps, rope) are attributes of the blocks that use them; instance knobs (qkv
bias, q/k norm, tied lm_head) are attributes or optional members of the subs.

`NAMES` is the family's table of tensor names: for each sub, the segment it adds to
llama.cpp's and to HF's tensor names. The builder stamps it on the subs, so the IR
carries every tensor's names (`strata.dialects.instances`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
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
from strata.models.llama_config import LlamaConfig
from strata.models.module_blocks import DTYPES, SEQ_FNS, SHARDING, block, fn, model_fns, symbol

_ATTN_GENERICS = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float"]
_ATTN_ARGS = "H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize"
_LAYER_ARGS = "H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards, PageSize"

#: (block, sub) -> (llama.cpp segment, HF segment) of the tensor names below that sub;
#: "" adds no segment. `blk.3.attn_q.weight` is model.layers.3.self_attn.q_proj.weight.
NAMES: dict[tuple[str, str], tuple[str, str]] = {
    ("Model", "embedding"): ("token_embd", "model.embed_tokens"),
    ("Model", "layers"): ("blk", "model.layers"),
    ("Model", "norm"): ("output_norm", "model.norm"),
    ("Model", "lm_head"): ("output", "lm_head"),
    ("DecoderLayer", "attention_norm"): ("attn_norm", "input_layernorm"),
    ("DecoderLayer", "attention"): ("", "self_attn"),
    ("DecoderLayer", "mlp_norm"): ("ffn_norm", "post_attention_layernorm"),
    ("DecoderLayer", "mlp"): ("", "mlp"),
    ("GroupedQueryAttention", "q_proj"): ("attn_q", "q_proj"),
    ("GroupedQueryAttention", "k_proj"): ("attn_k", "k_proj"),
    ("GroupedQueryAttention", "v_proj"): ("attn_v", "v_proj"),
    ("GroupedQueryAttention", "o_proj"): ("attn_output", "o_proj"),
    ("GroupedQueryAttention", "q_norm"): ("attn_q_norm", "q_norm"),
    ("GroupedQueryAttention", "k_norm"): ("attn_k_norm", "k_norm"),
    ("SwiGlu", "gate"): ("ffn_gate", "gate_proj"),
    ("SwiGlu", "up"): ("ffn_up", "up_proj"),
    ("SwiGlu", "down"): ("ffn_down", "down_proj"),
}


def _sub(owner: str, name: str, typ: str, **attrs: Attribute) -> M.SubOp:
    ggml, hf = NAMES[(owner, name)]
    return M.SubOp(name, typ, ggml=StringAttr(ggml), hf=StringAttr(hf), **attrs)


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


def _layer_names(cfg: LlamaConfig) -> dict[str, Attribute]:
    """The layer's llama.cpp names that differ by builder: llama.cpp's llama (unlike its qwen2
    and qwen3) names the attention's output projection `attn_out`."""
    if cfg.arch != "LlamaForCausalLM":
        return {}
    return {"ggml_names": DictionaryAttr({"attn_out": StringAttr("attn_out")})}


def build_llama(cfg: LlamaConfig, max_seq: int | None = None) -> ModuleOp:
    """The module-level program of a llama-family checkpoint."""
    eps = {"eps": FloatAttr(float(cfg.rms_norm_eps), f64)}
    seq_fns = [fn(n, s) for n, s in SEQ_FNS.items()]
    embedding = block(
        "Embedding", ["Vocab: Dim", "H: Dim", "T: Float = bf16"], "std.nn.embedding",
        [M.ParamOp("weight", "Tensor[Vocab, H; T]"), fn("forward", "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]")],
    )
    rms = block(
        "RmsNorm", ["H: Dim", "T: Float = bf16"], "std.nn.norm",
        [M.ParamOp("weight", "Tensor[H; T]"), fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]")],
    )
    linear = block(
        "Linear", ["In: Dim", "Out: Dim", "T: Float = bf16"], "std.nn.linear",
        [
            M.ParamOp("weight", "Tensor[Out, In; T]"),
            M.ParamOp("bias", "Tensor[Out; T]", optional=UnitAttr()),
            fn("forward", "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]"),
        ],
    )
    swiglu = block(
        "SwiGlu", ["H: Dim", "Inner: Dim", "T: Float = bf16"], "std.nn.mlp",
        [
            _sub("SwiGlu", "gate", "Linear<H, Inner, T>"),
            _sub("SwiGlu", "up", "Linear<H, Inner, T>"),
            _sub("SwiGlu", "down", "Linear<Inner, H, T>"),
            fn("forward", "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]"),
        ],
    )
    qkv_bias = {"bias": UnitAttr()} if cfg.attention_bias else {}
    o_bias = {"bias": UnitAttr()} if cfg.o_bias else {}
    attn_members: list[M.MemberOp] = [
        _sub("GroupedQueryAttention", "q_proj", "Linear<H, (Heads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("GroupedQueryAttention", "k_proj", "Linear<H, (KvHeads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("GroupedQueryAttention", "v_proj", "Linear<H, (KvHeads / Shards) * HeadDim, T>", **qkv_bias),
        _sub("GroupedQueryAttention", "o_proj", "Linear<(Heads / Shards) * HeadDim, H, T>", **o_bias),
    ]
    if cfg.qk_norm:
        attn_members += [_sub("GroupedQueryAttention", "q_norm", "RmsNorm<HeadDim, T>"),
                         _sub("GroupedQueryAttention", "k_norm", "RmsNorm<HeadDim, T>")]
    attn_members += [
        M.StateOp("cache_k", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        M.StateOp("cache_v", "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"),
        *[fn(n, s) for n, s in SEQ_FNS.items()],
    ]
    attention = block("GroupedQueryAttention", _ATTN_GENERICS + SHARDING, "std.attn.grouped_query", attn_members,
                       **_rope_attrs(cfg))
    layer = block(
        "DecoderLayer", _ATTN_GENERICS[:4] + ["Inner: Dim"] + _ATTN_GENERICS[4:] + SHARDING, "std.layer.decoder",
        [
            _sub("DecoderLayer", "attention_norm", "RmsNorm<H, T>"),
            _sub("DecoderLayer", "attention", f"GroupedQueryAttention<{_ATTN_ARGS}>"),
            _sub("DecoderLayer", "mlp_norm", "RmsNorm<H, T>"),
            _sub("DecoderLayer", "mlp", "SwiGlu<H, Inner / Shards, T>"),
            *seq_fns,
        ],
        **_layer_names(cfg),
    )
    lm_head = {"tied": StringAttr("embedding.weight")} if cfg.tie_word_embeddings else {}
    model_generics = ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim",
                      "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16"] + SHARDING
    root = block(
        "Model", model_generics, "std.model.causal_lm",
        [
            _sub("Model", "embedding", "Embedding<Vocab, H, T>"),
            _sub("Model", "layers", f"[DecoderLayer<{_LAYER_ARGS}>; Layers]"),
            _sub("Model", "norm", "RmsNorm<H, T>"),
            _sub("Model", "lm_head", "Linear<H, Vocab / Shards, T>", **lm_head),
            *model_fns(),
        ],
        # llama.cpp's llama, qwen2 and qwen3 keep the output rows in the last layer, for one token too.
        ggml_output_rows=StringAttr("last_layer"),
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
    model = M.ModelOp(symbol(cfg.name), cfg.arch, "Model", generics)
    model.body.block.add_ops([root, layer, attention, swiglu, linear, rms, embedding])
    return ModuleOp([model])
