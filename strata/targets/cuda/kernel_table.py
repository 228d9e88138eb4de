"""Which launcher implements each blueprint group: the table from a group's rule (the names of
strata/passes/fusion/rules.json, with their `{table:key}` placeholders) to the kernel library's
launchers (`strata.targets.cuda.kernels.<module>.launch_<name>`), called in the order listed.

    entry = lookup("w8a16_m32")           # a concrete rule name, as a blueprint.group carries it
    entry.ops                              # ("linear",)
    fn = launcher(entry.launchers[0])      # gemm.launch_linear (imports triton)

A node no rule takes is a group of its own, `single_<op>`: `SINGLE` gives its launcher.
This module imports neither triton nor torch: the host generator can read the table anywhere.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

#: The name tables of rules.json ("tables"): a placeholder {table:key} is one of these spellings.
#: `w8i`/`int8` are ggml's Q8_0 weights (a GGUF's): the GEMM templates take them dequantized by
#: the host, as every weight the templates have no in-kernel dequant for. `q8_0` ... `q6_k` and
#: `gguf` (a projection of parts in different ones) are GGUF's block formats, read in place.
TABLES: dict[str, tuple[str, ...]] = {
    "gemm": ("w8a16", "w4a16", "w8i", "bf16", "f16", "f32", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "gguf"),
    "elem": ("fp8", "int4", "int8", "bf16", "f16", "f32", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "gguf"),
    "kv": ("paged_attention", "contiguous_attention"),
}
#: Free placeholders: argmax_{where}, sample_{where}.
FREE: dict[str, tuple[str, ...]] = {"where": ("host", "device")}


@dataclass(frozen=True)
class KernelEntry:
    rule: str  # the rule name as rules.json writes it (placeholders kept)
    ops: tuple[str, ...]  # the group's node ops (optional ones included)
    launchers: tuple[str, ...]  # "module.launch_x" under strata.targets.cuda.kernels, in call order
    kernels: tuple[str, ...]  # the @triton.jit kernels they launch ("module.kernel")
    note: str = ""


def _e(rule: str, ops: str, launchers: str, kernels: str, note: str = "") -> KernelEntry:
    return KernelEntry(rule, tuple(ops.split()), tuple(launchers.split()), tuple(kernels.split()), note)


_GEMM = "gemm.gemv_kernel gemm.gemm_kernel"
_GDN = "gdn.gdn_step_kernel gdn.gdn_chunk_prep_kernel gdn.gdn_chunk_state_kernel"
ENTRIES: tuple[KernelEntry, ...] = (
    _e("embed_row_copy", "embed", "elementwise.launch_embed", "elementwise.embed_kernel ggml_packed.gather_ggml_rows_kernel",
       "a packed table (a GGUF block format): its rows gathered and dequantized from the blocks"),
    _e("input_norm_residual", "rms_norm", "norms.launch_rms_norm", "norms.rms_norm_kernel"),
    _e("gdn_ba_gates_gemv_per_row", "linear gdn_gates", "gdn.launch_gdn_gates", "gdn.gdn_gates_kernel",
       "weights: the ba linear's (b rows, then a rows), the gates' A (= -exp(A_log)) and dt_bias"),
    _e("gdn_conv_l2_{elem:output}_per_row", "conv1d_update state_snapshot l2_norm", "gdn.launch_conv_l2",
       "gdn.conv_l2_kernel", "state_snapshot is optional: pass snapshot= when the group has it"),
    _e("gdn_recurrence_ckpt_{elem:output}_per_row", "gdn_recurrence state_snapshot", "gdn.launch_gdn_recurrence",
       _GDN, "snapshot= receives the updated state (a device copy)"),
    _e("gdn_recurrence_{elem:output}_per_row", "gdn_recurrence", "gdn.launch_gdn_recurrence",
       _GDN, "decode: one step per row; prefill: chunks of 64"),
    _e("gdn_out_norm_{elem:activation}_per_row", "gated_rms_norm", "norms.launch_gated_rms_norm",
       "norms.gated_rms_norm_kernel"),
    _e("residual_add_post_norm", "residual_add rms_norm", "norms.launch_rms_norm", "norms.rms_norm_kernel",
       "residual=: returns (sum, normed)"),
    _e("cross_layer_add_norm", "residual_add rms_norm", "norms.launch_rms_norm", "norms.rms_norm_kernel",
       "residual=: returns (sum, normed)"),
    _e("residual_add_norm", "residual_add rms_norm", "norms.launch_rms_norm", "norms.rms_norm_kernel",
       "residual=: returns (sum, normed)"),
    _e("moe_router_gemv", "router", "moe.launch_router", _GEMM),
    _e("moe_topk_softmax", "top_k", "moe.launch_topk_softmax", "moe.topk_softmax_kernel",
       "norm= the node's `norm` attribute"),
    _e("moe_gate_up_shared_{elem:weight}", "expert_gate_up linear", "moe.launch_moe_gate_up", _GEMM),
    _e("moe_gate_up_{elem:weight}", "expert_gate_up", "moe.launch_moe_gate_up", "gemm.gemv_kernel"),
    _e("moe_silu_down_shared_{elem:weight}", "expert_down silu_mul linear silu_mul", "moe.launch_moe_silu_down",
       "gemm.gemv_kernel", "the SiLU-mul is fused into the down GEMVs' input"),
    _e("moe_silu_down_{elem:weight}", "expert_down silu_mul", "moe.launch_moe_silu_down", "gemm.gemv_kernel"),
    _e("moe_weighted_sum_blend", "blend linear", "moe.launch_blend", "moe.blend_kernel",
       "the shared_gate linear (one output) is computed inside the blend kernel"),
    _e("moe_weighted_sum", "blend", "moe.launch_blend", "moe.blend_kernel"),
    _e("ffn_gate_up_silu_{gemm:weight}", "linear silu_mul", "gemm.launch_linear", _GEMM, "silu_out=True"),
    _e("ffn_residual_add", "residual_add", "elementwise.launch_residual_add", "elementwise.binary_kernel"),
    _e("final_norm", "final_norm", "norms.launch_rms_norm", "norms.rms_norm_kernel"),
    _e("lm_head_{elem:weight}_gemv", "lm_head", "gemm.launch_linear", _GEMM),
    _e("argmax_{where}", "argmax", "elementwise.launch_argmax", "elementwise.argmax_kernel"),
    _e("sample_{where}", "sample", "sampling.launch_sample", "sampling.sample_kernel",
       "on host: the numpy sampler carried in model.py, on the logits copied to the host"),
    _e("deinterleave_qg", "split", "elementwise.launch_split_qg", "elementwise.split_qg_kernel"),
    _e("qk_norm_rows", "qk_norm", "norms.launch_qk_norm", "norms.rms_norm_kernel"),
    _e("rope_mrope_interleaved", "rope", "attention.launch_rope attention.launch_rope", "attention.rope_kernel",
       "once for q, once for k; mode imrope, positions [4, n]"),
    _e("rope_mrope", "rope", "attention.launch_rope attention.launch_rope", "attention.rope_kernel",
       "once for q, once for k; mode mrope, positions [4, n]"),
    _e("rope_norm", "rope", "attention.launch_rope attention.launch_rope", "attention.rope_kernel",
       "once for q, once for k; mode norm"),
    _e("rope_neox", "rope", "attention.launch_rope attention.launch_rope", "attention.rope_kernel",
       "once for q, once for k; mode neox"),
    _e("kv_write_{elem:activation}", "kv_write", "attention.launch_kv_write", "attention.kv_write_kernel",
       "block_table= for a paged cache"),
    _e("{kv:kv_layout}_{elem:activation}", "paged_attention", "attention.launch_attention",
       "attention.attention_kernel", "block_table= for a paged cache (paged_attention_*), none when contiguous"),
    _e("sigmoid_gate_mul", "sigmoid_gate_mul", "elementwise.launch_sigmoid_gate_mul", "elementwise.binary_kernel"),
    _e("{gemm:weight}_m32", "linear", "gemm.launch_linear", _GEMM, "bias= the node's `bias` weight"),
    # A tensor-parallel program's collectives launch no kernel of the library: the host calls
    # torch.distributed on the device tensors (NCCL's kernels; gloo in the interpreter).
    _e("all_reduce_{elem:output}", "all_reduce", "", "", "the host's torch.distributed.all_reduce (sum)"),
    _e("all_gather_{elem:output}", "all_gather", "", "", "the host's torch.distributed.all_gather, joined on columns"),
)

#: A lone node's group, `single_<op>`: op -> (launcher, kernels).
SINGLE: dict[str, tuple[str, str]] = {
    "embed": ("elementwise.launch_embed", "elementwise.embed_kernel ggml_packed.gather_ggml_rows_kernel"),
    "rms_norm": ("norms.launch_rms_norm", "norms.rms_norm_kernel"),
    "final_norm": ("norms.launch_rms_norm", "norms.rms_norm_kernel"),
    "qk_norm": ("norms.launch_qk_norm", "norms.rms_norm_kernel"),
    "gated_rms_norm": ("norms.launch_gated_rms_norm", "norms.gated_rms_norm_kernel"),
    "linear": ("gemm.launch_linear", _GEMM),
    "lm_head": ("gemm.launch_linear", _GEMM),
    "router": ("moe.launch_router", _GEMM),
    "residual_add": ("elementwise.launch_residual_add", "elementwise.binary_kernel"),
    "sigmoid_gate_mul": ("elementwise.launch_sigmoid_gate_mul", "elementwise.binary_kernel"),
    "silu_mul": ("elementwise.launch_silu_mul", "elementwise.binary_kernel"),
    "split": ("elementwise.launch_split_qg", "elementwise.split_qg_kernel"),
    "argmax": ("elementwise.launch_argmax", "elementwise.argmax_kernel"),
    "sample": ("sampling.launch_sample", "sampling.sample_kernel"),
    "rope": ("attention.launch_rope", "attention.rope_kernel"),
    "kv_write": ("attention.launch_kv_write", "attention.kv_write_kernel"),
    "paged_attention": ("attention.launch_attention", "attention.attention_kernel"),
    "conv1d_update": ("gdn.launch_conv_l2", "gdn.conv_l2_kernel"),  # k_heads=0: no L2 norm
    "gdn_recurrence": ("gdn.launch_gdn_recurrence", _GDN),
    "top_k": ("moe.launch_topk_softmax", "moe.topk_softmax_kernel"),
    "expert_gate_up": ("moe.launch_expert_gate_up", "gemm.gemv_kernel"),
    "blend": ("moe.launch_blend", "moe.blend_kernel"),
}

RULES: dict[str, KernelEntry] = {e.rule: e for e in ENTRIES}


def _pattern(template: str) -> re.Pattern:
    out, pos = [], 0
    for m in re.finditer(r"\{([a-z_]+)(?::([a-z_]+))?\}", template):
        out.append(re.escape(template[pos:m.start()]))
        names = TABLES[m.group(1)] if m.group(2) else FREE[m.group(1)]
        out.append("(?:" + "|".join(re.escape(n) for n in names) + ")")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + r"\Z")


_PATTERNS = [(_pattern(e.rule), e) for e in ENTRIES]


class NoKernel(KeyError):
    """A group rule the kernel library has no launcher for."""


def lookup(rule: str) -> KernelEntry:
    """The entry of a concrete group rule (`w8a16_m32`, `single_linear`, ...)."""
    if rule.startswith("single_"):
        op = rule[len("single_"):]
        if op not in SINGLE:
            raise NoKernel(f"no CUDA kernel for a lone '{op}' node (group '{rule}')")
        launch, kernels = SINGLE[op]
        return KernelEntry(rule, (op,), (launch,), tuple(kernels.split()))
    for pat, entry in _PATTERNS:
        if pat.match(rule):
            return entry
    raise NoKernel(f"no CUDA kernel for group rule '{rule}'")


def _resolve(name: str) -> Callable:
    module, attr = name.split(".")
    return getattr(importlib.import_module(f"strata.targets.cuda.kernels.{module}"), attr)


def launcher(name: str) -> Callable:
    """The launcher `module.launch_x` (imports the kernel module, hence triton and torch)."""
    return _resolve(name)


def kernel(name: str):
    """The @triton.jit kernel `module.kernel_name`."""
    return _resolve(name)
