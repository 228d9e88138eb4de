"""The module interpreter's hybrid and MoE block kinds (strata.semantics.module_hybrid)
against HF transformers' own modules, in fp32.

Each test writes a small `module.model` whose root is the block under test (the members
named as the families' builders name them), copies the weights of a randomly initialised
HF module into a dict keyed by the IR's tensor names, and compares outputs: `forward`
without state, then `prefill` of a prompt followed by `decode` steps against HF's cache
path (DynamicCache: conv + recurrent states for Gated DeltaNet, K/V for attention).
Every weight is random, the zero-initialised norm weights, A_log and dt_bias included,
so that a formula that ignored one of them would fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache
from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as q35moe
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
from transformers.models.qwen3_moe import modeling_qwen3_moe as q3moe
from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
from transformers.models.qwen3_next import modeling_qwen3_next as qnext
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    f64,
    i64,
)

from strata.dialects import module as M
from strata.dialects.instances import instantiate
from strata.semantics.module_hybrid import top_k
from strata.semantics.module_interp import ModuleRunError, ModuleRunner, make_block

TOL = 1e-5
PROMPT, STEPS = 5, 4

H, HEADS, KV_HEADS, HEAD_DIM, ROTARY = 32, 4, 2, 16, 8  # partial rotary factor 0.5
LIN_K, LIN_V, LIN_KD, LIN_VD, CONV_K = 2, 4, 8, 8, 4
EXPERTS, TOPK, MOE_INNER, SHARED_INNER = 8, 3, 12, 20
MAX_SEQ = 16
EPS = 1e-6
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": ROTARY / HEAD_DIM,
        "mrope_section": [2, 1, 1], "mrope_interleaved": True}

torch.set_grad_enabled(False)


# ---------------------------------------------------------------------------
# A small module level, written here so that the kinds are tested on their own


class DictWeights:
    def __init__(self, tensors: dict[str, np.ndarray]):
        self.tensors = tensors

    def get(self, name: str) -> np.ndarray:
        return self.tensors[name]


def block(name: str, generics: list[str], path: str, members: list, **attrs) -> M.BlockOp:
    b = M.BlockOp(name, generics, {"path": StringAttr(path), **attrs})
    b.body.block.add_ops(members)
    return b


def sub(name: str, typ: str, hf: str | None = None, **attrs) -> M.SubOp:
    """A sub whose tensor names are HF's (`hf` is its segment there, the member name if not given)."""
    return M.SubOp(name, typ, ggml=StringAttr(name if hf is None else hf), **attrs)


def param(name: str, typ: str, hf: str | None = None) -> M.ParamOp:
    return M.ParamOp(name, typ, ggml=StringAttr(name if hf is None else hf))


def f(x: float) -> FloatAttr:
    return FloatAttr(float(x), f64)


def linear() -> M.BlockOp:
    return block("Linear", ["In: Dim", "Out: Dim", "T: Float = f32"], "std.nn.linear",
                 [param("weight", "Tensor[Out, In; T]"), M.ParamOp("bias", "Tensor[Out; T]", optional=UnitAttr())])


def norm(name: str = "RmsNorm", **attrs) -> M.BlockOp:
    return block(name, ["D: Dim", "T: Float = f32"], "std.nn.norm", [param("weight", "Tensor[D; T]")], eps=f(EPS),
                 **attrs)


def swiglu() -> M.BlockOp:
    return block("SwiGlu", ["H: Dim", "Inner: Dim", "T: Float = f32"], "std.nn.mlp", [
        sub("gate", "Linear<H, Inner, T>", "gate_proj"),
        sub("up", "Linear<H, Inner, T>", "up_proj"),
        sub("down", "Linear<Inner, H, T>", "down_proj"),
    ])


def model(root: M.BlockOp, blocks: list[M.BlockOp], dims: dict[str, int]) -> M.ModelOp:
    generics = {k: IntegerAttr(v, i64) for k, v in dims.items()} | {"T": Float32Type()}
    m = M.ModelOp("unit", "Unit", root.block_name, generics)
    m.body.block.add_ops([root, *blocks])
    return m


