// blueprint-place-state on a kbp-graph/v1-shaped function (Inputs/blueprint-seed-layers.mlir: a GDN +
// MoE layer, a gated attention + MoE layer, the head; no effects given). Defaults are kbp-graph/v1's:
// embed and argmax on the host, everything else on the device, a paged KV cache; stateful nodes
// get their kind's effects. Options move embed/argmax to the device and make the KV contiguous.
// In verify mode the recurrence's state h gets an inserted snapshot (the conv one exists).

// RUN: strata-opt %S/Inputs/blueprint-seed-layers.mlir -p blueprint-place-state | filecheck %s
// RUN: strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-place-state{kv=contiguous embed=device sample=device}' | filecheck %s --check-prefix=OPT
// RUN: sed 's/"decode"/"verify"/' %S/Inputs/blueprint-seed-layers.mlir | strata-opt -p blueprint-place-state | filecheck %s --check-prefix=VERIFY
// RUN: not strata-opt %S/Inputs/blueprint-seed-layers.mlir -p 'blueprint-place-state{kv=ring}' 2>&1 | filecheck %s --check-prefix=ERR

// CHECK: blueprint.embed {{.*}}node = "embed.embed"{{.*}}placement = #blueprint.placement<host>
// CHECK: blueprint.rms_norm {{.*}}node = "l0.gdn.input_norm"{{.*}}placement = #blueprint.placement<device>
// CHECK: blueprint.conv1d_update {{.*}}node = "l0.gdn.conv"{{.*}}placement = #blueprint.placement<device>, effects = [#blueprint.effect<conv:update>]
// CHECK-NEXT: blueprint.state_snapshot {{.*}}node = "l0.gdn.conv_ckpt"{{.*}}effects = [#blueprint.effect<conv:snapshot>]
// CHECK: blueprint.gdn_recurrence {{.*}}node = "l0.gdn.recur"{{.*}}effects = [#blueprint.effect<h:update>]
// CHECK-NOT: blueprint.state_snapshot
// CHECK: blueprint.kv_write {{.*}}node = "l1.attn.kv_write", placement = #blueprint.placement<device>, kv_layout = "paged", effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>]
// CHECK-NEXT: blueprint.paged_attention {{.*}}node = "l1.attn.attend"{{.*}}kv_layout = "paged", effects = [#blueprint.effect<k:read>, #blueprint.effect<v:read>]
// CHECK: blueprint.lm_head {{.*}}placement = #blueprint.placement<device>
// CHECK-NEXT: blueprint.argmax {{.*}}node = "head.argmax"{{.*}}placement = #blueprint.placement<host>

// OPT: blueprint.embed {{.*}}placement = #blueprint.placement<device>
// OPT: blueprint.kv_write {{.*}}kv_layout = "contiguous"
// OPT: blueprint.paged_attention {{.*}}kv_layout = "contiguous"
// OPT: blueprint.argmax {{.*}}placement = #blueprint.placement<device>

// VERIFY: %l0_gdn_core = blueprint.gdn_recurrence
// VERIFY-NEXT: blueprint.state_snapshot %l0_gdn_core {effects = [#blueprint.effect<h:snapshot>], inserted, placement = #blueprint.placement<device>, node = "l0.gdn.recur_ckpt"}

// ERR: blueprint-place-state: kv='ring' is not one of paged, contiguous
