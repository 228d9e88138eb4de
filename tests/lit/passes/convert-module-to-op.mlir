// convert-module-to-op on 2-layer llama-family models (Inputs/, written by
// Inputs/generate.py: vocab 32, hidden 16, 4 query heads, 2 KV heads, head dim 4,
// ffn 40, MaxSeq 64, or 128 for llama3_2l). Each RUN line lowers one entry; the
// checks follow one whole layer (layer 1, the last one) op by op, as llama.cpp's
// llm_build_llama / llm_build_qwen3 expand it (compare llama.cpp's eval-callback trace).

// Prefill of 5 tokens from position 0, flash attention: n_kv = 32 (kv-pad 32).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=true}' | filecheck %s --check-prefix=PREFILL

// The same without flash attention (MUL_MAT, SOFT_MAX, MUL_MAT); the options
// are spelled with underscores here, as the pass's dataclass fields are.
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv_pad=32 flash_attn=false}' | filecheck %s --check-prefix=NOFA

// Decode of one token at position 7, with and without flash attention.
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=7 ctx=64 kv-pad=32 flash-attn=true}' | filecheck %s --check-prefix=DECODE
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=7 ctx=64 kv-pad=32 flash-attn=false}' | filecheck %s --check-prefix=DECNOFA

// Both spellings of an option (kv-pad, kv_pad) mean the same.
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=false}' > %t.dash
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv_pad=32 flash_attn=false}' > %t.under
// RUN: diff %t.dash %t.under

// The lowered IR round-trips: print, parse, print gives the same text.
// RUN: strata-opt %S/Inputs/qwen3_2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=false}' > %t.op.mlir
// RUN: strata-opt %t.op.mlir | diff %t.op.mlir -

// Qwen2: biases on the q, k and v projections (an ADD after each MUL_MAT), and
// an lm_head tied to the token embedding.
// RUN: strata-opt %S/Inputs/qwen2_2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=true}' | filecheck %s --check-prefix=QWEN2

// Qwen3: per-head RMS_NORM and MUL of q and k before ROPE.
// RUN: strata-opt %S/Inputs/qwen3_2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=true}' | filecheck %s --check-prefix=QWEN3

// Llama 3 rope scaling: one rope_freqs table shared by every ROPE.
// RUN: strata-opt %S/Inputs/llama3_2l.mlir -p 'convert-module-to-op{entry=decode start=100 ctx=128 kv-pad=32}' | filecheck %s --check-prefix=LLAMA3

// A prefill whose length is known only at run time: tokens=0 (the default).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill}' | filecheck %s --check-prefix=DYN

// Bad options are errors with a non-zero exit.
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=backward}' 2>&1 | filecheck %s --check-prefix=ERR-ENTRY
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=60 start=8 ctx=64}' 2>&1 | filecheck %s --check-prefix=ERR-CTX
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{tokens=five}' 2>&1 | filecheck %s --check-prefix=ERR-TYPE

// ERR-ENTRY: strata-opt: error: convert-module-to-op: unknown entry 'backward' (known: forward, next_token, decode, prefill, {{.*}})
// ERR-CTX: strata-opt: error: convert-module-to-op: 8 + 60 tokens exceed the context of 64
// ERR-TYPE: strata-opt: error: {{.*}}five

// -----------------------------------------------------------------------------
// Prefill, flash attention. Layer 0 keeps every row; layer 1 (the last) keeps
// only the row whose logits are returned: GET_ROWS of the attention output and
// of the residual with inp_out_ids, before ffn_inp-1.

