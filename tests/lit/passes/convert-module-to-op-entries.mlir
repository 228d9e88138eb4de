// convert-module-to-op on the module level's entries of several sequences (Inputs/, see generate.py):
// one flat row of the call's tokens, KV written at host-computed cells (SET_ROWS), attention in
// streams of the rows or one stream masked to each token's sequence, recurrent state in slots.

// decode_rows with Batch 2: the cache is [Batch * ctx, KvHeads * HeadDim], viewed per row as
// [2, 64, 2, 4]; FLASH_ATTN_EXT gets a leading dim of two streams; every token's logits return.
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode_rows ctx=64 batch=2}' | filecheck %s --check-prefix=ROWS
// ROWS:      func.func @decode_rows() -> tensor<2x32xf32>
// ROWS-SAME:   op.call = {entry = "decode_rows", kv = "cache", streams = "rows", state = "slots", Batch = 2 : i64, MaxSeq = 64 : i64
// ROWS-SAME:   op.args = ["tokens", "positions"], op.arg_types = [tensor<2x1xi32>, tensor<2xi32>]
// ROWS:        %cache_k_l1 = op.state "cache_k_l1" {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<128x8xf32>
// ROWS-NEXT:   %k_idxs_1 = op.input "kv_rows" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi64>
// ROWS-NEXT:   op.set_rows %cache_k_l1, %{{.*}}, %k_idxs_1 {op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<128x8xf32>, tensor<2x8xf32>, tensor<2xi64> -> tensor<128x8xf32>
// ROWS:        op.view %cache_k_l1 {offset = 0 : i64, strides = array<i64: 512, 8, 4, 1>, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<128x8xf32> -> tensor<2x64x2x4xf32>
// ROWS:        op.flash_attn_ext %{{.*}}, %{{.*}}, %{{.*}}, %kq_mask {scale = 5.000000e-01 : f64, op.block = #op.block<"std.attn.grouped_query", "layers.1.attention">} : tensor<2x4x1x4xf32>, tensor<2x2x64x4xf32>, tensor<2x2x64x4xf32>, tensor<2x1x64xf32> -> tensor<2x1x4x4xf32>
// ROWS-NOT:    op.input "out_ids"
// ROWS:        func.return %result_output : tensor<2x32xf32>

// decode_paged: the cells the block table reaches, gathered (GET_ROWS by kv_cells).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode_paged ctx=64 batch=2 page_size=16}' | filecheck %s --check-prefix=PAGED
// PAGED:     func.func @decode_paged() -> tensor<2x32xf32>
// PAGED-SAME:  op.arg_types = [tensor<2x1xi32>, tensor<2xi32>, tensor<2x4xi32>]
// PAGED:       %kv_cells = op.input "kv_cells" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<128xi64>
// PAGED-NEXT:  op.get_rows %cache_k_l0, %kv_cells {op.block = #op.block<"std.attn.grouped_query", "layers.0.attention">} : tensor<128x8xf32>, tensor<128xi64> -> tensor<128x8xf32>
// PAGED:       op.flash_attn_ext {{.*}} : tensor<2x4x1x4xf32>, tensor<2x2x64x4xf32>, tensor<2x2x64x4xf32>, tensor<2x1x64xf32> -> tensor<2x1x4x4xf32>

// prefill_packed: one stream of every token over every cell of the cache, a dynamic P; the
// logits of the `last` rows (GET_ROWS by out_ids).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill_packed ctx=64 batch=2}' | filecheck %s --check-prefix=PACKED
// PACKED:    func.func @prefill_packed() -> tensor<2x32xf32>
// PACKED-SAME: op.arg_types = [tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<2xi32>]
// PACKED:      %kq_mask = op.input "kq_mask" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<?x128xf32>
// PACKED:      op.flash_attn_ext {{.*}} : tensor<4x?x4xf32>, tensor<2x128x4xf32>, tensor<2x128x4xf32>, tensor<?x128xf32> -> tensor<?x4x4xf32>
// PACKED:      %inp_out_ids = op.input "out_ids" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi32>
// PACKED-NEXT: op.get_rows %l_out-1, %inp_out_ids {op.block = #op.block<"std.model.causal_lm", "">} : tensor<?x16xf32>, tensor<2xi32> -> tensor<2x16xf32>

// loss_packed: no cache (the call's own K and V), the targets' log-probabilities fused with the
// output weight, then the weighted mean of their negatives: a scalar.
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=loss_packed ctx=64}' | filecheck %s --check-prefix=LOSS
// LOSS:      func.func @loss_packed() -> tensor<f32>
// LOSS-NOT:    op.state
// LOSS:        %result_log_probs = op.target_log_probs %result_norm, %output.weight, %targets {name = "result_log_probs", op.block = #op.block<"std.model.causal_lm", "">} : tensor<?x16xf32>, tensor<32x16xf32>, tensor<?xi64> -> tensor<?xf32>
// LOSS-NEXT:   %weights = op.input "weights" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<?xf32>
// LOSS-NEXT:   op.mul %result_log_probs, %weights
// LOSS-NEXT:   op.sum_rows
// LOSS-NEXT:   op.sum_rows %weights
// LOSS-NEXT:   op.div
// LOSS-NEXT:   op.scale %{{.*}} {scale = -1.000000e+00 : f64, op.block = #op.block<"std.model.causal_lm", "">}
// LOSS-NEXT:   %result_loss = op.reshape %{{.*}} {name = "result_loss", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xf32> -> tensor<f32>

