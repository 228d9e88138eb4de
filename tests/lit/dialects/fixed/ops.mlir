// RUN: strata-opt %s | strata-opt | filecheck %s
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -

// Round trip of every op of the `fixed` dialect and its element type !fixed.fp32<frac>: parse,
// print, parse again, print (the ops' docstring examples; broadcast mul, a calibrated range).

// CHECK-LABEL: func.func @param(
// CHECK-NEXT:    %w = fixed.param "blk.0.attn_norm.weight" : tensor<32x!fixed.fp32<30>>
// CHECK-NEXT:    %b = fixed.param "blk.0.attn_q.weight" {part = "int4_b", block = 128 : i64} : tensor<32x1x64xui8>
// CHECK-NEXT:    %s = fixed.param "blk.0.attn_q.weight" {part = "int4_scales", block = 128 : i64} : tensor<32x1x!fixed.fp32<31>>
// CHECK-NEXT:    %z = fixed.param "blk.0.attn_q.weight" {part = "int4_zp", block = 128 : i64} : tensor<32x1xui8>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @embed(
// CHECK-NEXT:    %h = fixed.embed %ids, %table {node = "embd"} : tensor<5xi32>, tensor<48x32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<29>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @elementwise(
// CHECK-NEXT:    %m = fixed.mul %a, %b {node = "ffn_swiglu-0"} : tensor<5x40x!fixed.fp32<24>>, tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<21>>
// CHECK-NEXT:    %mb = fixed.mul %a, %w : tensor<5x40x!fixed.fp32<24>>, tensor<40x!fixed.fp32<30>> -> tensor<5x40x!fixed.fp32<24>>
// CHECK-NEXT:    %s = fixed.add %a, %m {node = "ffn_inp-0", range = [-1.088170e+01 : f64, 1.118820e+01 : f64]} : tensor<5x40x!fixed.fp32<24>>, tensor<5x40x!fixed.fp32<21>> -> tensor<5x40x!fixed.fp32<25>>
// CHECK-NEXT:    %r = fixed.rescale %s : tensor<5x40x!fixed.fp32<25>> -> tensor<5x40x!fixed.fp32<24>>
// CHECK-NEXT:    %g = fixed.sigmoid %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<31>>
// CHECK-NEXT:    %u = fixed.silu %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<24>>
// CHECK-NEXT:    %p = fixed.softmax %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<31>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @rms_norm_rope(
// CHECK-NEXT:    %y = fixed.rms_norm %x, %w {eps = 1.000000e-05 : f64} : tensor<5x32x!fixed.fp32<27>>, tensor<32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<28>>
// CHECK-NEXT:    %qr = fixed.rope %y, %cos, %sin {head_dim = 8 : i64} : tensor<5x32x!fixed.fp32<28>>, tensor<5x4x!fixed.fp32<30>>, tensor<5x4x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<27>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @int4(
// CHECK-NEXT:    %w = fixed.dequant_int4 %b, %s, %zp : tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<32x32x!fixed.fp32<29>>
// CHECK-NEXT:    %q = fixed.matmul_w4a16 %x, %b, %s, %zp {wfrac = 31 : i64, node = "Qcur-0"} : tensor<5x32x!fixed.fp32<28>>, tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<5x32x!fixed.fp32<25>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @matmul(
// CHECK-NEXT:    %y = fixed.matmul %x, %w {node = "result_output"} : tensor<5x32x!fixed.fp32<28>>, tensor<48x32x!fixed.fp32<31>> -> tensor<5x48x!fixed.fp32<27>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @int8(
// CHECK-NEXT:    %q = fixed.quant_int8 %k, %s {head_dim = 8 : i64} : tensor<5x16x!fixed.fp32<28>>, tensor<2x!fixed.fp32<31>> -> tensor<5x16xi8>
// CHECK-NEXT:    %d = fixed.dequant_int8 %q, %s {head_dim = 8 : i64} : tensor<5x16xi8>, tensor<2x!fixed.fp32<31>> -> tensor<5x16x!fixed.fp32<28>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @attention(
// CHECK-NEXT:    %a = fixed.attention %q, %k, %v {head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sfrac = 27 : i64} : tensor<5x32x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<28>> -> tensor<5x32x!fixed.fp32<28>>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