def run_block(m: M.ModelOp, weights: dict[str, np.ndarray]):
    m.verify()
    return make_block(instantiate(m), DictWeights(weights))


def numpy_state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def randomize(module: torch.nn.Module, seed: int, std: float = 0.2) -> None:
    """Every parameter random, norm weights (zero-centred or not), A_log and dt_bias included."""
    gen = torch.Generator().manual_seed(seed)
    for _, p in sorted(module.named_parameters()):
        p.copy_(torch.randn(p.shape, generator=gen) * std)


def inputs(seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, seq, H), dtype=np.float32)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close(got: np.ndarray, want: torch.Tensor | np.ndarray, tol: float = TOL) -> float:
    want = want.numpy() if isinstance(want, torch.Tensor) else want
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.float32, got.dtype
    diff = float(np.abs(got.astype(np.float64) - want).max())
    assert diff < tol * max(1.0, float(np.abs(want).max())), diff
    return diff


# ---------------------------------------------------------------------------
# Norms


@pytest.mark.parametrize("cls", [q35.Qwen3_5RMSNorm, qnext.Qwen3NextRMSNorm])
def test_zero_centred_norm(cls) -> None:
    hf = cls(H, eps=EPS)
    randomize(hf, 1)
    m = model(norm(weight_offset=f(1.0)), [], {"D": H})
    ours = run_block(m, {"weight": numpy_state(hf)["weight"]})
    x = inputs(6)
    close(ours.forward(x), hf(t(x)))


def test_norm_without_offset_is_unchanged() -> None:
    hf = q3moe.Qwen3MoeRMSNorm(H, eps=EPS)
    randomize(hf, 2)
    ours = run_block(model(norm(), [], {"D": H}), {"weight": numpy_state(hf)["weight"]})
    x = inputs(3)
    close(ours.forward(x), hf(t(x)))


@pytest.mark.parametrize("cls", [q35.Qwen3_5RMSNormGated, qnext.Qwen3NextRMSNormGated])
def test_gated_norm(cls) -> None:
    hf = cls(LIN_VD, eps=EPS)
    randomize(hf, 3, std=1.0)
    gated = block("GatedNorm", ["D: Dim", "T: Float = f32"], "std.nn.gated_norm", [param("weight", "Tensor[D; T]")],
                  eps=f(EPS))
    ours = run_block(model(gated, [], {"D": LIN_VD}), {"weight": numpy_state(hf)["weight"]})
    rng = np.random.default_rng(4)
    x, z = (rng.standard_normal((7, LIN_VD), dtype=np.float32) * 3 for _ in range(2))
    close(ours.forward(x, z), hf(t(x), t(z)))


# ---------------------------------------------------------------------------
# Gated attention


def text_config(cls=Qwen3_5TextConfig, **changes):
    fields = dict(vocab_size=64, hidden_size=H, intermediate_size=40, num_hidden_layers=2,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                  linear_num_key_heads=LIN_K, linear_num_value_heads=LIN_V, linear_key_head_dim=LIN_KD,
                  linear_value_head_dim=LIN_VD, linear_conv_kernel_dim=CONV_K, rms_norm_eps=EPS,
                  layer_types=["linear_attention", "full_attention"], rope_parameters=dict(ROPE))
    cfg = cls(**(fields | changes))
    cfg._attn_implementation = "eager"
    return cfg


ATTN_GENERICS = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Batch: Dim", "MaxSeq: Dim",
                 "T: Float = f32", "Shards: Dim = 1"]


def gated_attention_model(**attrs) -> M.ModelOp:
    attn = block("GatedAttention", ATTN_GENERICS, "std.attn.gated", [
        sub("q_proj", "Linear<H, Heads * HeadDim * 2, T>"),
        sub("k_proj", "Linear<H, KvHeads * HeadDim, T>"),
        sub("v_proj", "Linear<H, KvHeads * HeadDim, T>"),
        sub("o_proj", "Linear<Heads * HeadDim, H, T>"),
        sub("q_norm", "RmsNorm<HeadDim, T>"),
        sub("k_norm", "RmsNorm<HeadDim, T>"),
        M.StateOp("cache_k", "Tensor[Batch, KvHeads, MaxSeq, HeadDim; T]"),
        M.StateOp("cache_v", "Tensor[Batch, KvHeads, MaxSeq, HeadDim; T]"),
    ], rope_theta=f(ROPE["rope_theta"]), rotary_dim=IntegerAttr(ROTARY, i64), **attrs)
    dims = {"H": H, "Heads": HEADS, "KvHeads": KV_HEADS, "HeadDim": HEAD_DIM, "Batch": 1, "MaxSeq": MAX_SEQ}
    return model(attn, [linear(), norm(weight_offset=f(1.0))], dims)