// PREFILL-LABEL: func.func @prefill() -> tensor<1x32xf32> attributes {op.n_ctx = 64 : i64, op.n_kv = 32 : i64} {
// PREFILL-NEXT: %token_embd.weight = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// PREFILL-NEXT: %inp_tokens = op.input "tokens" {name = "inp_tokens", op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi32>
// PREFILL-NEXT: %embd = op.get_rows %token_embd.weight, %inp_tokens {name = "embd", op.block = #op.block<"std.nn.embedding", "embedding">} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
// PREFILL: %inp_pos = op.input "positions" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi32>
// PREFILL: %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5x32xf32>
// PREFILL-NOT: out_ids
// PREFILL: %norm-1 = op.rms_norm %l_out-0 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32> -> tensor<5x16xf32>
// PREFILL-NEXT: %blk.1.attn_norm.weight = op.param "blk.1.attn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention_norm", "weight">} : tensor<16xf32>
// PREFILL-NEXT: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// PREFILL-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// PREFILL-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// PREFILL-NEXT: %Qcur-1_1 = op.reshape %Qcur-1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x16xf32> -> tensor<5x4x4xf32>
// PREFILL-NEXT: %Qcur-1_2 = op.rope %Qcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32>, tensor<5xi32> -> tensor<5x4x4xf32>
// PREFILL-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// PREFILL-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// PREFILL-NEXT: %Vcur-1_1 = op.reshape %Vcur-1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// PREFILL-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// PREFILL-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// PREFILL-NEXT: %Kcur-1_1 = op.reshape %Kcur-1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// PREFILL-NEXT: %Kcur-1_2 = op.rope %Kcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32>, tensor<5xi32> -> tensor<5x2x4xf32>
// PREFILL-NEXT: [[VIEW1:%[0-9]+]] = op.view %Kcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32> -> tensor<5x8xf32>
// PREFILL-NEXT: %cache_k_l1 = op.state "cache_k_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// PREFILL-NEXT: %k_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi64>
// PREFILL-NEXT: [[SETROWS1:%[0-9]+]] = op.set_rows %cache_k_l1, [[VIEW1]], %k_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<5x8xf32>, tensor<5xi64> -> tensor<64x8xf32>
// PREFILL-NEXT: [[VIEW2:%[0-9]+]] = op.view %Vcur-1_1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32> -> tensor<5x8xf32>
// PREFILL-NEXT: %cache_v_l1 = op.state "cache_v_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// PREFILL-NEXT: %v_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi64>
// PREFILL-NEXT: [[SETROWS2:%[0-9]+]] = op.set_rows %cache_v_l1, [[VIEW2]], %v_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<5x8xf32>, tensor<5xi64> -> tensor<64x8xf32>
// PREFILL-NEXT: [[VIEW3:%[0-9]+]] = op.view %Qcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<5x4x4xf32>
// PREFILL-NEXT: [[PERMUTE1:%[0-9]+]] = op.permute [[VIEW3]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<4x5x4xf32>
// PREFILL-NEXT: [[VIEW4:%[0-9]+]] = op.view %cache_k_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// PREFILL-NEXT: [[PERMUTE2:%[0-9]+]] = op.permute [[VIEW4]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// PREFILL-NEXT: [[VIEW5:%[0-9]+]] = op.view %cache_v_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// PREFILL-NEXT: [[PERMUTE3:%[0-9]+]] = op.permute [[VIEW5]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// PREFILL-NEXT: [[FLASHATTNEXT1:%[0-9]+]] = op.flash_attn_ext [[PERMUTE1]], [[PERMUTE2]], [[PERMUTE3]], %kq_mask {scale = 5.000000e-01 : f64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x5x4xf32>, tensor<2x32x4xf32>, tensor<2x32x4xf32>, tensor<5x32xf32> -> tensor<5x4x4xf32>
// PREFILL-NEXT: %kqv_out-1 = op.reshape [[FLASHATTNEXT1]] {name = "kqv_out-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<5x16xf32>
// PREFILL-NEXT: %blk.1.attn_output.weight = op.param "blk.1.attn_output.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj", "weight">} : tensor<16x16xf32>
// PREFILL-NEXT: [[MULMAT1:%[0-9]+]] = op.mul_mat %blk.1.attn_output.weight, %kqv_out-1 {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// PREFILL-NEXT: %inp_out_ids = op.input "out_ids" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// PREFILL-NEXT: [[GETROWS1:%[0-9]+]] = op.get_rows [[MULMAT1]], %inp_out_ids {op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// PREFILL-NEXT: [[GETROWS2:%[0-9]+]] = op.get_rows %l_out-0, %inp_out_ids {op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// PREFILL-NEXT: %ffn_inp-1 = op.add [[GETROWS1]], [[GETROWS2]] {name = "ffn_inp-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %norm-1_1 = op.rms_norm %ffn_inp-1 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %blk.1.ffn_norm.weight = op.param "blk.1.ffn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm", "weight">} : tensor<16xf32>
// PREFILL-NEXT: %ffn_norm-1 = op.mul %norm-1_1, %blk.1.ffn_norm.weight {name = "ffn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %blk.1.ffn_gate.weight = op.param "blk.1.ffn_gate.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate", "weight">} : tensor<40x16xf32>
// PREFILL-NEXT: %ffn_gate-1 = op.mul_mat %blk.1.ffn_gate.weight, %ffn_norm-1 {name = "ffn_gate-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// PREFILL-NEXT: %blk.1.ffn_up.weight = op.param "blk.1.ffn_up.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.up", "weight">} : tensor<40x16xf32>
// PREFILL-NEXT: %ffn_up-1 = op.mul_mat %blk.1.ffn_up.weight, %ffn_norm-1 {name = "ffn_up-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.up">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// PREFILL-NEXT: %ffn_swiglu-1 = op.swiglu %ffn_gate-1, %ffn_up-1 {name = "ffn_swiglu-1", op.block = #op.block<"std.nn.mlp", "layers.1.mlp">} : tensor<1x40xf32>, tensor<1x40xf32> -> tensor<1x40xf32>
// PREFILL-NEXT: %blk.1.ffn_down.weight = op.param "blk.1.ffn_down.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.down", "weight">} : tensor<16x40xf32>
// PREFILL-NEXT: %ffn_out-1 = op.mul_mat %blk.1.ffn_down.weight, %ffn_swiglu-1 {name = "ffn_out-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.down">} : tensor<16x40xf32>, tensor<1x40xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %l_out-1 = op.add %ffn_out-1, %ffn_inp-1 {name = "l_out-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %norm = op.rms_norm %l_out-1 {eps = 1.000000e-05 : f64, name = "norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %output_norm.weight = op.param "output_norm.weight" {op.block = #op.block<"std.nn.norm", "norm", "weight">} : tensor<16xf32>
// PREFILL-NEXT: %result_norm = op.mul %norm, %output_norm.weight {name = "result_norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// PREFILL-NEXT: %output.weight = op.param "output.weight" {op.block = #op.block<"std.nn.linear", "lm_head", "weight">} : tensor<32x16xf32>
// PREFILL-NEXT: %result_output = op.mul_mat %output.weight, %result_norm {name = "result_output", op.block = #op.block<"std.nn.linear", "lm_head">} : tensor<32x16xf32>, tensor<1x16xf32> -> tensor<1x32xf32>
// PREFILL-NEXT: func.return %result_output : tensor<1x32xf32>
// PREFILL-NEXT: }

