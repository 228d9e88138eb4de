// `strata view` of a module-level file (the tensorviz.graph TinyLlama, as `strata import --format tensorviz`
// gives it): Graphviz with a cluster per block that has sub-blocks, the params' shapes and
// precisions on the nodes, the activations' shapes and precisions on the edges.
// RUN: strata view %s --level module --format dot | filecheck %s

// CHECK:      digraph "TinyLlama" {
// CHECK:        subgraph "cluster_layers.0" {
// CHECK-NEXT:     label="layers.0: DecoderLayer";
// CHECK:          subgraph "cluster_layers.0.attention" {
// CHECK-NEXT:       label="layers.0.attention: GroupedQueryAttention\ncache_k 1x4x2048x4 f32\ncache_v 1x4x2048x4 f32";
// CHECK:            "layers.0.attention.q_proj" [label="layers.0.attention.q_proj\nLinear (std.nn.linear)\nweight 16x16 f32", shape=box];
// CHECK:          subgraph "cluster_layers.0.mlp" {
// CHECK:            "layers.0.mlp.gate" [label="layers.0.mlp.gate\nLinear (std.nn.linear)\nweight 40x16 f32", shape=box];
// CHECK:        "embedding" [label="embedding\nEmbedding (std.nn.embedding)\nweight 32x16 f32", shape=box];
// CHECK:        "tokens" -> "embedding" [label="S i32"];
// CHECK-NEXT:   "embedding" -> "layers.0.attention_norm" [label="S x 16 f32"];
// CHECK:        "embedding" -> "layers.0.add1" [label="S x 16 f32", style=dashed];
// CHECK:        "layers.0.mlp.gate" -> "layers.0.mlp.silu_mul" [label="S x 40 f32"];
// CHECK:        "lm_head" -> "logits" [label="S x 32 f32"];
// CHECK-NEXT: }

builtin.module {
  module.model @TinyLlama attributes {arch = "LlamaForCausalLM", root = "Model", generics = {Vocab = 32 : i64, H = 16 : i64, Heads = 4 : i64, KvHeads = 4 : i64, HeadDim = 4 : i64, Inner = 40 : i64, Layers = 1 : i64, Batch = 1 : i64, MaxSeq = 2048 : i64, T = f32}, tensorviz_input = "1,4,6,4"} {
    module.block @Model ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.model.causal_lm"} {
      module.sub @embedding : "Embedding<Vocab, H, T>" {ggml = "token_embd", hf = "model.embed_tokens"}
      module.sub @layers : "[DecoderLayer<H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards, PageSize>; Layers]" {ggml = "blk", hf = "model.layers"}
      module.sub @norm : "RmsNorm<H, T>" {ggml = "output_norm", hf = "model.norm"}
      module.sub @lm_head : "Linear<H, Vocab / Shards, T>" {ggml = "output", hf = "lm_head"}
      module.fn @forward : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, Vocab; T]" {pub, entry}
      module.fn @next_token : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, Vocab; T]" {pub, entry}
      module.fn @decode : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @prefill : "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @logits : "<R: Dim>(x: Tensor[R, H; T]) -> Tensor[R, Vocab; T]"
      module.fn @hidden : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]"
    }
    module.block @DecoderLayer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.layer.decoder"} {
      module.sub @attention_norm : "RmsNorm<H, T>" {ggml = "attn_norm", hf = "input_layernorm"}
      module.sub @attention : "GroupedQueryAttention<H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize>" {ggml = "", hf = "self_attn"}
      module.sub @mlp_norm : "RmsNorm<H, T>" {ggml = "ffn_norm", hf = "post_attention_layernorm"}
      module.sub @mlp : "SwiGlu<H, Inner / Shards, T>" {ggml = "", hf = "mlp"}
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
    }
    module.block @GroupedQueryAttention ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.attn.grouped_query", rope_theta = 1.000000e+04 : f64} {
      module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {ggml = "attn_q", hf = "q_proj"}
      module.sub @k_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_k", hf = "k_proj"}
      module.sub @v_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_v", hf = "v_proj"}
      module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>" {ggml = "attn_output", hf = "o_proj"}
      module.state @cache_k : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
      module.state @cache_v : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
    }
    module.block @SwiGlu ["H: Dim", "Inner: Dim", "T: Float = bf16"] attributes {path = "std.nn.mlp"} {
      module.sub @gate : "Linear<H, Inner, T>" {ggml = "ffn_gate", hf = "gate_proj"}
      module.sub @up : "Linear<H, Inner, T>" {ggml = "ffn_up", hf = "up_proj"}
      module.sub @down : "Linear<Inner, H, T>" {ggml = "ffn_down", hf = "down_proj"}
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
    }
    module.block @Linear ["In: Dim", "Out: Dim", "T: Float = bf16"] attributes {path = "std.nn.linear"} {
      module.param @weight : "Tensor[Out, In; T]"
      module.param @bias : "Tensor[Out; T]" {optional}
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]" {pub}
    }
    module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm", eps = 1.000000e-05 : f64} {
      module.param @weight : "Tensor[H; T]"
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
    }
    module.block @Embedding ["Vocab: Dim", "H: Dim", "T: Float = bf16"] attributes {path = "std.nn.embedding"} {
      module.param @weight : "Tensor[Vocab, H; T]"
      module.fn @forward : "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]" {pub}
    }
  }
}
