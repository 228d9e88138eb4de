// assign-frac-bits sets each fixed op's format from a ranges file by Chimera's FixedPoint32 rules (matmul
// outputs 31 - ceil(log2 max|y|) - headroom, other ops headroom 0), records the range, updates
// the function's result types; -t fixed-range-table prints Chimera's range table; a missing tensor
// or a range that overflows int32 under the headroom is a one-line error.
// RUN: strata-opt %s -p 'assign-frac-bits{headroom=2 ranges="%S/Inputs/fixed-ranges.json"}' | filecheck %s
// RUN: strata-opt %s -p 'assign-frac-bits{headroom=3 ranges="%S/Inputs/fixed-ranges.json"}' | filecheck %s --check-prefix=HR3
// RUN: strata-opt %s -p 'assign-frac-bits{headroom=2 ranges="%S/Inputs/fixed-ranges.json"}' -t fixed-range-table | filecheck %s --check-prefix=TABLE
// RUN: sed 's/"Qcur-0_2"/"nope"/' %s | not strata-opt -p 'assign-frac-bits{ranges="%S/Inputs/fixed-ranges.json"}' 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: sed 's/"Qcur-0"}/"big"}/' %s | not strata-opt -p 'assign-frac-bits{ranges="%S/Inputs/fixed-ranges.json"}' 2>&1 | filecheck %s --check-prefix=OVERFLOW

// CHECK:      func.func @layer({{.*}}) -> tensor<5x32x!fixed.fp32<27>> attributes {fixed.headroom = 2 : i64, fixed.ranges = "{{[0-9a-f]+}}"}
// CHECK:      fixed.embed {{.*}}range = [-8.187500e+00 : f64, 6.343750e+00 : f64]{{.*}} -> tensor<5x32x!fixed.fp32<27>>
// CHECK:      fixed.rms_norm {{.*}} -> tensor<5x32x!fixed.fp32<26>>
// CHECK:      fixed.matmul_w4a16 %xn, {{.*}} : tensor<5x32x!fixed.fp32<26>>, {{.*}} -> tensor<5x32x!fixed.fp32<25>>
// CHECK:      fixed.rope %q, {{.*}} : tensor<5x32x!fixed.fp32<25>>, {{.*}} -> tensor<5x32x!fixed.fp32<27>>
// CHECK:      func.return %qr : tensor<5x32x!fixed.fp32<27>>

// HR3:        fixed.matmul_w4a16 {{.*}} -> tensor<5x32x!fixed.fp32<24>>
// HR3:        fixed.rope {{.*}} -> tensor<5x32x!fixed.fp32<27>>

// TABLE:      Source name  Op                  Output 0 Range         Output 0 Frac Bits  Output 1 Range  Output 1 Frac Bits
// TABLE-NEXT: -----------  ------------------  ---------------------  ------------------  --------------  ------------------
// TABLE-NEXT: embd         fixed.embed         [-8.1875f, 6.34375f]   27                  N/A             N/A
// TABLE-NEXT: norm-0       fixed.rms_norm      [-18.9287f, 28.7483f]  26                  N/A             N/A
// TABLE-NEXT: Qcur-0       fixed.matmul_w4a16  [-11.0497f, 9.87976f]  25                  N/A             N/A
// TABLE-NEXT: Qcur-0_2     fixed.rope          [-11.2f, 10.4f]        27                  N/A             N/A
// TABLE-EMPTY:

// MISSING:    strata-opt: error: assign-frac-bits: {{.*}}fixed-ranges.json has no range for tensor 'nope' (fixed.rope)
// OVERFLOW:   strata-opt: error: assign-frac-bits: fixed.matmul_w4a16 'big': range [-1.07374e+09, 5] needs 30 integer bits + 2 headroom, more than FixedPoint32's 31

func.func @layer(%ids: tensor<5xi32>, %cos: tensor<5x4x!fixed.fp32<30>>, %sin: tensor<5x4x!fixed.fp32<30>>) -> tensor<5x32x!fixed.fp32<20>> {
  %table = fixed.param "token_embd.weight" : tensor<48x32x!fixed.fp32<30>>
  %w = fixed.param "blk.0.attn_norm.weight" : tensor<32x!fixed.fp32<30>>
  %h = fixed.embed %ids, %table {node = "embd"} : tensor<5xi32>, tensor<48x32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<20>>
  %xn = fixed.rms_norm %h, %w {eps = 1.0e-05 : f64, node = "norm-0"} : tensor<5x32x!fixed.fp32<20>>, tensor<32x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<20>>
  %b = fixed.param "blk.0.attn_q.weight" {part = "int4_b", block = 128 : i64} : tensor<32x1x64xui8>
  %s = fixed.param "blk.0.attn_q.weight" {part = "int4_scales", block = 128 : i64} : tensor<32x1x!fixed.fp32<31>>
  %zp = fixed.param "blk.0.attn_q.weight" {part = "int4_zp", block = 128 : i64} : tensor<32x1xui8>
  %q = fixed.matmul_w4a16 %xn, %b, %s, %zp {wfrac = 31 : i64, node = "Qcur-0"} : tensor<5x32x!fixed.fp32<20>>, tensor<32x1x64xui8>, tensor<32x1x!fixed.fp32<31>>, tensor<32x1xui8> -> tensor<5x32x!fixed.fp32<20>>
  %qr = fixed.rope %q, %cos, %sin {head_dim = 8 : i64, node = "Qcur-0_2"} : tensor<5x32x!fixed.fp32<20>>, tensor<5x4x!fixed.fp32<30>>, tensor<5x4x!fixed.fp32<30>> -> tensor<5x32x!fixed.fp32<20>>
  func.return %qr : tensor<5x32x!fixed.fp32<20>>
}
