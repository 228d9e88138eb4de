// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'shard-tensor-parallel{tp=2 ep=2}' | filecheck %s
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'shard-tensor-parallel{tp=2 ep=2},convert-module-to-op{entry=decode start=3 ctx=16 kv_pad=16}' | filecheck %s --check-prefix=OP
// RUN: not strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'shard-tensor-parallel{tp=2 ep=4}' 2>&1 | filecheck %s --check-prefix=BAD

// Expert parallelism on Inputs/qwen35moe_4l.mlir (8 experts of 32, a shared expert of 32):
// whole experts per rank, the router replicated, the shared expert split as a dense FFN, one
// sum of routed + shared per sparse layer.

// CHECK: module.sub @mlp : "SparseMoe<H, Experts, TopK, MoeInner, SharedInner / Shards, T, Shards>" {{{.*}}tp_reduce, tp_experts}
// CHECK: module.block @SparseMoe [{{.*}}"T: Float", "Shards: Dim"]
// CHECK-NEXT: module.sub @router : "Linear<H, Experts, T>"
// CHECK: module.param @gate_exps : "Tensor[Experts / Shards, MoeInner, H; T]" {{{.*}}tp_split = array<i64: 0, 2>}
// CHECK: module.param @down_exps : "Tensor[Experts / Shards, H, MoeInner; T]" {{{.*}}tp_split = array<i64: 0, 2>}

// OP: op.param "blk.0.ffn_gate_inp.weight" {op.block = #op.block<"std.nn.linear", "layers.0.mlp.router", "weight">} : tensor<8x64xf32>
// OP: op.param "blk.0.ffn_gate_exps.weight" {split = array<i64: 0, 2>, op.block = #op.block<"std.moe.sparse", "layers.0.mlp", "gate_exps">} : tensor<4x32x64xf32>
// OP-NEXT: op.mul_mat_id_sharded {{.*}}name = "ffn_moe_gate-0"{{.*}} -> tensor<1x2x32xf32>
// OP: op.mul_mat_id_sharded {{.*}}name = "ffn_moe_down-0"
// OP: op.param "blk.0.ffn_gate_shexp.weight" {split = array<i64: 0, 2>, op.block = #op.block<"std.nn.linear", "layers.0.mlp.shared_expert.gate", "weight">} : tensor<16x64xf32>
// OP: op.param "blk.0.ffn_down_shexp.weight" {split = array<i64: 1, 2>, op.block = #op.block<"std.nn.linear", "layers.0.mlp.shared_expert.down", "weight">} : tensor<64x16xf32>
// OP: op.all_reduce {{.*}}name = "ffn_out-0"

// BAD: shard-tensor-parallel{tp=2 ep=4}: ep is 1 (experts split by their intermediate dim) or the ranks, 2 (whole experts per rank)
