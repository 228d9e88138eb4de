// convert-module-to-op on the Qwen3.5-MoE tiny checkpoint of tests/data/llamacpp
// (Inputs/qwen35moe_4l.mlir: three Gated DeltaNet layers, then gated attention; routed
// experts and a shared expert in every layer), as llama.cpp's qwen35moe.cpp builds it.

// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=prefill tokens=3 start=0 ctx=256}' | filecheck %s --check-prefix=PREFILL
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=prefill ctx=256}' | filecheck %s --check-prefix=DYN
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=256}' | filecheck %s --check-prefix=DECODE

// The lowered IR round-trips.
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=prefill ctx=256}' > %t.op.mlir
// RUN: strata-opt %t.op.mlir | diff %t.op.mlir -

// Layer 0 reads its conv state as llama.cpp's build_rs does: the recurrent state (zeroed
// when a sequence starts), the SCALE by 0 of a new sequence's slot, the slot rs_s_copy
// names, and the copy of the (no) slots after it.
// PREFILL:      %cache_r_l0 = op.state "cache_r_l0" {recurrent, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x384xf32>
// PREFILL-NEXT: [[ROWS:%[0-9]+]] = op.reshape %cache_r_l0 {op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x384xf32> -> tensor<1x384xf32>
// PREFILL-NEXT: [[ZERO:%[0-9]+]] = op.view [[ROWS]] {offset = 0 : i64, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x384xf32> -> tensor<384xf32>
// PREFILL-NEXT: {{%.*}} = op.scale [[ZERO]] {scale = 0.000000e+00 : f64, name = "cache_r_l0 (reshaped) (view) (view)", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">}
// PREFILL-NEXT: %rs_s_copy = op.input "state_copy" {name = "rs_s_copy", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// PREFILL-NEXT: [[MAIN:%[0-9]+]] = op.view %rs_s_copy {offset = 0 : i64, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1xi32> -> tensor<1xi32>
// PREFILL-NEXT: %conv_states-0 = op.get_rows [[ROWS]], [[MAIN]] {name = "conv_states-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">}
// PREFILL-NEXT: [[EXTRA:%[0-9]+]] = op.view %rs_s_copy {offset = 1 : i64, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1xi32> -> tensor<0xi32>
// PREFILL-NEXT: [[NONE:%[0-9]+]] = op.get_rows [[ROWS]], [[EXTRA]] {op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x384xf32>, tensor<0xi32> -> tensor<0x384xf32>
// PREFILL-NEXT: [[AFTER:%[0-9]+]] = op.view %cache_r_l0 {offset = 384 : i64, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x384xf32> -> tensor<0x384xf32>
// PREFILL-NEXT: {{%[0-9]+}} = op.cpy [[NONE]], [[AFTER]]

// The conv window [state | new columns] and its last K-1 columns written back, before the conv.
// PREFILL:      %conv_input-0 = op.concat %conv_states_reshaped-0, %qkv_mixed_transposed-0 {axis = 1 : i64, name = "conv_input-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<128x6xf32>
// PREFILL-NEXT: %conv_state_last-0 = op.view %conv_input-0 {offset = 3 : i64, strides = array<i64: 6, 1>, name = "conv_state_last-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">}
// PREFILL-NEXT: %conv_state_update-0 = op.view %cache_r_l0 {offset = 0 : i64, name = "conv_state_update-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">}
// PREFILL-NEXT: {{%[0-9]+}} = op.cpy %conv_state_last-0, %conv_state_update-0

// HF's weights, converted as llama.cpp's GGUF holds them.
// PREFILL:      op.param "blk.0.ssm_conv1d.weight" {convert = "squeeze", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention", "conv1d">} : tensor<128x4xf32>
// PREFILL:      op.param "blk.0.ssm_a" {convert = "neg_exp", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention", "A_log">} : tensor<4xf32>

// The fused delta rule (value heads in HF's grouped order), its new state written back.
// PREFILL:      [[GDN:%[0-9]+]] = op.gated_delta_net %q_conv_predelta-0, %k_conv_predelta-0, %v_conv_predelta-0, {{%[0-9]+}}, %beta_sigmoid-0, %state_predelta-0 {grouped, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : {{.*}} -> tensor<19x64xf32>
// PREFILL-NEXT: %new_state-0 = op.view [[GDN]] {offset = 192 : i64, name = "new_state-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<19x64xf32> -> tensor<4x16x16xf32>
// PREFILL-NEXT: [[DST:%[0-9]+]] = op.view %cache_s_l0 {offset = 0 : i64, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<1x1024xf32> -> tensor<1x1024xf32>
// PREFILL-NEXT: {{%[0-9]+}} = op.cpy %new_state-0, [[DST]]
// PREFILL-NEXT: %attn_output-0 = op.view [[GDN]] {offset = 0 : i64, name = "attn_output-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<19x64xf32> -> tensor<3x4x16xf32>