// -----------------------------------------------------------------------------
// Prefill without flash attention: KQ = K Q^T, softmax with the mask, V^T made
// contiguous, KQV, permuted back to [S, Heads, D] and made contiguous.

// NOFA-LABEL: func.func @prefill() -> tensor<1x32xf32> attributes {op.n_ctx = 64 : i64, op.n_kv = 32 : i64} {
// NOFA-NEXT: %token_embd.weight = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// NOFA-NEXT: %inp_tokens = op.input "tokens" {name = "inp_tokens", op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi32>
// NOFA-NEXT: %embd = op.get_rows %token_embd.weight, %inp_tokens {name = "embd", op.block = #op.block<"std.nn.embedding", "embedding">} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
// NOFA: %inp_pos = op.input "positions" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi32>
// NOFA: %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5x32xf32>
// NOFA-NOT: out_ids
// NOFA: %norm-1 = op.rms_norm %l_out-0 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32> -> tensor<5x16xf32>
// NOFA-NEXT: %blk.1.attn_norm.weight = op.param "blk.1.attn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention_norm", "weight">} : tensor<16xf32>
// NOFA-NEXT: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// NOFA-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// NOFA-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// NOFA-NEXT: %Qcur-1_1 = op.reshape %Qcur-1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x16xf32> -> tensor<5x4x4xf32>
// NOFA-NEXT: %Qcur-1_2 = op.rope %Qcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32>, tensor<5xi32> -> tensor<5x4x4xf32>
// NOFA-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// NOFA-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// NOFA-NEXT: %Vcur-1_1 = op.reshape %Vcur-1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// NOFA-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// NOFA-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// NOFA-NEXT: %Kcur-1_1 = op.reshape %Kcur-1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// NOFA-NEXT: %Kcur-1_2 = op.rope %Kcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32>, tensor<5xi32> -> tensor<5x2x4xf32>
// NOFA-NEXT: [[VIEW1:%[0-9]+]] = op.view %Kcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32> -> tensor<5x8xf32>
// NOFA-NEXT: %cache_k_l1 = op.state "cache_k_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// NOFA-NEXT: %k_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi64>
// NOFA-NEXT: [[SETROWS1:%[0-9]+]] = op.set_rows %cache_k_l1, [[VIEW1]], %k_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<5x8xf32>, tensor<5xi64> -> tensor<64x8xf32>
// NOFA-NEXT: [[VIEW2:%[0-9]+]] = op.view %Vcur-1_1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32> -> tensor<5x8xf32>
// NOFA-NEXT: %cache_v_l1 = op.state "cache_v_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// NOFA-NEXT: %v_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<5xi64>
// NOFA-NEXT: [[SETROWS2:%[0-9]+]] = op.set_rows %cache_v_l1, [[VIEW2]], %v_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<5x8xf32>, tensor<5xi64> -> tensor<64x8xf32>
// NOFA-NEXT: [[VIEW5:%[0-9]+]] = op.view %cache_v_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// NOFA-NEXT: [[PERMUTE3:%[0-9]+]] = op.permute [[VIEW5]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// NOFA-NEXT: [[TRANSPOSE1:%[0-9]+]] = op.transpose [[PERMUTE3]] {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x32x4xf32> -> tensor<2x4x32xf32>
// NOFA-NEXT: [[CONT1:%[0-9]+]] = op.cont [[TRANSPOSE1]] {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x4x32xf32> -> tensor<2x4x32xf32>
// NOFA-NEXT: [[VIEW4:%[0-9]+]] = op.view %cache_k_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// NOFA-NEXT: [[PERMUTE2:%[0-9]+]] = op.permute [[VIEW4]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// NOFA-NEXT: [[VIEW3:%[0-9]+]] = op.view %Qcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<5x4x4xf32>
// NOFA-NEXT: [[PERMUTE1:%[0-9]+]] = op.permute [[VIEW3]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<4x5x4xf32>
// NOFA-NEXT: %kq-1 = op.mul_mat [[PERMUTE2]], [[PERMUTE1]] {name = "kq-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x32x4xf32>, tensor<4x5x4xf32> -> tensor<4x5x32xf32>
// NOFA-NEXT: %kq_soft_max-1 = op.soft_max %kq-1, %kq_mask {scale = 5.000000e-01 : f64, name = "kq_soft_max-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x5x32xf32>, tensor<5x32xf32> -> tensor<4x5x32xf32>
// NOFA-NEXT: %kqv-1 = op.mul_mat [[CONT1]], %kq_soft_max-1 {name = "kqv-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x4x32xf32>, tensor<4x5x32xf32> -> tensor<4x5x4xf32>
// NOFA-NEXT: [[PERMUTE4:%[0-9]+]] = op.permute %kqv-1 {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x5x4xf32> -> tensor<5x4x4xf32>
// NOFA-NEXT: %kqv_out-1 = op.cont [[PERMUTE4]] {name = "kqv_out-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32> -> tensor<5x16xf32>
// NOFA-NEXT: %blk.1.attn_output.weight = op.param "blk.1.attn_output.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj", "weight">} : tensor<16x16xf32>
// NOFA-NEXT: [[MULMAT1:%[0-9]+]] = op.mul_mat %blk.1.attn_output.weight, %kqv_out-1 {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// NOFA-NEXT: %inp_out_ids = op.input "out_ids" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// NOFA-NEXT: [[GETROWS1:%[0-9]+]] = op.get_rows [[MULMAT1]], %inp_out_ids {op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// NOFA-NEXT: [[GETROWS2:%[0-9]+]] = op.get_rows %l_out-0, %inp_out_ids {op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// NOFA-NEXT: %ffn_inp-1 = op.add [[GETROWS1]], [[GETROWS2]] {name = "ffn_inp-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %norm-1_1 = op.rms_norm %ffn_inp-1 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %blk.1.ffn_norm.weight = op.param "blk.1.ffn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm", "weight">} : tensor<16xf32>
// NOFA-NEXT: %ffn_norm-1 = op.mul %norm-1_1, %blk.1.ffn_norm.weight {name = "ffn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %blk.1.ffn_gate.weight = op.param "blk.1.ffn_gate.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate", "weight">} : tensor<40x16xf32>
// NOFA-NEXT: %ffn_gate-1 = op.mul_mat %blk.1.ffn_gate.weight, %ffn_norm-1 {name = "ffn_gate-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// NOFA-NEXT: %blk.1.ffn_up.weight = op.param "blk.1.ffn_up.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.up", "weight">} : tensor<40x16xf32>
// NOFA-NEXT: %ffn_up-1 = op.mul_mat %blk.1.ffn_up.weight, %ffn_norm-1 {name = "ffn_up-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.up">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// NOFA-NEXT: %ffn_swiglu-1 = op.swiglu %ffn_gate-1, %ffn_up-1 {name = "ffn_swiglu-1", op.block = #op.block<"std.nn.mlp", "layers.1.mlp">} : tensor<1x40xf32>, tensor<1x40xf32> -> tensor<1x40xf32>
// NOFA-NEXT: %blk.1.ffn_down.weight = op.param "blk.1.ffn_down.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.down", "weight">} : tensor<16x40xf32>
// NOFA-NEXT: %ffn_out-1 = op.mul_mat %blk.1.ffn_down.weight, %ffn_swiglu-1 {name = "ffn_out-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.down">} : tensor<16x40xf32>, tensor<1x40xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %l_out-1 = op.add %ffn_out-1, %ffn_inp-1 {name = "l_out-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %norm = op.rms_norm %l_out-1 {eps = 1.000000e-05 : f64, name = "norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %output_norm.weight = op.param "output_norm.weight" {op.block = #op.block<"std.nn.norm", "norm", "weight">} : tensor<16xf32>
// NOFA-NEXT: %result_norm = op.mul %norm, %output_norm.weight {name = "result_norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// NOFA-NEXT: %output.weight = op.param "output.weight" {op.block = #op.block<"std.nn.linear", "lm_head", "weight">} : tensor<32x16xf32>
// NOFA-NEXT: %result_output = op.mul_mat %output.weight, %result_norm {name = "result_output", op.block = #op.block<"std.nn.linear", "lm_head">} : tensor<32x16xf32>, tensor<1x16xf32> -> tensor<1x32xf32>
// NOFA-NEXT: func.return %result_output : tensor<1x32xf32>
// NOFA-NEXT: }

