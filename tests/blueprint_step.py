"""A tiny blueprint decode step (one Gated DeltaNet layer + MoE) with its weights and state,
shared by the blueprint interpreter's tests and the precision pass's before/after tests."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func

from strata.dialects import parse_ir


def E(rows: str, dim: str, el: str = "f32") -> str:
    return f'!blueprint.edge<"{rows}", "{dim}", {el}>'


HID, HK, DK, HV, DV, KCONV, NE, TOPK, INTER, VOCAB = 32, 1, 8, 2, 8, 4, 4, 2, 16, 20
C = 2 * HK * DK + HV * DV
DIMS = dict(lin_k_heads=HK, lin_k_dim=DK, lin_v_heads=HV, lin_v_dim=DV, top_k=TOPK)


def _decode_text(wprec: str | None) -> str:
    p = f" {{precision = #blueprint.precision<weight = {wprec}>}}" if wprec else ""
    H, X, Z, BA, CV, V = E("n", "hidden", "bf16"), E("n", "qkvz", "bf16"), E("n", "qkvz", "bf16"), E("n", "ba", "f32"), E("n", "c", "f32"), E("n", "v", "f32")
    HV_, IDS, L = E("n", "hv"), E("n", "top_k", "i32"), E("n", "experts", "bf16")
    GU, ACT, ED = E("n*top_k", "moe_inter*2", "bf16"), E("n*top_k", "moe_inter", "f32"), E("n*top_k", "hidden", "bf16")
    SGU, SACT, SG = E("n", "moe_inter*2", "bf16"), E("n", "moe_inter", "f32"), E("n", "1", "f32")
    return f'''
func.func @decode(%tok: {E("n", "1", "i32")}) -> ({E("n", "1", "i32")}, {E("n", "vocab", "bf16")}) {{
  %h = blueprint.embed %tok weight "embed" : {E("n", "1", "i32")} -> {H}
  %xn = blueprint.rms_norm %h weight "ln1" : {H} -> {H}
  %qkvz = blueprint.linear %xn weight "qkvz" role "qkvz"{p} : {H} -> {Z}
  %ba = blueprint.linear %xn weight "ba" role "ba"{p} : {H} -> {BA}
  %conv = blueprint.conv1d_update %qkvz weight "conv" {{effects = [#blueprint.effect<conv:update>]}} : {Z} -> {CV}
  %qkv = blueprint.l2_norm %conv : {CV} -> {CV}
  %decay, %beta = blueprint.gdn_gates %ba weights ["A", "dt_bias"] : {BA} -> {HV_}, {HV_}
  %core = blueprint.gdn_recurrence %decay, %beta, %qkv {{effects = [#blueprint.effect<h:update>]}} : {HV_}, {HV_}, {CV} -> {V}
  %g = blueprint.gated_rms_norm %qkvz, %core weight "gnorm" : {Z}, {V} -> {V}
  %o = blueprint.linear %g weight "out" role "o"{p} : {V} -> {H}
  %y, %yn = blueprint.group "cross_layer_add_norm" on device {{
    %1 = blueprint.residual_add %h, %o : {H}, {H} -> {H}
    %2 = blueprint.rms_norm %1 weight "ln2" : {H} -> {H}
    blueprint.yield %1, %2 : {H}, {H}
  }} : {H}, {H}
  %logits = blueprint.router %yn weight "router" : {H} -> {L}
  %w, %ids = blueprint.top_k %logits : {L} -> {E("n", "top_k")}, {IDS}
  %egu = blueprint.expert_gate_up %yn, %ids weight "gate_up"{p} : {H}, {IDS} -> {GU}
  %act = blueprint.silu_mul %egu : {GU} -> {ACT}
  %ed = blueprint.expert_down %act, %ids weight "down"{p} : {ACT}, {IDS} -> {ED}
  %sgu = blueprint.linear %yn weight "sh_gate_up" role "shared_gate_up"{p} : {H} -> {SGU}
  %sact = blueprint.silu_mul %sgu : {SGU} -> {SACT}
  %sd = blueprint.linear %sact weight "sh_down" role "shared_down"{p} : {SACT} -> {H}
  %sg = blueprint.linear %yn weight "sh_gate" role "shared_gate" : {H} -> {SG}
  %f = blueprint.blend %w, %ed, %sd, %sg : {E("n", "top_k")}, {ED}, {H}, {SG} -> {H}
  %out = blueprint.residual_add %y, %f : {H}, {H} -> {H}
  %fn = blueprint.final_norm %out weight "norm" : {H} -> {H}
  %lg = blueprint.lm_head %fn weight "lm_head"{p} : {H} -> {E("n", "vocab", "bf16")}
  %next = blueprint.argmax %lg : {E("n", "vocab", "bf16")} -> {E("n", "1", "i32")}
  func.return %next, %lg : {E("n", "1", "i32")}, {E("n", "vocab", "bf16")}
}}
'''


def _decode_fn(wprec):
    return next(op for op in parse_ir(_decode_text(wprec)).walk() if isinstance(op, func.FuncOp))


def _tiny_weights():
    g = np.random.default_rng(1)

    def n(*s, sc=0.2):
        return (g.standard_normal(s) * sc).astype(np.float32)

    return {
        "embed": n(VOCAB, HID, sc=1.0), "ln1": 1 + n(HID, sc=0.1), "qkvz": n(C + HV * DV, HID),
        "ba": n(2 * HV, HID), "conv": n(C, 1, KCONV, sc=0.5), "A": -np.exp(n(HV, sc=0.5)), "dt_bias": n(HV, sc=0.5),
        "gnorm": 1 + n(DV, sc=0.1), "out": n(HID, HV * DV), "ln2": 1 + n(HID, sc=0.1), "router": n(NE, HID),
        "gate_up": n(NE, 2 * INTER, HID), "down": n(NE, HID, INTER), "sh_gate_up": n(2 * INTER, HID),
        "sh_down": n(HID, INTER), "sh_gate": n(1, HID), "norm": 1 + n(HID, sc=0.1), "lm_head": n(VOCAB, HID),
    }


def _tiny_state():
    g = np.random.default_rng(2)
    return {"conv": (g.standard_normal((C, KCONV - 1)) * 0.5).astype(np.float32),
            "h": (g.standard_normal((HV, DK, DV)) * 0.1).astype(np.float32)}
