// add-sampler on the op level of a 2-layer llama (Inputs/llama2l.mlir, vocab 32): @prefill and
// @decode stay as they were, and @sample_logits follows them: op.sample over its arguments, the
// logits of one row as the entries return them, [1]-shaped parameters, the two token counts and
// the token mask (one bit per token: 32 tokens, one i32 word).
// rows=4 samples four rows. The errors: a module with no entry, a second add-sampler.

// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill,decode ctx=64},add-sampler' | filecheck %s
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill,decode ctx=64},add-sampler{rows=4}' | filecheck %s --check-prefix=ROWS
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill,decode ctx=64}' > %t.before
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill,decode ctx=64},add-sampler' | sed '/func.func @sample_logits/,/^  }/d' > %t.after
// RUN: diff %t.before %t.after
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'add-sampler' 2>&1 | filecheck %s --check-prefix=NOENTRY
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode ctx=64},add-sampler,add-sampler' 2>&1 | filecheck %s --check-prefix=TWICE

// CHECK:      func.func @prefill()
// CHECK:      func.func @decode()
// CHECK:      func.func @sample_logits(%logits: tensor<1x32xf32>, %key: tensor<2xi64>, %step: tensor<1xi32>, %temperature: tensor<1xf32>, %top_k: tensor<1xi32>, %top_p: tensor<1xf32>, %min_p: tensor<1xf32>, %repetition_penalty: tensor<1xf32>, %presence_penalty: tensor<1xf32>, %frequency_penalty: tensor<1xf32>, %prompt_counts: tensor<1x32xi32>, %output_counts: tensor<1x32xi32>, %mask: tensor<1x1xi32>) -> tensor<1xi32> {
// CHECK-NEXT:   %ids = op.sample %logits, %key, %step, %temperature, %top_k, %top_p, %min_p, %repetition_penalty, %presence_penalty, %frequency_penalty counts %prompt_counts, %output_counts mask %mask {op.block = #op.block<"std.model.causal_lm", "">} : tensor<1x32xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1x32xi32>, tensor<1x32xi32> mask tensor<1x1xi32> -> tensor<1xi32>
// CHECK-NEXT:   func.return %ids : tensor<1xi32>

// ROWS:       func.func @sample_logits(%logits: tensor<4x32xf32>, {{.*}}, %temperature: tensor<4xf32>, %top_k: tensor<4xi32>, {{.*}}, %output_counts: tensor<4x32xi32>, %mask: tensor<4x1xi32>) -> tensor<4xi32> {

// NOENTRY: add-sampler: the module holds no op-level entry (lower it with convert-module-to-op first)
// TWICE: add-sampler: the module already has @sample_logits
