// Bad input to strata-opt: a one-line `strata-opt: error:` diagnostic on stderr
// that names the file, line and column where there is one, a non-zero exit
// (lit's `not`), and never a Python traceback.

// Malformed syntax in this very file (the missing comma below).
// RUN: not strata-opt %s 2>&1 | filecheck %s --check-prefix=SYNTAX
// SYNTAX-NOT:  Traceback
// SYNTAX:      {{^}}strata-opt: error: {{.*}}strata-opt-errors.mlir:[[# @LINE + 7]]:18
// SYNTAX-NEXT: {{^}}  %y = op.mul %x %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
// SYNTAX-NEXT: {{^}}                 ^^
// SYNTAX-NEXT: {{^}}                 Expected ','
// SYNTAX-NOT:  Traceback
// SYNTAX-NOT:  {{.}}
func.func @f(%x: tensor<5x16xf32>, %g: tensor<16xf32>) -> tensor<5x16xf32> {
  %y = op.mul %x %g : tensor<5x16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  func.return %y : tensor<5x16xf32>
}

// An op that no dialect defines.
// RUN: not strata-opt %S/Inputs/unknown-op.mlir 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN-NOT:  Traceback
// UNKNOWN:      {{^}}strata-opt: error: {{.*}}Inputs{{/|\\}}unknown-op.mlir:2:22
// UNKNOWN:      {{^}} {{ *}}Operation op.frobnicate is not registered
// UNKNOWN-NOT:  Traceback

// An op cut short: the type after `->` is missing.
// RUN: not strata-opt %S/Inputs/truncated.mlir 2>&1 | filecheck %s --check-prefix=TRUNC
// TRUNC-NOT:  Traceback
// TRUNC:      {{^}}strata-opt: error: {{.*}}Inputs{{/|\\}}truncated.mlir:3:3
// TRUNC:      type expected
// TRUNC-NOT:  Traceback

// Well-formed text that does not verify: the verifier's message.
// RUN: not strata-opt %S/Inputs/invalid-op.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY-NOT: Traceback
// VERIFY:     {{^}}strata-opt: error: {{.*}}op.mul: rhs 3 cannot be broadcast to lhs 5x16
// VERIFY-NOT: Traceback

// A module-level type string that names an unknown generic.
// RUN: not strata-opt %S/Inputs/bad-type-string.mlir 2>&1 | filecheck %s --check-prefix=TYPESTR
// TYPESTR-NOT: Traceback
// TYPESTR:     {{^}}strata-opt: error: {{.*}}module.param @weight: unknown name 'Vocab' in 'Tensor[H, Vocab; T]'
// TYPESTR-NOT: Traceback

// A file that does not exist is named in the error.
// RUN: not strata-opt %S/Inputs/no-such-file.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING:     {{^}}strata-opt: error: {{.*}}no-such-file.mlir
// MISSING-NOT: Traceback

// An unknown pass, and a pass option that does not exist.
// RUN: not strata-opt %S/Inputs/op-level.mlir -p no-such-pass 2>&1 | filecheck %s --check-prefix=PASS
// PASS-NOT: Traceback
// PASS:     {{^}}strata-opt: error: {{.*}}no-such-pass
// PASS-NOT: Traceback
// RUN: not strata-opt %S/../passes/Inputs/llama2l.mlir -p 'convert-module-to-op{no-such-option=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION-NOT: Traceback
// OPTION:     {{^}}strata-opt: error: {{.*}}no_such_option
// OPTION-NOT: Traceback

// convert-module-to-op needs a module.model; the trace target needs op-level IR.
// RUN: not strata-opt %S/Inputs/op-level.mlir -p convert-module-to-op 2>&1 | filecheck %s --check-prefix=NOMODEL
// NOMODEL-NOT: Traceback
// NOMODEL:     {{^}}strata-opt: error: convert-module-to-op: expected one module.model, found 0
// NOMODEL-NOT: Traceback
// RUN: not strata-opt %S/../passes/Inputs/llama2l.mlir -t trace 2>&1 | filecheck %s --check-prefix=TRACE
// TRACE-NOT: Traceback
// TRACE:     {{^}}strata-opt: error: trace: expected one op-level function, found 0
// TRACE-NOT: Traceback

// Nothing is written to stdout when the input is bad.
// RUN: not strata-opt %S/Inputs/invalid-op.mlir > %t.verify.out 2>/dev/null
// RUN: test ! -s %t.verify.out
// RUN: not strata-opt %S/Inputs/truncated.mlir > %t.parse.out 2>/dev/null
// RUN: test ! -s %t.parse.out