// -----------------------------------------------------------------------------
// Decode, flash attention: one row everywhere, and no row pruning in any layer.

// DECODE-LABEL: func.func @decode() -> tensor<1x32xf32> attributes {op.n_ctx = 64 : i64, op.n_kv = 32 : i64} {
// DECODE-NEXT: %token_embd.weight = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// DECODE-NEXT: %inp_tokens = op.input "tokens" {name = "inp_tokens", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// DECODE-NEXT: %embd = op.get_rows %token_embd.weight, %inp_tokens {name = "embd", op.block = #op.block<"std.nn.embedding", "embedding">} : tensor<32x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// DECODE: %inp_pos = op.input "positions" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// DECODE: %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1x32xf32>
// DECODE-NOT: out_ids
// DECODE: %norm-1 = op.rms_norm %l_out-0 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %blk.1.attn_norm.weight = op.param "blk.1.attn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention_norm", "weight">} : tensor<16xf32>
// DECODE-NEXT: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// DECODE-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %Qcur-1_1 = op.reshape %Qcur-1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x16xf32> -> tensor<1x4x4xf32>
// DECODE-NEXT: %Qcur-1_2 = op.rope %Qcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32>, tensor<1xi32> -> tensor<1x4x4xf32>
// DECODE-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// DECODE-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<1x16xf32> -> tensor<1x8xf32>
// DECODE-NEXT: %Vcur-1_1 = op.reshape %Vcur-1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x8xf32> -> tensor<1x2x4xf32>
// DECODE-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// DECODE-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<1x16xf32> -> tensor<1x8xf32>
// DECODE-NEXT: %Kcur-1_1 = op.reshape %Kcur-1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x8xf32> -> tensor<1x2x4xf32>
// DECODE-NEXT: %Kcur-1_2 = op.rope %Kcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32>, tensor<1xi32> -> tensor<1x2x4xf32>
// DECODE-NEXT: [[VIEW1:%[0-9]+]] = op.view %Kcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32> -> tensor<1x8xf32>
// DECODE-NEXT: %cache_k_l1 = op.state "cache_k_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// DECODE-NEXT: %k_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi64>
// DECODE-NEXT: [[SETROWS1:%[0-9]+]] = op.set_rows %cache_k_l1, [[VIEW1]], %k_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi64> -> tensor<64x8xf32>
// DECODE-NEXT: [[VIEW2:%[0-9]+]] = op.view %Vcur-1_1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32> -> tensor<1x8xf32>
// DECODE-NEXT: %cache_v_l1 = op.state "cache_v_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// DECODE-NEXT: %v_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi64>
// DECODE-NEXT: [[SETROWS2:%[0-9]+]] = op.set_rows %cache_v_l1, [[VIEW2]], %v_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi64> -> tensor<64x8xf32>
// DECODE-NEXT: [[VIEW3:%[0-9]+]] = op.view %Qcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<1x4x4xf32>
// DECODE-NEXT: [[PERMUTE1:%[0-9]+]] = op.permute [[VIEW3]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<4x1x4xf32>
// DECODE-NEXT: [[VIEW4:%[0-9]+]] = op.view %cache_k_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// DECODE-NEXT: [[PERMUTE2:%[0-9]+]] = op.permute [[VIEW4]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// DECODE-NEXT: [[VIEW5:%[0-9]+]] = op.view %cache_v_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// DECODE-NEXT: [[PERMUTE3:%[0-9]+]] = op.permute [[VIEW5]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// DECODE-NEXT: [[FLASHATTNEXT1:%[0-9]+]] = op.flash_attn_ext [[PERMUTE1]], [[PERMUTE2]], [[PERMUTE3]], %kq_mask {scale = 5.000000e-01 : f64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x1x4xf32>, tensor<2x32x4xf32>, tensor<2x32x4xf32>, tensor<1x32xf32> -> tensor<1x4x4xf32>
// DECODE-NEXT: %kqv_out-1 = op.reshape [[FLASHATTNEXT1]] {name = "kqv_out-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %blk.1.attn_output.weight = op.param "blk.1.attn_output.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj", "weight">} : tensor<16x16xf32>
// DECODE-NEXT: [[MULMAT1:%[0-9]+]] = op.mul_mat %blk.1.attn_output.weight, %kqv_out-1 {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj">} : tensor<16x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %ffn_inp-1 = op.add [[MULMAT1]], %l_out-0 {name = "ffn_inp-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %norm-1_1 = op.rms_norm %ffn_inp-1 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %blk.1.ffn_norm.weight = op.param "blk.1.ffn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm", "weight">} : tensor<16xf32>
// DECODE-NEXT: %ffn_norm-1 = op.mul %norm-1_1, %blk.1.ffn_norm.weight {name = "ffn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %blk.1.ffn_gate.weight = op.param "blk.1.ffn_gate.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate", "weight">} : tensor<40x16xf32>
// DECODE-NEXT: %ffn_gate-1 = op.mul_mat %blk.1.ffn_gate.weight, %ffn_norm-1 {name = "ffn_gate-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// DECODE-NEXT: %blk.1.ffn_up.weight = op.param "blk.1.ffn_up.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.up", "weight">} : tensor<40x16xf32>
// DECODE-NEXT: %ffn_up-1 = op.mul_mat %blk.1.ffn_up.weight, %ffn_norm-1 {name = "ffn_up-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.up">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// DECODE-NEXT: %ffn_swiglu-1 = op.swiglu %ffn_gate-1, %ffn_up-1 {name = "ffn_swiglu-1", op.block = #op.block<"std.nn.mlp", "layers.1.mlp">} : tensor<1x40xf32>, tensor<1x40xf32> -> tensor<1x40xf32>
// DECODE-NEXT: %blk.1.ffn_down.weight = op.param "blk.1.ffn_down.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.down", "weight">} : tensor<16x40xf32>
// DECODE-NEXT: %ffn_out-1 = op.mul_mat %blk.1.ffn_down.weight, %ffn_swiglu-1 {name = "ffn_out-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.down">} : tensor<16x40xf32>, tensor<1x40xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %l_out-1 = op.add %ffn_out-1, %ffn_inp-1 {name = "l_out-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %norm = op.rms_norm %l_out-1 {eps = 1.000000e-05 : f64, name = "norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %output_norm.weight = op.param "output_norm.weight" {op.block = #op.block<"std.nn.norm", "norm", "weight">} : tensor<16xf32>
// DECODE-NEXT: %result_norm = op.mul %norm, %output_norm.weight {name = "result_norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECODE-NEXT: %output.weight = op.param "output.weight" {op.block = #op.block<"std.nn.linear", "lm_head", "weight">} : tensor<32x16xf32>
// DECODE-NEXT: %result_output = op.mul_mat %output.weight, %result_norm {name = "result_output", op.block = #op.block<"std.nn.linear", "lm_head">} : tensor<32x16xf32>, tensor<1x16xf32> -> tensor<1x32xf32>
// DECODE-NEXT: func.return %result_output : tensor<1x32xf32>
// DECODE-NEXT: }
// DECODE-NOT: out_ids

