// The CPU target as a printer: `strata compile --print-pipeline`'s pipeline run by
// strata-opt, then `-t cpu` prints the numpy module that `strata compile` writes.
// RUN: strata-opt %S/../../passes/Inputs/qwen3_2l.mlir -p 'convert-module-to-op{entry=prefill,decode tokens=0 start=-1 ctx=64 kv_pad=256 flash_attn=true}' -t cpu | filecheck %s

// Without the pipeline the module has no entry to print: one line, non-zero exit.
// RUN: not strata-opt %S/../../passes/Inputs/qwen3_2l.mlir -t cpu 2>&1 | filecheck %s --check-prefix=ERR
// ERR: strata-opt: error: cpu target: the module has no func.func entry

// CHECK: """A model compiled by strata for the CPU (numpy); generated, do not edit.
// CHECK: import numpy as np
// CHECK: def rms_norm(
// CHECK: def flash_attn_ext(
// CHECK: class Model:
// CHECK: N_CTX = N_CTX
// CHECK: 'blk.0.attn_q_norm.weight',
// CHECK: 'cache_k_l1': ((64, 8), np.float32),
// CHECK: def prefill(self, tokens, start):
// CHECK: inp_tokens = host_input('tokens', tokens, start, 64)
// CHECK: Qcur_normed_0 = mul(norm_0_1, self.blk_0_attn_q_norm_weight)
// CHECK: return result_output
// CHECK: def decode(self, token, pos):
// CHECK: return result_output