// Routing: top-2 of 8 by ARGSORT and a view, the weights renormalised.
// PREFILL:      %ffn_moe_argsort-0 = op.argsort %ffn_moe_probs-0 {order = "desc", name = "ffn_moe_argsort-0", op.block = #op.block<"std.moe.sparse", "layers.0.mlp">} : tensor<3x8xf32> -> tensor<3x8xi32>
// PREFILL-NEXT: %ffn_moe_topk-0 = op.view %ffn_moe_argsort-0 {offset = 0 : i64, strides = array<i64: 8, 1>, name = "ffn_moe_topk-0", op.block = #op.block<"std.moe.sparse", "layers.0.mlp">} : tensor<3x8xi32> -> tensor<3x2xi32>
// PREFILL:      %ffn_moe_weights_sum_clamped-0 = op.clamp %ffn_moe_weights_sum-0 {min = 6.103515625e-05 : f64, max = 0x7ff0000000000000 : f64
// PREFILL:      %ffn_moe_down-0 = op.mul_mat_id %blk.0.ffn_down_exps.weight, %ffn_moe_swiglu-0, %ffn_moe_topk-0 {name = "ffn_moe_down-0", op.block = #op.block<"std.moe.sparse", "layers.0.mlp">} : tensor<8x64x32xf32>, tensor<3x2x32xf32>, tensor<3x2xi32> -> tensor<3x2x64xf32>
// PREFILL:      %ffn_out-0 = op.add %ffn_moe_out-0, %ffn_shexp_gated-0

// The gated attention layer: q and its gate viewed out of q_proj, IMROPE over 8 of 32 dims
// with M-RoPE's four position streams.
// PREFILL:      %Qcur_reshaped-3 = op.view %Qcur_full-3 {offset = 0 : i64, strides = array<i64: 256, 64, 1>, name = "Qcur_reshaped-3", op.block = #op.block<"std.attn.gated", "layers.3.attention">}
// PREFILL:      %inp_pos = op.input "mrope_positions" {name = "inp_pos", op.block = #op.block<"std.model.causal_lm", "">} : tensor<12xi32>
// PREFILL-NEXT: %Qcur-3 = op.rope %Qcur_normed-3, %inp_pos {n_dims = 8 : i64, mode = "imrope", {{.*}}sections = array<i64: 2, 1, 1, 0>
// PREFILL:      %gate_reshaped-3 = op.cont {{%[0-9]+}} {name = "gate_reshaped-3", op.block = #op.block<"std.attn.gated", "layers.3.attention">} : tensor<3x4x32xf32> -> tensor<3x128xf32>
// PREFILL-NEXT: %gate_sigmoid-3 = op.sigmoid %gate_reshaped-3
// PREFILL-NEXT: %attn_gated-3 = op.mul %attn_pregate-3, %gate_sigmoid-3

// The output row is gathered after the final (zero-centred) norm.
// PREFILL:      %output_norm.weight = op.param "output_norm.weight" {convert = "plus_one", op.block = #op.block<"std.nn.norm", "norm", "weight">} : tensor<64xf32>
// PREFILL-NEXT: %h_nextn = op.mul %norm, %output_norm.weight {name = "h_nextn", op.block = #op.block<"std.nn.norm", "norm">} : tensor<3x64xf32>, tensor<64xf32> -> tensor<3x64xf32>
// PREFILL-NEXT: %inp_out_ids = op.input "out_ids" {name = "out_ids", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// PREFILL-NEXT: %result_norm = op.get_rows %h_nextn, %inp_out_ids {name = "result_norm", op.block = #op.block<"std.model.causal_lm", "">}

// A prefill of any length: the window's last K-1 columns and the new state move with the tokens.
// DYN: %conv_state_last-0 = op.view %conv_input-0 {offset = 0 : i64, strides = array<i64: 3, 1>, per_token = array<i64: 1, 1, 0>, name = "conv_state_last-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<128x?xf32> -> tensor<128x3xf32>
// DYN: %new_state-0 = op.view {{%[0-9]+}} {offset = 0 : i64, per_token = array<i64: 64>, name = "new_state-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<?x64xf32> -> tensor<4x16x16xf32>

// A decode step of a running sequence clears no slot: the SCALE's view is empty.
// DECODE:      op.scale {{%[0-9]+}} {scale = 0.000000e+00 : f64, name = "cache_r_l0 (reshaped) (view) (view)", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<0xf32> -> tensor<0xf32>
// DECODE:      %conv_input-0 = op.concat {{.*}} : tensor<128x3xf32>, tensor<128x1xf32> -> tensor<128x4xf32>
