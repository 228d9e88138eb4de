// blueprint-fuse after blueprint-assign-precision and blueprint-place-state on a kbp-graph/v1-shaped
// function (Inputs/blueprint-seed-layers.mlir): every node lands in exactly one group, with the
// kbp-graph/v1 plan's rule names and members for a GDN + MoE layer, a gated attention + MoE layer and the head
// under fp8-bf16head. Under w4a16 the same groups take int4 names. The points of a group's members
// spread over the group (ba gets the gates' point, shared_gate the blend's).

// RUN: strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-assign-precision{recipe=fp8-bf16head},blueprint-place-state,blueprint-fuse' | filecheck %s
// RUN: strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-assign-precision{recipe=w4a16},blueprint-place-state,blueprint-fuse' | filecheck %s --check-prefix=W4
// RUN: strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-assign-precision,blueprint-place-state,blueprint-fuse,blueprint-fuse' | filecheck %s
// RUN: not strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-assign-precision,blueprint-fuse' 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-place-state,blueprint-fuse{rules=nope}' 2>&1 | filecheck %s --check-prefix=ERR-RULES

// CHECK: %embed_h = blueprint.group "embed_row_copy" on host attributes {kernel = "strata::embed_row_copy", family = "embed", compute = "memory", numerics = "reference"} {
// CHECK-NEXT: blueprint.embed
// CHECK-NEXT: blueprint.yield
// CHECK: blueprint.group "input_norm_residual" on device
// CHECK-NEXT: node = "l0.gdn.input_norm"
// CHECK: blueprint.group "w8a16_m32" on device attributes {kernel = "strata::w8a16_gemm", family = "w8a16_gemm", compute = "tensor_core", numerics = "reference"}
// CHECK-NEXT: node = "l0.gdn.qkvz"
// CHECK: %l0_gdn_decay, %l0_gdn_beta = blueprint.group "gdn_ba_gates_gemv_per_row" on device
// CHECK-NEXT: blueprint.linear {{.*}}node = "l0.gdn.ba"{{.*}}point = {gate = "softplus", decay = "head"}
// CHECK-NEXT: blueprint.gdn_gates {{.*}}node = "l0.gdn.gates"
// CHECK-NEXT: blueprint.yield
// CHECK: blueprint.group "gdn_conv_l2_f32_per_row" on device
// CHECK-NEXT: node = "l0.gdn.conv"
// CHECK-NEXT: node = "l0.gdn.conv_ckpt"
// CHECK-NEXT: node = "l0.gdn.l2"
// CHECK-NEXT: blueprint.yield
// CHECK: blueprint.group "gdn_recurrence_f32_per_row" on device
// CHECK: blueprint.group "gdn_out_norm_f32_per_row" on device
// CHECK: blueprint.group "w8a16_m32" on device
// CHECK-NEXT: node = "l0.gdn.out"
// CHECK: %l0_gdn_y, %l0_moe_ffn_xn = blueprint.group "residual_add_post_norm" on device
// CHECK-NEXT: node = "l0.gdn.add"
// CHECK-NEXT: node = "l0.moe_ffn.post_norm"
// CHECK: blueprint.group "moe_router_gemv" on device
// CHECK: blueprint.group "moe_topk_softmax" on device
// CHECK: blueprint.group "moe_gate_up_shared_fp8" on device
// CHECK-NEXT: node = "l0.moe_ffn.experts_gate_up"
// CHECK-NEXT: node = "l0.moe_ffn.shared_gate_up"
// CHECK: blueprint.group "moe_silu_down_shared_fp8" on device
// CHECK-NEXT: node = "l0.moe_ffn.experts_act"
// CHECK-NEXT: node = "l0.moe_ffn.experts_down"
// CHECK-NEXT: node = "l0.moe_ffn.shared_act"
// CHECK-NEXT: node = "l0.moe_ffn.shared_down"
// CHECK: blueprint.group "moe_weighted_sum_blend" on device
// CHECK-NEXT: node = "l0.moe_ffn.shared_gate"{{.*}}point = {shared_gate = "sigmoid"}
// CHECK-NEXT: node = "l0.moe_ffn.blend"
// CHECK: blueprint.group "cross_layer_add_norm" on device attributes {kernel = "strata::residual_add_rms_norm_exact", family = "rms_norm", compute = "memory", numerics = "bit_identical(residual_add_rms_norm)"}
// CHECK-NEXT: node = "l0.moe_ffn.add"
// CHECK-NEXT: node = "l1.attn.input_norm"
// CHECK: blueprint.group "w8a16_m32"
// CHECK-NEXT: node = "l1.attn.q"
// CHECK: blueprint.group "deinterleave_qg"
// CHECK: blueprint.group "w8a16_m32"
// CHECK-NEXT: node = "l1.attn.k"
// CHECK: blueprint.group "w8a16_m32"
// CHECK-NEXT: node = "l1.attn.v"
// CHECK: blueprint.group "qk_norm_rows"
// CHECK: blueprint.group "qk_norm_rows"
// CHECK: blueprint.group "rope_mrope_interleaved"
// CHECK: blueprint.group "kv_write_bf16"
// CHECK: blueprint.group "paged_attention_bf16"
// CHECK: blueprint.group "sigmoid_gate_mul"
// CHECK: blueprint.group "w8a16_m32"
// CHECK-NEXT: node = "l1.attn.o"
// CHECK: blueprint.group "residual_add_post_norm"
// CHECK: blueprint.group "moe_router_gemv"
// CHECK: blueprint.group "moe_topk_softmax"
// CHECK: blueprint.group "moe_gate_up_shared_fp8"
// CHECK: blueprint.group "moe_silu_down_shared_fp8"
// CHECK: blueprint.group "moe_weighted_sum_blend"
// CHECK: blueprint.group "ffn_residual_add" on device
// CHECK-NEXT: node = "l1.moe_ffn.add"
// CHECK: blueprint.group "final_norm" on device
// CHECK: blueprint.group "lm_head_bf16_gemv" on device
// CHECK: %head_next = blueprint.group "argmax_host" on host
// CHECK: func.return %head_next
// CHECK-NOT: blueprint.group

// W4: blueprint.group "w4a16_m32" on device attributes {kernel = "strata::w4a16_gemm", family = "w4a16_gemm"
// W4-NEXT: node = "l0.gdn.qkvz"
// W4: blueprint.group "moe_gate_up_shared_int4"
// W4: blueprint.group "moe_silu_down_shared_int4"
// W4: blueprint.group "kv_write_bf16"
// W4: blueprint.group "paged_attention_bf16"
// W4: blueprint.group "lm_head_bf16_gemv"

// ERR: blueprint-fuse: blueprint.embed 'embed.embed' has no placement (run blueprint-place-state first)
// ERR-RULES: blueprint-fuse: unknown rule set 'nope' (known: rules)
