builtin.module {
  module.model @qwen3_5_moe_tiny attributes {arch = "Qwen3_5MoeForCausalLM", root = "Model", generics = {Vocab = 320 : i64, H = 64 : i64, Heads = 4 : i64, KvHeads = 2 : i64, HeadDim = 32 : i64, Inner = 1 : i64, LinKHeads = 2 : i64, LinVHeads = 4 : i64, LinKDim = 16 : i64, LinVDim = 16 : i64, ConvK = 4 : i64, Experts = 8 : i64, TopK = 2 : i64, MoeInner = 32 : i64, SharedInner = 32 : i64, Batch = 1 : i64, MaxSeq = 512 : i64, Layers = 4 : i64, T = f32}, ignored_weights = ["model.visual.", "mtp."]} {
    module.block @Model ["Vocab: Dim", "H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "Batch: Dim", "MaxSeq: Dim", "Layers: Dim", "T: Float = bf16", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.model.causal_lm", ggml_names = {embd = "model.input_embed"}, ggml_inputs = {positions = "inp_pos", k_rows = "attn_inp_k_idxs", v_rows = "attn_inp_v_idxs", out_ids = "out_ids", state_copy = "rs_s_copy"}, ggml_output_rows = "after_norm"} {
      module.sub @embedding : "Embedding<Vocab, H, T>" {ggml = "token_embd", hf = "model.embed_tokens"}
      module.sub @layers : "[LinearMoeLayer<H, Heads, KvHeads, HeadDim, Inner, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Experts, TopK, MoeInner, SharedInner, Batch, MaxSeq, T, Shards, PageSize> | AttentionMoeLayer<H, Heads, KvHeads, HeadDim, Inner, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Experts, TopK, MoeInner, SharedInner, Batch, MaxSeq, T, Shards, PageSize>; Layers]" {ggml = "blk", hf = "model.layers", pattern = array<i64: 0, 0, 0, 1>}
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
    module.block @LinearMoeLayer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.layer.decoder", ggml_names = {residual = "attn_residual", mlp_norm = "attn_post_norm", mlp_out = "ffn_out"}} {
      module.sub @attention_norm : "RmsNorm<H, T>" {ggml = "attn_norm", hf = "input_layernorm"}
      module.sub @attention : "GatedDeltaNet<H, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Batch, T>" {ggml = "", hf = "linear_attn"}
      module.sub @mlp_norm : "RmsNorm<H, T>" {ggml = "post_attention_norm", hf = "post_attention_layernorm"}
      module.sub @mlp : "SparseMoe<H, Experts, TopK, MoeInner, SharedInner, T>" {ggml = "", hf = "mlp"}
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
      module.fn @decode_rows : "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32], lengths: Tensor[M; i32]) -> Tensor[M, S, H; T]" {pub}
      module.fn @prefill_packed : "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @packed : "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_packed : "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]" {pub}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]" {pub}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]" {pub}
    }
    module.block @AttentionMoeLayer ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.layer.decoder", ggml_names = {residual = "attn_residual", mlp_norm = "attn_post_norm", mlp_out = "ffn_out"}} {
      module.sub @attention_norm : "RmsNorm<H, T>" {ggml = "attn_norm", hf = "input_layernorm"}
      module.sub @attention : "Attention<H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T, Shards, PageSize>" {ggml = "", hf = "self_attn"}
      module.sub @mlp_norm : "RmsNorm<H, T>" {ggml = "post_attention_norm", hf = "post_attention_layernorm"}
      module.sub @mlp : "SparseMoe<H, Experts, TopK, MoeInner, SharedInner, T>" {ggml = "", hf = "mlp"}
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
      module.fn @decode_rows : "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32], lengths: Tensor[M; i32]) -> Tensor[M, S, H; T]" {pub}
      module.fn @prefill_packed : "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @packed : "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_packed : "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]" {pub}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]" {pub}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]" {pub}
    }
    module.block @Attention ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float", "Shards: Dim = 1", "PageSize: Dim = 64"] attributes {path = "std.attn.gated", rope_theta = 1.000000e+04 : f64, rotary_dim = 8 : i64, mrope_section = array<i64: 2, 1, 1>, mrope_interleaved = 1 : i64, rope_mode = "imrope"} {
      module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim * 2, T>" {ggml = "attn_q", hf = "q_proj"}
      module.sub @k_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_k", hf = "k_proj"}
      module.sub @v_proj : "Linear<H, (KvHeads / Shards) * HeadDim, T>" {ggml = "attn_v", hf = "v_proj"}
      module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>" {ggml = "attn_output", hf = "o_proj"}
      module.sub @q_norm : "RmsNorm<HeadDim, T>" {ggml = "attn_q_norm", hf = "q_norm"}
      module.sub @k_norm : "RmsNorm<HeadDim, T>" {ggml = "attn_k_norm", hf = "k_norm"}
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
    module.block @GatedDeltaNet ["H: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Batch: Dim", "T: Float"] attributes {path = "std.attn.gated_delta_net", layout = "separate", eps = 1.000000e-06 : f64} {
      module.sub @in_proj_qkv : "Linear<H, 2 * LinKHeads * LinKDim + LinVHeads * LinVDim, T>" {ggml = "attn_qkv", hf = "in_proj_qkv"}
      module.sub @in_proj_z : "Linear<H, LinVHeads * LinVDim, T>" {ggml = "attn_gate", hf = "in_proj_z"}
      module.sub @in_proj_b : "Linear<H, LinVHeads, T>" {ggml = "ssm_beta", hf = "in_proj_b"}
      module.sub @in_proj_a : "Linear<H, LinVHeads, T>" {ggml = "ssm_alpha", hf = "in_proj_a"}
      module.param @conv1d : "Tensor[2 * LinKHeads * LinKDim + LinVHeads * LinVDim, 1, ConvK; T]" {ggml = "ssm_conv1d.weight", hf = "conv1d.weight"}
      module.param @dt_bias : "Tensor[LinVHeads; T]" {ggml = "ssm_dt.bias", hf = "dt_bias"}
      module.param @A_log : "Tensor[LinVHeads; T]" {ggml = "ssm_a", hf = "A_log"}
      module.sub @norm : "GatedRmsNorm<LinVDim, T>" {ggml = "ssm_norm", hf = "norm"}
      module.sub @out_proj : "Linear<LinVHeads * LinVDim, H, T>" {ggml = "ssm_out", hf = "out_proj"}
      module.state @conv_state : "Tensor[Batch, 2 * LinKHeads * LinKDim + LinVHeads * LinVDim, ConvK - 1; T]"
      module.state @recurrent_state : "Tensor[Batch, LinVHeads, LinKDim, LinVDim; T]"
      module.fn @forward : "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]" {pub}
      module.fn @decode : "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill : "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]" {pub}
      module.fn @decode_rows : "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]" {pub}
      module.fn @prefill_slots : "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32], lengths: Tensor[M; i32]) -> Tensor[M, S, H; T]" {pub}
      module.fn @prefill_packed : "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @packed : "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_packed : "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]" {pub}
      module.fn @decode_paged : "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]" {pub}
      module.fn @prefill_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P, H; T]" {pub}
      module.fn @step_paged : "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]" {pub}
    }
    module.block @GatedRmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.gated_norm", eps = 1.000000e-06 : f64} {
      module.param @weight : "Tensor[H; T]"
    }
    module.block @SparseMoe ["H: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "T: Float"] attributes {path = "std.moe.sparse", norm_topk_prob = 1 : i64} {
      module.sub @router : "Linear<H, Experts, T>" {ggml = "ffn_gate_inp", hf = "gate"}
      module.param @gate_exps : "Tensor[Experts, MoeInner, H; T]" {ggml = "ffn_gate_exps.weight", hf = "experts.*.gate_proj.weight", hf_merged = "experts.gate_up_proj:0/2"}
      module.param @up_exps : "Tensor[Experts, MoeInner, H; T]" {ggml = "ffn_up_exps.weight", hf = "experts.*.up_proj.weight", hf_merged = "experts.gate_up_proj:1/2"}
      module.param @down_exps : "Tensor[Experts, H, MoeInner; T]" {ggml = "ffn_down_exps.weight", hf = "experts.*.down_proj.weight", hf_merged = "experts.down_proj:0/1"}
      module.sub @shared_expert : "SharedExpert<H, SharedInner, T>" {ggml = "", hf = "shared_expert"}
      module.sub @shared_expert_gate : "Linear<H, 1, T>" {ggml = "ffn_gate_inp_shexp", hf = "shared_expert_gate"}
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
    }
    module.block @SharedExpert ["H: Dim", "Inner: Dim", "T: Float = bf16"] attributes {path = "std.nn.mlp"} {
      module.sub @gate : "Linear<H, Inner, T>" {ggml = "ffn_gate_shexp", hf = "gate_proj"}
      module.sub @up : "Linear<H, Inner, T>" {ggml = "ffn_up_shexp", hf = "up_proj"}
      module.sub @down : "Linear<Inner, H, T>" {ggml = "ffn_down_shexp", hf = "down_proj"}
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
    }
    module.block @Linear ["In: Dim", "Out: Dim", "T: Float = bf16"] attributes {path = "std.nn.linear"} {
      module.param @weight : "Tensor[Out, In; T]"
      module.param @bias : "Tensor[Out; T]" {optional}
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]" {pub}
    }
    module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm", eps = 1.000000e-06 : f64, weight_offset = 1.000000e+00 : f64} {
      module.param @weight : "Tensor[H; T]"
      module.fn @forward : "<*S: Shape>(x: Tensor[*S, H; T]) -> Tensor[*S, H; T]" {pub}
    }
    module.block @Embedding ["Vocab: Dim", "H: Dim", "T: Float = bf16"] attributes {path = "std.nn.embedding"} {
      module.param @weight : "Tensor[Vocab, H; T]"
      module.fn @forward : "<*S: Shape>(ids: Tensor[*S; i32]) -> Tensor[*S, H; T]" {pub}
    }
  }
}
