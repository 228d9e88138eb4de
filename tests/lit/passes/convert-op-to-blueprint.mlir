// The op level's ggml subgraphs become kbp-graph/v1's semantic nodes: a Gated DeltaNet + MoE
// layer (Qwen3.5-MoE), its attention layer, the dense families' attention + FFN; prefill
// has no conv snapshot; bad options are one-line errors.
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=256},convert-op-to-blueprint{mode=decode rows=1}' | filecheck %s --check-prefix=GDN
// RUN: strata-opt %S/Inputs/qwen35moe_4l.mlir -p 'convert-module-to-op{entry=prefill tokens=3 start=0 ctx=256},convert-op-to-blueprint{mode=prefill rows=3}' | filecheck %s --check-prefix=PREFILL
// RUN: strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=256},convert-op-to-blueprint' | filecheck %s --check-prefix=DENSE
// RUN: not strata-opt %S/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=5 ctx=256},convert-op-to-blueprint{mode=draft rows=2}' 2>&1 | filecheck %s --check-prefix=ERR

// GDN: func.func @decode(%tokens: !blueprint.edge<"n", "1", i32>) -> (!blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "vocab", f32>) attributes {blueprint.mode = "decode", blueprint.rows = 1 : i64, blueprint.layers = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
// GDN: %embed.h = blueprint.embed %tokens weight "token_embd.weight" {node = "embed.embed", edges = ["embed.h"]}
// GDN: %l0.gdn.xn = blueprint.rms_norm %embed.h weight "blk.0.attn_norm.weight" {node = "l0.gdn.input_norm"
// GDN: %l0.gdn.qkvz = blueprint.linear %l0.gdn.xn weight "blk.0.attn_qkv.weight" role "qkvz" {node = "l0.gdn.qkvz", edges = ["l0.gdn.qkvz"], concat = ["blk.0.attn_gate.weight"]} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim*2", f32>
// GDN: %l0.gdn.ba = blueprint.linear %l0.gdn.xn weight "blk.0.ssm_beta.weight" role "ba" {node = "l0.gdn.ba", edges = ["l0.gdn.ba"], concat = ["blk.0.ssm_alpha.weight"]} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "lin_v_heads*2", f32>
// GDN: %l0.gdn.decay, %l0.gdn.beta = blueprint.gdn_gates %l0.gdn.ba weights ["blk.0.ssm_a", "blk.0.ssm_dt.bias"] {{.*}}point = {gate = "softplus", decay = "head"}
// GDN: %l0.gdn.conv = blueprint.conv1d_update %l0.gdn.qkvz weight "blk.0.ssm_conv1d.weight" {{.*}}effects = [#blueprint.effect<conv:update>], slots = ["cache_r_l0"]
// GDN: blueprint.state_snapshot %l0.gdn.conv {node = "l0.gdn.conv_ckpt", effects = [#blueprint.effect<conv:snapshot>], slots = ["cache_r_l0"]}
// GDN: %l0.gdn.qkv = blueprint.l2_norm %l0.gdn.conv
// GDN: %l0.gdn.core = blueprint.gdn_recurrence %l0.gdn.decay, %l0.gdn.beta, %l0.gdn.qkv {{.*}}effects = [#blueprint.effect<h:update>], slots = ["cache_s_l0"]
// GDN: %l0.gdn.gated = blueprint.gated_rms_norm %l0.gdn.qkvz, %l0.gdn.core
// GDN: %l0.gdn.o = blueprint.linear %l0.gdn.gated weight "blk.0.ssm_out.weight" role "gdn_out"
// GDN: %l0.gdn.y = blueprint.residual_add %embed.h, %l0.gdn.o
// GDN: %l0.moe_ffn.xn = blueprint.rms_norm %l0.gdn.y weight "blk.0.post_attention_norm.weight" {node = "l0.moe_ffn.post_norm"
// GDN: %l0.moe_ffn.router_logits = blueprint.router %l0.moe_ffn.xn
// GDN: %l0.moe_ffn.topk_w, %l0.moe_ffn.topk_id = blueprint.top_k %l0.moe_ffn.router_logits {{.*}} -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", i32>
// GDN: %l0.moe_ffn.egu = blueprint.expert_gate_up %l0.moe_ffn.xn, %l0.moe_ffn.topk_id weight "blk.0.ffn_gate_exps.weight" {{.*}}concat = ["blk.0.ffn_up_exps.weight"]} {{.*}} -> !blueprint.edge<"n*top_k", "moe_inter*2", f32>
// GDN: %l0.moe_ffn.sgu = blueprint.linear %l0.moe_ffn.xn weight "blk.0.ffn_gate_shexp.weight" role "shared_gate_up"
// GDN: %l0.moe_ffn.eact = blueprint.silu_mul %l0.moe_ffn.egu
// GDN: %l0.moe_ffn.edown = blueprint.expert_down %l0.moe_ffn.eact, %l0.moe_ffn.topk_id
// GDN: %l0.moe_ffn.sact = blueprint.silu_mul %l0.moe_ffn.sgu
// GDN: %l0.moe_ffn.sdown = blueprint.linear %l0.moe_ffn.sact weight "blk.0.ffn_down_shexp.weight" role "shared_down"
// GDN: %l0.moe_ffn.sg = blueprint.linear %l0.moe_ffn.xn weight "blk.0.ffn_gate_inp_shexp.weight" role "shared_gate"
// GDN: %l0.moe_ffn.f = blueprint.blend %l0.moe_ffn.topk_w, %l0.moe_ffn.edown, %l0.moe_ffn.sdown, %l0.moe_ffn.sg
// GDN: %l0.moe_ffn.y = blueprint.residual_add %l0.gdn.y, %l0.moe_ffn.f
// GDN: %l3.attn.xn = blueprint.rms_norm %l2.moe_ffn.y weight "blk.3.attn_norm.weight"
// GDN: %l3.attn.qg = blueprint.linear %l3.attn.xn weight "blk.3.attn_q.weight" role "q" {{.*}} -> !blueprint.edge<"n", "q_heads*head_dim*2", f32>
// GDN: %l3.attn.q, %l3.attn.gate = blueprint.split %l3.attn.qg {{.*}}point = {layout = "interleaved"}
// GDN: %l3.attn.k = blueprint.linear %l3.attn.xn weight "blk.3.attn_k.weight" role "k"
// GDN: %l3.attn.v = blueprint.linear %l3.attn.xn weight "blk.3.attn_v.weight" role "v"
// GDN: %l3.attn.qn = blueprint.qk_norm %l3.attn.q
// GDN: %l3.attn.kn = blueprint.qk_norm %l3.attn.k
// GDN: %l3.attn.qr, %l3.attn.kr = blueprint.rope %l3.attn.qn, %l3.attn.kn {{.*}}mode = "imrope"
// GDN: blueprint.kv_write %l3.attn.kr, %l3.attn.v {{.*}}slots = ["cache_k_l3", "cache_v_l3"]
// GDN: %l3.attn.a = blueprint.paged_attention %l3.attn.qr, %l3.attn.kr, %l3.attn.v
// GDN: %l3.attn.ag = blueprint.sigmoid_gate_mul %l3.attn.gate, %l3.attn.a
// GDN: %l3.attn.o = blueprint.linear %l3.attn.ag weight "blk.3.attn_output.weight" role "o"
// GDN: %head.xn = blueprint.final_norm %l3.moe_ffn.y weight "output_norm.weight"
// GDN: %head.logits = blueprint.lm_head %head.xn weight "output.weight"
// GDN: %head.next = blueprint.argmax %head.logits
// GDN: func.return %head.next, %head.logits

