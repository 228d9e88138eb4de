"""The HF config fields that llama.cpp does not represent, and the op where each one shows.

Strata reads an HF directory as transformers does and a GGUF as llama.cpp does. llama.cpp's
converter (convert_hf_to_gguf.py) and graph builders (src/models/*.cpp) drop or override a few
config fields, so verifying an HF directory against llama.cpp's log of its GGUF must diverge
where such a field takes effect. `explain` names the field at that op:

* `norm_topk_prob: false` (Qwen3-MoE, Qwen3-Next): their builders call build_moe_ffn with
  norm_w = true, renormalising the top-k weights, and the GGUF has no key for the field. It
  shows at the first MoE layer's CLAMP of the weights' sum.
* `rope_parameters.mrope_section` (Qwen3.5, Qwen3.5-MoE), where the sections send rotary pairs
  to M-RoPE's fourth stream: llama.cpp's IMROPE turns those by that stream, which it sets to
  position 0 for text, so they are not rotated; HF turns every pair by the token's position.
  (Sections that llama.cpp's converter writes when the config has none, [11, 11, 10, 0],
  never do; Strata reads a GGUF's as llama.cpp does.) It shows at the first full-attention
  layer's ROPE of Q, from the second position on.

Fields checked and not listed:
* llama.cpp honours them as HF does: Llama's attention biases, Qwen2's q/k/v biases,
  `head_dim`, `rms_norm_eps`, the llama3 RoPE scaling (the converter's rope_freqs),
  `layer_types` and `full_attention_interval` (written as recurrent layers),
  `partial_rotary_factor` of the hybrids, `linear_conv_kernel_dim`; and
  `tie_word_embeddings`, which the converter ignores (it writes a stored lm_head.weight as
  output.weight) as transformers 5 does (it unties a checkpoint storing both, apart);
* both ignore them: Qwen3-MoE's `partial_rotary_factor` (Strata too);
* Strata refuses them: `hidden_act` other than silu, `use_sliding_window`, Llama's
  `mlp_bias`, RoPE scaling other than llama3, attention biases of the other families;
* llama.cpp cannot load the converted file, so there is no log: `mlp_only_layers` and
  `decoder_sparse_step` leaving dense layers in Qwen3-MoE or Qwen3-Next, and Qwen3's
  `attention_bias` (qwen3.cpp loads no o_proj bias).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from strata.frontends.gguf import ARCHITECTURES
from strata.models.qwen35 import MROPE_DEFAULT, QWEN35
from strata.verify.llamacpp import Divergence

#: llama.cpp's architecture name of each HF architecture.
_GGML_ARCH = {hf: ggml for ggml, hf in ARCHITECTURES.items()}



@dataclass(frozen=True)
class IgnoredField:
    """A config field whose value llama.cpp's graph of the model does not follow."""

    field: str  # the field and its value, as config.json spells them
    op: str  # the ggml op where it first changes a value
    name: re.Pattern[str]  # the names of the tensors (of that op) where it does
    message: str  # what llama.cpp does with it, naming it, in one line

    def shows_at(self, d: Divergence) -> bool:
        return d.op == self.op and self.name.fullmatch(d.name) is not None


def ignored_fields(model: Any) -> list[IgnoredField]:
    """The fields of `model`'s HF config that llama.cpp does not represent (none for a GGUF,
    which Strata reads as llama.cpp does)."""
    if model.gguf is not None:
        return []
    cfg = model.config
    arch = _GGML_ARCH.get(cfg.arch, cfg.arch)
    out: list[IgnoredField] = []
    if getattr(cfg, "norm_topk_prob", True) is False and any(getattr(cfg, "moe_layers", ())):
        field = "'norm_topk_prob': false"
        out.append(IgnoredField(
            field, "CLAMP", re.compile(r"ffn_moe_weights_sum_clamped-\d+"),
            f"llama.cpp ignores this HF config's {field}: its {arch} graph always renormalises the top-k "
            "expert weights, which HF leaves as softmax probabilities"))
    if cfg.arch in QWEN35:
        out += _mrope_sections(cfg, arch)
    return out


def explain(model: Any, d: Divergence) -> Divergence:
    """`d`, its reason extended by the config field llama.cpp ignores that shows at its op, if any."""
    for f in ignored_fields(model):
        if f.shows_at(d):
            return dataclasses.replace(d, why=f"{d.why}; {f.message}")
    return d


def _mrope_sections(cfg: Any, arch: str) -> list[IgnoredField]:
    from strata.passes.convert_module_to_op.attention import extra_stream_pairs

    given = tuple(cfg.mrope_section)
    # Without sections in the config, llama.cpp's converter writes [11, 11, 10, 0], as Strata's builder.
    sections = ((given or MROPE_DEFAULT) + (0,) * 4)[:4]
    pairs = cfg.rotary_dim // 2
    extra = extra_stream_pairs(sections, pairs, interleaved=True)  # llama.cpp's qwen35 ropes are IMROPE
    if not extra:
        return []
    first = next(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    field = f"'rope_parameters.mrope_section': {list(given)}"
    shown = f"pair{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} of {pairs}"
    return [IgnoredField(
        field, "ROPE", re.compile(rf"Qcur-{first}"),
        f"llama.cpp reads this HF config's {field} otherwise than HF: its {arch} IMROPE turns rotary {shown} "
        "by M-RoPE's fourth stream, which is 0 for text, so not at all, where HF turns every pair by the "
        "token's position")]
