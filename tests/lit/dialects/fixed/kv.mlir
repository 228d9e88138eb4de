// RUN: strata-opt %s | filecheck %s
// RUN: strata-opt %s -p epu-pack-projections | filecheck %s

// The decode ops print as they parse: a constant, the int8 KV state, a write, attention over it.
// CHECK:      %s = fixed.const {value = array<i64: 16909320, 16909320>} : tensor<2x!fixed.fp32<31>>
// CHECK-NEXT: %kc = fixed.kv_state "cache_k_l0" : tensor<8x16xi8>
// CHECK-NEXT: %k8 = fixed.quant_int8 %k, %s {head_dim = 8 : i64} : tensor<1x16x!fixed.fp32<27>>, tensor<2x!fixed.fp32<31>> -> tensor<1x16xi8>
// CHECK-NEXT: fixed.cache_write %kc, %k8, %pos : tensor<8x16xi8>, tensor<1x16xi8>, tensor<1xi32>
// CHECK-NEXT: %kd = fixed.dequant_int8 %kc, %s {head_dim = 8 : i64} : tensor<8x16xi8>, tensor<2x!fixed.fp32<31>> -> tensor<8x16x!fixed.fp32<27>>
// CHECK-NEXT: %y = fixed.cache_attention %q, %kd, %kd, %pos {head_dim = 8 : i64, scale = 3.535530e-01 : f64, sfrac = 26 : i64} : tensor<1x32x!fixed.fp32<27>>, tensor<8x16x!fixed.fp32<27>>, tensor<8x16x!fixed.fp32<27>>, tensor<1xi32> -> tensor<1x32x!fixed.fp32<28>>
func.func @step(%q: tensor<1x32x!fixed.fp32<27>>, %k: tensor<1x16x!fixed.fp32<27>>, %pos: tensor<1xi32>) -> tensor<1x32x!fixed.fp32<28>> {
  %s = fixed.const {value = array<i64: 16909320, 16909320>} : tensor<2x!fixed.fp32<31>>
  %kc = fixed.kv_state "cache_k_l0" : tensor<8x16xi8>
  %k8 = fixed.quant_int8 %k, %s {head_dim = 8 : i64} : tensor<1x16x!fixed.fp32<27>>, tensor<2x!fixed.fp32<31>> -> tensor<1x16xi8>
  fixed.cache_write %kc, %k8, %pos : tensor<8x16xi8>, tensor<1x16xi8>, tensor<1xi32>
  %kd = fixed.dequant_int8 %kc, %s {head_dim = 8 : i64} : tensor<8x16xi8>, tensor<2x!fixed.fp32<31>> -> tensor<8x16x!fixed.fp32<27>>
  %y = fixed.cache_attention %q, %kd, %kd, %pos {head_dim = 8 : i64, scale = 0.353553 : f64, sfrac = 26 : i64} : tensor<1x32x!fixed.fp32<27>>, tensor<8x16x!fixed.fp32<27>>, tensor<8x16x!fixed.fp32<27>>, tensor<1xi32> -> tensor<1x32x!fixed.fp32<28>>
  func.return %y : tensor<1x32x!fixed.fp32<28>>
}
