// A hand-written blueprint module for blueprint-assign-precision: the embedding, one
// Gated DeltaNet (linear attention) layer with a sparse MoE (routed and shared experts,
// as layer 0 of the kbp-graph/v1 plan of Qwen3.6-35B-A3B), the final norm, the head and the argmax. Node ids as in kbp-graph/v1.
func.func @decode(%tok: !blueprint.edge<"n", "1", i32>) {
  %h = blueprint.embed %tok weight "model.embed_tokens.weight" {node = "embed.embed"} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
  %xn = blueprint.rms_norm %h weight "model.layers.0.input_layernorm.weight" {node = "l0.gdn.input_norm"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %qkvz = blueprint.linear %xn weight "model.layers.0.linear_attn.in_proj_qkvz.weight" role "qkvz" {node = "l0.gdn.qkvz"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>
  %ba = blueprint.linear %xn weight "model.layers.0.linear_attn.in_proj_ba.weight" role "ba" {node = "l0.gdn.ba"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "lin_v_heads*2", f32>
  %decay, %beta = blueprint.gdn_gates %ba weights ["model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias"] {node = "l0.gdn.gates"} : !blueprint.edge<"n", "lin_v_heads*2", f32> -> !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>
  %conv = blueprint.conv1d_update %qkvz weight "model.layers.0.linear_attn.conv1d.weight" {node = "l0.gdn.conv", effects = [#blueprint.effect<conv:update>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  blueprint.state_snapshot %conv {node = "l0.gdn.conv_ckpt", effects = [#blueprint.effect<conv:snapshot>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  %qkv = blueprint.l2_norm %conv {node = "l0.gdn.l2"} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  %core = blueprint.gdn_recurrence %decay, %beta, %qkv {node = "l0.gdn.recur", effects = [#blueprint.effect<h:update>]} : !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32>
  %g = blueprint.gated_rms_norm %qkvz, %core weight "model.layers.0.linear_attn.norm.weight" {node = "l0.gdn.out_norm"} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>, !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", bf16>
  %o = blueprint.linear %g weight "model.layers.0.linear_attn.out_proj.weight" role "gdn_out" {node = "l0.gdn.out"} : !blueprint.edge<"n", "lin_v_heads*lin_v_dim", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %y = blueprint.residual_add %h, %o {node = "l0.gdn.add"} : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %yn = blueprint.rms_norm %y weight "model.layers.0.post_attention_layernorm.weight" {node = "l0.moe_ffn.post_norm"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %logits = blueprint.router %yn weight "model.layers.0.mlp.gate.weight" {node = "l0.moe_ffn.router"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "experts", bf16>
  %w, %ids = blueprint.top_k %logits {node = "l0.moe_ffn.top_k"} : !blueprint.edge<"n", "experts", bf16> -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", i32>
  %egu = blueprint.expert_gate_up %yn, %ids weight "model.layers.0.mlp.experts.gate_up_proj" {node = "l0.moe_ffn.experts_gate_up"} : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "moe_inter*2", bf16>
  %eact = blueprint.silu_mul %egu {node = "l0.moe_ffn.experts_act"} : !blueprint.edge<"n*top_k", "moe_inter*2", bf16> -> !blueprint.edge<"n*top_k", "moe_inter", f32>
  %ed = blueprint.expert_down %eact, %ids weight "model.layers.0.mlp.experts.down_proj" {node = "l0.moe_ffn.experts_down"} : !blueprint.edge<"n*top_k", "moe_inter", f32>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "hidden", bf16>
  %sgu = blueprint.linear %yn weight "model.layers.0.mlp.shared_expert.gate_up_proj.weight" role "shared_gate_up" {node = "l0.moe_ffn.shared_gate_up"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "shared_inter*2", bf16>
  %sact = blueprint.silu_mul %sgu {node = "l0.moe_ffn.shared_act"} : !blueprint.edge<"n", "shared_inter*2", bf16> -> !blueprint.edge<"n", "shared_inter", f32>
  %sd = blueprint.linear %sact weight "model.layers.0.mlp.shared_expert.down_proj.weight" role "shared_down" {node = "l0.moe_ffn.shared_down"} : !blueprint.edge<"n", "shared_inter", f32> -> !blueprint.edge<"n", "hidden", bf16>
  %sg = blueprint.linear %yn weight "model.layers.0.mlp.shared_expert_gate.weight" role "shared_gate" {node = "l0.moe_ffn.shared_gate"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "1", f32>
  %f = blueprint.blend %w, %ed, %sd, %sg {node = "l0.moe_ffn.blend"} : !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n*top_k", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "hidden", bf16>
  %y2 = blueprint.residual_add %y, %f {node = "l0.moe_ffn.add"} : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %fn = blueprint.final_norm %y2 weight "model.norm.weight" {node = "head.final_norm"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %out = blueprint.lm_head %fn weight "lm_head.weight" {node = "head.lm_head"} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "vocab", bf16>
  %next = blueprint.argmax %out {node = "head.argmax"} : !blueprint.edge<"n", "vocab", bf16> -> !blueprint.edge<"n", "1", i32>
  func.return
}
