// RUN: strata-opt %s | strata-opt | filecheck %s
// RUN: strata-opt %s > %t.1.mlir
// RUN: strata-opt %t.1.mlir | diff %t.1.mlir -

// Round trip of every op and attribute of the `blueprint` dialect: parse, print, parse
// again, print. One function per op (its docstring's example), then the attributes in
// all their forms (#blueprint.format with and without a block, asymmetric int4, a
// precision with some fields absent, steps, placement, state effects) and kernel groups
// (with one, two and no results, extra attributes, on host and device).

// CHECK-LABEL: func.func @embed(
// CHECK-NEXT:    %h = blueprint.embed %tok weight "model.embed_tokens.weight" {node = "embed.embed"} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @embed(%tok: !blueprint.edge<"n", "1", i32>) {
%h = blueprint.embed %tok weight "model.embed_tokens.weight" {node = "embed.embed"} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @rms_norm(
// CHECK-NEXT:    %xn = blueprint.rms_norm %h weight "model.layers.0.input_layernorm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @rms_norm(%h: !blueprint.edge<"n", "hidden", bf16>) {
%xn = blueprint.rms_norm %h weight "model.layers.0.input_layernorm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:    %q = blueprint.linear %xn weight "model.layers.3.self_attn.q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim*2", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @linear(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%q = blueprint.linear %xn weight "model.layers.3.self_attn.q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim*2", bf16>
  func.return
}

// CHECK-LABEL: func.func @gdn_gates(
// CHECK-NEXT:    %decay, %beta = blueprint.gdn_gates %ba weights ["model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias"] : !blueprint.edge<"n", "lin_v_heads*2", f32> -> !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @gdn_gates(%ba: !blueprint.edge<"n", "lin_v_heads*2", f32>) {
%decay, %beta = blueprint.gdn_gates %ba weights ["model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias"] : !blueprint.edge<"n", "lin_v_heads*2", f32> -> !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>
  func.return
}

// CHECK-LABEL: func.func @conv1d_update(
// CHECK-NEXT:    %conv = blueprint.conv1d_update %qkvz weight "model.layers.0.linear_attn.conv1d.weight" {effects = [#blueprint.effect<conv:update>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @conv1d_update(%qkvz: !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>) {
%conv = blueprint.conv1d_update %qkvz weight "model.layers.0.linear_attn.conv1d.weight" {effects = [#blueprint.effect<conv:update>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  func.return
}

// CHECK-LABEL: func.func @state_snapshot(
// CHECK-NEXT:    blueprint.state_snapshot %conv {effects = [#blueprint.effect<conv:snapshot>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @state_snapshot(%conv: !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>) {
blueprint.state_snapshot %conv {effects = [#blueprint.effect<conv:snapshot>]} : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  func.return
}

// CHECK-LABEL: func.func @l2_norm(
// CHECK-NEXT:    %qkv = blueprint.l2_norm %conv : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @l2_norm(%conv: !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>) {
%qkv = blueprint.l2_norm %conv : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>
  func.return
}

// CHECK-LABEL: func.func @gdn_recurrence(
// CHECK-NEXT:    %core = blueprint.gdn_recurrence %decay, %beta, %qkv {effects = [#blueprint.effect<h:update>]} : !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @gdn_recurrence(%decay: !blueprint.edge<"n", "lin_v_heads", f32>, %beta: !blueprint.edge<"n", "lin_v_heads", f32>, %qkv: !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32>) {
%core = blueprint.gdn_recurrence %decay, %beta, %qkv {effects = [#blueprint.effect<h:update>]} : !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32>
  func.return
}

// CHECK-LABEL: func.func @gated_rms_norm(
// CHECK-NEXT:    %g = blueprint.gated_rms_norm %qkvz, %core weight "model.layers.0.linear_attn.norm.weight" : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>, !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @gated_rms_norm(%qkvz: !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>, %core: !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32>) {
%g = blueprint.gated_rms_norm %qkvz, %core weight "model.layers.0.linear_attn.norm.weight" : !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>, !blueprint.edge<"n", "lin_v_heads*lin_v_dim", f32> -> !blueprint.edge<"n", "lin_v_heads*lin_v_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @residual_add(
// CHECK-NEXT:    %y = blueprint.residual_add %h, %o : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @residual_add(%h: !blueprint.edge<"n", "hidden", bf16>, %o: !blueprint.edge<"n", "hidden", bf16>) {
%y = blueprint.residual_add %h, %o : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @router(
// CHECK-NEXT:    %logits = blueprint.router %xn weight "model.layers.0.mlp.gate.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "experts", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @router(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%logits = blueprint.router %xn weight "model.layers.0.mlp.gate.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "experts", bf16>
  func.return
}

// CHECK-LABEL: func.func @top_k(
// CHECK-NEXT:    %w, %ids = blueprint.top_k %logits : !blueprint.edge<"n", "experts", bf16> -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", i32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @top_k(%logits: !blueprint.edge<"n", "experts", bf16>) {
%w, %ids = blueprint.top_k %logits : !blueprint.edge<"n", "experts", bf16> -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", i32>
  func.return
}

// CHECK-LABEL: func.func @expert_gate_up(
// CHECK-NEXT:    %egu = blueprint.expert_gate_up %xn, %ids weight "model.layers.0.mlp.experts.gate_up_proj" : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "moe_inter*2", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @expert_gate_up(%xn: !blueprint.edge<"n", "hidden", bf16>, %ids: !blueprint.edge<"n", "top_k", i32>) {
%egu = blueprint.expert_gate_up %xn, %ids weight "model.layers.0.mlp.experts.gate_up_proj" : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "moe_inter*2", bf16>
  func.return
}

