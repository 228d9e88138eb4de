// RUN: strata-opt %s | strata-opt | filecheck %s
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -

// Round trip of every op of the `op` dialect: parse, print, parse again, print.
// Each op appears in its custom form, with and without the optional `name`
// attribute, and with its optional operands both present and absent
// (op.soft_max's mask, op.rope's freq_factors, op.flash_attn_ext's mask) and its optional
// attributes (op.view's strides, op.rope's sections, op.gated_delta_net's grouped).

// CHECK-LABEL: func.func @param(
// CHECK-NEXT:    %w = op.param "blk.0.attn_q.weight" : tensor<64x16xbf16>
// CHECK-NEXT:    %wn = op.param "token_embd.weight" {name = "embd_table"} : tensor<32x16xf16>
// CHECK-NEXT:    %wf = op.param "output_norm.weight" : tensor<16xf32>
// CHECK-NEXT:    %wc = op.param "output_norm.weight" {convert = "plus_one"} : tensor<16xf32>
// CHECK-NEXT:    %wa = op.param "blk.0.ssm_a" {convert = "neg_exp"} : tensor<4xf32>
// CHECK-NEXT:    %ws = op.param "blk.0.ssm_conv1d.weight" {convert = "squeeze"} : tensor<128x4xbf16>
// CHECK-NEXT:    %wq = op.param "blk.0.attn_qkv.weight" {source = "blk.0.ssm_in.weight", convert = "ungroup_rows", convert_args = array<i64: 2, 0, 3, 16, 16, 32, 32>} : tensor<128x64xbf16>
// CHECK-NEXT:    func.return
func.func @param() {
  %w = op.param "blk.0.attn_q.weight" : tensor<64x16xbf16>
  %wn = op.param "token_embd.weight" {name = "embd_table"} : tensor<32x16xf16>
  %wf = op.param "output_norm.weight" : tensor<16xf32>
  %wc = op.param "output_norm.weight" {convert = "plus_one"} : tensor<16xf32>
  %wa = op.param "blk.0.ssm_a" {convert = "neg_exp"} : tensor<4xf32>
  %ws = op.param "blk.0.ssm_conv1d.weight" {convert = "squeeze"} : tensor<128x4xbf16>
  %wq = op.param "blk.0.attn_qkv.weight" {source = "blk.0.ssm_in.weight", convert = "ungroup_rows", convert_args = array<i64: 2, 0, 3, 16, 16, 32, 32>} : tensor<128x64xbf16>
  func.return
}

// CHECK-LABEL: func.func @state(
// CHECK-NEXT:    %k = op.state "cache_k_l0" : tensor<256x64xf32>
// CHECK-NEXT:    %v = op.state "cache_v_l0" {name = "cache_v_l0"} : tensor<256x64xbf16>
// CHECK-NEXT:    %r = op.state "cache_r_l0" {recurrent} : tensor<1x384xf32>
// CHECK-NEXT:    func.return
func.func @state() {
  %k = op.state "cache_k_l0" : tensor<256x64xf32>
  %v = op.state "cache_v_l0" {name = "cache_v_l0"} : tensor<256x64xbf16>
  %r = op.state "cache_r_l0" {recurrent} : tensor<1x384xf32>
  func.return
}

// CHECK-LABEL: func.func @input(
// CHECK-NEXT:    %t = op.input "tokens" {name = "inp_tokens"} : tensor<5xi32>
// CHECK-NEXT:    %p = op.input "positions" : tensor<5xi32>
// CHECK-NEXT:    %r = op.input "kv_rows" : tensor<5xi64>
// CHECK-NEXT:    %m = op.input "kq_mask" : tensor<5x256xf32>
// CHECK-NEXT:    %mh = op.input "kq_mask" : tensor<5x256xf16>
// CHECK-NEXT:    %o = op.input "out_ids" : tensor<1xi32>
// CHECK-NEXT:    %d = op.input "tokens" : tensor<?xi32>
// CHECK-NEXT:    %dm = op.input "kq_mask" : tensor<?x?xf32>
// CHECK-NEXT:    func.return
func.func @input() {
  %t = op.input "tokens" {name = "inp_tokens"} : tensor<5xi32>
  %p = op.input "positions" : tensor<5xi32>
  %r = op.input "kv_rows" : tensor<5xi64>
  %m = op.input "kq_mask" : tensor<5x256xf32>
  %mh = op.input "kq_mask" : tensor<5x256xf16>
  %o = op.input "out_ids" : tensor<1xi32>
  %d = op.input "tokens" : tensor<?xi32>
  %dm = op.input "kq_mask" : tensor<?x?xf32>
  func.return
}

// CHECK-LABEL: func.func @constant(
// CHECK-NEXT:    %f = op.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %s = op.constant dense<5.000000e-01> : tensor<4xf32>
// CHECK-NEXT:    %i = op.constant dense<[1, 2, 3]> : tensor<3xi32> {name = "rope_freqs"}
// CHECK-NEXT:    func.return
func.func @constant() {
  %f = op.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %s = op.constant dense<0.5> : tensor<4xf32>
  %i = op.constant dense<[1, 2, 3]> : tensor<3xi32> {name = "rope_freqs"}
  func.return
}

// CHECK-LABEL: func.func @get_rows(
// CHECK-NEXT:    %e = op.get_rows %w, %ids {name = "embd"} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
// CHECK-NEXT:    %r = op.get_rows %x, %out : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
// CHECK-NEXT:    %d = op.get_rows %w, %dids : tensor<32x16xf32>, tensor<?xi64> -> tensor<?x16xf32>
// CHECK-NEXT:    func.return
func.func @get_rows(%w: tensor<32x16xf32>, %ids: tensor<5xi32>, %x: tensor<5x16xf32>, %out: tensor<1xi32>, %dids: tensor<?xi64>) {
  %e = op.get_rows %w, %ids {name = "embd"} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
  %r = op.get_rows %x, %out : tensor<5x16xf32>, tensor<1xi32> -> tensor<1x16xf32>
  %d = op.get_rows %w, %dids : tensor<32x16xf32>, tensor<?xi64> -> tensor<?x16xf32>
  func.return
}