// -----------------------------------------------------------------------------
// Decode without flash attention.

// DECNOFA-LABEL: func.func @decode() -> tensor<1x32xf32> attributes {op.n_ctx = 64 : i64, op.n_kv = 32 : i64} {
// DECNOFA-NEXT: %token_embd.weight = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// DECNOFA-NEXT: %inp_tokens = op.input "tokens" {name = "inp_tokens", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// DECNOFA-NEXT: %embd = op.get_rows %token_embd.weight, %inp_tokens {name = "embd", op.block = #op.block<"std.nn.embedding", "embedding">} : tensor<32x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// DECNOFA: %inp_pos = op.input "positions" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// DECNOFA: %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1x32xf32>
// DECNOFA-NOT: out_ids
// DECNOFA: %norm-1 = op.rms_norm %l_out-0 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %blk.1.attn_norm.weight = op.param "blk.1.attn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention_norm", "weight">} : tensor<16xf32>
// DECNOFA-NEXT: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// DECNOFA-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %Qcur-1_1 = op.reshape %Qcur-1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x16xf32> -> tensor<1x4x4xf32>
// DECNOFA-NEXT: %Qcur-1_2 = op.rope %Qcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32>, tensor<1xi32> -> tensor<1x4x4xf32>
// DECNOFA-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// DECNOFA-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<1x16xf32> -> tensor<1x8xf32>
// DECNOFA-NEXT: %Vcur-1_1 = op.reshape %Vcur-1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x8xf32> -> tensor<1x2x4xf32>
// DECNOFA-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// DECNOFA-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<1x16xf32> -> tensor<1x8xf32>
// DECNOFA-NEXT: %Kcur-1_1 = op.reshape %Kcur-1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x8xf32> -> tensor<1x2x4xf32>
// DECNOFA-NEXT: %Kcur-1_2 = op.rope %Kcur-1_1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32>, tensor<1xi32> -> tensor<1x2x4xf32>
// DECNOFA-NEXT: [[VIEW1:%[0-9]+]] = op.view %Kcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32> -> tensor<1x8xf32>
// DECNOFA-NEXT: %cache_k_l1 = op.state "cache_k_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// DECNOFA-NEXT: %k_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi64>
// DECNOFA-NEXT: [[SETROWS1:%[0-9]+]] = op.set_rows %cache_k_l1, [[VIEW1]], %k_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi64> -> tensor<64x8xf32>
// DECNOFA-NEXT: [[VIEW2:%[0-9]+]] = op.view %Vcur-1_1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x2x4xf32> -> tensor<1x8xf32>
// DECNOFA-NEXT: %cache_v_l1 = op.state "cache_v_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>
// DECNOFA-NEXT: %v_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi64>
// DECNOFA-NEXT: [[SETROWS2:%[0-9]+]] = op.set_rows %cache_v_l1, [[VIEW2]], %v_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi64> -> tensor<64x8xf32>
// DECNOFA-NEXT: [[VIEW5:%[0-9]+]] = op.view %cache_v_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// DECNOFA-NEXT: [[PERMUTE3:%[0-9]+]] = op.permute [[VIEW5]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// DECNOFA-NEXT: [[TRANSPOSE1:%[0-9]+]] = op.transpose [[PERMUTE3]] {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x32x4xf32> -> tensor<2x4x32xf32>
// DECNOFA-NEXT: [[CONT1:%[0-9]+]] = op.cont [[TRANSPOSE1]] {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x4x32xf32> -> tensor<2x4x32xf32>
// DECNOFA-NEXT: [[VIEW4:%[0-9]+]] = op.view %cache_k_l1 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<64x8xf32> -> tensor<32x2x4xf32>
// DECNOFA-NEXT: [[PERMUTE2:%[0-9]+]] = op.permute [[VIEW4]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<32x2x4xf32> -> tensor<2x32x4xf32>
// DECNOFA-NEXT: [[VIEW3:%[0-9]+]] = op.view %Qcur-1_2 {offset = 0 : i64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<1x4x4xf32>
// DECNOFA-NEXT: [[PERMUTE1:%[0-9]+]] = op.permute [[VIEW3]] {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<4x1x4xf32>
// DECNOFA-NEXT: %kq-1 = op.mul_mat [[PERMUTE2]], [[PERMUTE1]] {name = "kq-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x32x4xf32>, tensor<4x1x4xf32> -> tensor<4x1x32xf32>
// DECNOFA-NEXT: %kq_soft_max-1 = op.soft_max %kq-1, %kq_mask {scale = 5.000000e-01 : f64, name = "kq_soft_max-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x1x32xf32>, tensor<1x32xf32> -> tensor<4x1x32xf32>
// DECNOFA-NEXT: %kqv-1 = op.mul_mat [[CONT1]], %kq_soft_max-1 {name = "kqv-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x4x32xf32>, tensor<4x1x32xf32> -> tensor<4x1x4xf32>
// DECNOFA-NEXT: [[PERMUTE4:%[0-9]+]] = op.permute %kqv-1 {dims = array<i64: 1, 0, 2>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<4x1x4xf32> -> tensor<1x4x4xf32>
// DECNOFA-NEXT: %kqv_out-1 = op.cont [[PERMUTE4]] {name = "kqv_out-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<1x4x4xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %blk.1.attn_output.weight = op.param "blk.1.attn_output.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj", "weight">} : tensor<16x16xf32>
// DECNOFA-NEXT: [[MULMAT1:%[0-9]+]] = op.mul_mat %blk.1.attn_output.weight, %kqv_out-1 {op.block = #op.block<"std.nn.linear", "layers.1.attention.o_proj">} : tensor<16x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %ffn_inp-1 = op.add [[MULMAT1]], %l_out-0 {name = "ffn_inp-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %norm-1_1 = op.rms_norm %ffn_inp-1 {eps = 1.000000e-05 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %blk.1.ffn_norm.weight = op.param "blk.1.ffn_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm", "weight">} : tensor<16xf32>
// DECNOFA-NEXT: %ffn_norm-1 = op.mul %norm-1_1, %blk.1.ffn_norm.weight {name = "ffn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.mlp_norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %blk.1.ffn_gate.weight = op.param "blk.1.ffn_gate.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate", "weight">} : tensor<40x16xf32>
// DECNOFA-NEXT: %ffn_gate-1 = op.mul_mat %blk.1.ffn_gate.weight, %ffn_norm-1 {name = "ffn_gate-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.gate">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// DECNOFA-NEXT: %blk.1.ffn_up.weight = op.param "blk.1.ffn_up.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.up", "weight">} : tensor<40x16xf32>
// DECNOFA-NEXT: %ffn_up-1 = op.mul_mat %blk.1.ffn_up.weight, %ffn_norm-1 {name = "ffn_up-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.up">} : tensor<40x16xf32>, tensor<1x16xf32> -> tensor<1x40xf32>
// DECNOFA-NEXT: %ffn_swiglu-1 = op.swiglu %ffn_gate-1, %ffn_up-1 {name = "ffn_swiglu-1", op.block = #op.block<"std.nn.mlp", "layers.1.mlp">} : tensor<1x40xf32>, tensor<1x40xf32> -> tensor<1x40xf32>
// DECNOFA-NEXT: %blk.1.ffn_down.weight = op.param "blk.1.ffn_down.weight" {op.block = #op.block<"std.nn.linear", "layers.1.mlp.down", "weight">} : tensor<16x40xf32>
// DECNOFA-NEXT: %ffn_out-1 = op.mul_mat %blk.1.ffn_down.weight, %ffn_swiglu-1 {name = "ffn_out-1", op.block = #op.block<"std.nn.linear", "layers.1.mlp.down">} : tensor<16x40xf32>, tensor<1x40xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %l_out-1 = op.add %ffn_out-1, %ffn_inp-1 {name = "l_out-1", op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %norm = op.rms_norm %l_out-1 {eps = 1.000000e-05 : f64, name = "norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %output_norm.weight = op.param "output_norm.weight" {op.block = #op.block<"std.nn.norm", "norm", "weight">} : tensor<16xf32>
// DECNOFA-NEXT: %result_norm = op.mul %norm, %output_norm.weight {name = "result_norm", op.block = #op.block<"std.nn.norm", "norm">} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
// DECNOFA-NEXT: %output.weight = op.param "output.weight" {op.block = #op.block<"std.nn.linear", "lm_head", "weight">} : tensor<32x16xf32>
// DECNOFA-NEXT: %result_output = op.mul_mat %output.weight, %result_norm {name = "result_output", op.block = #op.block<"std.nn.linear", "lm_head">} : tensor<32x16xf32>, tensor<1x16xf32> -> tensor<1x32xf32>
// DECNOFA-NEXT: func.return %result_output : tensor<1x32xf32>
// DECNOFA-NEXT: }
// DECNOFA-NOT: out_ids

