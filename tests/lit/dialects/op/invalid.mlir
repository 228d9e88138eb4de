// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// One verifier error (at least) for every op of the `op` dialect. With
// --verify-diagnostics, strata-opt prints the first line of each diagnostic (the
// message), then the chunk in generic form with the failing op underlined; each
// CHECK anchors the message at the start of a line, so a chunk that verified by
// mistake (printed as IR) fails the test. --parsing-diagnostics does the same for
// parse errors, which carry the file, line and column.

// op.param: the result must be a tensor.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}expected a tensor, got f32
%w = op.param "w" : f32

// -----

// op.param: the weight's name is required.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}attribute 'tensor' expected in operation 'op.param'
%w = "op.param"() : () -> tensor<4xf32>

// -----

// op.param: a conversion is one of a fixed vocabulary ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: unknown conversion 'transpose' (known: plus_one, neg_exp, squeeze, ungroup_rows)
%w = op.param "w" {convert = "transpose"} : tensor<4x4xf32>

// -----

// op.param: a stored format is a ggml block type ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: unknown ggml block format 'q4_k' (known: q4_0,
%w = op.param "w" {format = "q4_k"} : tensor<4x256xf32>

// -----

// ... whose blocks the weight's rows hold whole ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: a q4_K weight's last dim is a multiple of 256, got 4x96
%w = op.param "w" {format = "q4_K"} : tensor<4x96xf32>

// -----

// ... and a block order reorders a whole row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: block_order is [a, b, c] of positive sizes whose product is the row's 64, got [2, 2, 8]
%w = op.param "w" {format = "q8_0", block_order = array<i64: 2, 2, 8>} : tensor<4x64xf32>

// -----

// op.param: a block order goes with a format.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: block_order goes with a format
%w = op.param "w" {block_order = array<i64: 2, 2, 16>} : tensor<4x64xf32>

// -----

// ... with its number of arguments ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: conversion 'plus_one' takes 0 convert_args, got 1
%w = op.param "w" {convert = "plus_one", convert_args = array<i64: 1>} : tensor<4xf32>

// -----

// ... and a source tensor only with a conversion.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: convert_args and source go with a conversion (convert)
%w = op.param "w" {source = "v"} : tensor<4xf32>

// -----

// op.param: ungroup_rows gives G times the rows of the parts it takes.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: ungroup_rows of [2, 3, 4, 16, 16, 32, 32] gives 64 rows, the result type has 128
%w = op.param "w" {source = "v", convert = "ungroup_rows", convert_args = array<i64: 2, 3, 4, 16, 16, 32, 32>} : tensor<128x64xf32>

// -----

// op.state: a state buffer has a static shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.state: a state buffer must have a static shape
%s = op.state "cache_k_l0" : tensor<?x64xf32>

// -----

// op.input: the kind is one of a fixed set.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: unknown kind 'token' (expected one of tokens, positions, kv_rows, kq_mask, out_ids, mrope_positions, state_copy, kv_cells, token_seq, state_read, state_write, conv_window, conv_tail, targets, weights, start, eos, key, temperature, step)
%i = op.input "token" : tensor<5xi32>

// -----

// op.input: tokens, positions, kv_rows and out_ids have rank 1 ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'tokens' input must have rank 1, got 1x5
%i = op.input "tokens" : tensor<1x5xi32>

// -----

// ... and an integer element type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'positions' input must be an integer tensor
%i = op.input "positions" : tensor<5xf32>

// -----

// op.input: the mask is a float matrix.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'kq_mask' input must be a float tensor
%i = op.input "kq_mask" : tensor<5x8xi32>

// -----

// op.input: the mask has rank 2.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'kq_mask' input must have rank 2 or 3, got 40
%i = op.input "kq_mask" : tensor<40xf32>

// -----

// op.constant: the result type is the value's.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.constant: result type must be the value's
%c = "op.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<3xf32>

// -----

// op.constant: the value must be a dense elements attribute (a parse error,
// reported with the file, line and column).
// CHECK: invalid.mlir:[[# @LINE + 3]]:25
// CHECK-NEXT: %c = op.constant "rope" : tensor<2xf32>
// CHECK: op.constant expects a dense elements attribute
%c = op.constant "rope" : tensor<2xf32>

// -----