// CHECK-LABEL: func.func @rms_norm(
// CHECK-NEXT:    %n = op.rms_norm %x {eps = 1.000000e-06 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %m = op.rms_norm %h {eps = 1.000000e-05 : f64, name = "norm-0"} : tensor<5x4x16xbf16> -> tensor<5x4x16xbf16>
// CHECK-NEXT:    func.return
func.func @rms_norm(%x: tensor<5x16xf32>, %h: tensor<5x4x16xbf16>) {
  %n = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
  %m = op.rms_norm %h {eps = 1.0e-05 : f64, name = "norm-0"} : tensor<5x4x16xbf16> -> tensor<5x4x16xbf16>
  func.return
}

// CHECK-LABEL: func.func @mul(
// CHECK-NEXT:    %y = op.mul %x, %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %z = op.mul %h, %g {name = "Qcur_normed-0"} : tensor<5x4x16xf32>, tensor<16xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    %s = op.mul %x, %x : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    func.return
func.func @mul(%x: tensor<5x16xf32>, %g: tensor<16xf32>, %h: tensor<5x4x16xf32>) {
  %y = op.mul %x, %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  %z = op.mul %h, %g {name = "Qcur_normed-0"} : tensor<5x4x16xf32>, tensor<16xf32> -> tensor<5x4x16xf32>
  %s = op.mul %x, %x : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
  func.return
}

// CHECK-LABEL: func.func @add(
// CHECK-NEXT:    %y = op.add %x, %r {name = "ffn_inp-0"} : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %z = op.add %x, %b : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %w = op.add %d, %b : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
// CHECK-NEXT:    func.return
func.func @add(%x: tensor<5x16xf32>, %r: tensor<5x16xf32>, %b: tensor<16xf32>, %d: tensor<?x16xf32>) {
  %y = op.add %x, %r {name = "ffn_inp-0"} : tensor<5x16xf32>, tensor<5x16xf32> -> tensor<5x16xf32>
  %z = op.add %x, %b : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  %w = op.add %d, %b : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  func.return
}

// Element types from the dtype table: fp8 and int4 weights, as the blueprint and
// fixed-point levels refine a weight's type in place, feed MUL_MAT like any weight.
// CHECK-LABEL: func.func @quantized_weights(
// CHECK-NEXT:    %w8 = op.param "blk.0.ffn_up.weight" : tensor<64x16xf8E4M3FN>
// CHECK-NEXT:    %w5 = op.param "blk.0.ffn_gate.weight" : tensor<64x16xf8E5M2>
// CHECK-NEXT:    %w4 = op.param "blk.0.ffn_down.weight" : tensor<64x16xi4>
// CHECK-NEXT:    %y8 = op.mul_mat %w8, %x : tensor<64x16xf8E4M3FN>, tensor<5x16xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    %y4 = op.mul_mat %w4, %x : tensor<64x16xi4>, tensor<5x16xf32> -> tensor<5x64xf32>
func.func @quantized_weights(%x: tensor<5x16xf32>) {
  %w8 = op.param "blk.0.ffn_up.weight" : tensor<64x16xf8E4M3FN>
  %w5 = op.param "blk.0.ffn_gate.weight" : tensor<64x16xf8E5M2>
  %w4 = op.param "blk.0.ffn_down.weight" : tensor<64x16xi4>
  %y8 = op.mul_mat %w8, %x : tensor<64x16xf8E4M3FN>, tensor<5x16xf32> -> tensor<5x64xf32>
  %y4 = op.mul_mat %w4, %x : tensor<64x16xi4>, tensor<5x16xf32> -> tensor<5x64xf32>
  func.return
}

// A GGUF's block-quantized weights: the values dequantized, the format named; ggml-cpu's
// quantized activations on the products that read them.
// CHECK-LABEL: func.func @ggml_blocks(
// CHECK-NEXT:    %wk = op.param "blk.0.attn_q.weight" {format = "q4_K"} : tensor<64x256xf32>
// CHECK-NEXT:    %wo = op.param "blk.0.ssm_out.weight" {format = "q8_0", block_order = array<i64: 2, 4, 32>} : tensor<64x256xf32>
// CHECK-NEXT:    %we = op.param "blk.0.ffn_up_exps.weight" {format = "iq4_xs"} : tensor<8x32x256xf32>
// CHECK-NEXT:    %yk = op.mul_mat %wk, %x {act = "q8_K"} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    %yo = op.mul_mat %wo, %x {act = "q8_0", act_order = array<i64: 2, 4, 32>} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    %ye = op.mul_mat_id %we, %xe, %ids {act = "q8_K"} : tensor<8x32x256xf32>, tensor<5x1x256xf32>, tensor<5x2xi32> -> tensor<5x2x32xf32>
// CHECK-NEXT:    func.return
func.func @ggml_blocks(%x: tensor<5x256xf32>, %xe: tensor<5x1x256xf32>, %ids: tensor<5x2xi32>) {
  %wk = op.param "blk.0.attn_q.weight" {format = "q4_K"} : tensor<64x256xf32>
  %wo = op.param "blk.0.ssm_out.weight" {format = "q8_0", block_order = array<i64: 2, 4, 32>} : tensor<64x256xf32>
  %we = op.param "blk.0.ffn_up_exps.weight" {format = "iq4_xs"} : tensor<8x32x256xf32>
  %yk = op.mul_mat %wk, %x {act = "q8_K"} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
  %yo = op.mul_mat %wo, %x {act = "q8_0", act_order = array<i64: 2, 4, 32>} : tensor<64x256xf32>, tensor<5x256xf32> -> tensor<5x64xf32>
  %ye = op.mul_mat_id %we, %xe, %ids {act = "q8_K"} : tensor<8x32x256xf32>, tensor<5x1x256xf32>, tensor<5x2xi32> -> tensor<5x2x32xf32>
  func.return
}

