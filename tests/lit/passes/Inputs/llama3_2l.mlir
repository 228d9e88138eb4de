builtin.module {
  module.model @llama3_2l attributes {arch = "LlamaForCausalLM", root = "Model", generics = {Vocab = 32 : i64, H = 16 : i64, Heads = 4 : i64, KvHeads = 2 : i64, HeadDim = 4 : i64, Inner = 40 : i64, Layers = 2 : i64, Batch = 1 : i64, MaxSeq = 128 : i64, T = f32}} {
    module.block @Model ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Layers: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float = bf16", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.model.causal_lm"} {
      module.sub @embedding : "Embedding<Vocab, H, T>" {ggml = "token_embd", hf = "model.embed_tokens"}
      module.sub @layers : "[DecoderLayer<H, Heads, KvHeads, HeadDim, Inner, Batch, MaxSeq, T, Shards, PageSize>; Layers]" {ggml = "blk", hf = "model.layers"}
      module.sub @norm : "RmsNorm<H, T>" {ggml = "output_norm", hf = "model.norm"}
      module.sub @lm_head : "Linear<H, Vocab / Shards, T>" {ggml = "output", hf = "lm_head"}
      module.fn @forward : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, Vocab; T]" {pub, entry}
      module.fn @next_token : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, Vocab; T]" {pub, entry}
      module.fn @decode : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @prefill : "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @decode_rows : "(tokens: Tensor[Batch, 1; i32], positions: Tensor[Batch; i32]) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(tokens: Tensor[M, S; i32], slots: Tensor[M; i32], lengths: Tensor[M; i32]) -> Tensor[M, Vocab; T]" {pub, entry}
      module.fn @loss_packed : "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], targets: Tensor[P; i64], weights: Tensor[P; f32]) -> f32" {pub, entry}
      module.fn @log_probs_packed : "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], targets: Tensor[P; i64]) -> Tensor[P; f32]" {pub, entry}
      module.fn @hidden_packed : "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[P, H; T]" {pub, entry}
      module.fn @packed_states : "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[P, H; T]"
      module.fn @prefill_packed : "<P: Dim>(tokens: Tensor[P; i32], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], last: Tensor[Batch; i32]) -> Tensor[Batch, Vocab; T]" {pub, entry}
      module.fn @step_packed : "<P: Dim>(tokens: Tensor[P; i32], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], last: Tensor[Batch; i32], step_tokens: Tensor[Batch, 1; i32], step_positions: Tensor[Batch; i32]) -> Tensor[2 * Batch, Vocab; T]" {pub, entry}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(tokens: Tensor[Rows, 1; i32], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, Vocab; T]" {pub, entry}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], last: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, Vocab; T]" {pub, entry}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], last: Tensor[Rows; i32], step_tokens: Tensor[Rows, 1; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[2 * Rows, Vocab; T]" {pub, entry}
      module.fn @generate : "<Steps: Dim>(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Steps; i32]" {pub, entry}
      module.fn @sample : "<Steps: Dim>(token: Tensor[Batch, 1; i32], pos: i32, key: Tensor[2; i64], temperature: f32) -> Tensor[Batch, Steps; i32]" {pub, entry}
      module.fn @generate_until : "<MaxNew: Dim>(token: Tensor[Batch, 1; i32], pos: i32, eos: i32) -> (Tensor[Batch, MaxNew; i32], i32)" {pub, entry}
      module.fn @step : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]"
      module.fn @logits : "<R: Dim>(x: Tensor[R, H; T]) -> Tensor[R, Vocab; T]"
      module.fn @hidden : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]"
      module.fn @hidden_states : "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]"
    }
    module.block @DecoderLayer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.layer.decoder"} {
      module.sub @attention_norm : "RmsNorm<H, T>" {ggml = "attn_norm", hf = "input_layernorm"}
      module.sub @attention : "GroupedQueryAttention<H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize>" {ggml = "", hf = "self_attn"}
      module.sub @mlp_norm : "RmsNorm<H, T>" {ggml = "ffn_norm", hf = "post_attention_layernorm"}
      module.sub @mlp : "SwiGlu<H, Inner / Shards, T>" {ggml = "", hf = "mlp"}
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
      module.fn @decode_rows : "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32]) -> Tensor[M, S, H; T]" {pub}
      module.fn @prefill_packed : "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @packed : "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_packed : "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]" {pub}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]" {pub}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]" {pub}
    }
    module.block @GroupedQueryAttention ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.attn.grouped_query", rope_theta = 5.000000e+05 : f64, rope_scaling = {rope_type = "llama3", factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 32 : i64}} {
      module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {ggml = "attn_q", hf = "q_proj"}
      module.sub @k_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_k", hf = "k_proj"}
      module.sub @v_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_v", hf = "v_proj"}
      module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>" {ggml = "attn_output", hf = "o_proj"}
      module.state @cache_k : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
      module.state @cache_v : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
      module.fn @decode_rows : "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32]) -> Tensor[M, S, H; T]" {pub}
      module.fn @prefill_packed : "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @packed : "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_packed : "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]" {pub}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]" {pub}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]" {pub}
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