def causal_mask(q_len: int, start: int) -> torch.Tensor:
    """Eager attention's additive mask [1, 1, q_len, start + q_len]."""
    keys = torch.arange(start + q_len)[None, :]
    allowed = keys <= (start + torch.arange(q_len))[:, None]
    return torch.where(allowed, 0.0, float("-inf"))[None, None]


MROPE_ATTRS = {"mrope_section": ArrayAttr([IntegerAttr(n, i64) for n in ROPE["mrope_section"]]),
               "mrope_interleaved": UnitAttr()}


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_gated_attention(family: str) -> None:
    if family == "qwen3_5":
        cfg = text_config()
        hf, rotary = q35.Qwen3_5Attention(cfg, layer_idx=1), q35.Qwen3_5TextRotaryEmbedding(cfg)
        attrs = MROPE_ATTRS
    else:
        cfg = text_config(Qwen3NextConfig, num_experts=0)
        hf, rotary = qnext.Qwen3NextAttention(cfg, layer_idx=1), qnext.Qwen3NextRotaryEmbedding(cfg)
        attrs = {}
    randomize(hf, 5)
    ours = run_block(gated_attention_model(**attrs), numpy_state(hf))
    x = inputs(PROMPT + STEPS, seed=6)

    def hf_run(rows: slice, cache) -> torch.Tensor:
        start, n = rows.start or 0, rows.stop - (rows.start or 0)
        pos = torch.arange(start, start + n)[None]
        out, _ = hf(t(x[:, rows]), rotary(t(x), pos), causal_mask(n, start), cache=cache)
        return out

    close(ours.forward(x), hf_run(slice(0, PROMPT + STEPS), None))
    cache = DynamicCache(config=cfg)
    close(ours.prefill(x[:, :PROMPT], 0), hf_run(slice(0, PROMPT), cache))
    for p in range(PROMPT, PROMPT + STEPS):
        close(ours.decode(x[:, p:p + 1], p), hf_run(slice(p, p + 1), cache))
    k_cache = cache.layers[1].keys.numpy()
    close(ours.state["cache_k"][:, :, :PROMPT + STEPS], k_cache)


def test_text_mrope_is_plain_partial_rope() -> None:
    """HF's interleaved M-RoPE recomposition on text positions (all three rows equal) gives the
    cos/sin of plain NeoX rope over the first rotary_dim dims."""
    # Qwen3.6-35B-A3B's rope: head_dim 256, partial 0.25, sections [11, 11, 10] interleaved.
    rope = dict(ROPE, rope_theta=1e7, partial_rotary_factor=0.25, mrope_section=[11, 11, 10])
    pos = torch.arange(300)[None]
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = q35.Qwen3_5TextRotaryEmbedding(text_config(head_dim=256, rope_parameters=rope))(x, pos)
    plain_cos, plain_sin = qnext.Qwen3NextRotaryEmbedding(
        text_config(Qwen3NextConfig, head_dim=256, rope_parameters=rope))(x, pos)
    assert cos.shape[-1] == 64
    torch.testing.assert_close(cos, plain_cos, rtol=0, atol=0)
    torch.testing.assert_close(sin, plain_sin, rtol=0, atol=0)


def test_gated_attention_refuses_an_odd_rotary_dim() -> None:
    m = gated_attention_model()
    m.block("GatedAttention").attributes["rotary_dim"] = IntegerAttr(5, i64)
    hf = q35.Qwen3_5Attention(text_config(), layer_idx=1)
    with pytest.raises(ModuleRunError, match="rotary_dim"):
        run_block(m, numpy_state(hf)).forward(inputs(2))