// CHECK-LABEL: func.func @mul_mat(
// CHECK-NEXT:    %q0 = op.mul_mat %w, %x {name = "Qcur-0"} : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    %q1 = op.mul_mat %wb, %x : tensor<64x16xbf16>, tensor<5x16xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    %kq = op.mul_mat %k, %q {name = "kq-0"} : tensor<2x8x16xf32>, tensor<4x5x16xf32> -> tensor<4x5x8xf32>
// CHECK-NEXT:    %bq = op.mul_mat %w, %q : tensor<64x16xf32>, tensor<4x5x16xf32> -> tensor<4x5x64xf32>
// CHECK-NEXT:    func.return
func.func @mul_mat(%w: tensor<64x16xf32>, %wb: tensor<64x16xbf16>, %x: tensor<5x16xf32>, %k: tensor<2x8x16xf32>, %q: tensor<4x5x16xf32>) {
  %q0 = op.mul_mat %w, %x {name = "Qcur-0"} : tensor<64x16xf32>, tensor<5x16xf32> -> tensor<5x64xf32>
  %q1 = op.mul_mat %wb, %x : tensor<64x16xbf16>, tensor<5x16xf32> -> tensor<5x64xf32>
  %kq = op.mul_mat %k, %q {name = "kq-0"} : tensor<2x8x16xf32>, tensor<4x5x16xf32> -> tensor<4x5x8xf32>
  %bq = op.mul_mat %w, %q : tensor<64x16xf32>, tensor<4x5x16xf32> -> tensor<4x5x64xf32>
  func.return
}

// CHECK-LABEL: func.func @reshape(
// CHECK-NEXT:    %r = op.reshape %q {name = "Qcur-0"} : tensor<5x64xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    %f = op.reshape %q : tensor<5x64xf32> -> tensor<320xf32>
// CHECK-NEXT:    %s = op.reshape %d : tensor<?x64xf32> -> tensor<?x4x16xf32>
// CHECK-NEXT:    func.return
func.func @reshape(%q: tensor<5x64xf32>, %d: tensor<?x64xf32>) {
  %r = op.reshape %q {name = "Qcur-0"} : tensor<5x64xf32> -> tensor<5x4x16xf32>
  %f = op.reshape %q : tensor<5x64xf32> -> tensor<320xf32>
  %s = op.reshape %d : tensor<?x64xf32> -> tensor<?x4x16xf32>
  func.return
}

// CHECK-LABEL: func.func @view(
// CHECK-NEXT:    %v = op.view %c {offset = 0 : i64} : tensor<256x64xf32> -> tensor<32x4x16xf32>
// CHECK-NEXT:    %w = op.view %c {offset = 128 : i64, name = "k-0"} : tensor<256x64xf32> -> tensor<2x64xf32>
// CHECK-NEXT:    %s = op.view %x {offset = 16 : i64, strides = array<i64: 64, 1>} : tensor<5x64xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    func.return
func.func @view(%c: tensor<256x64xf32>, %x: tensor<5x64xf32>) {
  %v = op.view %c {offset = 0 : i64} : tensor<256x64xf32> -> tensor<32x4x16xf32>
  %w = op.view %c {offset = 128 : i64, name = "k-0"} : tensor<256x64xf32> -> tensor<2x64xf32>
  %s = op.view %x {offset = 16 : i64, strides = array<i64: 64, 1>} : tensor<5x64xf32> -> tensor<5x16xf32>
  func.return
}

// CHECK-LABEL: func.func @permute(
// CHECK-NEXT:    %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<4x5x16xf32>
// CHECK-NEXT:    %i = op.permute %q {dims = array<i64: 0, 1, 2>} : tensor<5x4x16xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    %t = op.permute %x {dims = array<i64: 1, 0>, name = "xt"} : tensor<5x64xf32> -> tensor<64x5xf32>
// CHECK-NEXT:    func.return
func.func @permute(%q: tensor<5x4x16xf32>, %x: tensor<5x64xf32>) {
  %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<4x5x16xf32>
  %i = op.permute %q {dims = array<i64: 0, 1, 2>} : tensor<5x4x16xf32> -> tensor<5x4x16xf32>
  %t = op.permute %x {dims = array<i64: 1, 0>, name = "xt"} : tensor<5x64xf32> -> tensor<64x5xf32>
  func.return
}

// CHECK-LABEL: func.func @transpose(
// CHECK-NEXT:    %t = op.transpose %v : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
// CHECK-NEXT:    %u = op.transpose %m {name = "mt"} : tensor<5x64xf32> -> tensor<64x5xf32>
// CHECK-NEXT:    func.return
func.func @transpose(%v: tensor<2x8x16xf32>, %m: tensor<5x64xf32>) {
  %t = op.transpose %v : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  %u = op.transpose %m {name = "mt"} : tensor<5x64xf32> -> tensor<64x5xf32>
  func.return
}

// CHECK-LABEL: func.func @cont(
// CHECK-NEXT:    %c = op.cont %t : tensor<2x16x8xf32> -> tensor<2x16x8xf32>
// CHECK-NEXT:    %m = op.cont %p {name = "kqv_out-0"} : tensor<5x4x16xf32> -> tensor<5x64xf32>
// CHECK-NEXT:    func.return
func.func @cont(%t: tensor<2x16x8xf32>, %p: tensor<5x4x16xf32>) {
  %c = op.cont %t : tensor<2x16x8xf32> -> tensor<2x16x8xf32>
  %m = op.cont %p {name = "kqv_out-0"} : tensor<5x4x16xf32> -> tensor<5x64xf32>
  func.return
}

// CHECK-LABEL: func.func @scale(
// CHECK-NEXT:    %s = op.scale %x {scale = 2.500000e-01 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    func.return
func.func @scale(%x: tensor<5x16xf32>) {
  %s = op.scale %x {scale = 2.500000e-01 : f64} : tensor<5x16xf32> -> tensor<5x16xf32>
  func.return
}

