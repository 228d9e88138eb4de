// RUN: strata-opt %s | strata-opt | filecheck %s
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -

// Round trip of every op of the `op` dialect: parse, print, parse again, print.
// Each op appears in its custom form, with and without the optional `name`
// attribute, and with its optional operands both present and absent
// (op.soft_max's mask, op.rope's freq_factors, op.flash_attn_ext's mask).

// CHECK-LABEL: func.func @param(
// CHECK-NEXT:    %w = op.param "blk.0.attn_q.weight" : tensor<64x16xbf16>
// CHECK-NEXT:    %wn = op.param "token_embd.weight" {name = "embd_table"} : tensor<32x16xf16>
// CHECK-NEXT:    %wf = op.param "output_norm.weight" : tensor<16xf32>
// CHECK-NEXT:    func.return
func.func @param() {
  %w = op.param "blk.0.attn_q.weight" : tensor<64x16xbf16>
  %wn = op.param "token_embd.weight" {name = "embd_table"} : tensor<32x16xf16>
  %wf = op.param "output_norm.weight" : tensor<16xf32>
  func.return
}

// CHECK-LABEL: func.func @state(
// CHECK-NEXT:    %k = op.state "cache_k_l0" : tensor<256x64xf32>
// CHECK-NEXT:    %v = op.state "cache_v_l0" {name = "cache_v_l0"} : tensor<256x64xbf16>
// CHECK-NEXT:    func.return
func.func @state() {
  %k = op.state "cache_k_l0" : tensor<256x64xf32>
  %v = op.state "cache_v_l0" {name = "cache_v_l0"} : tensor<256x64xbf16>
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

// CHECK-LABEL: func.func @generic_form(
// CHECK-NEXT:    %y = op.mul %x, %g {name = "attn_norm-0"} : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// CHECK-NEXT:    %w = op.param "blk.0.attn_norm.weight" : tensor<16xf32>
// CHECK-NEXT:    func.return
func.func @generic_form(%x: tensor<5x16xf32>, %g: tensor<16xf32>) {
  %y = "op.mul"(%x, %g) {name = "attn_norm-0"} : (tensor<5x16xf32>, tensor<16xf32>) -> tensor<5x16xf32>
  %w = "op.param"() {tensor = "blk.0.attn_norm.weight"} : () -> tensor<16xf32>
  func.return
}
