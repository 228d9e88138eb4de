// RUN: strata-opt %s | strata-opt | filecheck %s

// Print, parse, print gives the same text, here and for a whole model as the
// llama builder writes it (Qwen3: q/k norm subs, tied lm_head).
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -
// RUN: strata-opt %S/../../passes/Inputs/qwen3_2l.mlir > %t.q1.mlir
// RUN: strata-opt %t.q1.mlir | diff %t.q1.mlir -
// A hybrid model: an array of layers of two kinds, picked by `pattern`.
// RUN: strata-opt %S/../../passes/Inputs/qwen35moe_4l.mlir > %t.h1.mlir
// RUN: strata-opt %t.h1.mlir | diff %t.h1.mlir -
// RUN: filecheck %s --check-prefix=HYBRID < %t.h1.mlir
// HYBRID: module.sub @layers : "[LinearMoeLayer<{{.*}}> | AttentionMoeLayer<{{.*}}>; Layers]" {ggml = "blk", hf = "model.layers", pattern = array<i64: 0, 0, 0, 1>}
// HYBRID: module.param @gate_exps : "Tensor[Experts, MoeInner, H; T]" {ggml = "ffn_gate_exps.weight", hf = "experts.*.gate_proj.weight", hf_merged = "experts.gate_up_proj:0/2"}

// Round trip of every op of the `module` dialect: module.model with its bound
// generics, module.block with generics (with and without defaults), and the
// members module.param (with and without `optional`), module.state, module.sub
// (a block, an array of blocks, with `bias` and `tied`), and module.fn (with
// `pub` and `entry`, with generics, with several results). Type strings use the
// module level's notation (dim arithmetic over generics, `*S` variadic shapes). One
// member is written in the generic form and printed in the custom one.

// CHECK-LABEL: module.model @tiny attributes {arch = "LlamaForCausalLM", root = "Model", generics = {Vocab = 32 : i64, H = 16 : i64, Heads = 4 : i64, KvHeads = 2 : i64, HeadDim = 4 : i64, Inner = 40 : i64, Layers = 2 : i64, Batch = 1 : i64, MaxSeq = 64 : i64, T = f32}} {
// CHECK-NEXT:  module.block @Model ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16", "Shards: Dim = 1"] attributes {path = "llama"} {
// CHECK-NEXT:  module.sub @embedding : "Embedding<Vocab, H, T>"
// CHECK-NEXT:  module.sub @layers : "[Layer<H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards>; Layers]"
// CHECK-NEXT:  module.sub @lm_head : "Linear<H, Vocab / Shards, T>" {tied = "embedding.weight"}
// CHECK-NEXT:  module.fn @decode : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
// CHECK-NEXT:  module.fn @prefill : "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
// CHECK-NEXT:  module.fn @hidden : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]"
// CHECK-NEXT:  }
// CHECK-LABEL: module.block @Layer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1"] attributes {path = "llama", rope_theta = 1.000000e+04 : f64} {
// CHECK-NEXT:  module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {bias}
// CHECK-NEXT:  module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>"
// CHECK-NEXT:  module.sub @norm : "RmsNorm<HeadDim, T>"
// CHECK-NEXT:  module.state @cache_k : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
// CHECK-NEXT:  module.state @cache_v : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
// CHECK-NEXT:  module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
// CHECK-NEXT:  module.fn @split : "(x: Tensor[Batch, 2 * H + 1 - 1; T]) -> (Tensor[Batch, H; T], Tensor[Batch, H; T])"
// CHECK-NEXT:  }
// CHECK-LABEL: module.block @Linear ["In: Dim", "Out: Dim", "T: Float = bf16"] attributes {path = "std.nn.linear"} {
// CHECK-NEXT:  module.param @weight : "Tensor[Out, In; T]"
// CHECK-NEXT:  module.param @bias : "Tensor[Out; T]" {optional}
// CHECK-NEXT:  module.fn @forward : "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]" {pub}
// CHECK-NEXT:  }
// CHECK-LABEL: module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm", eps = 1.000000e-05 : f64} {
// CHECK-NEXT:  module.param @weight : "Tensor[H; T]"
// CHECK-NEXT:  module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
// CHECK-NEXT:  }
// CHECK-LABEL: module.block @Embedding ["Vocab: Dim", "H: Dim", "T: Float = bf16"] attributes {path = "std.nn.embedding"} {
// CHECK-NEXT:  module.param @weight : "Tensor[Vocab, H; T]"
// CHECK-NEXT:  module.fn @forward : "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]" {pub}
// CHECK-NEXT:  }
// CHECK-NEXT:  }

module.model @tiny attributes {arch = "LlamaForCausalLM", root = "Model", generics = {Vocab = 32 : i64, H = 16 : i64, Heads = 4 : i64, KvHeads = 2 : i64, HeadDim = 4 : i64, Inner = 40 : i64, Layers = 2 : i64, Batch = 1 : i64, MaxSeq = 64 : i64, T = f32}} {
  module.block @Model ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16", "Shards: Dim = 1"] attributes {path = "llama"} {
    module.sub @embedding : "Embedding<Vocab, H, T>"
    module.sub @layers : "[Layer<H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards>; Layers]"
    module.sub @lm_head : "Linear<H, Vocab / Shards, T>" {tied = "embedding.weight"}
    module.fn @decode : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
    module.fn @prefill : "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
    module.fn @hidden : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]"
  }
  module.block @Layer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1"] attributes {path = "llama", rope_theta = 1.000000e+04 : f64} {
    module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {bias}
    module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>"
    module.sub @norm : "RmsNorm<HeadDim, T>"
    module.state @cache_k : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
    module.state @cache_v : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
    module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
    module.fn @split : "(x: Tensor[Batch, 2 * H + 1 - 1; T]) -> (Tensor[Batch, H; T], Tensor[Batch, H; T])"
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
    "module.param"() {sym_name = "weight", type = "Tensor[Vocab, H; T]"} : () -> ()
    module.fn @forward : "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]" {pub}
  }
}