// -----------------------------------------------------------------------------
// Qwen2: q, k and v biases; lm_head tied to token_embd.weight.

// QWEN2-LABEL: func.func @prefill
// QWEN2: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// QWEN2-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// QWEN2-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// QWEN2-NEXT: %blk.1.attn_q.bias = op.param "blk.1.attn_q.bias" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "bias">} : tensor<16xf32>
// QWEN2-NEXT: %Qcur-1_1 = op.add %Qcur-1, %blk.1.attn_q.bias {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// QWEN2-NEXT: %Qcur-1_2 = op.reshape %Qcur-1_1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x16xf32> -> tensor<5x4x4xf32>
// QWEN2-NEXT: %Qcur-1_3 = op.rope %Qcur-1_2, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+06 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32>, tensor<5xi32> -> tensor<5x4x4xf32>
// QWEN2-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// QWEN2-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// QWEN2-NEXT: %blk.1.attn_v.bias = op.param "blk.1.attn_v.bias" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "bias">} : tensor<8xf32>
// QWEN2-NEXT: %Vcur-1_1 = op.add %Vcur-1, %blk.1.attn_v.bias {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>
// QWEN2-NEXT: %Vcur-1_2 = op.reshape %Vcur-1_1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// QWEN2-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// QWEN2-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// QWEN2-NEXT: %blk.1.attn_k.bias = op.param "blk.1.attn_k.bias" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "bias">} : tensor<8xf32>
// QWEN2-NEXT: %Kcur-1_1 = op.add %Kcur-1, %blk.1.attn_k.bias {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>
// QWEN2-NEXT: %Kcur-1_2 = op.reshape %Kcur-1_1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// QWEN2-NEXT: %Kcur-1_3 = op.rope %Kcur-1_2, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+06 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32>, tensor<5xi32> -> tensor<5x2x4xf32>
// QWEN2-NOT: attn_output.bias
// QWEN2-NOT: "output.weight"
// QWEN2: %token_embd.weight_1 = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// QWEN2-NEXT: %result_output = op.mul_mat %token_embd.weight_1, %result_norm {name = "result_output", op.block = #op.block<"std.nn.linear", "lm_head">} : tensor<32x16xf32>, tensor<1x16xf32> -> tensor<1x32xf32>