// CHECK-LABEL: func.func @silu_mul(
// CHECK-NEXT:    %act = blueprint.silu_mul %gu : !blueprint.edge<"n*top_k", "moe_inter*2", bf16> -> !blueprint.edge<"n*top_k", "moe_inter", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @silu_mul(%gu: !blueprint.edge<"n*top_k", "moe_inter*2", bf16>) {
%act = blueprint.silu_mul %gu : !blueprint.edge<"n*top_k", "moe_inter*2", bf16> -> !blueprint.edge<"n*top_k", "moe_inter", f32>
  func.return
}

// CHECK-LABEL: func.func @expert_down(
// CHECK-NEXT:    %ed = blueprint.expert_down %act, %ids weight "model.layers.0.mlp.experts.down_proj" : !blueprint.edge<"n*top_k", "moe_inter", f32>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @expert_down(%act: !blueprint.edge<"n*top_k", "moe_inter", f32>, %ids: !blueprint.edge<"n", "top_k", i32>) {
%ed = blueprint.expert_down %act, %ids weight "model.layers.0.mlp.experts.down_proj" : !blueprint.edge<"n*top_k", "moe_inter", f32>, !blueprint.edge<"n", "top_k", i32> -> !blueprint.edge<"n*top_k", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @blend(
// CHECK-NEXT:    %f = blueprint.blend %w, %ed, %sd, %sg : !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n*top_k", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @blend(%w: !blueprint.edge<"n", "top_k", f32>, %ed: !blueprint.edge<"n*top_k", "hidden", bf16>, %sd: !blueprint.edge<"n", "hidden", bf16>, %sg: !blueprint.edge<"n", "1", f32>) {
%f = blueprint.blend %w, %ed, %sd, %sg : !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n*top_k", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @split(
// CHECK-NEXT:    %q, %gate = blueprint.split %qg : !blueprint.edge<"n", "q_heads*head_dim*2", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @split(%qg: !blueprint.edge<"n", "q_heads*head_dim*2", bf16>) {
%q, %gate = blueprint.split %qg : !blueprint.edge<"n", "q_heads*head_dim*2", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @qk_norm(
// CHECK-NEXT:    %qn = blueprint.qk_norm %q weight "model.layers.3.self_attn.q_norm.weight" : !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @qk_norm(%q: !blueprint.edge<"n", "q_heads*head_dim", bf16>) {
%qn = blueprint.qk_norm %q weight "model.layers.3.self_attn.q_norm.weight" : !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @rope(
// CHECK-NEXT:    %qr, %kr = blueprint.rope %qn, %kn : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @rope(%qn: !blueprint.edge<"n", "q_heads*head_dim", bf16>, %kn: !blueprint.edge<"n", "kv_heads*head_dim", bf16>) {
%qr, %kr = blueprint.rope %qn, %kn : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @kv_write(
// CHECK-NEXT:    blueprint.kv_write %kr, %v {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>]} : !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @kv_write(%kr: !blueprint.edge<"n", "kv_heads*head_dim", bf16>, %v: !blueprint.edge<"n", "kv_heads*head_dim", bf16>) {
blueprint.kv_write %kr, %v {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>]} : !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @paged_attention(
// CHECK-NEXT:    %a = blueprint.paged_attention %qr, %kr, %v {effects = [#blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @paged_attention(%qr: !blueprint.edge<"n", "q_heads*head_dim", bf16>, %kr: !blueprint.edge<"n", "kv_heads*head_dim", bf16>, %v: !blueprint.edge<"n", "kv_heads*head_dim", bf16>) {
%a = blueprint.paged_attention %qr, %kr, %v {effects = [#blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16>, !blueprint.edge<"n", "kv_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @sigmoid_gate_mul(
// CHECK-NEXT:    %ag = blueprint.sigmoid_gate_mul %gate, %a : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @sigmoid_gate_mul(%gate: !blueprint.edge<"n", "q_heads*head_dim", bf16>, %a: !blueprint.edge<"n", "q_heads*head_dim", bf16>) {
%ag = blueprint.sigmoid_gate_mul %gate, %a : !blueprint.edge<"n", "q_heads*head_dim", bf16>, !blueprint.edge<"n", "q_heads*head_dim", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @final_norm(
// CHECK-NEXT:    %xn = blueprint.final_norm %h weight "model.norm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @final_norm(%h: !blueprint.edge<"n", "hidden", bf16>) {
%xn = blueprint.final_norm %h weight "model.norm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @lm_head(
// CHECK-NEXT:    %logits = blueprint.lm_head %xn weight "lm_head.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "vocab", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @lm_head(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%logits = blueprint.lm_head %xn weight "lm_head.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "vocab", bf16>
  func.return
}

// CHECK-LABEL: func.func @argmax(
// CHECK-NEXT:    %tok = blueprint.argmax %logits : !blueprint.edge<"n", "vocab", bf16> -> !blueprint.edge<"n", "1", i32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @argmax(%logits: !blueprint.edge<"n", "vocab", bf16>) {
%tok = blueprint.argmax %logits : !blueprint.edge<"n", "vocab", bf16> -> !blueprint.edge<"n", "1", i32>
  func.return
}

// The sampler, without and with its counts, per-row and one-row parameters, with a token mask.
// CHECK-LABEL: func.func @sample(
// CHECK-NEXT:    %ids = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32> -> !blueprint.edge<"n", "1", i32>
// CHECK-NEXT:    %ids2 = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr counts %pc, %oc {node = "sampler.sample", placement = #blueprint.placement<device>} : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "vocab", i32>, !blueprint.edge<"n", "vocab", i32> -> !blueprint.edge<"n", "1", i32>
// CHECK-NEXT:    %ids3 = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr mask %words : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32> mask !blueprint.edge<"n", "vocab_words", i32> -> !blueprint.edge<"n", "1", i32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @sample(%l: !blueprint.edge<"n", "vocab", f32>, %key: !blueprint.edge<"1", "2", i64>, %step: !blueprint.edge<"1", "1", i32>, %t: !blueprint.edge<"n", "1", f32>, %k: !blueprint.edge<"n", "1", i32>, %p: !blueprint.edge<"1", "1", f32>, %m: !blueprint.edge<"1", "1", f32>, %r: !blueprint.edge<"n", "1", f32>, %pr: !blueprint.edge<"1", "1", f32>, %fr: !blueprint.edge<"1", "1", f32>, %pc: !blueprint.edge<"n", "vocab", i32>, %oc: !blueprint.edge<"n", "vocab", i32>, %words: !blueprint.edge<"n", "vocab_words", i32>) {
  %ids = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32> -> !blueprint.edge<"n", "1", i32>
  %ids2 = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr counts %pc, %oc {node = "sampler.sample", placement = #blueprint.placement<device>} : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "vocab", i32>, !blueprint.edge<"n", "vocab", i32> -> !blueprint.edge<"n", "1", i32>
  %ids3 = blueprint.sample %l, %key, %step, %t, %k, %p, %m, %r, %pr, %fr mask %words : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"1", "1", f32>, !blueprint.edge<"1", "1", f32> mask !blueprint.edge<"n", "vocab_words", i32> -> !blueprint.edge<"n", "1", i32>
  func.return
}

// CHECK-LABEL: func.func @swiglu_ffn(
// CHECK-NEXT:    %f = blueprint.swiglu_ffn %xn weights ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"] : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @swiglu_ffn(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%f = blueprint.swiglu_ffn %xn weights ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"] : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @attention(
// CHECK-NEXT:    %o = blueprint.attention %xn weights ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"] {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>, #blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @attention(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%o = blueprint.attention %xn weights ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"] {effects = [#blueprint.effect<k:write>, #blueprint.effect<v:write>, #blueprint.effect<k:read>, #blueprint.effect<v:read>]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// CHECK-LABEL: func.func @collectives(
// CHECK-NEXT:    %h = blueprint.embed %tok weight "token_embd.weight" {group = "tp", ranks = 2 : i64} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    %s = blueprint.all_reduce %h {group = "tp", ranks = 2 : i64, bytes_per_row = 4096 : i64} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    %l = blueprint.all_gather %p {group = "tp", ranks = 2 : i64, bytes_per_row = 96 : i64} : !blueprint.edge<"n", "vocab / ranks", bf16> -> !blueprint.edge<"n", "vocab", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @collectives(%tok: !blueprint.edge<"n", "1", i32>, %p: !blueprint.edge<"n", "vocab / ranks", bf16>) attributes {blueprint.ranks = 2 : i64} {
%h = blueprint.embed %tok weight "token_embd.weight" {group = "tp", ranks = 2 : i64} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
%s = blueprint.all_reduce %h {group = "tp", ranks = 2 : i64, bytes_per_row = 4096 : i64} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
%l = blueprint.all_gather %p {group = "tp", ranks = 2 : i64, bytes_per_row = 96 : i64} : !blueprint.edge<"n", "vocab / ranks", bf16> -> !blueprint.edge<"n", "vocab", bf16>
  func.return
}

// CHECK-LABEL: func.func @group(
// CHECK-NEXT:    %q = blueprint.group "w8a16_m32" on device {
// CHECK-NEXT:      %y = blueprint.linear %xn weight "q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:      blueprint.yield %y : !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    } : !blueprint.edge<"n", "q_heads*head_dim", bf16>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @group(%xn: !blueprint.edge<"n", "hidden", bf16>) {
%q = blueprint.group "w8a16_m32" on device {
  %y = blueprint.linear %xn weight "q_proj.weight" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "q_heads*head_dim", bf16>
  blueprint.yield %y : !blueprint.edge<"n", "q_heads*head_dim", bf16>
} : !blueprint.edge<"n", "q_heads*head_dim", bf16>
  func.return
}

// CHECK-LABEL: func.func @attributes(
// CHECK-NEXT:    %a = blueprint.linear %x weight "w.fp8" role "qkvz" {node = "l0.gdn.qkvz", precision = #blueprint.precision<weight = #blueprint.format<fp8, block = [128, 128]>, activation = #blueprint.format<bf16>, output = #blueprint.format<bf16>, accumulate = #blueprint.format<f32>>, steps = [#blueprint.step<act, "bf16">, #blueprint.step<weight, "fp8/block128x128->bf16">, #blueprint.step<mma, "bf16*bf16">, #blueprint.step<accumulate, "f32">, #blueprint.step<scale, "f32">], placement = #blueprint.placement<device>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>
// CHECK-NEXT:    %b = blueprint.linear %x weight "w.int4" role "gate_up" {precision = #blueprint.precision<weight = #blueprint.format<int4, block = [128], asymmetric>, activation = #blueprint.format<f16>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "inter*2", bf16>
// CHECK-NEXT:    %c = blueprint.linear %x weight "w.f8" role "o" {precision = #blueprint.precision<weight = #blueprint.format<f8E4M3FN, block = [128, 128]>, output = #blueprint.format<f32>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", f32>
// CHECK-NEXT:    %d = blueprint.rms_norm %x weight "norm.weight" {precision = #blueprint.precision<activation = #blueprint.format<bf16>, output = #blueprint.format<bf16>>, steps = [#blueprint.step<compute, "f32">]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    %h = blueprint.embed %tok weight "embed.weight" {placement = #blueprint.placement<host>, steps = [#blueprint.step<gather, "bf16">]} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    %e = blueprint.silu_mul %b : !blueprint.edge<"n", "inter*2", bf16> -> !blueprint.edge<"n", "(inter)", f32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @attributes(%x: !blueprint.edge<"n", "hidden", bf16>, %tok: !blueprint.edge<"n", "1", i32>) {
  %a = blueprint.linear %x weight "w.fp8" role "qkvz" {node = "l0.gdn.qkvz", precision = #blueprint.precision<weight = #blueprint.format<fp8, block = [128, 128]>, activation = #blueprint.format<bf16>, output = #blueprint.format<bf16>, accumulate = #blueprint.format<f32>>, steps = [#blueprint.step<act, "bf16">, #blueprint.step<weight, "fp8/block128x128->bf16">, #blueprint.step<mma, "bf16*bf16">, #blueprint.step<accumulate, "f32">, #blueprint.step<scale, "f32">], placement = #blueprint.placement<device>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", bf16>
  %b = blueprint.linear %x weight "w.int4" role "gate_up" {precision = #blueprint.precision<weight = #blueprint.format<int4, block = [128], asymmetric>, activation = #blueprint.format<f16>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "inter*2", bf16>
  %c = blueprint.linear %x weight "w.f8" role "o" {precision = #blueprint.precision<weight = #blueprint.format<f8E4M3FN, block = [128, 128]>, output = #blueprint.format<f32>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", f32>
  %d = blueprint.rms_norm %x weight "norm.weight" {precision = #blueprint.precision<activation = #blueprint.format<bf16>, output = #blueprint.format<bf16>>, steps = [#blueprint.step<compute, "f32">]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %h = blueprint.embed %tok weight "embed.weight" {placement = #blueprint.placement<host>, steps = [#blueprint.step<gather, "bf16">]} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
  %e = blueprint.silu_mul %b : !blueprint.edge<"n", "inter*2", bf16> -> !blueprint.edge<"n", "(inter)", f32>
  func.return
}

// CHECK-LABEL: func.func @decode_groups(
// CHECK-NEXT:    %h = blueprint.group "embed_row_copy" on host {
// CHECK-NEXT:      %0 = blueprint.embed %tok weight "model.embed_tokens.weight" : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:      blueprint.yield %0 : !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    } : !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    %y, %xn = blueprint.group "cross_layer_add_norm" on device attributes {kernels = ["norm::rms_norm_residual"]} {
// CHECK-NEXT:      %1 = blueprint.residual_add %prev, %o : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:      %2 = blueprint.rms_norm %1 weight "model.layers.1.input_layernorm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:      blueprint.yield %1, %2 : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    } : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
// CHECK-NEXT:    blueprint.group "argmax_host" on host {
// CHECK-NEXT:      %t = blueprint.argmax %xn : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "1", i32>
// CHECK-NEXT:      blueprint.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @decode_groups(%tok: !blueprint.edge<"n", "1", i32>, %prev: !blueprint.edge<"n", "hidden", bf16>, %o: !blueprint.edge<"n", "hidden", bf16>) {
  %h = blueprint.group "embed_row_copy" on host {
    %0 = blueprint.embed %tok weight "model.embed_tokens.weight" : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
    blueprint.yield %0 : !blueprint.edge<"n", "hidden", bf16>
  } : !blueprint.edge<"n", "hidden", bf16>
  %y, %xn = blueprint.group "cross_layer_add_norm" on device attributes {kernels = ["norm::rms_norm_residual"]} {
    %1 = blueprint.residual_add %prev, %o : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    %2 = blueprint.rms_norm %1 weight "model.layers.1.input_layernorm.weight" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    blueprint.yield %1, %2 : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
  } : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
  blueprint.group "argmax_host" on host {
    %t = blueprint.argmax %xn : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "1", i32>
    blueprint.yield
  }
  func.return
}

// The function's facts: its dims and its weight table, each entry form of the table (a
// conversion, a conversion with arguments of another stored tensor, a stored tensor alone),
// and both empty.
// CHECK-LABEL: func.func @facts()
// CHECK-SAME:  attributes {blueprint.dims = #blueprint.dims<head_dim = 8, hidden = 32, top_k = 2>, blueprint.weights = #blueprint.weights<"blk.0.attn_norm.weight" = plus_one, "blk.0.ssm_a" = neg_exp of "blk.0.ssm_a_log", "blk.0.attn_qkv.weight" = ungroup_rows [2, 0, 3, 16, 16, 32, 32] of "blk.0.ssm_in.weight", "output.weight" = "token_embd.weight", "blk.0.attn_q.weight" = split [0, 2], "blk.0.ssm_conv1d.weight" = squeeze split [0, 2, 16, 16, 32]>}
// CHECK-LABEL: func.func @no_facts()
// CHECK-SAME:  attributes {blueprint.dims = #blueprint.dims<>, blueprint.weights = #blueprint.weights<>}
func.func @facts() attributes {blueprint.dims = #blueprint.dims<head_dim = 8, hidden = 32, top_k = 2>, blueprint.weights = #blueprint.weights<"blk.0.attn_norm.weight" = plus_one, "blk.0.ssm_a" = neg_exp of "blk.0.ssm_a_log", "blk.0.attn_qkv.weight" = ungroup_rows [2, 0, 3, 16, 16, 32, 32] of "blk.0.ssm_in.weight", "output.weight" = "token_embd.weight", "blk.0.attn_q.weight" = split [0, 2], "blk.0.ssm_conv1d.weight" = squeeze split [0, 2, 16, 16, 32]>} {
  func.return
}
func.func @no_facts() attributes {blueprint.dims = #blueprint.dims<>, blueprint.weights = #blueprint.weights<>} {
  func.return
}

// GGUF's block types as weight formats (ggml's names, no block), and `gguf` (each part its own).
// CHECK-LABEL: func.func @gguf_formats(
// CHECK-NEXT:    %a = blueprint.linear %x weight "blk.0.attn_q.weight" role "q" {precision = #blueprint.precision<weight = #blueprint.format<q4_K>, activation = #blueprint.format<f32>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "hidden", f32>
// CHECK-NEXT:    %b = blueprint.linear %x weight "blk.0.ffn_gate.weight" role "gate_up" {concat = ["blk.0.ffn_up.weight"], precision = #blueprint.precision<weight = #blueprint.format<gguf>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "inter*2", f32>
func.func @gguf_formats(%x: !blueprint.edge<"n", "hidden", f32>) {
  %a = blueprint.linear %x weight "blk.0.attn_q.weight" role "q" {precision = #blueprint.precision<weight = #blueprint.format<q4_K>, activation = #blueprint.format<f32>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "hidden", f32>
  %b = blueprint.linear %x weight "blk.0.ffn_gate.weight" role "gate_up" {concat = ["blk.0.ffn_up.weight"], precision = #blueprint.precision<weight = #blueprint.format<gguf>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "inter*2", f32>
  func.return
}