# ---------------------------------------------------------------------------
# Gated DeltaNet

GDN_GENERICS = ["H: Dim", "LinKHeads: Dim", "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim",
                "Batch: Dim", "T: Float = f32"]
CONV_C = "2 * LinKHeads * LinKDim + LinVHeads * LinVDim"


def gated_delta_net_model(layout: str) -> M.ModelOp:
    if layout == "separate":
        proj = [sub("in_proj_qkv", f"Linear<H, {CONV_C}, T>"),
                sub("in_proj_z", "Linear<H, LinVHeads * LinVDim, T>"),
                sub("in_proj_b", "Linear<H, LinVHeads, T>"),
                sub("in_proj_a", "Linear<H, LinVHeads, T>")]
    else:
        proj = [sub("in_proj_qkvz", "Linear<H, 2 * LinKHeads * LinKDim + 2 * LinVHeads * LinVDim, T>"),
                sub("in_proj_ba", "Linear<H, 2 * LinVHeads, T>")]
    gdn = block("GatedDeltaNet", GDN_GENERICS, "std.attn.gated_delta_net", [
        *proj,
        param("conv1d", f"Tensor[{CONV_C}, 1, ConvK; T]", "conv1d.weight"),
        param("dt_bias", "Tensor[LinVHeads; T]"),
        param("A_log", "Tensor[LinVHeads; T]"),
        sub("norm", "GatedNorm<LinVDim, T>"),
        sub("out_proj", "Linear<LinVHeads * LinVDim, H, T>"),
        M.StateOp("conv_state", f"Tensor[Batch, {CONV_C}, ConvK - 1; T]"),
        M.StateOp("recurrent_state", "Tensor[Batch, LinVHeads, LinKDim, LinVDim; T]"),
    ], layout=StringAttr(layout), eps=f(1e-6))
    gated = block("GatedNorm", ["D: Dim", "T: Float = f32"], "std.nn.gated_norm", [param("weight", "Tensor[D; T]")],
                  eps=f(EPS))
    dims = {"H": H, "LinKHeads": LIN_K, "LinVHeads": LIN_V, "LinKDim": LIN_KD, "LinVDim": LIN_VD, "ConvK": CONV_K,
            "Batch": 1}
    return model(gdn, [linear(), gated], dims)


def hf_gated_delta_net(family: str, seed: int):
    if family == "qwen3_5":
        cfg = text_config()
        hf = q35.Qwen3_5GatedDeltaNet(cfg, layer_idx=0)
        layout = "separate"
    elif family == "qwen3_5_moe":
        cfg = text_config(Qwen3_5MoeTextConfig)
        hf = q35moe.Qwen3_5MoeGatedDeltaNet(cfg, layer_idx=0)
        layout = "separate"
    else:
        cfg = text_config(Qwen3NextConfig, num_experts=0)
        hf = qnext.Qwen3NextGatedDeltaNet(cfg, layer_idx=0)
        layout = "grouped"
    randomize(hf, seed)
    with torch.no_grad():  # a spread of decays: exp(A_log) from ~0.4 to ~3
        hf.A_log.copy_(torch.linspace(-1.0, 1.0, LIN_V))
    return cfg, hf, run_block(gated_delta_net_model(layout), numpy_state(hf))


FAMILIES = ["qwen3_5", "qwen3_5_moe", "qwen3_next"]


