// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'shard-tensor-parallel{tp=2}' | filecheck %s
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'shard-tensor-parallel{tp=2},convert-module-to-op{entry=decode start=3 ctx=16 kv_pad=16}' | filecheck %s --check-prefix=OP

// shard-tensor-parallel on Inputs/llama2l.mlir (vocab 32, hidden 16, 4 query heads and 2 KV
// heads of 4, ffn 40). The plan on the module level: Shards bound, the embedding per rank, each linear's piece and
// the sums; the op level: one SPMD function whose params are pieces, joined by collectives.

// CHECK: generics = {{{.*}}Shards = 2 : i64
// CHECK: module.sub @embedding : "Embedding<Vocab / Shards, H, T>" {{{.*}}tp_split = "vocab"
// CHECK: module.sub @lm_head : "Linear<H, Vocab / Shards, T>" {{{.*}}tp_split = "out", tp_gather
// CHECK: module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {{{.*}}tp_split = "out"
// CHECK: module.sub @o_proj : "Linear<(Heads / Shards) * HeadDim, H, T>" {{{.*}}tp_split = "in", tp_reduce
// CHECK: module.sub @down : "Linear<Inner, H, T>" {{{.*}}tp_split = "in", tp_reduce

// OP: func.func @decode() -> tensor<1x32xf32> attributes {{{.*}}op.ranks = 2 : i64
// OP: op.param "token_embd.weight" {split = array<i64: 0, 2>, op.block = #op.block<"std.nn.embedding", "embedding", "weight">} : tensor<16x16xf32>
// OP: op.get_rows_sharded
// OP: op.all_reduce {{.*}}name = "embd"
// OP: op.param "blk.0.attn_q.weight" {split = array<i64: 0, 2>, op.block = #op.block<"std.nn.linear", "layers.0.attention.q_proj", "weight">} : tensor<8x16xf32>
// OP: op.param "blk.0.attn_output.weight" {split = array<i64: 1, 2>, op.block = #op.block<"std.nn.linear", "layers.0.attention.o_proj", "weight">} : tensor<16x8xf32>
// OP: op.all_reduce
// OP: op.param "blk.0.ffn_down.weight" {split = array<i64: 1, 2>, op.block = #op.block<"std.nn.linear", "layers.0.mlp.down", "weight">} : tensor<16x20xf32>
// OP: op.all_reduce {{.*}}name = "ffn_out-0"
// OP: op.all_gather {{.*}}axis = 1 : i64{{.*}}name = "result_output"{{.*}} : tensor<1x16xf32> -> tensor<1x32xf32>
