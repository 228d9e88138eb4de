// blueprint-collapse on a fused blueprint shaped like the Qwen3.6-35B-A3B kbp-graph/v1 plan (Inputs/blueprint-fused-3l.mlir: embed,
// two Gated DeltaNet + MoE layers, one gated-attention + MoE layer, head): the function gets
// blueprint.collapsed with the plan's template names, instances and ports, and nothing else changes.
// A layer whose precision differs from its template's is a template of its own (#2). The error: a
// node outside any layer between two layers.

// RUN: strata-opt %S/Inputs/blueprint-fused-3l.mlir -p blueprint-collapse | filecheck %s
// RUN: strata-opt %S/Inputs/blueprint-fused-3l.mlir -p blueprint-collapse,blueprint-collapse | filecheck %s
// RUN: strata-opt %S/Inputs/blueprint-fused-3l.mlir -p blueprint-collapse | sed 's/, blueprint.collapsed = {.*}}}}} {$/} {/' > %t.after
// RUN: strata-opt %S/Inputs/blueprint-fused-3l.mlir > %t.before
// RUN: diff %t.before %t.after
// RUN: sed 's/node = "l1.gdn.qkvz", edges = \["l1.gdn.qkvz"\], precision = #blueprint.precision<weight = #blueprint.format<fp8, block = \[128, 128\]>/node = "l1.gdn.qkvz", edges = ["l1.gdn.qkvz"], precision = #blueprint.precision<weight = #blueprint.format<bf16>/' %S/Inputs/blueprint-fused-3l.mlir | strata-opt -p blueprint-collapse | filecheck %s --check-prefix=SPLIT
// RUN: not strata-opt %S/Inputs/blueprint-collapse-errors.mlir -p blueprint-collapse 2>&1 | filecheck %s --check-prefix=ERR

// CHECK: func.func @decode({{.*}}blueprint.layers = ["linear_attention", "linear_attention", "full_attention"]
// CHECK-SAME: blueprint.collapsed = {prologue = ["embed"], layout = ["gdn+moe_ffn", "gdn+moe_ffn", "attn+moe_ffn"], epilogue = ["head"]
// CHECK-SAME: templates = {embed = {instances = [], ports = {in = [], out = [0 : i64]}}
// CHECK-SAME: "gdn+moe_ffn" = {instances = [0 : i64, 1 : i64], ports = {in = [0 : i64, 10 : i64], out = [22 : i64]}}
// CHECK-SAME: "attn+moe_ffn" = {instances = [2 : i64], ports = {in = [0 : i64, 12 : i64], out = [24 : i64]}}
// CHECK-SAME: head = {instances = [], ports = {in = [0 : i64], out = []}}}}} {
// CHECK-NOT: blueprint.collapsed

// SPLIT: layout = ["gdn+moe_ffn", "gdn+moe_ffn#2", "attn+moe_ffn"]
// SPLIT-SAME: "gdn+moe_ffn" = {instances = [0 : i64]
// SPLIT-SAME: "gdn+moe_ffn#2" = {instances = [1 : i64]

// ERR: strata-opt: error: blueprint-collapse: @decode: blueprint: node 'mid.norm' lies between layers but belongs to none