@pytest.mark.parametrize("family", FAMILIES)
def test_gated_delta_net_forward_prefill_decode(family: str) -> None:
    cfg, hf, ours = hf_gated_delta_net(family, seed=7)
    x = inputs(PROMPT + STEPS, seed=8)
    close(ours.forward(x), hf(t(x)))  # HF's chunked delta rule, zero state
    two = np.concatenate([x, x[:, ::-1]])  # forward takes any batch, each row on its own
    close(ours.forward(two), hf(t(two)))
    assert not ours.state["recurrent_state"].any(), "forward must leave the state alone"

    cache = DynamicCache(config=cfg)
    close(ours.prefill(x[:, :PROMPT], 0), hf(t(x[:, :PROMPT]), cache=cache))
    for p in range(PROMPT, PROMPT + STEPS):  # HF: causal_conv1d_update + the recurrent rule
        close(ours.decode(x[:, p:p + 1], p), hf(t(x[:, p:p + 1]), cache=cache))
    layer = cache.layers[0]
    close(ours.state["recurrent_state"], layer.recurrent_states[0])
    close(ours.state["conv_state"], layer.conv_states[0][..., 1:].numpy())  # HF keeps K columns, the first unused


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_gated_delta_net_chunked_prefill_continues_the_state(family: str) -> None:
    """A prefill at pos > 0 continues from the stored state, as HF's cache does for a second
    prefill; at pos 0 it starts afresh whatever was stored."""
    cfg, hf, ours = hf_gated_delta_net(family, seed=9)
    x = inputs(9, seed=10)
    cache = DynamicCache(config=cfg)
    hf(t(x[:, :2]), cache=cache)  # 2 tokens: fewer than the conv's K - 1 = 3 columns of state
    want = hf(t(x[:, 2:]), cache=cache)
    ours.prefill(x[:, :2], 0)
    close(ours.prefill(x[:, 2:], 2), want)
    close(ours.prefill(x, 0), hf(t(x)))  # pos 0: the state left by the chunks is dropped


def test_gated_delta_net_refuses_an_unknown_layout() -> None:
    m = gated_delta_net_model("separate")
    m.block("GatedDeltaNet").attributes["layout"] = StringAttr("interleaved")
    hf = q35.Qwen3_5GatedDeltaNet(text_config(), layer_idx=0)
    with pytest.raises(ModuleRunError, match="layout 'interleaved'"):
        run_block(m, numpy_state(hf)).forward(inputs(2))


# ---------------------------------------------------------------------------
# Sparse MoE

MOE_GENERICS = ["H: Dim", "Experts: Dim", "TopK: Dim", "MoeInner: Dim", "SharedInner: Dim", "T: Float = f32"]


def sparse_moe_model(shared: bool, norm_topk_prob) -> M.ModelOp:
    members = [
        sub("router", "Linear<H, Experts, T>", "gate"),
        param("gate_exps", "Tensor[Experts, MoeInner, H; T]"),
        param("up_exps", "Tensor[Experts, MoeInner, H; T]"),
        param("down_exps", "Tensor[Experts, H, MoeInner; T]"),
    ]
    if shared:
        members += [sub("shared_expert", "SwiGlu<H, SharedInner, T>"), sub("shared_expert_gate", "Linear<H, 1, T>")]
    attrs = {} if norm_topk_prob is None else {"norm_topk_prob": norm_topk_prob}
    moe = block("SparseMoe", MOE_GENERICS, "std.moe.sparse", members, **attrs)
    dims = {"H": H, "Experts": EXPERTS, "TopK": TOPK, "MoeInner": MOE_INNER,
            "SharedInner": SHARED_INNER if shared else 0}
    return model(moe, [linear(), swiglu()], dims)


