// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// One verifier error (at least) for each op that the module level's entries of several sequences bring
// (see invalid.mlir for how the checks anchor).

// op.gated_delta_net_seq: one sequence id per token.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net_seq: seq must be tensor<5xi32>, got tensor<4xi32>
func.func @f(%q: tensor<5x2x16xf32>, %k: tensor<5x2x16xf32>, %v: tensor<5x4x16xf32>, %g: tensor<5x4x1xf32>, %b: tensor<5x4x1xf32>, %seq: tensor<4xi32>) {
  %f = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<4xi32> -> tensor<5x64xf32>
  func.return
}

// -----

// op.gated_delta_net_seq: the states are [G, Hv, D, D].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net_seq: state must be [G, 4x16x16], got 2x4x16
func.func @f(%q: tensor<5x2x16xf32>, %k: tensor<5x2x16xf32>, %v: tensor<5x4x16xf32>, %g: tensor<5x4x1xf32>, %b: tensor<5x4x1xf32>, %seq: tensor<5xi32>, %s: tensor<2x4x16xf32>) {
  %r = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq, %s : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32>, tensor<2x4x16xf32> -> tensor<37x64xf32>
  func.return
}

// -----

// op.gated_delta_net_seq: with states the result is the outputs then G*D rows of them.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net_seq: result must be 37x64, got 5x64
func.func @f(%q: tensor<5x2x16xf32>, %k: tensor<5x2x16xf32>, %v: tensor<5x4x16xf32>, %g: tensor<5x4x1xf32>, %b: tensor<5x4x1xf32>, %seq: tensor<5xi32>, %s: tensor<2x4x16x16xf32>) {
  %r = op.gated_delta_net_seq %q, %k, %v, %g, %b, %seq, %s : tensor<5x2x16xf32>, tensor<5x2x16xf32>, tensor<5x4x16xf32>, tensor<5x4x1xf32>, tensor<5x4x1xf32>, tensor<5xi32>, tensor<2x4x16x16xf32> -> tensor<5x64xf32>
  func.return
}

// -----

// op.target_log_probs: x and the weight share H.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.target_log_probs: x 5x64 and the weight 128x32 have different H
func.func @f(%x: tensor<5x64xf32>, %w: tensor<128x32xf32>, %t: tensor<5xi64>) {
  %lp = op.target_log_probs %x, %w, %t : tensor<5x64xf32>, tensor<128x32xf32>, tensor<5xi64> -> tensor<5xf32>
  func.return
}

// -----

// op.target_log_probs: one f32 log-probability per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.target_log_probs: result must be tensor<5xf32>, got tensor<5x128xf32>
func.func @f(%x: tensor<5x64xf32>, %w: tensor<128x64xf32>, %t: tensor<5xi64>) {
  %lp = op.target_log_probs %x, %w, %t : tensor<5x64xf32>, tensor<128x64xf32>, tensor<5xi64> -> tensor<5x128xf32>
  func.return
}

// -----

// op.flash_attn_ext: every operand has the streams.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: q, k and v must have the same streams
func.func @f(%q: tensor<3x4x1x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 2.500000e-01 : f64} : tensor<3x4x1x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<3x1x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: with streams the mask is [R, S, N].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: mask must be [S, N] ([R, S, N] with streams): 3x1x8, got 1x8
func.func @f(%q: tensor<3x4x1x16xf32>, %k: tensor<3x2x8x16xf32>, %v: tensor<3x2x8x16xf32>, %m: tensor<1x8xf32>) {
  %o = op.flash_attn_ext %q, %k, %v, %m {scale = 2.500000e-01 : f64} : tensor<3x4x1x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>, tensor<1x8xf32> -> tensor<3x1x4x16xf32>
  func.return
}

// -----

// op.input: a key holds two numbers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'key' input holds 2 value(s), got 3
%k = op.input "key" : tensor<3xi64>

// -----

// op.input: the loss weights are floats.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'weights' input must be a float tensor
%w = op.input "weights" : tensor<4xi32>

// -----

// op.generate: the step function must exist.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.generate: no step function @nowhere
func.func @generate() -> tensor<2x8xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %ids = op.generate @nowhere %t, %p {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32> -> tensor<2x8xi32>
  func.return %ids : tensor<2x8xi32>
}

// -----

// op.generate: one column of ids per step.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.generate: the ids must be tensor<2x8xi32>, got tensor<2x4xi32>
func.func @generate() -> tensor<2x4xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %ids = op.generate @generate %t, %p {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32> -> tensor<2x4xi32>
  func.return %ids : tensor<2x4xi32>
}

// -----

// op.generate_until: the step returns one id per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.generate_until: the step @step must return the chosen ids tensor<2xi32>
func.func private @step() -> tensor<2x48xf32> {
  %m = op.input "kq_mask" : tensor<2x48xf32>
  func.return %m : tensor<2x48xf32>
}
func.func @until() -> (tensor<2x8xi32>, tensor<i32>) {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %e = op.input "eos" : tensor<1xi32>
  %ids, %n = op.generate_until @step %t, %p, %e {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<1xi32> -> tensor<2x8xi32>, tensor<i32>
  func.return %ids, %n : tensor<2x8xi32>, tensor<i32>
}

// -----

// op.generate_sampled: the key is two int64.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.generate_sampled: key must be tensor<2xi64>, got tensor<2xi32>
func.func private @step() -> tensor<2xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  func.return %t : tensor<2xi32>
}
func.func @sample() -> tensor<2x8xi32> {
  %t = op.input "tokens" : tensor<2xi32>
  %p = op.input "start" : tensor<1xi32>
  %k = op.input "tokens" : tensor<2xi32>
  %temp = op.input "temperature" : tensor<1xf32>
  %ids = op.generate_sampled @step %t, %p, %k, %temp {steps = 8 : i64} : tensor<2xi32>, tensor<1xi32>, tensor<2xi32>, tensor<1xf32> -> tensor<2x8xi32>
  func.return %ids : tensor<2x8xi32>
}