func.func @param() {
  %w = fixed.param "blk.0.attn_norm.weight" : tensor<32x!fixed.fp32<30>>
  %b = fixed.param "blk.0.attn_q.weight" {part = "int4_b", block = 128 : i64} : tensor<32x1x64xui8>
  %s = fixed.param "blk.0.attn_q.weight" {part = "int4_scales", block = 128 : i64} : tensor<32x1x!fixed.fp32<31>>
  %z = fixed.param "blk.0.attn_q.weight" {part = "int4_zp", block = 128 : i64} : tensor<32x1xui8>
  func.return
}
func.func @embed(%ids: tensor<5xi32>, %table: tensor<48x32x!fixed.fp32<30>>) {
  %h = fixed.embed %ids, %table {node = "embd"} : tensor<5xi32>, tensor<48x32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<29>>
  func.return
}
func.func @elementwise(%a: tensor<5x40x!fixed.fp32<24>>, %b: tensor<5x40x!fixed.fp32<24>>, %w: tensor<40x!fixed.fp32<30>>) {
  %m = fixed.mul %a, %b {node = "ffn_swiglu-0"} : tensor<5x40x!fixed.fp32<24>>, tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<21>>
  %mb = fixed.mul %a, %w : tensor<5x40x!fixed.fp32<24>>, tensor<40x!fixed.fp32<30>> -> tensor<5x40x!fixed.fp32<24>>
  %s = fixed.add %a, %m {node = "ffn_inp-0", range = [-1.088170e+01 : f64, 1.118820e+01 : f64]} : tensor<5x40x!fixed.fp32<24>>, tensor<5x40x!fixed.fp32<21>> -> tensor<5x40x!fixed.fp32<25>>
  %r = fixed.rescale %s : tensor<5x40x!fixed.fp32<25>> -> tensor<5x40x!fixed.fp32<24>>
  %g = fixed.sigmoid %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<31>>
  %u = fixed.silu %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<24>>
  %p = fixed.softmax %a : tensor<5x40x!fixed.fp32<24>> -> tensor<5x40x!fixed.fp32<31>>
  func.return
}
func.func @rms_norm_rope(%x: tensor<5x32x!fixed.fp32<27>>, %w: tensor<32x!fixed.fp32<30>>, %cos: tensor<5x4x!fixed.fp32<30>>, %sin: tensor<5x4x!fixed.fp32<30>>) {
  %y = fixed.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<5x32x!fixed.fp32<27>>, tensor<32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<28>>
  %qr = fixed.rope %y, %cos, %sin {head_dim = 8 : i64} : tensor<5x32x!fixed.fp32<28>>, tensor<5x4x!fixed.fp32<30>>, tensor<5x4x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<27>>
  func.return
}
func.func @int4(%x: tensor<5x32x!fixed.fp32<28>>, %b: tensor<32x1x64xui8>, %s: tensor<32x1x!fixed.fp32<31>>, %zp: tensor<32x1xui8>) {
  %w = fixed.dequant_int4 %b, %s, %zp : tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<32x32x!fixed.fp32<29>>
  %q = fixed.matmul_w4a16 %x, %b, %s, %zp {wfrac = 31 : i64, node = "Qcur-0"} : tensor<5x32x!fixed.fp32<28>>, tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<5x32x!fixed.fp32<25>>
  func.return
}
func.func @matmul(%x: tensor<5x32x!fixed.fp32<28>>, %w: tensor<48x32x!fixed.fp32<31>>) {
  %y = fixed.matmul %x, %w {node = "result_output"} : tensor<5x32x!fixed.fp32<28>>, tensor<48x32x!fixed.fp32<31>> -> tensor<5x48x!fixed.fp32<27>>
  func.return
}
func.func @int8(%k: tensor<5x16x!fixed.fp32<28>>, %s: tensor<2x!fixed.fp32<31>>) {
  %q = fixed.quant_int8 %k, %s {head_dim = 8 : i64} : tensor<5x16x!fixed.fp32<28>>, tensor<2x!fixed.fp32<31>> -> tensor<5x16xi8>
  %d = fixed.dequant_int8 %q, %s {head_dim = 8 : i64} : tensor<5x16xi8>, tensor<2x!fixed.fp32<31>> -> tensor<5x16x!fixed.fp32<28>>
  func.return
}
func.func @attention(%q: tensor<5x32x!fixed.fp32<27>>, %k: tensor<5x16x!fixed.fp32<27>>, %v: tensor<5x16x!fixed.fp32<28>>) {
  %a = fixed.attention %q, %k, %v {head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sfrac = 27 : i64} : tensor<5x32x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<27>>, tensor<5x16x!fixed.fp32<28>> -> tensor<5x32x!fixed.fp32<28>>
  func.return
}
