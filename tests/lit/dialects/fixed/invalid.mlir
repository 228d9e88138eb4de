// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// One case for every verifier message of the `fixed` dialect. With --verify-diagnostics,
// strata-opt prints the first line of each diagnostic (the message); each CHECK anchors the
// message at the start of a line, so a chunk that verified by mistake fails the test.

// fixed.fp32: the fractional bits are 0..31.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.fp32: frac must be in 0..31, got 32
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rescale %a : tensor<4x!fixed.fp32<20>> -> tensor<4x!fixed.fp32<32>>
  func.return
}

// -----

// fixed.sigmoid: results are fixed-point tensors.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}expected a tensor of fixed elements, got tensor<4xf32>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.sigmoid %a : tensor<4x!fixed.fp32<20>> -> tensor<4xf32>
  func.return
}

// -----

// fixed.rescale: the result keeps the source's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rescale: result shape [2, 2] must be the source's [4]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rescale %a : tensor<4x!fixed.fp32<20>> -> tensor<2x2x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.mul: the rhs is the lhs's shape or a suffix of it.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.mul: rhs shape [4] must be the lhs's [4, 3] or a suffix of it (broadcast)
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.mul %c, %a : tensor<4x3x!fixed.fp32<20>>, tensor<4x!fixed.fp32<20>> -> tensor<4x3x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.add: the result has the lhs's shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.add: result shape [3] must be the lhs's [4, 3]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.add %c, %c : tensor<4x3x!fixed.fp32<20>>, tensor<4x3x!fixed.fp32<20>> -> tensor<3x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.param: a known part.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: part must be one of value, int4_b, int4_scales, int4_zp, got 'int3'
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {part = "int3"} : tensor<4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.param: an int4 part needs its block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: part 'int4_zp' needs an even block >= 2, got 0
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {part = "int4_zp"} : tensor<4x1xui8>
  func.return
}

// -----

// fixed.param: int4_b's last dim is half the block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: int4_b is [N, nb, 64] for block 128, got [4, 1, 32]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {part = "int4_b", block = 128 : i64} : tensor<4x1x32xui8>
  func.return
}

// -----

// fixed.param: zero points are ui8.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: part 'int4_zp' is a ui8 tensor, got tensor<4x1xi8>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {part = "int4_zp", block = 128 : i64} : tensor<4x1xi8>
  func.return
}

// -----

// fixed.param: scales are fixed point.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: part 'int4_scales' is a fixed-point tensor, got tensor<4x1xf32>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {part = "int4_scales", block = 128 : i64} : tensor<4x1xf32>
  func.return
}

// -----

