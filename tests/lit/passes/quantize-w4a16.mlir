// quantize-w4a16 and smoothquant decide on the op level and record their plans on the function,
// leaving the ops alone: every projection and the head become int4 (a tied head, which the
// embedding lookup also reads, stays float); q/k/v share a smoothing group, gate/up another, the
// head the final norm's; bad options are one-line errors (smoothquant without ranges too).
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{alpha=0.5 ranges="%S/Inputs/llama2l.ranges.json"},quantize-w4a16{block=128}' | filecheck %s --check-prefix=LLAMA
// RUN: strata-opt %S/Inputs/qwen2_2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{ranges="%S/Inputs/qwen2_2l.ranges.json"},quantize-w4a16{block=32}' | filecheck %s --check-prefix=TIED
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{alpha=0.5}' 2>&1 | filecheck %s --check-prefix=NORANGES
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{alpha=x ranges="%S/Inputs/llama2l.ranges.json"}' 2>&1 | filecheck %s --check-prefix=ALPHAKIND
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},quantize-w4a16{block=96}' 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{alpha=2 ranges="%S/Inputs/llama2l.ranges.json"}' 2>&1 | filecheck %s --check-prefix=ALPHA
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=64},smoothquant{ranges="%t.none.json"}' 2>&1 | filecheck %s --check-prefix=RANGES

// LLAMA: func.func @decode
// LLAMA-SAME: smoothquant.alpha = 5.000000e-01 : f64
// LLAMA-SAME: smoothquant.groups = {{\[}}["blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.attn_k.weight"], ["blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"], ["blk.1.attn_norm.weight", "blk.1.attn_q.weight", "blk.1.attn_v.weight", "blk.1.attn_k.weight"], ["blk.1.ffn_norm.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight"], ["output_norm.weight", "output.weight"]]
// LLAMA-SAME: w4a16.block = 128 : i64
// LLAMA-SAME: w4a16.weights = ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.attn_k.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "blk.1.attn_q.weight", "blk.1.attn_v.weight", "blk.1.attn_k.weight", "blk.1.attn_output.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight", "output.weight"]
// LLAMA-NOT: skipped
// LLAMA: op.mul_mat %blk.0.attn_q.weight, %attn_norm-0

// TIED: func.func @decode
// TIED-SAME: smoothquant.skipped = {{\[}}["output_norm.weight", "projection 'token_embd.weight' is read elsewhere or through a conversion"]]
// TIED-SAME: w4a16.block = 32 : i64
// TIED-SAME: w4a16.skipped = {{\[}}["token_embd.weight", "also read by op.get_rows"]]

// ERR: block must be a power of two >= 16 (MatMulNBits), got 96
// ALPHA: smoothquant: alpha must be in [0, 1], got 2.0
// ALPHAKIND: strata-opt: error: -p: smoothquant: option alpha takes a number, got 'x'
// NORANGES: strata-opt: error: smoothquant: give ranges=FILE
// RANGES: none.json: no such ranges file