// CHECK-LABEL: func.func @cpy(
// CHECK-NEXT:    %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<80xbf16> -> tensor<80xbf16>
// CHECK-NEXT:    %h = op.cpy %x, %d2 {name = "x_f16"} : tensor<5x16xf32>, tensor<5x16xf16> -> tensor<5x16xf16>
// CHECK-NEXT:    func.return
func.func @cpy(%x: tensor<5x16xf32>, %dst: tensor<80xbf16>, %d2: tensor<5x16xf16>) {
  %c = op.cpy %x, %dst : tensor<5x16xf32>, tensor<80xbf16> -> tensor<80xbf16>
  %h = op.cpy %x, %d2 {name = "x_f16"} : tensor<5x16xf32>, tensor<5x16xf16> -> tensor<5x16xf16>
  func.return
}

// CHECK-LABEL: func.func @argmax(
// CHECK-NEXT:    %i = op.argmax %logits : tensor<1x32xf32> -> tensor<1xi32>
// CHECK-NEXT:    func.return
func.func @argmax(%logits: tensor<1x32xf32>) {
  %i = op.argmax %logits : tensor<1x32xf32> -> tensor<1xi32>
  func.return
}

// CHECK-LABEL: func.func @swiglu(
// CHECK-NEXT:    %h = op.swiglu %g, %u {name = "ffn_swiglu-0"} : tensor<5x40xf32>, tensor<5x40xf32> -> tensor<5x40xf32>
// CHECK-NEXT:    func.return
func.func @swiglu(%g: tensor<5x40xf32>, %u: tensor<5x40xf32>) {
  %h = op.swiglu %g, %u {name = "ffn_swiglu-0"} : tensor<5x40xf32>, tensor<5x40xf32> -> tensor<5x40xf32>
  func.return
}

// CHECK-LABEL: func.func @set_rows(
// CHECK-NEXT:    %cache = op.state "cache_k_l0" : tensor<256x64xf32>
// CHECK-NEXT:    %w = op.set_rows %cache, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xi64> -> tensor<256x64xf32>
// CHECK-NEXT:    func.return
func.func @set_rows(%k: tensor<5x64xf32>, %rows: tensor<5xi64>) {
  %cache = op.state "cache_k_l0" : tensor<256x64xf32>
  %w = op.set_rows %cache, %k, %rows : tensor<256x64xf32>, tensor<5x64xf32>, tensor<5xi64> -> tensor<256x64xf32>
  func.return
}

// CHECK-LABEL: func.func @soft_max(
// CHECK-NEXT:    %p = op.soft_max %kq, %m {scale = 2.500000e-01 : f64, name = "kq_soft_max-0"} : tensor<4x5x8xf32>, tensor<5x8xf32> -> tensor<4x5x8xf32>
// CHECK-NEXT:    %n = op.soft_max %kq {scale = 1.000000e+00 : f64} : tensor<4x5x8xf32> -> tensor<4x5x8xf32>
// CHECK-NEXT:    func.return
func.func @soft_max(%kq: tensor<4x5x8xf32>, %m: tensor<5x8xf32>) {
  %p = op.soft_max %kq, %m {scale = 2.500000e-01 : f64, name = "kq_soft_max-0"} : tensor<4x5x8xf32>, tensor<5x8xf32> -> tensor<4x5x8xf32>
  %n = op.soft_max %kq {scale = 1.000000e+00 : f64} : tensor<4x5x8xf32> -> tensor<4x5x8xf32>
  func.return
}