// PREFILL: blueprint.mode = "prefill", blueprint.rows = 3 : i64
// PREFILL-NOT: conv_ckpt
// PREFILL: %l0.gdn.qkv = blueprint.l2_norm %l0.gdn.conv

// DENSE: blueprint.layers = ["full_attention", "full_attention"]
// DENSE: %l0.attn.q = blueprint.linear %l0.attn.xn weight "blk.0.attn_q.weight" role "q" {{.*}} -> !blueprint.edge<"n", "q_heads*head_dim", f32>
// DENSE-NOT: blueprint.split
// DENSE: %l0.attn.qr, %l0.attn.kr = blueprint.rope %l0.attn.q, %l0.attn.k
// DENSE: %l0.ffn.xn = blueprint.rms_norm %l0.attn.y weight "blk.0.ffn_norm.weight" {node = "l0.ffn.post_norm"
// DENSE: %l0.ffn.gu = blueprint.linear %l0.ffn.xn weight "blk.0.ffn_gate.weight" role "gate_up" {{.*}}concat = ["blk.0.ffn_up.weight"]} {{.*}} -> !blueprint.edge<"n", "inter*2", f32>
// DENSE: %l0.ffn.act = blueprint.silu_mul %l0.ffn.gu
// DENSE: %l0.ffn.d = blueprint.linear %l0.ffn.act weight "blk.0.ffn_down.weight" role "down"
// DENSE: %l0.ffn.y = blueprint.residual_add %l0.attn.y, %l0.ffn.d

// ERR: convert-op-to-blueprint: mode draft takes exactly 1 row, got 2