// generate: a device loop over @greedy_step (decode of every row, then ARGMAX).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=generate ctx=64 steps=4}' | filecheck %s --check-prefix=LOOP
// LOOP:      func.func @generate() -> tensor<1x4xi32>
// LOOP:        %{{.*}} = op.generate @greedy_step %{{.*}}, %{{.*}} {steps = 4 : i64, op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>, tensor<1xi32> -> tensor<1x4xi32>
// LOOP:      func.func private @greedy_step() -> tensor<1xi32>
// LOOP:        %result_ids = op.argmax %result_output {name = "result_ids", op.block = #op.block<"std.model.causal_lm", "">} : tensor<1x32xf32> -> tensor<1xi32>

// sample: a device loop over @sample_step (decode of every row, then op.sample of the entry's
// key and temperature and the loop's draw counter; the other parameters fixed: nothing filtered).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=sample ctx=64 batch=2 steps=4}' | filecheck %s --check-prefix=SAMPLE
// SAMPLE:      func.func @sample() -> tensor<2x4xi32> attributes {{{.*}}op.args = ["token", "pos", "key", "temperature"], op.arg_types = [tensor<2x1xi32>, i32, tensor<2xi64>, f32]}
// SAMPLE:        %[[KEY:.*]] = op.input "key" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi64>
// SAMPLE-NEXT:   %[[TEMP:.*]] = op.input "temperature" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xf32>
// SAMPLE-NEXT:   %{{.*}} = op.generate_sampled @sample_step %{{.*}}, %{{.*}}, %[[KEY]], %[[TEMP]] {steps = 4 : i64, op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi32>, tensor<1xi32>, tensor<2xi64>, tensor<1xf32> -> tensor<2x4xi32>
// SAMPLE:      func.func private @sample_step() -> tensor<2xi32> attributes {{{.*}}op.args = ["token", "pos", "key", "temperature", "step"]
// SAMPLE:        %key = op.input "key" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi64>
// SAMPLE-NEXT:   %step = op.input "step" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xi32>
// SAMPLE-NEXT:   %temperature = op.input "temperature" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1xf32>
// SAMPLE-NEXT:   %sample_top_k = op.constant dense<0> : tensor<1xi32> {name = "sample_top_k", op.block = #op.block<"std.model.causal_lm", "">}
// SAMPLE-NEXT:   %sample_top_p = op.constant dense<1.000000e+00> : tensor<1xf32> {name = "sample_top_p", op.block = #op.block<"std.model.causal_lm", "">}
// SAMPLE:        %result_ids = op.sample %result_output, %key, %step, %temperature, %sample_top_k, %sample_top_p, {{.*}} -> tensor<2xi32>
// SAMPLE-NEXT:   func.return %result_ids : tensor<2xi32>

// The hybrid family's Gated DeltaNet per slot: the conv state's K-1 columns and the tokens in
// one table, each token's window gathered (conv_window), the next conv state (conv_tail) and the
// delta rule's state written back at state_write; GATED_DELTA_NET_SEQ over the rows' sequences.
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=decode_rows ctx=64 batch=2}' | filecheck %s --check-prefix=HYBRID
// HYBRID:      %cache_r_l0 = op.state "cache_r_l0" {op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<2x384xf32>
// HYBRID-NEXT: %state_read = op.input "state_read" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi32>
// HYBRID-NEXT: %conv_states-0 = op.get_rows %cache_r_l0, %state_read {name = "conv_states-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">}
// HYBRID:      %conv_input-0 = op.concat %{{.*}}, %linear_attn_qkv_mixed-0 {axis = 0 : i64, name = "conv_input-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<6x128xf32>, tensor<2x128xf32> -> tensor<8x128xf32>
// HYBRID:      %conv_tail = op.input "conv_tail" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<6xi32>
// HYBRID:      op.set_rows %cache_r_l0, %conv_state_update-0, %state_write
// HYBRID:      %conv_window = op.input "conv_window" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<8xi32>
// HYBRID:      op.ssm_conv %{{.*}}, %blk.0.ssm_conv1d.weight {name = "conv_output_raw-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<2x128x4xf32>, tensor<128x4xf32> -> tensor<2x1x128xf32>
// HYBRID:      %token_seq = op.input "token_seq" {op.block = #op.block<"std.model.causal_lm", "">} : tensor<2xi32>
// HYBRID-NEXT: op.gated_delta_net_seq {{.*}}, %token_seq, %state_predelta-0 {grouped, op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : {{.*}} -> tensor<34x64xf32>
// HYBRID:      %new_state-0 = op.view %{{.*}} {offset = 128 : i64, name = "new_state-0", op.block = #op.block<"std.attn.gated_delta_net", "layers.0.attention">} : tensor<34x64xf32> -> tensor<2x1024xf32>
// HYBRID:      op.set_rows %cache_s_l0, %new_state-0, %state_write

// Every entry's IR round-trips.
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=prefill_slots,step_paged,hidden_packed,generate_until,sample ctx=32 batch=2 page_size=8 tokens=3}' > %t.op.mlir
// RUN: strata-opt %t.op.mlir | diff %t.op.mlir -

// Bad options are one-line errors.
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill_slots ctx=64 batch=2 prompts=3}' 2>&1 | filecheck %s --check-prefix=ERR-SLOTS
// ERR-SLOTS: convert-module-to-op: prefill_slots: M = 3 prompts do not fit the 2 slots (Batch)