// op.get_rows: a table with a batch dim takes ids with that batch dim.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: a rank-3 table takes rank-2 ids, got 5
func.func @f(%w: tensor<2x32x16xf32>, %ids: tensor<5xi32>) {
  %e = op.get_rows %w, %ids : tensor<2x32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.get_rows: the ids are integers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: the ids must be an integer tensor, got tensor<5xf32>
func.func @f(%w: tensor<32x16xf32>, %ids: tensor<5xf32>) {
  %e = op.get_rows %w, %ids : tensor<32x16xf32>, tensor<5xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.get_rows: the result is [N, C].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: result must be 5x16, got 5x32
func.func @f(%w: tensor<32x16xf32>, %ids: tensor<5xi32>) {
  %e = op.get_rows %w, %ids : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x32xf32>
  func.return
}

// -----

// op.get_rows: the result is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: result must be float
func.func @f(%w: tensor<32x16xf32>, %ids: tensor<5xi32>) {
  %e = op.get_rows %w, %ids : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xi32>
  func.return
}

// -----

// op.rms_norm: the result has the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rms_norm: result shape must equal the operand's
func.func @f(%x: tensor<5x16xf32>) {
  %n = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xf32> -> tensor<5x8xf32>
  func.return
}

// -----

// op.rms_norm: the operand is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rms_norm: the operand must be a float tensor, got tensor<5x16xi32>
func.func @f(%x: tensor<5x16xi32>) {
  %n = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xi32> -> tensor<5x16xi32>
  func.return
}

// -----

// op.rms_norm: eps is required.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}attribute 'eps' expected in operation 'op.rms_norm'
func.func @f(%x: tensor<5x16xf32>) {
  %n = op.rms_norm %x : tensor<5x16xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.mul: rhs must repeat to lhs (ggml_can_repeat).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul: rhs 3 cannot be broadcast to lhs 5x16
func.func @f(%x: tensor<5x16xf32>, %g: tensor<3xf32>) {
  %y = op.mul %x, %g : tensor<5x16xf32>, tensor<3xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.mul: the result has lhs's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul: result 16 must have the shape of lhs 5x16
func.func @f(%x: tensor<5x16xf32>, %g: tensor<16xf32>) {
  %y = op.mul %x, %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<16xf32>
  func.return
}

// -----

// op.mul: every operand is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}expected a tensor of float elements, got tensor<16xi32>
func.func @f(%x: tensor<5x16xf32>, %g: tensor<16xi32>) {
  %y = op.mul %x, %g : tensor<5x16xf32>, tensor<16xi32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.add: rhs must repeat to lhs; 7 does not divide 16.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.add: rhs 5x7 cannot be broadcast to lhs 5x16
func.func @f(%x: tensor<5x16xf32>, %r: tensor<5x7xf32>) {
  %y = op.add %x, %r : tensor<5x16xf32>, tensor<5x7xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.add: a bigger rhs does not broadcast to a smaller lhs.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.add: rhs 5x16 cannot be broadcast to lhs 16
func.func @f(%x: tensor<16xf32>, %r: tensor<5x16xf32>) {
  %y = op.add %x, %r : tensor<16xf32>, tensor<5x16xf32> -> tensor<16xf32>
  func.return
}

// -----

// op.add: the result is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}expected a tensor of float elements, got tensor<5x16xi32>
func.func @f(%x: tensor<5x16xf32>, %r: tensor<5x16xf32>) {
  %y = op.add %x, %r : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xi32>
  func.return
}

// -----

// op.mul_mat: activations are quantized to Q8_0 or Q8_K ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: act 'q4_K' is not an activation block type (q8_0, q8_K)
func.func @f(%w: tensor<64x256xf32>, %x: tensor<5x256xf32>) {
  %q = op.mul_mat %w, %x {act = "q4_K"} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
  func.return
}

// -----

// ... in whole blocks ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: q8_K activations need rows of a multiple of 256 values, got 64
func.func @f(%w: tensor<16x64xf32>, %x: tensor<5x64xf32>) {
  %q = op.mul_mat %w, %x {act = "q8_K"} : tensor<16x64xf32>, tensor<5x64xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// ... and act_order goes with act.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: act_order goes with act
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids {act_order = array<i64: 2, 2, 16>} : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
  func.return
}
// -----

// op.mul_mat: the contraction (last) dims agree.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: contraction dims differ: 64x16 vs 5x8
func.func @f(%w: tensor<64x16xf32>, %x: tensor<5x8xf32>) {
  %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x8xf32> -> tensor<5x64xf32>
  func.return
}

// -----

// op.mul_mat: the result is [N, M], not [M, N].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: result must be 5x64, got 64x5
func.func @f(%w: tensor<64x16xf32>, %x: tensor<5x16xf32>) {
  %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<64x5xf32>
  func.return
}

// -----

// op.mul_mat: the result is f32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: result must be f32
func.func @f(%w: tensor<64x16xf32>, %x: tensor<5x16xf32>) {
  %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<5x64xbf16>
  func.return
}

// -----

// op.mul_mat: both operands are matrices or batches of them.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: operands must have rank >= 2
func.func @f(%w: tensor<16xf32>, %x: tensor<5x16xf32>) {
  %q = op.mul_mat %w, %x : tensor<16xf32>, tensor<5x16xf32> -> tensor<5xf32>
  func.return
}

// -----

// op.mul_mat: 4 query heads cannot share 3 KV heads.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: batch dims of 3x8x16 do not broadcast to 4x5x16
func.func @f(%k: tensor<3x8x16xf32>, %q: tensor<4x5x16xf32>) {
  %kq = op.mul_mat %k, %q : tensor<3x8x16xf32>, tensor<4x5x16xf32> -> tensor<4x5x8xf32>
  func.return
}

// -----

// op.mul_mat: the weight has no more dims than the activation.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: lhs rank must not exceed rhs rank
func.func @f(%k: tensor<2x8x16xf32>, %q: tensor<5x16xf32>) {
  %kq = op.mul_mat %k, %q : tensor<2x8x16xf32>, tensor<5x16xf32> -> tensor<5x8xf32>
  func.return
}

// -----

// op.mul_mat: the activations are float (the weight may be quantized: integer or packed).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat: rhs must be a float tensor, got tensor<5x16xi32>
func.func @f(%w: tensor<64x16xf32>, %x: tensor<5x16xi32>) {
  %q = op.mul_mat %w, %x : tensor<64x16xf32>, tensor<5x16xi32> -> tensor<5x64xf32>
  func.return
}

// -----

// op.reshape: the element count is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.reshape: element count changes from 320 to 160
func.func @f(%q: tensor<5x64xf32>) {
  %r = op.reshape %q : tensor<5x64xf32> -> tensor<5x4x8xf32>
  func.return
}

// -----

// op.reshape: the element type is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.reshape: element type must not change
func.func @f(%q: tensor<5x64xf32>) {
  %r = op.reshape %q : tensor<5x64xf32> -> tensor<5x4x16xbf16>
  func.return
}

// -----

// op.reshape: at most one dynamic dim.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.reshape: at most one dynamic dim in the result
func.func @f(%q: tensor<?x64xf32>) {
  %r = op.reshape %q : tensor<?x64xf32> -> tensor<?x?x16xf32>
  func.return
}

// -----

// op.view: the offset is not negative.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: offset must be >= 0
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c {offset = -1 : i64} : tensor<256x64xf32> -> tensor<32x64xf32>
  func.return
}

// -----

// op.view: a contiguous window stays inside its source.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: 16384 elements at offset 64 exceed the 16384 of the source
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c {offset = 64 : i64} : tensor<256x64xf32> -> tensor<256x64xf32>
  func.return
}

// -----

// op.view: one stride per result dim.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: one stride per result dim
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c {offset = 0 : i64, strides = array<i64: 64>} : tensor<256x64xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.view: strides are not negative.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: strides must be >= 0
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c {offset = 0 : i64, strides = array<i64: 64, -1>} : tensor<256x64xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.view: the element type is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: element type must not change
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c {offset = 0 : i64} : tensor<256x64xf32> -> tensor<32x64xbf16>
  func.return
}

// -----

// op.view: the offset is required.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}attribute 'offset' expected in operation 'op.view'
func.func @f(%c: tensor<256x64xf32>) {
  %v = op.view %c : tensor<256x64xf32> -> tensor<32x64xf32>
  func.return
}

// -----

// op.permute: dims is a permutation ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.permute: dims [1, 1, 2] is not a permutation of rank 3
func.func @f(%q: tensor<5x4x16xf32>) {
  %p = op.permute %q {dims = array<i64: 1, 1, 2>} : tensor<5x4x16xf32> -> tensor<4x4x16xf32>
  func.return
}

// -----

// ... of the operand's rank.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.permute: dims [1, 0] is not a permutation of rank 3
func.func @f(%q: tensor<5x4x16xf32>) {
  %p = op.permute %q {dims = array<i64: 1, 0>} : tensor<5x4x16xf32> -> tensor<4x5xf32>
  func.return
}

// -----

// op.permute: the result is the permuted shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.permute: result must be 4x5x16
func.func @f(%q: tensor<5x4x16xf32>) {
  %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.permute: the element type is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.permute: element type must not change
func.func @f(%q: tensor<5x4x16xf32>) {
  %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<4x5x16xf16>
  func.return
}

// -----

// op.transpose: rank >= 2.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.transpose: rank must be >= 2
func.func @f(%v: tensor<16xf32>) {
  %t = op.transpose %v : tensor<16xf32> -> tensor<16xf32>
  func.return
}

// -----

// op.transpose: only the last two dims swap.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.transpose: result must swap the last two dims
func.func @f(%v: tensor<2x8x16xf32>) {
  %t = op.transpose %v : tensor<2x8x16xf32> -> tensor<8x2x16xf32>
  func.return
}

// -----

// op.transpose: the element type is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.transpose: element type must not change
func.func @f(%v: tensor<2x8x16xf32>) {
  %t = op.transpose %v : tensor<2x8x16xf32> -> tensor<2x16x8xbf16>
  func.return
}

// -----

// op.cont: the element count is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.cont: element count changes from 256 to 128
func.func @f(%t: tensor<2x16x8xf32>) {
  %c = op.cont %t : tensor<2x16x8xf32> -> tensor<2x16x4xf32>
  func.return
}

// -----

// op.cont: the element type is kept.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.cont: element type must not change
func.func @f(%t: tensor<2x16x8xf32>) {
  %c = op.cont %t : tensor<2x16x8xf32> -> tensor<2x16x8xf16>
  func.return
}

// -----

// op.scale: the result has the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.scale: result shape must equal the operand's
func.func @f(%x: tensor<5x16xf32>) {
  %s = op.scale %x {scale = 2.5e-01 : f64} : tensor<5x16xf32> -> tensor<16x5xf32>
  func.return
}

// -----

// op.scale: the operand is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.scale: the operand must be a float tensor, got tensor<5x16xi32>
func.func @f(%x: tensor<5x16xi32>) {
  %s = op.scale %x {scale = 2.5e-01 : f64} : tensor<5x16xi32> -> tensor<5x16xi32>
  func.return
}

// -----

// op.scale: the scale is a float attribute.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}2 : i64 should be of base attribute float
func.func @f(%x: tensor<5x16xf32>) {
  %s = op.scale %x {scale = 2 : i64} : tensor<5x16xf32> -> tensor<5x16xf32>
  func.return
}

// -----

// op.cpy: source and destination have one element count.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.cpy: element counts differ (80 vs 64)
func.func @f(%x: tensor<5x16xf32>, %dst: tensor<64xbf16>) {
  %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<64xbf16> -> tensor<64xbf16>
  func.return
}

// -----

// op.cpy: the result is the destination.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.cpy: result type must be the destination's
func.func @f(%x: tensor<5x16xf32>, %dst: tensor<80xbf16>) {
  %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<80xbf16> -> tensor<5x16xbf16>
  func.return
}

// -----

// op.argmax: the operand is [R, C].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.argmax: operand must have rank 2
func.func @f(%l: tensor<32xf32>) {
  %i = op.argmax %l : tensor<32xf32> -> tensor<1xi32>
  func.return
}

// -----

// op.argmax: the result is [R] i32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.argmax: result must be tensor<1xi32>
func.func @f(%l: tensor<1x32xf32>) {
  %i = op.argmax %l : tensor<1x32xf32> -> tensor<1xi64>
  func.return
}

// -----

// op.sample: the logits are [rows, vocab].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: logits must be [rows, vocab], got 48
func.func @f(%l: tensor<48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: the key is two int64 (the module level's key: Tensor[2; i64]).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: key must be tensor<2xi64>
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi32>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<2x48xf32>, tensor<2xi32>, tensor<1xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: the token mask has one bit per token: 48 tokens are two i32 words, not three.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: mask must be tensor<2x2xi32> (a bit per token), got tensor<2x3xi32>
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>, %w: tensor<2x3xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t mask %w : tensor<2x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> mask tensor<2x3xi32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: the step is one integer.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: step must be tensor<1xi32> or tensor<1xi64>
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<2xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<2x48xf32>, tensor<2xi64>, tensor<2xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: a parameter is [1] or one value per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: temperature must be [1] or one value per row [2], got 3
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<3xf32>, %k: tensor<1xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<2x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<3xf32>, tensor<1xi32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: top_k is i32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: top_k must be i32, got i64
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi64>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<2x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<2xf32>, tensor<1xi64>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> tensor<2xi32>
  func.return
}

// -----

// op.sample: the result is one i32 per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: result must be tensor<2xi32>
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t : tensor<2x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> tensor<1xi32>
  func.return
}

// -----

// op.sample: the counts are [rows, vocab] i32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sample: prompt_counts must be tensor<2x48xi32>, got tensor<2x47xi32>
func.func @f(%l: tensor<2x48xf32>, %key: tensor<2xi64>, %s: tensor<1xi32>, %t: tensor<2xf32>, %k: tensor<1xi32>, %pc: tensor<2x47xi32>) {
  %i = op.sample %l, %key, %s, %t, %k, %t, %t, %t, %t, %t counts %pc, %pc : tensor<2x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<2xf32>, tensor<1xi32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2x47xi32>, tensor<2x47xi32> -> tensor<2xi32>
  func.return
}

// -----

// op.swiglu: gate, up and result have one shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.swiglu: gate, up and result must have one shape
func.func @f(%g: tensor<5x40xf32>, %u: tensor<5x20xf32>) {
  %h = op.swiglu %g, %u : tensor<5x40xf32>, tensor<5x20xf32> -> tensor<5x40xf32>
  func.return
}

// -----

// op.swiglu: the gate is float.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.swiglu: gate must be a float tensor, got tensor<5x40xi32>
func.func @f(%g: tensor<5x40xi32>, %u: tensor<5x40xi32>) {
  %h = op.swiglu %g, %u : tensor<5x40xi32>, tensor<5x40xi32> -> tensor<5x40xi32>
  func.return
}

// -----

// op.set_rows: dst and src are matrices.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.set_rows: dst and src must have rank 2
func.func @f(%c: tensor<256x64xf32>, %k: tensor<5x4x16xf32>, %rows: tensor<5xi64>) {
  %w = op.set_rows %c, %k, %rows : tensor<256x64xf32>, tensor<5x4x16xf32>, tensor<5xi64> -> tensor<256x64xf32>
  func.return
}

// -----

// op.set_rows: rows of dst and src have one size.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.set_rows: row sizes differ (256x64 vs 5x32)
func.func @f(%c: tensor<256x64xf32>, %k: tensor<5x32xf32>, %rows: tensor<5xi64>) {
  %w = op.set_rows %c, %k, %rows : tensor<256x64xf32>, tensor<5x32xf32>, tensor<5xi64> -> tensor<256x64xf32>
  func.return
}

// -----

// op.set_rows: one row id per src row ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.set_rows: rows must be an integer tensor with one id per src row
func.func @f(%c: tensor<256x64xf32>, %k: tensor<5x64xf32>, %rows: tensor<4xi64>) {
  %w = op.set_rows %c, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<4xi64> -> tensor<256x64xf32>
  func.return
}

// -----

// ... and the ids are integers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}expected a tensor of int elements, got tensor<5xf32>
func.func @f(%c: tensor<256x64xf32>, %k: tensor<5x64xf32>, %rows: tensor<5xf32>) {
  %w = op.set_rows %c, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xf32> -> tensor<256x64xf32>
  func.return
}

// -----

// op.set_rows: the result is the destination buffer.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.set_rows: result type must be dst's
func.func @f(%c: tensor<256x64xf32>, %k: tensor<5x64xf32>, %rows: tensor<5xi64>) {
  %w = op.set_rows %c, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xi64> -> tensor<5x64xf32>
  func.return
}

// -----

// op.soft_max: the result has the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.soft_max: result shape must equal the operand's
func.func @f(%kq: tensor<4x5x8xf32>) {
  %p = op.soft_max %kq {scale = 1.0 : f64} : tensor<4x5x8xf32> -> tensor<4x8x5xf32>
  func.return
}

// -----

// op.soft_max: the mask must broadcast to the scores.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.soft_max: mask 5x7 does not broadcast to 4x5x8
func.func @f(%kq: tensor<4x5x8xf32>, %m: tensor<5x7xf32>) {
  %p = op.soft_max %kq, %m {scale = 1.0 : f64} : tensor<4x5x8xf32>, tensor<5x7xf32> -> tensor<4x5x8xf32>
  func.return
}

// -----

// op.rope: the operand is [S, Heads, D].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: operand must be [S, Heads, D], got 5x64
func.func @f(%q: tensor<5x64xf32>, %pos: tensor<5xi32>) {
  %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x64xf32>, tensor<5xi32> -> tensor<5x64xf32>
  func.return
}

// -----

// op.rope: the result has the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: result shape must equal the operand's
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>) {
  %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x8xf32>
  func.return
}

// -----

// op.rope: one position per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: positions must be an integer tensor [S]
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<4xi32>) {
  %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<4xi32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.rope: the mode is one of ggml's.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: mode must be one of neox, norm, mrope, imrope, got 'gptj'
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>) {
  %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "gptj", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.rope: n_dims is even ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: n_dims 15 must be even and at most D=16
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>) {
  %r = op.rope %q, %pos {n_dims = 15 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// ... and at most the head size.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: n_dims 32 must be even and at most D=16
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>) {
  %r = op.rope %q, %pos {n_dims = 32 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.rope: freq_factors has n_dims / 2 entries.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: freq_factors must be tensor<8xf32>
func.func @f(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>, %ff: tensor<16xf32>) {
  %r = op.rope %q, %pos, %ff {n_dims = 16 : i64, mode = "neox", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<5x4x16xf32>, tensor<5xi32>, tensor<16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: q, k and v have rank 3.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: q, k and v must have rank 3
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<2x8xf32>, %v: tensor<2x8x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<2x8xf32>, tensor<2x8x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: q and k have one head size.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: q and k head sizes differ
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<2x8x8xf32>, %v: tensor<2x8x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: k and v have the same heads and rows.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: k and v must have the same heads and rows
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x7x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x7x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: query heads are a multiple of KV heads (GQA).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: query heads must be a multiple of KV heads
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<3x8x16xf32>, %v: tensor<3x8x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<3x8x16xf32>, tensor<3x8x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: the result is [S, Heads, Dv].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: result must be 5x4x16
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x5x16xf32>
  func.return
}

// -----

// op.flash_attn_ext: the mask is [S, N].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.flash_attn_ext: mask must be [S, N]
func.func @f(%q: tensor<4x5x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>, %m: tensor<5x16xf32>) {
  %o = op.flash_attn_ext %q, %k, %v, %m {scale = 0.25 : f64} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<5x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// -----

// op.get_rows: batched ids have the table's batch dims.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: the ids' batch dims 4 must be the table's 3
func.func @f(%p: tensor<3x8x1xf32>, %ids: tensor<4x2xi32>) {
  %e = op.get_rows %p, %ids : tensor<3x8x1xf32>, tensor<4x2xi32> -> tensor<4x2x1xf32>
  func.return
}

// -----

// op.get_rows: a batched gather gives [B, N, C].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: result must be 3x2x1, got 3x2
func.func @f(%p: tensor<3x8x1xf32>, %ids: tensor<3x2xi32>) {
  %e = op.get_rows %p, %ids : tensor<3x8x1xf32>, tensor<3x2xi32> -> tensor<3x2xf32>
  func.return
}

// -----

// op.get_rows: the table has rows.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows: the table must have rank >= 2, got 32
func.func @f(%w: tensor<32xf32>, %ids: tensor<5xi32>) {
  %e = op.get_rows %w, %ids : tensor<32xf32>, tensor<5xi32> -> tensor<5xf32>
  func.return
}

// -----

// op.input: M-RoPE positions come four per token.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'mrope_positions' input holds 4 positions per token, got 10
%i = op.input "mrope_positions" : tensor<10xi32>

// -----

// op.input: one recurrent-state slot for the one sequence.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.input: a 'state_copy' input has one slot per sequence (1), got 2
%i = op.input "state_copy" : tensor<2xi32>

// -----

// op.div: rhs tiles lhs, as in op.add.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.div: rhs 3x4 cannot be broadcast to lhs 3x2
func.func @f(%x: tensor<3x2xf32>, %s: tensor<3x4xf32>) {
  %w = op.div %x, %s : tensor<3x2xf32>, tensor<3x4xf32> -> tensor<3x2xf32>
  func.return
}

// -----

// op.div: the result has lhs's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.div: result 3x1 must have the shape of lhs 3x2
func.func @f(%x: tensor<3x2xf32>, %s: tensor<3x1xf32>) {
  %w = op.div %x, %s : tensor<3x2xf32>, tensor<3x1xf32> -> tensor<3x1xf32>
  func.return
}

// -----

// op.div: float operands only (a constraint: a parse error with its line).
// CHECK: invalid.mlir:[[# @LINE + 3]]
// CHECK: expected a tensor of float elements, got tensor<3x2xi32>
func.func @f(%x: tensor<3x2xi32>, %s: tensor<3x1xf32>) {
  %w = op.div %x, %s : tensor<3x2xi32>, tensor<3x1xf32> -> tensor<3x2xf32>
  func.return
}

// -----

// op.clamp: min must not exceed max.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.clamp: min 2.0 must not exceed max 1.0
func.func @f(%x: tensor<3x1xf32>) {
  %c = op.clamp %x {min = 2.0 : f64, max = 1.0 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
  func.return
}

// -----

// op.clamp: the bounds are numbers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.clamp: min and max must be numbers
func.func @f(%x: tensor<3x1xf32>) {
  %c = op.clamp %x {min = 0x7FF8000000000000 : f64, max = 1.0 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
  func.return
}

// -----

// op.clamp: both bounds are required.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}attribute 'max' expected in operation 'op.clamp'
func.func @f(%x: tensor<3x1xf32>) {
  %c = op.clamp %x {min = 0.0 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
  func.return
}

// -----

// op.clamp: the result has the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.clamp: result shape must equal the operand's
func.func @f(%x: tensor<3x1xf32>) {
  %c = op.clamp %x {min = 0.0 : f64, max = 1.0 : f64} : tensor<3x1xf32> -> tensor<3xf32>
  func.return
}

// -----

// op.silu: element-wise, same shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.silu: result shape must equal the operand's
func.func @f(%x: tensor<3x128xf32>) {
  %y = op.silu %x : tensor<3x128xf32> -> tensor<128x3xf32>
  func.return
}

// -----

// op.sigmoid: a float operand.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sigmoid: the operand must be a float tensor, got tensor<3x4xi32>
func.func @f(%x: tensor<3x4xi32>) {
  %y = op.sigmoid %x : tensor<3x4xi32> -> tensor<3x4xi32>
  func.return
}

// -----

// op.softplus: a float result.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.softplus: the result must be a float tensor, got tensor<3x4xi32>
func.func @f(%x: tensor<3x4xf32>) {
  %y = op.softplus %x : tensor<3x4xf32> -> tensor<3x4xi32>
  func.return
}

// -----

// op.sum_rows: the last dim becomes 1.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.sum_rows: result must be 3x1, got 3
func.func @f(%x: tensor<3x2xf32>) {
  %s = op.sum_rows %x : tensor<3x2xf32> -> tensor<3xf32>
  func.return
}

// -----

// op.argsort: the order is asc or desc.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.argsort: order must be 'asc' or 'desc', got 'descending'
func.func @f(%p: tensor<3x8xf32>) {
  %s = op.argsort %p {order = "descending"} : tensor<3x8xf32> -> tensor<3x8xi32>
  func.return
}

// -----

// op.argsort: i32 indices of the operand's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.argsort: result must be tensor<3x8xi32>
func.func @f(%p: tensor<3x8xf32>) {
  %s = op.argsort %p {order = "desc"} : tensor<3x8xf32> -> tensor<3x8xi64>
  func.return
}

// -----

// op.repeat: each result dim is a multiple of the source's.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.repeat: 3x2x1x16 cannot be tiled to 3x3x2x16
func.func @f(%q: tensor<3x2x1x16xf32>) {
  %r = op.repeat %q : tensor<3x2x1x16xf32> -> tensor<3x3x2x16xf32>
  func.return
}

// -----

// op.repeat: the element type stays.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.repeat: element type must not change
func.func @f(%q: tensor<2x16xf32>) {
  %r = op.repeat %q : tensor<2x16xf32> -> tensor<4x16xbf16>
  func.return
}

// -----

// op.concat: the axis exists.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.concat: axis 2 is out of range for rank 2
func.func @f(%a: tensor<128x3xf32>, %b: tensor<128x3xf32>) {
  %c = op.concat %a, %b {axis = 2 : i64} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<128x6xf32>
  func.return
}

// -----

// op.concat: the other dims agree.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.concat: 128x3 and 64x3 differ outside axis 1
func.func @f(%a: tensor<128x3xf32>, %b: tensor<64x3xf32>) {
  %c = op.concat %a, %b {axis = 1 : i64} : tensor<128x3xf32>, tensor<64x3xf32> -> tensor<128x6xf32>
  func.return
}

// -----

// op.concat: the joined dim is the sum.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.concat: result must be 128x4, got 128x6
func.func @f(%a: tensor<128x3xf32>, %b: tensor<128x1xf32>) {
  %c = op.concat %a, %b {axis = 1 : i64} : tensor<128x3xf32>, tensor<128x1xf32> -> tensor<128x6xf32>
  func.return
}

// -----

// op.concat: one element type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.concat: operands and result must have one element type
func.func @f(%a: tensor<128x3xf32>, %b: tensor<128x3xbf16>) {
  %c = op.concat %a, %b {axis = 1 : i64} : tensor<128x3xf32>, tensor<128x3xbf16> -> tensor<128x6xf32>
  func.return
}

// -----

// op.mul_mat_id: the experts are [E, M, K].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: the experts must be [E, M, K], got 32x64
func.func @f(%w: tensor<32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
  func.return
}

// -----

// op.mul_mat_id: the ids are i32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: the ids must be [T, U] i32, got tensor<3x2xi64>
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi64>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi64> -> tensor<3x2x32xf32>
  func.return
}

// -----

// op.mul_mat_id: the contraction dims agree.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: contraction dims differ: 8x32x64 vs 3x1x32
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x1x32xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xf32>, tensor<3x1x32xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
  func.return
}

// -----

// op.mul_mat_id: one expert list per token of b.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: ids 4x2 and b 3x1x64 must have one row per token
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<4x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<4x2xi32> -> tensor<4x2x32xf32>
  func.return
}

// -----

// op.mul_mat_id: b's rows per token divide the expert slots.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: the 3 expert slots must be a multiple of b's 2 rows
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x2x64xf32>, %ids: tensor<3x3xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xf32>, tensor<3x2x64xf32>, tensor<3x3xi32> -> tensor<3x3x32xf32>
  func.return
}

// -----

// op.mul_mat_id: the result is [T, U, M].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: result must be 3x2x32, got 3x2x64
func.func @f(%w: tensor<8x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x64xf32>
  func.return
}

// -----

// op.mul_mat_id: the result is f32.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id: result must be f32
func.func @f(%w: tensor<8x32x64xbf16>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids : tensor<8x32x64xbf16>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xbf16>
  func.return
}

// -----

// op.ssm_conv: sx is [C, K-1+T] or [S, C, K-1+T].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.ssm_conv: sx must be [C, K-1+T] or [S, C, K-1+T], got 768
func.func @f(%x: tensor<768xf32>, %w: tensor<128x4xf32>) {
  %y = op.ssm_conv %x, %w : tensor<768xf32>, tensor<128x4xf32> -> tensor<3x128xf32>
  func.return
}

// -----

// op.ssm_conv: sx and the kernel have the same channels.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.ssm_conv: sx 64x6 and kernel 128x4 have different channels
func.func @f(%x: tensor<64x6xf32>, %w: tensor<128x4xf32>) {
  %y = op.ssm_conv %x, %w : tensor<64x6xf32>, tensor<128x4xf32> -> tensor<3x64xf32>
  func.return
}

// -----

// op.ssm_conv: sx holds at least the K-1 columns of the state.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.ssm_conv: sx 128x2 holds fewer than K-1 = 3 columns
func.func @f(%x: tensor<128x2xf32>, %w: tensor<128x4xf32>) {
  %y = op.ssm_conv %x, %w : tensor<128x2xf32>, tensor<128x4xf32> -> tensor<0x128xf32>
  func.return
}

// -----

// op.ssm_conv: the result is token-major [T, C].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.ssm_conv: result must be 3x128, got 128x3
func.func @f(%x: tensor<128x6xf32>, %w: tensor<128x4xf32>) {
  %y = op.ssm_conv %x, %w : tensor<128x6xf32>, tensor<128x4xf32> -> tensor<128x3xf32>
  func.return
}

// -----

// op.gated_delta_net: q and k have one shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: q and k must be [T, Hk, D] alike, got 3x2x16 and 3x4x16
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x4x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x4x1xf32>, %b: tensor<3x4x1xf32>, %s: tensor<4x16x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
  func.return
}

// -----

// op.gated_delta_net: value heads are a multiple of key heads.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: value heads 3 must be a multiple of key heads 2
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x3x16xf32>, %g: tensor<3x3x1xf32>, %b: tensor<3x3x1xf32>, %s: tensor<3x16x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x3x16xf32>, tensor<3x3x1xf32>, tensor<3x3x1xf32>, tensor<3x16x16xf32> -> tensor<19x48xf32>
  func.return
}

// -----

// op.gated_delta_net: one gate per value head (or per channel).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: g must be [T, Hv, 1] or [T, Hv, D] = 3x4x1 or 3x4x16, got 3x2x1
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x2x1xf32>, %b: tensor<3x4x1xf32>, %s: tensor<4x16x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x2x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
  func.return
}

// -----

// op.gated_delta_net: one beta per value head.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: beta must be 3x4x1, got 3x4
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x4x1xf32>, %b: tensor<3x4xf32>, %s: tensor<4x16x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
  func.return
}

// -----

// op.gated_delta_net: the state is [Hv, D, D].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: state must be 4x16x16, got 1024
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x4x1xf32>, %b: tensor<3x4x1xf32>, %s: tensor<1024xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<1024xf32> -> tensor<19x64xf32>
  func.return
}

// -----

// op.gated_delta_net: the packed result holds T rows of outputs, then the state.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.gated_delta_net: result must be 19x64, got 3x64
func.func @f(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x4x1xf32>, %b: tensor<3x4x1xf32>, %s: tensor<4x16x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<3x64xf32>
  func.return
}

// -----

// op.rope: the multi-section modes take four positions per token ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: positions must be an integer tensor [4*S] (four streams), got tensor<3xi32>
func.func @f(%q: tensor<3x4x32xf32>, %pos: tensor<3xi32>) {
  %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "imrope", sections = array<i64: 2, 1, 1, 0>, freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<3xi32> -> tensor<3x4x32xf32>
  func.return
}

// -----

// ... and their sections.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: mode 'imrope' needs `sections` (4 values)
func.func @f(%q: tensor<3x4x32xf32>, %pos: tensor<12xi32>) {
  %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "imrope", freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
  func.return
}

// -----

// op.rope: four sections, as ggml's.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: sections must be 4 values >= 0 with a positive sum, got [2, 1, 1]
func.func @f(%q: tensor<3x4x32xf32>, %pos: tensor<12xi32>) {
  %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "mrope", sections = array<i64: 2, 1, 1>, freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
  func.return
}


// -----

// op.rope: the one-stream modes take no sections.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.rope: mode 'neox' takes no sections
func.func @f(%q: tensor<3x4x32xf32>, %pos: tensor<3xi32>) {
  %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "neox", sections = array<i64: 2, 1, 1, 0>, freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<3xi32> -> tensor<3x4x32xf32>
  func.return
}

// -----

// op.view: per_token grows the offset, and each stride when there are strides.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: per_token holds the offset's growth and one per stride (3 values), got 2
func.func @f(%w: tensor<128x?xf32>) {
  %l = op.view %w {offset = 0 : i64, strides = array<i64: 3, 1>, per_token = array<i64: 1, 1>} : tensor<128x?xf32> -> tensor<128x3xf32>
  func.return
}

// -----

// ... and only the offset's without strides.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: per_token holds the offset's growth (1 value), got 3
func.func @f(%r: tensor<?x64xf32>) {
  %s = op.view %r {offset = 0 : i64, per_token = array<i64: 64, 1, 1>} : tensor<?x64xf32> -> tensor<64xf32>
  func.return
}

// -----

// op.view: views only grow with the tokens.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.view: per_token must be >= 0
func.func @f(%r: tensor<?x64xf32>) {
  %s = op.view %r {offset = 64 : i64, per_token = array<i64: -64>} : tensor<?x64xf32> -> tensor<64xf32>
  func.return
}

// -----

// op.param: a split's parts sum to the piece's dim.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: split parts [8, 8] sum to 16, the result's dim 0 is 32
%w = op.param "w" {split = array<i64: 0, 2, 8, 8>} : tensor<32x16xf32>

// -----

// op.param: a split's axis is a dim of the piece.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.param: split axis 2 is not a dim of 32x16
%w = op.param "w" {split = array<i64: 2, 2>} : tensor<32x16xf32>

// -----

// op.all_reduce: the result is the operand's type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.all_reduce: the result type must be the operand's
%x = op.input "kq_mask" : tensor<5x16xf32>
%r = op.all_reduce %x {group = "tp", ranks = 2 : i64} : tensor<5x16xf32> -> tensor<5x8xf32>

// -----

// op.all_reduce: the group is one the runtime knows.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.all_reduce: unknown group 'dp' (known: tp)
%x = op.input "kq_mask" : tensor<5x16xf32>
%r = op.all_reduce %x {group = "dp", ranks = 2 : i64} : tensor<5x16xf32> -> tensor<5x16xf32>

// -----

// op.all_gather: the ranks' pieces along the axis make the result.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.all_gather: 2 ranks of 5x16 along axis 1 give 5x32, got 5x48
%x = op.input "kq_mask" : tensor<5x16xf32>
%g = op.all_gather %x {group = "tp", ranks = 2 : i64, axis = 1 : i64} : tensor<5x16xf32> -> tensor<5x48xf32>

// -----

// op.get_rows_sharded: one row of the table per id.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.get_rows_sharded: result must be 5x16, got 4x16
%w = op.param "w" : tensor<24x16xf32>
%ids = op.input "tokens" : tensor<5xi32>
%e = op.get_rows_sharded %w, %ids {group = "tp", ranks = 2 : i64} : tensor<24x16xf32>, tensor<5xi32> -> tensor<4x16xf32>

// -----

// op.mul_mat_id_sharded: MUL_MAT_ID's shapes, over this rank's experts.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id_sharded: result must be 3x2x32, got 3x2x16
func.func @f(%w: tensor<4x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id_sharded %w, %x, %ids {group = "tp", ranks = 2 : i64} : tensor<4x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x16xf32>
  func.return
}

// -----

// op.mul_mat_id_sharded: a group of the ranks, as every collective.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}op.mul_mat_id_sharded: unknown group 'dp' (known: tp)
func.func @f(%w: tensor<4x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>) {
  %g = op.mul_mat_id_sharded %w, %x, %ids {group = "dp", ranks = 2 : i64} : tensor<4x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
  func.return
}

// -----

// Malformed syntax: a missing comma. The parse error names the file, the line
// and the column, and shows the line with a caret under the offending token.
func.func @f(%x: tensor<5x16xf32>, %g: tensor<16xf32>) {
  // CHECK: invalid.mlir:[[# @LINE + 5]]:18
  // CHECK-NEXT: {{^}}  %y = op.mul %x %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  // CHECK-NEXT: {{^}}                 ^^
  // CHECK-NEXT: {{^}}                 Expected ','
  // CHECK-NOT: {{.}}
  %y = op.mul %x %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  func.return
}
