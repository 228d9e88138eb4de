// RUN: strata-opt %s | strata-opt | filecheck %s
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -

// Round trip of the ops that the module level's entries of several sequences bring: GATED_DELTA_NET over
// several sequences (with and without their states), the targets' log-probabilities, the device
// loops (a module with their step function), FLASH_ATTN_EXT with a leading dim of streams, and
// the host inputs those entries read.

// CHECK-LABEL: func.func @gated_delta_net_seq(
// CHECK-NEXT:    %r = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq, %s : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32>, tensor<2x4x16x16xf32> -> tensor<37x64xf32>
// CHECK-NEXT:    %f = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq {grouped, name = "attn_output-0"} : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32> -> tensor<5x64xf32>
// CHECK-NEXT:    func.return
func.func @gated_delta_net_seq(%q: tensor<5x2x16xf32>, %k: tensor<5x2x16xf32>, %v: tensor<5x4x16xf32>, %g: tensor<5x4x1xf32>, %b: tensor<5x4x1xf32>, %seq: tensor<5xi32>, %s: tensor<2x4x16x16xf32>) {
  %r = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq, %s : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32>, tensor<2x4x16x16xf32> -> tensor<37x64xf32>
  %f = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq {grouped, name = "attn_output-0"} : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32> -> tensor<5x64xf32>
  func.return
}

// CHECK-LABEL: func.func @target_log_probs(
// CHECK-NEXT:    %lp = op.target_log_probs %x, %w, %t {name = "result_log_probs"} : tensor<?x64xf32>, tensor<128x64xbf16>, tensor<?xi64> -> tensor<?xf32>
// CHECK-NEXT:    func.return
func.func @target_log_probs(%x: tensor<?x64xf32>, %w: tensor<128x64xbf16>, %t: tensor<?xi64>) {
  %lp = op.target_log_probs %x, %w, %t {name = "result_log_probs"} : tensor<?x64xf32>, tensor<128x64xbf16>, tensor<?xi64> -> tensor<?xf32>
  func.return
}

// CHECK-LABEL: func.func @flash_attn_streams(
// CHECK-NEXT:    %o = op.flash_attn_ext %q, %k, %v, %m {scale = 2.500000e-01 : f64} : tensor<3x4x1x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x1x8xf32> -> tensor<3x1x4x16xf32>
// CHECK-NEXT:    func.return
func.func @flash_attn_streams(%q: tensor<3x4x1x16xf32>, %k: tensor<3x2x8x16xf32>, %v: tensor<3x2x8x16xf32>, %m: tensor<3x1x8xf32>) {
  %o = op.flash_attn_ext %q, %k, %v, %m {scale = 2.500000e-01 : f64} : tensor<3x4x1x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x1x8xf32> -> tensor<3x1x4x16xf32>
  func.return
}

// CHECK-LABEL: func.func @inputs(
// CHECK-NEXT:    %c = op.input "kv_cells" : tensor<32xi64>
// CHECK-NEXT:    %m = op.input "kq_mask" : tensor<2x1x16xf32>
// CHECK-NEXT:    %s = op.input "token_seq" : tensor<?xi32>
// CHECK-NEXT:    %r = op.input "state_read" : tensor<2xi32>
// CHECK-NEXT:    %w = op.input "state_write" : tensor<2xi64>
// CHECK-NEXT:    %cw = op.input "conv_window" : tensor<?xi32>
// CHECK-NEXT:    %ct = op.input "conv_tail" : tensor<6xi32>
// CHECK-NEXT:    %t = op.input "targets" : tensor<?xi64>
// CHECK-NEXT:    %wt = op.input "weights" : tensor<?xf32>
// CHECK-NEXT:    %p = op.input "start" : tensor<1xi32>
// CHECK-NEXT:    %e = op.input "eos" : tensor<1xi32>
// CHECK-NEXT:    %key = op.input "key" : tensor<2xi64>
// CHECK-NEXT:    %temp = op.input "temperature" : tensor<1xf32>
// CHECK-NEXT:    %n = op.input "step" : tensor<1xi32>
// CHECK-NEXT:    func.return
func.func @inputs() {
  %c = op.input "kv_cells" : tensor<32xi64>
  %m = op.input "kq_mask" : tensor<2x1x16xf32>
  %s = op.input "token_seq" : tensor<?xi32>
  %r = op.input "state_read" : tensor<2xi32>
  %w = op.input "state_write" : tensor<2xi64>
  %cw = op.input "conv_window" : tensor<?xi32>
  %ct = op.input "conv_tail" : tensor<6xi32>
  %t = op.input "targets" : tensor<?xi64>
  %wt = op.input "weights" : tensor<?xf32>
  %p = op.input "start" : tensor<1xi32>
  %e = op.input "eos" : tensor<1xi32>
  %key = op.input "key" : tensor<2xi64>
  %temp = op.input "temperature" : tensor<1xf32>
  %n = op.input "step" : tensor<1xi32>
  func.return
}

// A device loop and its step (here a stand-in that returns its tokens: the loop only needs the
// step's ids [Batch]).
// CHECK-LABEL: func.func private @greedy_step(
// CHECK-LABEL: func.func @generate(
// CHECK-NEXT:    %t = op.input "tokens" : tensor<2xi32>
// CHECK-NEXT:    %p = op.input "start" : tensor<1xi32>
// CHECK-NEXT:    %ids = op.generate @greedy_step %t, %p {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32> -> tensor<2x8xi32>
// CHECK-NEXT:    func.return %ids : tensor<2x8xi32>
// CHECK-LABEL: func.func @generate_until(
// CHECK:         %ids, %n = op.generate_until @greedy_step %t, %p, %e {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<1xi32> -> tensor<2x8xi32>, tensor<i32>
// CHECK-NEXT:    func.return %ids, %n : tensor<2x8xi32>, tensor<i32>
// CHECK-LABEL: func.func @sample(
// CHECK:         %ids = op.generate_sampled @greedy_step %t, %p, %k, %temp {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<2xi64>, tensor<1xf32> -> tensor<2x8xi32>
// CHECK-NEXT:    func.return %ids : tensor<2x8xi32>
func.func private @greedy_step() -> tensor<2xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  func.return %t : tensor<2xi32>
}
func.func @generate() -> tensor<2x8xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %ids = op.generate @greedy_step %t, %p {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32> -> tensor<2x8xi32>
  func.return %ids : tensor<2x8xi32>
}
func.func @generate_until() -> (tensor<2x8xi32>, tensor<i32>) {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %e = op.input "eos" : tensor<1xi32>
  %ids, %n = op.generate_until @greedy_step %t, %p, %e {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<1xi32> -> tensor<2x8xi32>, tensor<i32>
  func.return %ids, %n : tensor<2x8xi32>, tensor<i32>
}
func.func @sample() -> tensor<2x8xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %k = op.input "key" : tensor<2xi64>
  %temp = op.input "temperature" : tensor<1xf32>
  %ids = op.generate_sampled @greedy_step %t, %p, %k, %temp {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<2xi64>, tensor<1xf32> -> tensor<2x8xi32>
  func.return %ids : tensor<2x8xi32>
}