// -----------------------------------------------------------------------------
// Qwen3: q and k normalized per head (norm-1, Qcur_normed-1, Kcur_normed-1).

// QWEN3-LABEL: func.func @prefill
// QWEN3: %attn_norm-1 = op.mul %norm-1, %blk.1.attn_norm.weight {name = "attn_norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention_norm">} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// QWEN3-NEXT: %blk.1.attn_q.weight = op.param "blk.1.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj", "weight">} : tensor<16x16xf32>
// QWEN3-NEXT: %Qcur-1 = op.mul_mat %blk.1.attn_q.weight, %attn_norm-1 {name = "Qcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.q_proj">} : tensor<16x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// QWEN3-NEXT: %Qcur-1_1 = op.reshape %Qcur-1 {name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x16xf32> -> tensor<5x4x4xf32>
// QWEN3-NEXT: %norm-1_1 = op.rms_norm %Qcur-1_1 {eps = 1.000000e-06 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention.q_norm">} : tensor<5x4x4xf32> -> tensor<5x4x4xf32>
// QWEN3-NEXT: %blk.1.attn_q_norm.weight = op.param "blk.1.attn_q_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention.q_norm", "weight">} : tensor<4xf32>
// QWEN3-NEXT: %Qcur_normed-1 = op.mul %norm-1_1, %blk.1.attn_q_norm.weight {name = "Qcur_normed-1", op.block = #op.block<"std.nn.norm", "layers.1.attention.q_norm">} : tensor<5x4x4xf32>, tensor<4xf32> -> tensor<5x4x4xf32>
// QWEN3-NEXT: %Qcur-1_2 = op.rope %Qcur_normed-1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+06 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x4x4xf32>, tensor<5xi32> -> tensor<5x4x4xf32>
// QWEN3-NEXT: %blk.1.attn_v.weight = op.param "blk.1.attn_v.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj", "weight">} : tensor<8x16xf32>
// QWEN3-NEXT: %Vcur-1 = op.mul_mat %blk.1.attn_v.weight, %attn_norm-1 {name = "Vcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.v_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// QWEN3-NEXT: %Vcur-1_1 = op.reshape %Vcur-1 {name = "Vcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// QWEN3-NEXT: %blk.1.attn_k.weight = op.param "blk.1.attn_k.weight" {op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj", "weight">} : tensor<8x16xf32>
// QWEN3-NEXT: %Kcur-1 = op.mul_mat %blk.1.attn_k.weight, %attn_norm-1 {name = "Kcur-1", op.block = #op.block<"std.nn.linear", "layers.1.attention.k_proj">} : tensor<8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
// QWEN3-NEXT: %Kcur-1_1 = op.reshape %Kcur-1 {name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x8xf32> -> tensor<5x2x4xf32>
// QWEN3-NEXT: %norm-1_2 = op.rms_norm %Kcur-1_1 {eps = 1.000000e-06 : f64, name = "norm-1", op.block = #op.block<"std.nn.norm", "layers.1.attention.k_norm">} : tensor<5x2x4xf32> -> tensor<5x2x4xf32>
// QWEN3-NEXT: %blk.1.attn_k_norm.weight = op.param "blk.1.attn_k_norm.weight" {op.block = #op.block<"std.nn.norm", "layers.1.attention.k_norm", "weight">} : tensor<4xf32>
// QWEN3-NEXT: %Kcur_normed-1 = op.mul %norm-1_2, %blk.1.attn_k_norm.weight {name = "Kcur_normed-1", op.block = #op.block<"std.nn.norm", "layers.1.attention.k_norm">} : tensor<5x2x4xf32>, tensor<4xf32> -> tensor<5x2x4xf32>
// QWEN3-NEXT: %Kcur-1_2 = op.rope %Kcur_normed-1, %inp_pos {n_dims = 4 : i64, mode = "neox", freq_base = 1.000000e+06 : f64, freq_scale = 1.000000e+00 : f64, name = "Kcur-1", op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<5x2x4xf32>, tensor<5xi32> -> tensor<5x2x4xf32>

