"""The CUDA target's Triton kernels (issue 9) against the numpy reference of their groups'
nodes, run by the Triton interpreter on the CPU (TRITON_INTERPRET=1, torch CPU tensors).

The interpreter gets bf16 arithmetic and f32 -> fp8 downcasts wrong, so every test runs in f32:
the kernels take f32 activations, and fp8 / int4 weights are quantized on the host (as the
reference quantizes them) and dequantized by the kernels, the reference multiplying by the same
dequantized weights (`cuda_ref.Bp.kernel_weight` / `dense_weight`). Groups, node attributes,
dims and weights come from the blueprints of tiny checkpoints (`cuda_ref.Bp`).

Tolerance: `cuda_ref.close`, 1e-4 of the larger of 1 and the reference's largest magnitude.
The kernels compute in f32 like the reference; they differ only in the order of f32 sums
(blocked dot products, online softmax, the chunked delta rule's matrix form), whose rounding
is ~1e-6 relative at these sizes (K <= 128 terms), two orders below the bound.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import numpy as np
import pytest

pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")

from cuda_ref import Bp, close, t  # noqa: E402
from support import HYBRID_FAMILIES, TINY, write_checkpoint  # noqa: E402
from strata.semantics import kernels as K  # noqa: E402
from strata.targets.cuda.kernels import attention, elementwise, gdn, gemm, moe, norms  # noqa: E402

if not getattr(gemm.gemv_kernel, "__class__", None).__name__.startswith("Interpreted"):
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set", allow_module_level=True)

PREFILL = 5


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_kernels")
    cfgs = {"qwen2": TINY["qwen2"], "qwen3": TINY["qwen3"], "qwen3_5_moe": HYBRID_FAMILIES["qwen3_5_moe"],
            "qwen3_moe": HYBRID_FAMILIES["qwen3_moe"]}
    return {k: write_checkpoint(c, root / k) for k, c in cfgs.items()}


_CACHE: dict = {}


def bp(ckpts, fam: str, mode: str = "decode", recipe: str = "f32") -> Bp:
    key = (fam, mode, recipe)
    if key not in _CACHE:
        _CACHE[key] = Bp(ckpts[fam], mode, 1 if mode == "decode" else PREFILL, recipe)
    return _CACHE[key]


# ---------------------------------------------------------------------------------------------
# Norms and row-wise kernels


@pytest.mark.parametrize("rule", ["input_norm_residual", "final_norm"])
def test_rms_norm(ckpts, rule):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group(rule)
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    got = norms.launch_rms_norm(t(ins[node.operands[0]]), b.dense_weight(node), b.env().eps_of(node))
    close(got, want)


@pytest.mark.parametrize("rule", ["residual_add_post_norm", "cross_layer_add_norm"])
def test_residual_add_rms_norm(ckpts, rule):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group(rule)
    ins = b.inputs(g, PREFILL)
    h_want, y_want = b.reference(g, ins)
    add, norm = b.nodes(g)
    h, y = norms.launch_rms_norm(t(ins[add.operands[0]]), b.dense_weight(norm), b.env().eps_of(norm),
                                 residual=t(ins[add.operands[1]]))
    close(h, h_want)
    close(y, y_want)


def test_qk_norm(ckpts):
    b = bp(ckpts, "qwen3", "prefill")
    g = b.group("qk_norm_rows")
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    close(norms.launch_qk_norm(t(ins[node.operands[0]]), b.dense_weight(node), b.env().eps_of(node)), want)


def test_gated_rms_norm(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("gdn_out_norm_f32_per_row")
    ins = b.inputs(g, PREFILL)
    (want,) = b.reference(g, ins)
    node = b.nodes(g)[0]
    got = norms.launch_gated_rms_norm(t(ins[node.operands[0]]), t(ins[node.operands[1]]), b.dense_weight(node),
                                      b.env().eps_of(node))
    close(got, want)


def test_elementwise_groups(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("sigmoid_gate_mul")
    ins = b.inputs(g, PREFILL)
    node = b.nodes(g)[0]
    close(elementwise.launch_sigmoid_gate_mul(t(ins[node.operands[0]]), t(ins[node.operands[1]])),
          b.reference(g, ins)[0])
    g = b.group("deinterleave_qg")
    ins = b.inputs(g, PREFILL)
    q, gate = elementwise.launch_split_qg(t(ins[b.nodes(g)[0].operands[0]]), b.dims["head_dim"])
    q_want, g_want = b.reference(g, ins)
    assert np.array_equal(q.numpy(), q_want) and np.array_equal(gate.numpy(), g_want)
    g = bp(ckpts, "qwen3", "prefill").group("ffn_residual_add")
    ins = b.inputs(g, PREFILL)
    node = bp(ckpts, "qwen3", "prefill").nodes(g)[0]
    close(elementwise.launch_residual_add(t(ins[node.operands[0]]), t(ins[node.operands[1]])),
          bp(ckpts, "qwen3", "prefill").reference(g, ins)[0])
    x = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    close(elementwise.launch_silu_mul(t(x)), K.swiglu(x[:, :20], x[:, 20:]))


def test_embed_and_argmax(ckpts):
    b = bp(ckpts, "qwen3_5_moe", "prefill")
    g = b.group("embed_row_copy")
    ids = np.array([[3], [0], [127], [3], [64]], np.int32)
    (want,) = b.reference(g, {b.nodes(g)[0].operands[0]: ids})
    got = elementwise.launch_embed(t(ids), b.dense_weight(b.nodes(g)[0]))
    assert np.array_equal(got.numpy(), want)
    g = b.group("argmax_host")
    x = np.random.default_rng(2).standard_normal((4, 300)).astype(np.float32)
    x[1, 17] = x[1, 250] = 9.0  # a tie: the first index wins, as numpy's
    (want,) = b.reference(g, {b.nodes(g)[0].operands[0]: x})
    got = elementwise.launch_argmax(t(x), block=128)  # three blocks per row
    assert np.array_equal(got.numpy(), want) and int(got[1, 0]) == 17


# ---------------------------------------------------------------------------------------------
# GEMV / GEMM


@pytest.mark.parametrize("recipe,rule", [("f32", "f32_m32"), ("fp8-bf16head", "w8a16_m32"), ("w4a16", "w4a16_m32"),
                                         ("bf16", "bf16_m32")])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_linear(ckpts, recipe, rule, mode):
    b = bp(ckpts, "qwen3_5_moe", mode, recipe)
    rows = 1 if mode == "decode" else 12  # 12 > GEMV_MAX_ROWS: the tiled GEMM
    for g in b.groups(rule)[:3]:
        ins = b.inputs(g, rows)
        (want,) = b.reference(g, ins)
        node = b.nodes(g)[0]
        close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node)), want)


@pytest.mark.parametrize("rows", [1, 12])
def test_linear_bias(ckpts, rows):
    b = bp(ckpts, "qwen2", "prefill")
    g = next(g for g in b.groups("f32_m32") if "bias" in b.nodes(g)[0].attributes)
    ins = b.inputs(g, rows)
    node = b.nodes(g)[0]
    got = gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node), bias=b.vector(node.attributes["bias"].data))
    close(got, b.reference(g, ins)[0])


@pytest.mark.parametrize("recipe,rule", [("f32", "ffn_gate_up_silu_f32"), ("fp8-bf16head", "ffn_gate_up_silu_w8a16"),
                                         ("w4a16", "ffn_gate_up_silu_w4a16")])
@pytest.mark.parametrize("rows", [1, 12])
def test_gate_up_silu(ckpts, recipe, rule, rows):
    b = bp(ckpts, "qwen3", "prefill", recipe)
    g = b.group(rule)
    ins = b.inputs(g, rows)
    node = b.nodes(g)[0]
    close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node), silu_out=True), b.reference(g, ins)[0])


@pytest.mark.parametrize("recipe,rule", [("f32", "lm_head_f32_gemv"), ("fp8-bf16head", "lm_head_bf16_gemv"),
                                         ("fp8-bf16head", "moe_router_gemv")])
def test_head_and_router(ckpts, recipe, rule):
    b = bp(ckpts, "qwen3_5_moe", "decode", recipe)
    g = b.group(rule)
    ins = b.inputs(g, 1)
    node = b.nodes(g)[0]
    close(gemm.launch_linear(t(ins[node.operands[0]]), b.kernel_weight(node)), b.reference(g, ins)[0])