// CHECK-LABEL: func.func @rope(
// CHECK-NEXT:    %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    %f = op.rope %q, %pos, %ff {n_dims = 16 : i64, mode = "norm", freq_base = 5.000000e+05 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-0"} : tensor<5x4x16xf32>, tensor<5xi32>, tensor<8xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    func.return
func.func @rope(%q: tensor<5x4x16xf32>, %pos: tensor<5xi32>, %ff: tensor<8xf32>) {
  %r = op.rope %q, %pos {n_dims = 16 : i64, mode = "neox", freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64} : tensor<5x4x16xf32>, tensor<5xi32> -> tensor<5x4x16xf32>
  %f = op.rope %q, %pos, %ff {n_dims = 16 : i64, mode = "norm", freq_base = 5.000000e+05 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-0"} : tensor<5x4x16xf32>, tensor<5xi32>, tensor<8xf32> -> tensor<5x4x16xf32>
  func.return
}

// CHECK-LABEL: func.func @flash_attn_ext(
// CHECK-NEXT:    %o = op.flash_attn_ext %q, %k, %v, %m {scale = 2.500000e-01 : f64} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<5x8xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    %n = op.flash_attn_ext %q, %k, %v {scale = 2.500000e-01 : f64, name = "attn-0"} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<5x4x16xf32>
// CHECK-NEXT:    func.return
func.func @flash_attn_ext(%q: tensor<4x5x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>, %m: tensor<5x8xf32>) {
  %o = op.flash_attn_ext %q, %k, %v, %m {scale = 2.500000e-01 : f64} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<5x8xf32> -> tensor<5x4x16xf32>
  %n = op.flash_attn_ext %q, %k, %v {scale = 2.500000e-01 : f64, name = "attn-0"} : tensor<4x5x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<5x4x16xf32>
  func.return
}

// The ops of the hybrid and MoE families (Qwen3-MoE, Qwen3.5, Qwen3-Next), with the
// shapes of llama.cpp's graphs for the tiny checkpoints in tests/data/llamacpp.

// CHECK-LABEL: func.func @hybrid_inputs(
// CHECK-NEXT:    %p = op.input "mrope_positions" {name = "inp_pos"} : tensor<12xi32>
// CHECK-NEXT:    %d = op.input "mrope_positions" : tensor<?xi32>
// CHECK-NEXT:    %s = op.input "state_copy" {name = "rs_s_copy"} : tensor<1xi32>
// CHECK-NEXT:    func.return
func.func @hybrid_inputs() {
  %p = op.input "mrope_positions" {name = "inp_pos"} : tensor<12xi32>
  %d = op.input "mrope_positions" : tensor<?xi32>
  %s = op.input "state_copy" {name = "rs_s_copy"} : tensor<1xi32>
  func.return
}

// CHECK-LABEL: func.func @get_rows_batched(
// CHECK-NEXT:    %w = op.get_rows %p, %k {name = "ffn_moe_weights-0"} : tensor<3x8x1xf32>, tensor<3x2xi32> -> tensor<3x2x1xf32>
// CHECK-NEXT:    %s = op.get_rows %c, %r {name = "conv_states-0"} : tensor<1x384xf32>, tensor<1xi32> -> tensor<1x384xf32>
// CHECK-NEXT:    %e = op.get_rows %c, %z : tensor<1x384xf32>, tensor<0xi32> -> tensor<0x384xf32>
// CHECK-NEXT:    func.return
func.func @get_rows_batched(%p: tensor<3x8x1xf32>, %k: tensor<3x2xi32>, %c: tensor<1x384xf32>, %r: tensor<1xi32>, %z: tensor<0xi32>) {
  %w = op.get_rows %p, %k {name = "ffn_moe_weights-0"} : tensor<3x8x1xf32>, tensor<3x2xi32> -> tensor<3x2x1xf32>
  %s = op.get_rows %c, %r {name = "conv_states-0"} : tensor<1x384xf32>, tensor<1xi32> -> tensor<1x384xf32>
  %e = op.get_rows %c, %z : tensor<1x384xf32>, tensor<0xi32> -> tensor<0x384xf32>
  func.return
}

// Recurrent state: read by GET_ROWS, written back by CPY into a view of the state (an empty
// view when there is nothing to copy).
// CHECK-LABEL: func.func @state_write_back(
// CHECK-NEXT:    %r = op.state "cache_r_l0" : tensor<1x384xf32>
// CHECK-NEXT:    %u = op.view %r {offset = 0 : i64, name = "conv_state_update-0"} : tensor<1x384xf32> -> tensor<1x384xf32>
// CHECK-NEXT:    %c = op.cpy %last, %u : tensor<128x3xf32>, tensor<1x384xf32> -> tensor<1x384xf32>
// CHECK-NEXT:    %e = op.view %r {offset = 384 : i64} : tensor<1x384xf32> -> tensor<0x384xf32>
// CHECK-NEXT:    %n = op.cpy %none, %e : tensor<0x384xf32>, tensor<0x384xf32> -> tensor<0x384xf32>
// CHECK-NEXT:    func.return
func.func @state_write_back(%last: tensor<128x3xf32>, %none: tensor<0x384xf32>) {
  %r = op.state "cache_r_l0" : tensor<1x384xf32>
  %u = op.view %r {offset = 0 : i64, name = "conv_state_update-0"} : tensor<1x384xf32> -> tensor<1x384xf32>
  %c = op.cpy %last, %u : tensor<128x3xf32>, tensor<1x384xf32> -> tensor<1x384xf32>
  %e = op.view %r {offset = 384 : i64} : tensor<1x384xf32> -> tensor<0x384xf32>
  %n = op.cpy %none, %e : tensor<0x384xf32>, tensor<0x384xf32> -> tensor<0x384xf32>
  func.return
}

// Views that grow with a dynamic number of tokens T: the last K-1 columns of the conv
// window [C, K-1+T] (offset T, row stride K-1+T), the state after GATED_DELTA_NET's T rows.
// CHECK-LABEL: func.func @view_per_token(
// CHECK-NEXT:    %l = op.view %w {offset = 0 : i64, strides = array<i64: 3, 1>, per_token = array<i64: 1, 1, 0>, name = "conv_state_last-0"} : tensor<128x?xf32> -> tensor<128x3xf32>
// CHECK-NEXT:    %s = op.view %r {offset = 0 : i64, per_token = array<i64: 64>, name = "new_state-0"} : tensor<?x64xf32> -> tensor<4x16x16xf32>
// CHECK-NEXT:    %o = op.view %r {offset = 0 : i64} : tensor<?x64xf32> -> tensor<?x4x16xf32>
// CHECK-NEXT:    func.return
func.func @view_per_token(%w: tensor<128x?xf32>, %r: tensor<?x64xf32>) {
  %l = op.view %w {offset = 0 : i64, strides = array<i64: 3, 1>, per_token = array<i64: 1, 1, 0>, name = "conv_state_last-0"} : tensor<128x?xf32> -> tensor<128x3xf32>
  %s = op.view %r {offset = 0 : i64, per_token = array<i64: 64>, name = "new_state-0"} : tensor<?x64xf32> -> tensor<4x16x16xf32>
  %o = op.view %r {offset = 0 : i64} : tensor<?x64xf32> -> tensor<?x4x16xf32>
  func.return
}

// CHECK-LABEL: func.func @div(
// CHECK-NEXT:    %w = op.div %x, %s {name = "ffn_moe_weights_norm-0"} : tensor<3x2xf32>, tensor<3x1xf32> -> tensor<3x2xf32>
// CHECK-NEXT:    %v = op.div %x, %x : tensor<3x2xf32>, tensor<3x2xf32> -> tensor<3x2xf32>
// CHECK-NEXT:    func.return
func.func @div(%x: tensor<3x2xf32>, %s: tensor<3x1xf32>) {
  %w = op.div %x, %s {name = "ffn_moe_weights_norm-0"} : tensor<3x2xf32>, tensor<3x1xf32> -> tensor<3x2xf32>
  %v = op.div %x, %x : tensor<3x2xf32>, tensor<3x2xf32> -> tensor<3x2xf32>
  func.return
}

// CHECK-LABEL: func.func @clamp(
// CHECK-NEXT:    %c = op.clamp %s {min = 6.103515625e-05 : f64, max = 0x7ff0000000000000 : f64, name = "ffn_moe_weights_sum_clamped-0"} : tensor<3x1xf32> -> tensor<3x1xf32>
// CHECK-NEXT:    %d = op.clamp %s {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
// CHECK-NEXT:    func.return
func.func @clamp(%s: tensor<3x1xf32>) {
  %c = op.clamp %s {min = 6.103515625e-05 : f64, max = 0x7FF0000000000000 : f64, name = "ffn_moe_weights_sum_clamped-0"} : tensor<3x1xf32> -> tensor<3x1xf32>
  %d = op.clamp %s {min = -1.0 : f64, max = 1.0 : f64} : tensor<3x1xf32> -> tensor<3x1xf32>
  func.return
}

// CHECK-LABEL: func.func @activations(
// CHECK-NEXT:    %a = op.silu %x {name = "conv_output_silu-0"} : tensor<3x128xf32> -> tensor<3x128xf32>
// CHECK-NEXT:    %b = op.sigmoid %g : tensor<3x4x1xf32> -> tensor<3x4x1xf32>
// CHECK-NEXT:    %c = op.softplus %h {name = "a_softplus-0"} : tensor<3x4xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %d = op.silu %y : tensor<?x64xbf16> -> tensor<?x64xf32>
// CHECK-NEXT:    func.return
func.func @activations(%x: tensor<3x128xf32>, %g: tensor<3x4x1xf32>, %h: tensor<3x4xf32>, %y: tensor<?x64xbf16>) {
  %a = op.silu %x {name = "conv_output_silu-0"} : tensor<3x128xf32> -> tensor<3x128xf32>
  %b = op.sigmoid %g : tensor<3x4x1xf32> -> tensor<3x4x1xf32>
  %c = op.softplus %h {name = "a_softplus-0"} : tensor<3x4xf32> -> tensor<3x4xf32>
  %d = op.silu %y : tensor<?x64xbf16> -> tensor<?x64xf32>
  func.return
}

// CHECK-LABEL: func.func @sum_rows(
// CHECK-NEXT:    %s = op.sum_rows %w {name = "ffn_moe_weights_sum-0"} : tensor<3x2xf32> -> tensor<3x1xf32>
// CHECK-NEXT:    %t = op.sum_rows %v : tensor<4x16x16xf32> -> tensor<4x16x1xf32>
// CHECK-NEXT:    func.return
func.func @sum_rows(%w: tensor<3x2xf32>, %v: tensor<4x16x16xf32>) {
  %s = op.sum_rows %w {name = "ffn_moe_weights_sum-0"} : tensor<3x2xf32> -> tensor<3x1xf32>
  %t = op.sum_rows %v : tensor<4x16x16xf32> -> tensor<4x16x1xf32>
  func.return
}

// ARGSORT then the top-k as a strided view of its first columns (ggml_argsort_top_k).
// CHECK-LABEL: func.func @argsort_top_k(
// CHECK-NEXT:    %s = op.argsort %p {order = "desc", name = "ffn_moe_argsort-0"} : tensor<3x8xf32> -> tensor<3x8xi32>
// CHECK-NEXT:    %k = op.view %s {offset = 0 : i64, strides = array<i64: 8, 1>, name = "ffn_moe_topk-0"} : tensor<3x8xi32> -> tensor<3x2xi32>
// CHECK-NEXT:    %a = op.argsort %p {order = "asc"} : tensor<3x8xf32> -> tensor<3x8xi32>
// CHECK-NEXT:    func.return
func.func @argsort_top_k(%p: tensor<3x8xf32>) {
  %s = op.argsort %p {order = "desc", name = "ffn_moe_argsort-0"} : tensor<3x8xf32> -> tensor<3x8xi32>
  %k = op.view %s {offset = 0 : i64, strides = array<i64: 8, 1>, name = "ffn_moe_topk-0"} : tensor<3x8xi32> -> tensor<3x2xi32>
  %a = op.argsort %p {order = "asc"} : tensor<3x8xf32> -> tensor<3x8xi32>
  func.return
}

// CHECK-LABEL: func.func @repeat(
// CHECK-NEXT:    %r = op.repeat %q : tensor<3x2x1x16xf32> -> tensor<3x2x2x16xf32>
// CHECK-NEXT:    %s = op.repeat %k {name = "k_rep"} : tensor<16xf32> -> tensor<4x16x16xf32>
// CHECK-NEXT:    func.return
func.func @repeat(%q: tensor<3x2x1x16xf32>, %k: tensor<16xf32>) {
  %r = op.repeat %q : tensor<3x2x1x16xf32> -> tensor<3x2x2x16xf32>
  %s = op.repeat %k {name = "k_rep"} : tensor<16xf32> -> tensor<4x16x16xf32>
  func.return
}

// CHECK-LABEL: func.func @concat(
// CHECK-NEXT:    %c = op.concat %s, %x {axis = 1 : i64, name = "conv_input-0"} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<128x6xf32>
// CHECK-NEXT:    %d = op.concat %s3, %d3 {axis = 2 : i64} : tensor<1x128x3xf32>, tensor<1x128x?xf32> -> tensor<1x128x?xf32>
// CHECK-NEXT:    %e = op.concat %x, %x {axis = 0 : i64} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<256x3xf32>
// CHECK-NEXT:    func.return
func.func @concat(%s: tensor<128x3xf32>, %x: tensor<128x3xf32>, %s3: tensor<1x128x3xf32>, %d3: tensor<1x128x?xf32>) {
  %c = op.concat %s, %x {axis = 1 : i64, name = "conv_input-0"} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<128x6xf32>
  %d = op.concat %s3, %d3 {axis = 2 : i64} : tensor<1x128x3xf32>, tensor<1x128x?xf32> -> tensor<1x128x?xf32>
  %e = op.concat %x, %x {axis = 0 : i64} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<256x3xf32>
  func.return
}

// CHECK-LABEL: func.func @mul_mat_id(
// CHECK-NEXT:    %g = op.mul_mat_id %w, %x, %ids {name = "ffn_moe_gate-0"} : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
// CHECK-NEXT:    %d = op.mul_mat_id %wd, %h, %ids {name = "ffn_moe_down-0"} : tensor<8x64x32xbf16>, tensor<3x2x32xf32>, tensor<3x2xi32> -> tensor<3x2x64xf32>
// CHECK-NEXT:    %n = op.mul_mat_id %w, %dx, %dids : tensor<8x32x64xf32>, tensor<?x1x64xf32>, tensor<?x2xi32> -> tensor<?x2x32xf32>
// CHECK-NEXT:    func.return
func.func @mul_mat_id(%w: tensor<8x32x64xf32>, %x: tensor<3x1x64xf32>, %ids: tensor<3x2xi32>, %wd: tensor<8x64x32xbf16>, %h: tensor<3x2x32xf32>, %dx: tensor<?x1x64xf32>, %dids: tensor<?x2xi32>) {
  %g = op.mul_mat_id %w, %x, %ids {name = "ffn_moe_gate-0"} : tensor<8x32x64xf32>, tensor<3x1x64xf32>, tensor<3x2xi32> -> tensor<3x2x32xf32>
  %d = op.mul_mat_id %wd, %h, %ids {name = "ffn_moe_down-0"} : tensor<8x64x32xbf16>, tensor<3x2x32xf32>, tensor<3x2xi32> -> tensor<3x2x64xf32>
  %n = op.mul_mat_id %w, %dx, %dids : tensor<8x32x64xf32>, tensor<?x1x64xf32>, tensor<?x2xi32> -> tensor<?x2x32xf32>
  func.return
}

// CHECK-LABEL: func.func @ssm_conv(
// CHECK-NEXT:    %y = op.ssm_conv %sx, %w {name = "conv_output_raw-0"} : tensor<128x6xf32>, tensor<128x4xf32> -> tensor<3x128xf32>
// CHECK-NEXT:    %z = op.ssm_conv %s3, %w : tensor<1x128x4xf32>, tensor<128x4xf32> -> tensor<1x1x128xf32>
// CHECK-NEXT:    func.return
func.func @ssm_conv(%sx: tensor<128x6xf32>, %w: tensor<128x4xf32>, %s3: tensor<1x128x4xf32>) {
  %y = op.ssm_conv %sx, %w {name = "conv_output_raw-0"} : tensor<128x6xf32>, tensor<128x4xf32> -> tensor<3x128xf32>
  %z = op.ssm_conv %s3, %w : tensor<1x128x4xf32>, tensor<128x4xf32> -> tensor<1x1x128xf32>
  func.return
}

// GATED_DELTA_NET's packed result, then the views llama.cpp takes of it: the outputs and
// the new state (at offset T*Hv*D = 192).
// CHECK-LABEL: func.func @gated_delta_net(
// CHECK-NEXT:    %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
// CHECK-NEXT:    %o = op.view %r {offset = 0 : i64, name = "attn_output-0"} : tensor<19x64xf32> -> tensor<3x4x16xf32>
// CHECK-NEXT:    %n = op.view %r {offset = 192 : i64, name = "new_state-0"} : tensor<19x64xf32> -> tensor<4x16x16xf32>
// CHECK-NEXT:    %a = op.gated_delta_net %q, %k, %v, %kg, %b, %s {grouped, name = "kda"} : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
// CHECK-NEXT:    func.return
func.func @gated_delta_net(%q: tensor<3x2x16xf32>, %k: tensor<3x2x16xf32>, %v: tensor<3x4x16xf32>, %g: tensor<3x4x1xf32>, %b: tensor<3x4x1xf32>, %s: tensor<4x16x16xf32>, %kg: tensor<3x4x16xf32>) {
  %r = op.gated_delta_net %q, %k, %v, %g, %b, %s : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
  %o = op.view %r {offset = 0 : i64, name = "attn_output-0"} : tensor<19x64xf32> -> tensor<3x4x16xf32>
  %n = op.view %r {offset = 192 : i64, name = "new_state-0"} : tensor<19x64xf32> -> tensor<4x16x16xf32>
  %a = op.gated_delta_net %q, %k, %v, %kg, %b, %s {grouped, name = "kda"} : tensor<3x2x16xf32>, tensor<3x2x16xf32>, tensor<3x4x16xf32>, tensor<3x4x16xf32>, tensor<3x4x1xf32>, tensor<4x16x16xf32> -> tensor<19x64xf32>
  func.return
}

// Multi-section rope (Qwen3.5's interleaved M-RoPE on 8 of 32 dims), four positions a token.
// CHECK-LABEL: func.func @rope_multi(
// CHECK-NEXT:    %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "imrope", sections = array<i64: 2, 1, 1, 0>, freq_base = 1.000000e+04 : f64, freq_scale = 1.000000e+00 : f64, name = "Qcur-3"} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
// CHECK-NEXT:    %m = op.rope %q, %pos {n_dims = 32 : i64, mode = "mrope", sections = array<i64: 8, 4, 4, 0>, freq_base = 1.000000e+06 : f64, freq_scale = 1.000000e+00 : f64} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
// CHECK-NEXT:    func.return
func.func @rope_multi(%q: tensor<3x4x32xf32>, %pos: tensor<12xi32>) {
  %r = op.rope %q, %pos {n_dims = 8 : i64, mode = "imrope", sections = array<i64: 2, 1, 1, 0>, freq_base = 1.0e+04 : f64, freq_scale = 1.0 : f64, name = "Qcur-3"} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
  %m = op.rope %q, %pos {n_dims = 32 : i64, mode = "mrope", sections = array<i64: 8, 4, 4, 0>, freq_base = 1.0e+06 : f64, freq_scale = 1.0 : f64} : tensor<3x4x32xf32>, tensor<12xi32> -> tensor<3x4x32xf32>
  func.return
}

// The sampler: one row with [1] parameters and no counts; four rows with per-row parameters and counts;
// four rows with counts and a token mask (48 tokens: two i32 words a row).
// CHECK-LABEL: func.func @sample(
// CHECK-NEXT:    %ids = op.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> -> tensor<1xi32>
// CHECK-NEXT:    %ids4 = op.sample %l4, %key, %step64, %t4, %k4, %p, %m, %r4, %pr, %fr counts %pc, %oc {name = "sampled"} : tensor<4x48xf32>, tensor<2xi64>, tensor<1xi64>, tensor<4xf32>, tensor<4xi32>, tensor<1xf32>, tensor<1xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<4x48xi32>, tensor<4x48xi32> -> tensor<4xi32>
// CHECK-NEXT:    %idsm = op.sample %l4, %key, %step, %t4, %k4, %p, %m, %r4, %pr, %fr counts %pc, %oc mask %words : tensor<4x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<4xf32>, tensor<4xi32>, tensor<1xf32>, tensor<1xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<4x48xi32>, tensor<4x48xi32> mask tensor<4x2xi32> -> tensor<4xi32>
// CHECK-NEXT:    %ids1 = op.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr mask %word1 : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> mask tensor<1x2xi32> -> tensor<1xi32>
// CHECK-NEXT:    func.return
func.func @sample(%l: tensor<1x48xf32>, %key: tensor<2xi64>, %step: tensor<1xi32>, %t: tensor<1xf32>, %k: tensor<1xi32>, %p: tensor<1xf32>, %m: tensor<1xf32>, %r: tensor<1xf32>, %pr: tensor<1xf32>, %fr: tensor<1xf32>, %l4: tensor<4x48xf32>, %step64: tensor<1xi64>, %t4: tensor<4xf32>, %k4: tensor<4xi32>, %r4: tensor<4xf32>, %pc: tensor<4x48xi32>, %oc: tensor<4x48xi32>, %words: tensor<4x2xi32>, %word1: tensor<1x2xi32>) {
  %ids = op.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> -> tensor<1xi32>
  %ids4 = op.sample %l4, %key, %step64, %t4, %k4, %p, %m, %r4, %pr, %fr counts %pc, %oc {name = "sampled"} : tensor<4x48xf32>, tensor<2xi64>, tensor<1xi64>, tensor<4xf32>, tensor<4xi32>, tensor<1xf32>, tensor<1xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<4x48xi32>, tensor<4x48xi32> -> tensor<4xi32>
  %idsm = op.sample %l4, %key, %step, %t4, %k4, %p, %m, %r4, %pr, %fr counts %pc, %oc mask %words : tensor<4x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<4xf32>, tensor<4xi32>, tensor<1xf32>, tensor<1xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<4x48xi32>, tensor<4x48xi32> mask tensor<4x2xi32> -> tensor<4xi32>
  %ids1 = op.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr mask %word1 : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> mask tensor<1x2xi32> -> tensor<1xi32>
  func.return
}

// CHECK-LABEL: func.func @generic_form(
// CHECK-NEXT:    %y = op.mul %x, %g {name = "attn_norm-0"} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %w = op.param "blk.0.attn_norm.weight" : tensor<16xf32>
// CHECK-NEXT:    func.return
func.func @generic_form(%x: tensor<5x16xf32>, %g: tensor<16xf32>) {
  %y = "op.mul"(%x, %g) {name = "attn_norm-0"} : (tensor<5x16xf32>, tensor<16xf32>) -> tensor<5x16xf32>
  %w = "op.param"() {tensor = "blk.0.attn_norm.weight"} : () -> tensor<16xf32>
  func.return
}

// The collectives of a tensor-parallel entry, and a param that is one rank's piece.
// CHECK-LABEL: func.func @collectives(
// CHECK-NEXT:    %w = op.param "token_embd.weight" {split = array<i64: 0, 2>} : tensor<24x16xf32>
// CHECK-NEXT:    %q = op.param "blk.0.attn_qkv.weight" {split = array<i64: 0, 2, 8, 8, 16>} : tensor<32x16xf32>
// CHECK-NEXT:    %ids = op.input "tokens" : tensor<5xi32>
// CHECK-NEXT:    %e = op.get_rows_sharded %w, %ids {group = "tp", ranks = 2 : i64} : tensor<24x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
// CHECK-NEXT:    %s = op.all_reduce %e {group = "tp", ranks = 2 : i64, name = "embd"} : tensor<5x16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %g = op.all_gather %s {group = "tp", ranks = 2 : i64, axis = 1 : i64} : tensor<5x16xf32> -> tensor<5x32xf32>
// CHECK-NEXT:    %ew = op.param "blk.0.ffn_gate_exps.weight" {split = array<i64: 0, 2>} : tensor<4x32x16xf32>
// CHECK-NEXT:    %x = op.reshape %s : tensor<5x16xf32> -> tensor<5x1x16xf32>
// CHECK-NEXT:    %eg = op.mul_mat_id_sharded %ew, %x, %sel {group = "tp", ranks = 2 : i64, name = "ffn_moe_gate-0"} : tensor<4x32x16xf32>, tensor<5x1x16xf32>, tensor<5x2xi32> -> tensor<5x2x32xf32>
// CHECK-NEXT:    func.return
func.func @collectives(%sel: tensor<5x2xi32>) {
  %w = op.param "token_embd.weight" {split = array<i64: 0, 2>} : tensor<24x16xf32>
  %q = op.param "blk.0.attn_qkv.weight" {split = array<i64: 0, 2, 8, 8, 16>} : tensor<32x16xf32>
  %ids = op.input "tokens" : tensor<5xi32>
  %e = op.get_rows_sharded %w, %ids {group = "tp", ranks = 2 : i64} : tensor<24x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
  %s = op.all_reduce %e {group = "tp", ranks = 2 : i64, name = "embd"} : tensor<5x16xf32> -> tensor<5x16xf32>
  %g = op.all_gather %s {group = "tp", ranks = 2 : i64, axis = 1 : i64} : tensor<5x16xf32> -> tensor<5x32xf32>
  %ew = op.param "blk.0.ffn_gate_exps.weight" {split = array<i64: 0, 2>} : tensor<4x32x16xf32>
  %x = op.reshape %s : tensor<5x16xf32> -> tensor<5x1x16xf32>
  %eg = op.mul_mat_id_sharded %ew, %x, %sel {group = "tp", ranks = 2 : i64, name = "ffn_moe_gate-0"} : tensor<4x32x16xf32>, tensor<5x1x16xf32>, tensor<5x2xi32> -> tensor<5x2x32xf32>
  func.return
}