// -----------------------------------------------------------------------------
// Llama 3 rope scaling: the factors (1 for the short wavelength, factor 8 for the
// long one) are an op.constant passed to every ROPE as freq_factors.

// LLAMA3-LABEL: func.func @decode() -> tensor<1x32xf32> attributes {op.n_ctx = 128 : i64, op.n_kv = 128 : i64}
// LLAMA3: [[FREQS:%[0-9]+]] = op.constant dense<[1.000000e+00, 8.000000e+00]> : tensor<2xf32> {name = "rope_freqs", op.block = #op.block<"std.model.causal_lm", "">}
// LLAMA3: op.rope %Qcur-0_1, %inp_pos, [[FREQS]] {n_dims = 4 : i64, mode = "neox", freq_base = 5.000000e+05 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-0", op.block = #op.block<"std.attn.grouped_query", "layers.0.attention">} : tensor<1x4x4xf32>, tensor<1xi32>, tensor<2xf32> -> tensor<1x4x4xf32>
// LLAMA3: op.rope %Kcur-0_1, %inp_pos, [[FREQS]] {{.*}} : tensor<1x2x4xf32>, tensor<1xi32>, tensor<2xf32> -> tensor<1x2x4xf32>
// LLAMA3: op.rope %Qcur-1_1, %inp_pos, [[FREQS]]
// LLAMA3: op.rope %Kcur-1_1, %inp_pos, [[FREQS]]
// LLAMA3-NOT: op.constant

// -----------------------------------------------------------------------------
// Dynamic prefill: the token count is `?`; without a start position the whole
// context (MaxSeq) is visible; the last layer still keeps one row.

// DYN-LABEL: func.func @prefill() -> tensor<1x32xf32> attributes {op.n_ctx = 64 : i64, op.n_kv = 64 : i64}
// DYN-NEXT: %token_embd.weight = op.param "token_embd.weight" {op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<32x16xf32>
// DYN-NEXT: %inp_tokens = op.input "tokens" {name = "inp_tokens", op.block = #op.block<"std.model.causal_lm", "">} : tensor<?xi32>
// DYN: %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<?x64xf32>
// DYN: op.flash_attn_ext {{.*}} : tensor<4x?x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<?x64xf32> -> tensor<?x4x4xf32>
// DYN: %inp_out_ids = op.input "out_ids" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// DYN-NEXT: op.get_rows {{%[0-9]+}}, %inp_out_ids {op.block = #op.block<"std.layer.decoder", "layers.1">} : tensor<?x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// DYN: %result_output = {{.*}} -> tensor<1x32xf32>