def expert_weights(hf_state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF's fused experts.gate_up_proj [E, 2I, H] as the stacked gate_exps / up_exps."""
    out = dict(hf_state)
    gate_up = out.pop("experts.gate_up_proj")
    out["gate_exps"], out["up_exps"] = gate_up[:, :MOE_INNER], gate_up[:, MOE_INNER:]
    out["down_exps"] = out.pop("experts.down_proj")
    return out


MOE_CASES = {
    "qwen3_moe-norm": (q3moe.Qwen3MoeSparseMoeBlock, Qwen3MoeConfig, True, IntegerAttr(1, i64)),
    "qwen3_moe-no-norm": (q3moe.Qwen3MoeSparseMoeBlock, Qwen3MoeConfig, False, IntegerAttr(0, i64)),
    "qwen3_moe-unit": (q3moe.Qwen3MoeSparseMoeBlock, Qwen3MoeConfig, True, UnitAttr()),
    "qwen3_moe-absent": (q3moe.Qwen3MoeSparseMoeBlock, Qwen3MoeConfig, False, None),
    "qwen3_5_moe": (q35moe.Qwen3_5MoeSparseMoeBlock, Qwen3_5MoeTextConfig, True, IntegerAttr(1, i64)),
    "qwen3_next": (qnext.Qwen3NextSparseMoeBlock, Qwen3NextConfig, True, IntegerAttr(1, i64)),
    "qwen3_next-no-norm": (qnext.Qwen3NextSparseMoeBlock, Qwen3NextConfig, False, IntegerAttr(0, i64)),
}


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_sparse_moe(case: str) -> None:
    cls, cfg_cls, norm_topk, attr = MOE_CASES[case]
    cfg = cfg_cls(hidden_size=H, num_experts=EXPERTS, num_experts_per_tok=TOPK, moe_intermediate_size=MOE_INNER,
                  shared_expert_intermediate_size=SHARED_INNER, norm_topk_prob=norm_topk)
    hf = cls(cfg)
    randomize(hf, 11, std=0.3)
    shared = hasattr(hf, "shared_expert")
    ours = run_block(sparse_moe_model(shared, attr), expert_weights(numpy_state(hf)))
    x = inputs(13, seed=12)
    close(ours.forward(x), hf(t(x)))
    close(ours.forward(x[:, 4:5]), hf(t(x[:, 4:5])))  # a decode-shaped row


def test_sparse_moe_runs_only_the_routed_experts() -> None:
    hf = q3moe.Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(hidden_size=H, num_experts=EXPERTS, num_experts_per_tok=TOPK,
                                                     moe_intermediate_size=MOE_INNER))
    randomize(hf, 13)
    ours = run_block(sparse_moe_model(False, UnitAttr()), expert_weights(numpy_state(hf)))
    touched: list[int] = []
    run_expert = ours._expert

    def spy(e: int, rows: np.ndarray) -> np.ndarray:
        touched.append(e)
        return run_expert(e, rows)

    ours._expert = spy
    ours.forward(inputs(1, seed=14))  # one token: its TopK experts and no others
    assert len(touched) == TOPK and len(set(touched)) == TOPK, touched


def test_top_k_takes_the_lowest_index_among_ties() -> None:
    probs = np.array([[0.1, 0.3, 0.3, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25, 0.0]], np.float32)
    np.testing.assert_array_equal(top_k(probs, 2), [[1, 2], [0, 1]])


def test_sparse_moe_refuses_top_k_above_experts() -> None:
    m = sparse_moe_model(False, None)
    m.generics = DictionaryAttr({**m.generics.data, "TopK": IntegerAttr(EXPERTS + 1, i64)})
    w = {"gate.weight": np.zeros((EXPERTS, H), np.float32),
         "gate_exps": np.zeros((EXPERTS, MOE_INNER, H), np.float32),
         "up_exps": np.zeros((EXPERTS, MOE_INNER, H), np.float32),
         "down_exps": np.zeros((EXPERTS, H, MOE_INNER), np.float32)}
    with pytest.raises(ModuleRunError, match="TopK = 9"):
        run_block(m, w).forward(inputs(1))


# ---------------------------------------------------------------------------
# A hybrid model: layers of different kinds, the state of all of them


