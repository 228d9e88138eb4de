// strata-opt's blueprint targets on a fused blueprint shaped like the kbp-graph/v1 plan of Qwen3.6-35B-A3B
// (passes/Inputs/blueprint-fused-3l.mlir): kbp-graph/v1 JSON in its compact key order, the
// Graphviz digraph with one cluster per group, the group table. A module without a blueprint
// function is a one-line error.

// RUN: strata-opt %S/../../passes/Inputs/blueprint-fused-3l.mlir -t kbp-graph | filecheck %s --check-prefix=JSON
// RUN: strata-opt %S/../../passes/Inputs/blueprint-fused-3l.mlir -p blueprint-collapse -t kbp-graph | filecheck %s --check-prefix=JSON
// RUN: strata-opt %S/../../passes/Inputs/blueprint-fused-3l.mlir -t blueprint-dot | filecheck %s --check-prefix=DOT
// RUN: strata-opt %S/../../passes/Inputs/blueprint-fused-3l.mlir -t blueprint-table | filecheck %s --check-prefix=TABLE
// RUN: not strata-opt %s -t kbp-graph 2>&1 | filecheck %s --check-prefix=ERR

// JSON: {"schema":"kbp-graph/v1","blueprint_id":"strata:{{[0-9a-f]+}}","lineage":"sha256:{{[0-9a-f]+}}","revision":0,"exported_by":"strata blueprint","arm":{"mode":"decode","rows":1,"digest":"{{[0-9a-f]+}}"},"layers":[{"index":0,"kind":"linear_attention","template":"gdn+moe_ffn","blocks":["l0.gdn","l0.moe_ffn"]},
// JSON-SAME: "nodes":[{"id":"embed.embed","order":0,"layer":null,"block":"embed","block_type":"embed","kind":null,"op":"embed","roles":[],"inserted":false,"precision":{"weight":null,"activation":null,"output":"bf16"},"steps":["gather bf16"],"group":0,"kernel":null,"family":null,"point":null,"compute":null,"numerics":"reference","where":"host","state":null},
// JSON-SAME: "edges":[{"id":"embed.h","from":0,"to":1,"format":"bf16","rows":"n","dim":"hidden","fused":false},{"id":"embed.h","from":0,"to":11,
// JSON-SAME: {"id":"l0.gdn.ba","from":3,"to":4,"format":"f32","rows":"n","dim":"lin_v_heads*2","fused":true}
// JSON-SAME: "groups":[{"id":0,"rule":"embed_row_copy","kernels":[],"where":"host","numerics":"reference","compute":null,"nodes":[0]}
// JSON-SAME: {"id":14,"rule":"cross_layer_add_norm","kernels":["residual_add_rms_norm_exact::residual_add_rms_norm_exact"],"where":"device","numerics":"bit_identical(residual_add_rms_norm_exact_microtest)","compute":"memory","nodes":[23,24]}
// JSON-SAME: "collapsed":{"prologue":["embed"],"layout":["gdn+moe_ffn","gdn+moe_ffn","attn+moe_ffn"],"epilogue":["head"],"templates":{"embed":
// JSON-SAME: "ports":{"in":[0,10],"out":[22]},"instances":[0,1]}
// JSON-SAME: "provenance":{"kind":"strata-opt","model":"Qwen3.6-35B-A3B-FP8","recipe":"fp8-bf16head","mode":"decode","rows":1,

// DOT: digraph "decode" {
// DOT: subgraph "cluster_g14" {
// DOT-NEXT: label="#14 cross_layer_add_norm";
// DOT-NEXT: "n23" [label="l0.moe_ffn.add\nresidual_add\na bf16 o bf16", shape=ellipse];
// DOT-NEXT: "n24" [label="l1.gdn.input_norm\nrms_norm\na bf16 o bf16", shape=ellipse];
// DOT-NEXT: }
// DOT: "n5" -> "n6" [label="f32 n x lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", style=bold];

// TABLE: group  rule                        nodes  node ids {{ +}}weight            act       out      state
// TABLE-NEXT: 0      embed_row_copy              1      embed.embed {{ +}}-                 -         bf16     -
// TABLE: 4      gdn_conv_l2_f32_per_row     3      l0.gdn.{conv,conv_ckpt,l2} {{ +}}-                 bf16,f32  f32      conv:update,conv:snapshot
// TABLE: 48     argmax_host                 1      head.argmax {{ +}}-                 bf16      i32      -

// ERR: strata-opt: error: kbp-graph: {{.*}}exporters.mlir: expected one function of blueprint nodes, found 0

func.func @empty() {
  func.return
}