// fixed.param: a plain value has no block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.param: a block is for an int4 part
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %w = fixed.param "w" {block = 128 : i64} : tensor<4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.embed: the table is 2-D.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.embed: the table is [vocab, dim], got [4]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.embed %i, %a : tensor<3xi32>, tensor<4x!fixed.fp32<20>> -> tensor<3x4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.rms_norm: the weight is [D].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rms_norm: the weight is [3], got [4]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rms_norm %c, %a {eps = 1.0e-05 : f64} : tensor<4x3x!fixed.fp32<20>>, tensor<4x!fixed.fp32<20>> -> tensor<4x3x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.rms_norm: eps >= 0.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rms_norm: eps must be >= 0
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rms_norm %c, %h {eps = -1.0 : f64} : tensor<4x3x!fixed.fp32<20>>, tensor<3x!fixed.fp32<20>> -> tensor<4x3x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.rope: head_dim is even.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rope: head_dim must be positive and even, got 3
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rope %r, %t, %t {head_dim = 3 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x1x!fixed.fp32<30>>, tensor<2x1x!fixed.fp32<30>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.rope: cos and sin share one type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rope: cos and sin must have one type, got tensor<2x1x!fixed.fp32<30>> and tensor<2x1x!fixed.fp32<29>>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rope %r, %t, %u {head_dim = 2 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x1x!fixed.fp32<30>>, tensor<2x1x!fixed.fp32<29>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.rope: the tables are [rows, head_dim/2].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rope: cos and sin are [2, 3], got [2, 1] and [2, 1]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rope %r, %t, %t {head_dim = 6 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x1x!fixed.fp32<30>>, tensor<2x1x!fixed.fp32<30>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.dequant_int4: K must fit B's blocks.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.dequant_int4: K = 200 needs 2 blocks of 128, B has 1
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.dequant_int4 %b, %s, %z : tensor<4x1x64xui8>, tensor<4x1x!fixed.fp32<31>>, tensor<4x1xui8> -> tensor<4x200x!fixed.fp32<28>>
  func.return
}

// -----

// fixed.dequant_int4: B is ui8 [N, nb, block/2].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.dequant_int4: B is ui8 [N, nb, block/2] (MatMulNBits), got tensor<4x1xui8>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.dequant_int4 %z, %s, %z : tensor<4x1xui8>, tensor<4x1x!fixed.fp32<31>>, tensor<4x1xui8> -> tensor<4x128x!fixed.fp32<28>>
  func.return
}

// -----

// fixed.matmul: x [M, K], W [N, K].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.matmul: x [M, K], W [N, K] and the result [M, N], got [4, 3], [3, 4] and [4, 3]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>, %c2: tensor<3x4x!fixed.fp32<20>>) {
  %y = fixed.matmul %c, %c2 : tensor<4x3x!fixed.fp32<20>>, tensor<3x4x!fixed.fp32<20>> -> tensor<4x3x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.matmul_w4a16: wfrac in 0..31.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.matmul_w4a16: wfrac must be in 0..31, got 40
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.matmul_w4a16 %x, %b, %s, %z {wfrac = 40 : i64} : tensor<2x128x!fixed.fp32<20>>, tensor<4x1x64xui8>, tensor<4x1x!fixed.fp32<31>>, tensor<4x1xui8> -> tensor<2x4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.matmul_w4a16: scales are [N, nb].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.matmul_w4a16: scales are [4, 1], got [4, 2]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.matmul_w4a16 %x, %b, %s2, %z {wfrac = 30 : i64} : tensor<2x128x!fixed.fp32<20>>, tensor<4x1x64xui8>, tensor<4x2x!fixed.fp32<31>>, tensor<4x1xui8> -> tensor<2x4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.matmul_w4a16: the result has x's rows.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.matmul_w4a16: x is [M, K] and the result [M, N], got [2, 128] and [3, 4]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.matmul_w4a16 %x, %b, %s, %z {wfrac = 30 : i64} : tensor<2x128x!fixed.fp32<20>>, tensor<4x1x64xui8>, tensor<4x1x!fixed.fp32<31>>, tensor<4x1xui8> -> tensor<3x4x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.dequant_int8: one scale per head.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.dequant_int8: one scale per head: [3], got [4]
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.dequant_int8 %q, %a {head_dim = 2 : i64} : tensor<2x6xi8>, tensor<4x!fixed.fp32<20>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.dequant_int8: the source is 8-bit.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.dequant_int8: the source is an 8-bit tensor, got tensor<2x6xi32>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.dequant_int8 %i2, %h {head_dim = 2 : i64} : tensor<2x6xi32>, tensor<3x!fixed.fp32<20>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.quant_int8: the result is 8-bit.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.quant_int8: the result is an 8-bit tensor, got tensor<2x6xi32>
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.quant_int8 %r, %h {head_dim = 2 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<3x!fixed.fp32<20>> -> tensor<2x6xi32>
  func.return
}

// -----

// fixed.attention: query heads are a multiple of kv heads.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.attention: 3 query heads are not a multiple of 2 kv heads
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.attention %r, %v4, %v4 {head_dim = 2 : i64, scale = 0.5 : f64, sfrac = 20 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x4x!fixed.fp32<20>>, tensor<2x4x!fixed.fp32<20>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.attention: sfrac in 0..31.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.attention: sfrac must be in 0..31
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.attention %r, %r, %r {head_dim = 2 : i64, scale = 0.5 : f64, sfrac = 32 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x6x!fixed.fp32<20>>, tensor<2x6x!fixed.fp32<20>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// fixed.attention: a positive scale.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.attention: scale must be positive
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.attention %r, %r, %r {head_dim = 2 : i64, scale = 0.0 : f64, sfrac = 20 : i64} : tensor<2x6x!fixed.fp32<20>>, tensor<2x6x!fixed.fp32<20>>, tensor<2x6x!fixed.fp32<20>> -> tensor<2x6x!fixed.fp32<20>>
  func.return
}

// -----

// range: two numbers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rescale: range is [min, max], got 1 numbers
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rescale %a {range = [1.0 : f64]} : tensor<4x!fixed.fp32<20>> -> tensor<4x!fixed.fp32<20>>
  func.return
}

// -----

// range: min <= max.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}fixed.rescale: range [2.0, 1.0] has min > max
func.func @f(%a: tensor<4x!fixed.fp32<20>>, %c: tensor<4x3x!fixed.fp32<20>>, %i: tensor<3xi32>, %r: tensor<2x6x!fixed.fp32<20>>, %t: tensor<2x1x!fixed.fp32<30>>, %u: tensor<2x1x!fixed.fp32<29>>, %b: tensor<4x1x64xui8>, %s: tensor<4x1x!fixed.fp32<31>>, %s2: tensor<4x2x!fixed.fp32<31>>, %z: tensor<4x1xui8>, %x: tensor<2x128x!fixed.fp32<20>>, %q: tensor<2x6xi8>, %i2: tensor<2x6xi32>, %h: tensor<3x!fixed.fp32<20>>, %v4: tensor<2x4x!fixed.fp32<20>>) {
  %y = fixed.rescale %a {range = [2.0 : f64, 1.0 : f64]} : tensor<4x!fixed.fp32<20>> -> tensor<4x!fixed.fp32<20>>
  func.return
}