def hybrid_model() -> M.ModelOp:
    """Embedding, [GatedDeltaNet + MoE, GatedAttention + SwiGlu] layers, norm, lm_head."""
    gdn = gated_delta_net_model("separate")
    attn = gated_attention_model(**MROPE_ATTRS)
    moe = sparse_moe_model(True, IntegerAttr(1, i64))
    kinds = {b.block_name: b.clone() for m in (gdn, attn, moe) for b in m.blocks()}
    layer_generics = ["H: Dim", "Heads: Dim", "KvHeads: Dim", "HeadDim: Dim", "Inner: Dim", "LinKHeads: Dim",
                      "LinVHeads: Dim", "LinKDim: Dim", "LinVDim: Dim", "ConvK: Dim", "Experts: Dim", "TopK: Dim",
                      "MoeInner: Dim", "SharedInner: Dim", "Batch: Dim", "MaxSeq: Dim", "T: Float = f32"]
    args = ", ".join(g.split(":")[0] for g in layer_generics)
    linear_layer = block("LinearLayer", layer_generics, "std.layer.decoder", [
        sub("attention_norm", "RmsNorm<H, T>"),
        sub("attention", "GatedDeltaNet<H, LinKHeads, LinVHeads, LinKDim, LinVDim, ConvK, Batch, T>"),
        sub("mlp_norm", "RmsNorm<H, T>"),
        sub("mlp", "SparseMoe<H, Experts, TopK, MoeInner, SharedInner, T>"),
    ])
    attn_layer = block("AttnLayer", layer_generics, "std.layer.decoder", [
        sub("attention_norm", "RmsNorm<H, T>"),
        sub("attention", "GatedAttention<H, Heads, KvHeads, HeadDim, Batch, MaxSeq, T>"),
        sub("mlp_norm", "RmsNorm<H, T>"),
        sub("mlp", "SwiGlu<H, Inner, T>"),
    ])
    embedding = block("Embedding", ["Vocab: Dim", "H: Dim", "T: Float = f32"], "std.nn.embedding",
                      [param("weight", "Tensor[Vocab, H; T]")])
    root = block("Model", ["Vocab: Dim", "Layers: Dim", *layer_generics], "std.model.causal_lm", [
        sub("embedding", "Embedding<Vocab, H, T>"),
        M.SubOp("layers", f"[LinearLayer<{args}> | AttnLayer<{args}>; Layers]", ggml=StringAttr("layers"),
                pattern=DenseArrayBase.from_list(i64, [0, 1, 0])),
        sub("norm", "RmsNorm<H, T>"),
        sub("lm_head", "Linear<H, Vocab, T>"),
    ])
    dims = {"Vocab": 40, "Layers": 3, "H": H, "Heads": HEADS, "KvHeads": KV_HEADS, "HeadDim": HEAD_DIM, "Inner": 24,
            "LinKHeads": LIN_K, "LinVHeads": LIN_V, "LinKDim": LIN_KD, "LinVDim": LIN_VD, "ConvK": CONV_K,
            "Experts": EXPERTS, "TopK": TOPK, "MoeInner": MOE_INNER, "SharedInner": SHARED_INNER, "Batch": 1,
            "MaxSeq": MAX_SEQ}
    kinds["RmsNorm"] = norm(weight_offset=f(1.0))
    return model(root, [linear_layer, attn_layer, embedding, *kinds.values()], dims)


def random_weights(m: M.ModelOp, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for tensor in instantiate(m).tensors():
        if tensor.kind == "param":
            out[tensor.ggml] = (rng.standard_normal(tensor.shape, dtype=np.float32) * 0.2).astype(np.float32)
    return out


def test_hybrid_model_prefill_and_decode_match_forward() -> None:
    """Layers of different kinds in one array: prefill + decode through the conv, recurrent
    and KV states give the logits of a stateless forward, and reset() clears every state."""
    m = hybrid_model()
    m.verify()
    runner = ModuleRunner(m, DictWeights(random_weights(m, 15)))
    tokens = [3, 17, 8, 31, 2, 9, 22, 5]
    full = runner.forward(tokens)
    assert not any(buf.any() for buf in runner.state().values())
    got = [runner.prefill(tokens[:5], 0)]
    got += [runner.decode(tok, pos) for pos, tok in enumerate(tokens[5:], start=5)]
    close(np.stack(got), full[4:])
    state = runner.state()
    assert {"layers.0.attention.conv_state", "layers.0.attention.recurrent_state", "layers.1.attention.cache_k",
            "layers.2.attention.recurrent_state"} <= state.keys()
    assert state["layers.0.attention.conv_state"].shape == (1, 2 * LIN_K * LIN_KD + LIN_V * LIN_VD, CONV_K - 1)
    assert all(state[k].any() for k in state)
    runner.reset()
    assert not any(buf.any() for buf in runner.state().values())
    # Prefilled in two chunks (the second at pos 3) and then decoded: the same logits.
    runner.prefill(tokens[:3], 0)
    close(runner.prefill(tokens[3:5], 3), full[4])
