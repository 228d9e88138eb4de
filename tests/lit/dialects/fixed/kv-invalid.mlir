// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// The verifier messages of the decode ops (strata/dialects/fixed_kv.py).

// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.cache_write: rows are [n <= 8, 16] of the cache's element type, got tensor<9x16xi8>
func.func @f(%r: tensor<9x16xi8>, %pos: tensor<1xi32>) {
  %kc = fixed.kv_state "c" : tensor<8x16xi8>
  fixed.cache_write %kc, %r, %pos : tensor<8x16xi8>, tensor<9x16xi8>, tensor<1xi32>
  func.return
}

// -----

// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.cache_attention: k and v are [ctx >= 2, kv_heads*8], got [1, 16] and [1, 16]
func.func @f(%q: tensor<2x32x!fixed.fp32<27>>, %k: tensor<1x16x!fixed.fp32<27>>, %pos: tensor<1xi32>) {
  %y = fixed.cache_attention %q, %k, %k, %pos {head_dim = 8 : i64, scale = 0.35 : f64, sfrac = 26 : i64} : tensor<2x32x!fixed.fp32<27>>, tensor<1x16x!fixed.fp32<27>>, tensor<1x16x!fixed.fp32<27>>, tensor<1xi32> -> tensor<2x32x!fixed.fp32<28>>
  func.return
}

// -----

// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.kv_state: the state is an 8-bit [ctx, width] tensor, got tensor<8x16xi32>
func.func @f() {
  %kc = fixed.kv_state "c" : tensor<8x16xi32>
  func.return
}
