"""Capture a PyTorch causal LM (`torch.nn.Module`) as Strata's module level, with `torch.export`.

    from strata.pipeline import capture, capture_to_dir    # this reader, with the families wired in
    module_ir = capture(model, (ids,))                     # the module level (a builtin.module)
    out = capture_to_dir(model, (ids,), "build/captured")  # config.json + model.safetensors
    compile_model(load_model(out), "cpu", "build/cpu")     # as any checkpoint

`torch.export.export` traces the module on the example token ids ([batch, seq] integers) to
ATen ops; `strata.frontends.torch_graph` reads the graph's submodules as blocks (Embedding,
RMSNorm, Linear, attention with q/k/v/o projections, RoPE and softmax or SDPA, SwiGLU MLP,
pre-norm decoder layers) from each node's `nn_module_stack`. The blocks give an HF config
(`LlamaForCausalLM` or `Qwen2ForCausalLM` fields), which the caller's `build` turns into the
family's config and module level (the pipeline passes its family reader and builder):
`std.nn.embedding`, `std.nn.norm`,
`std.nn.linear`, `std.nn.mlp`, `std.attn.grouped_query`, `std.layer.decoder` and
`std.model.causal_lm`, with HF and ggml name segments, so the rest of the pipeline takes a
captured module as it takes an HF checkpoint.

What the graph fixes is read off it: vocab and hidden size (the embedding), heads and head
dim (the view that splits q and k into heads), the MLP width, the norms' eps (the scalar
added to the mean square), the RoPE frequencies (a 1-D buffer of HeadDim/2 frequencies,
such as HF's `inv_freq`; they must be theta^(-2i/d)) and its pairing: rotate-half (HF, a
`cat` of `-x2, x1`) or interleaved pairs (Meta's Llama and the TinyLlama of tensorviz.graph, a `stack` then
`flatten`), whose q/k rows are permuted to HF's order in the weights, exactly as HF's
Meta-to-HF converter does. The weights come from the module's parameters, renamed to HF's
names (`model.layers.0.self_attn.q_proj.weight`).

The ATen ops a block may use are listed in `torch_graph.ALLOWED` (views, casts, add, mul, div,
sub, neg, pow, mean, rsqrt, silu, linear/matmul, softmax, SDPA, cat, stack, masked_fill,
where, embedding, ...); any other op that depends on the tokens is a one-line
`CaptureError` naming it and its module path. Ops that do not depend on the tokens
(positions, causal masks, RoPE tables) are not read as computation: a numeric check runs
the captured module level (`strata.semantics.module_interp`) on the example ids and refuses
a capture that does not reproduce the module's own logits (`check=False` skips it).

A module that is not a causal LM of these blocks is lowered ATen op by ATen op to the op
level instead (`capture(..., level="op")`, `strata.frontends.torch_ops`, which lists the
ops it lowers). An HF model is captured with `use_cache` off (restored afterwards).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from strata.frontends.hf_config import write_hf_config
from strata.frontends.torch_graph import Block, CaptureError, Graph, op_name, shape

#: (an HF config.json's fields, the model's name) -> (the family's config, its module level).
Build = Callable[[dict[str, Any], str], tuple[Any, ModuleOp]]

__all__ = ["CaptureError", "Captured", "capture", "capture_model", "capture_to_dir"]

#: The numeric check's bound on |captured - module| relative to the largest logit (float32).
CHECK_TOL = 1e-4
DEFAULT_MAX_SEQ = 2048
_TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@dataclass
class Captured:
    """A captured model: its config, its module level and its weights by HF name."""

    config: Any
    module: ModuleOp
    weights: dict[str, np.ndarray]


def capture(module: Any, example_inputs: tuple, *, build: Build, max_seq: int | None = None, check: bool = True,
            level: str = "module") -> ModuleOp:
    """The module level of `module` (a causal LM taking token ids [batch, seq] and returning
    logits [batch, seq, vocab]), exported on `example_inputs`. `level="op"` lowers every
    ATen op directly to the op level instead (`strata.frontends.torch_ops`), for a module
    that is not made of the recognised blocks."""
    if level == "op":
        from strata.frontends.torch_ops import capture_ops

        return capture_ops(module, example_inputs)
    if level != "module":
        raise CaptureError(f"capture: level must be 'module' or 'op', got {level!r}")
    return capture_model(module, example_inputs, build=build, max_seq=max_seq, check=check).module


def capture_to_dir(module: Any, example_inputs: tuple, out_dir: str | Path, *, build: Build,
                   max_seq: int | None = None, check: bool = True) -> Path:
    """Capture `module` into a new checkpoint directory (HF `config.json` and
    `model.safetensors`) that `strata.pipeline.load_model` reads; returns it. An existing
    non-empty `out_dir` is refused (nothing of the user's is overwritten)."""
    from strata.artifacts.directory import locked, new_directory
    from strata.ir.weights import SINGLE_FILE, write_safetensors

    out = Path(out_dir)
    _check_empty(out)
    if not out.parent.is_dir():
        raise CaptureError(f"{out}: the directory {out.parent} does not exist")
    cap = capture_model(module, example_inputs, build=build, max_seq=max_seq, check=check)
    with locked(out):
        with new_directory(out, check=lambda: _check_empty(out)) as tmp:
            write_hf_config(cap.config, tmp)
            write_safetensors(tmp / SINGLE_FILE, cap.weights, {"format": "pt"})
    return out


def _check_empty(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CaptureError(f"{out}: exists and is not an empty directory; give a new one")


def capture_model(module: Any, example_inputs: tuple, *, build: Build, max_seq: int | None = None,
                  check: bool = True) -> Captured:
    """Capture `module`: its config, module level and HF-named weights (see the module doc)."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"capture takes a torch.nn.Module, got {type(module).__name__}")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    ids = inputs[0] if inputs else None
    if len(inputs) != 1 or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        raise CaptureError("example_inputs must be one integer tensor of token ids [batch, seq]")
    module.eval()
    hf = getattr(module, "config", None)
    use_cache = getattr(hf, "use_cache", None)
    try:
        if use_cache:  # an HF model would also return its KV cache
            hf.use_cache = False
        try:
            ep = torch.export.export(module, inputs)
        except Exception as e:  # noqa: BLE001 - torch.export raises many kinds; the first line says why
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CaptureError(f"torch.export could not trace {type(module).__name__}: {first}") from None
        graph = Graph(ep, module)
        root = graph.blocks()
        reader = _Reader(graph, root, module, max_seq)
        fields, weights = reader.config(), reader.weights()
        cfg, built = build(fields, type(module).__name__)
        captured = Captured(cfg, built, weights)
        captured.module.verify()
        if check:
            _check(captured, module, ids)
    finally:
        if use_cache:
            hf.use_cache = use_cache
    return captured


class _Reader:
    """Reads the config and the HF-named weights off the recognised blocks."""

    def __init__(self, graph: Graph, root: Block, module: Any, max_seq: int | None):
        self.g, self.root, self.module, self.max_seq = graph, root, module, max_seq
        top = {k: root.kids(k) for k in ("embedding", "layer", "norm", "linear")}
        stray = [b for b in root.children if b.kind not in top or (b.kind != "layer" and len(top[b.kind]) != 1)]
        if len(top["embedding"]) != 1 or not top["layer"] or len(top["norm"]) != 1 or len(top["linear"]) != 1 or stray:
            found = ", ".join(f"{b.kind} '{b.path}'" for b in root.children) or "none"
            raise CaptureError("torch capture: expected an embedding, decoder layers (RMSNorm, attention, RMSNorm, "
                               f"SwiGLU), a final RMSNorm and an lm_head Linear; found blocks: {found} (capture(..., level='op') "
                               "lowers a module of other blocks op by op)")
        self.embedding, self.norm, self.lm_head = top["embedding"][0], top["norm"][0], top["linear"][0]
        self.layers = sorted(top["layer"], key=lambda b: min(n.meta["_index"] for n in b.all_nodes()))
        if graph.source(graph.result) is not self.lm_head.output():
            raise CaptureError(f"torch capture: the module's result is not the output of '{self.lm_head.path}'")
        self.parts = [self._layer(b) for b in self.layers]

    # -- per layer --------------------------------------------------------------------------

    def _layer(self, layer: Block) -> dict[str, Any]:
        norms = sorted(layer.kids("norm"), key=lambda b: b.output().meta["_index"])
        attn, mlp = layer.kids("attention")[0], layer.kids("mlp")[0]
        return {"attention_norm": norms[0], "mlp_norm": norms[1], "mlp": self._mlp(mlp), **self._attention(attn)}

    def _mlp(self, mlp: Block) -> dict[str, Block]:
        lins = mlp.kids("linear")
        silu = [n for n in mlp.all_nodes() if op_name(n) == "silu"]
        if len(silu) != 1:
            raise CaptureError(f"torch capture: '{mlp.path}' must apply one SiLU (SwiGLU), it applies {len(silu)}")
        gate = [b for b in lins if self.g.source(silu[0].args[0]) is b.output()]
        down = [b for b in lins if silu[0] in Graph.ancestors(b.output())]
        up = [b for b in lins if b not in gate and b not in down]
        if len(gate) != 1 or len(down) != 1 or len(up) != 1:
            raise CaptureError(f"torch capture: '{mlp.path}' is not down(silu(gate(x)) * up(x))")
        return {"gate": gate[0], "up": up[0], "down": down[0]}

    def _attention(self, attn: Block) -> dict[str, Any]:
        nodes = attn.all_nodes()
        sdpa = [n for n in nodes if op_name(n) == "scaled_dot_product_attention"]
        soft = [n for n in nodes if op_name(n) in ("softmax", "_softmax")]
        where = f"torch capture: '{attn.path}'"
        if len(sdpa) + len(soft) != 1:
            raise CaptureError(f"{where} must apply one softmax or scaled_dot_product_attention")
        if sdpa:
            q_in, k_in, v_in = sdpa[0].args[:3]
            core = sdpa[0]
        else:
            anc = Graph.ancestors(soft[0])
            mms = [n for n in nodes if op_name(n) in ("matmul", "bmm")]
            qk = max((n for n in mms if n in anc), key=lambda n: n.meta["_index"], default=None)
            desc = Graph._descendants([soft[0]])
            pv = min((n for n in mms if n in desc), key=lambda n: n.meta["_index"], default=None)
            if qk is None or pv is None:
                raise CaptureError(f"{where}: no q·k and p·v matmuls around its softmax")
            (q_in, k_in), v_in, core = qk.args[:2], pv.args[1], pv
        sides = {"q_proj": Graph.ancestors(q_in), "k_proj": Graph.ancestors(k_in), "v_proj": Graph.ancestors(v_in)}
        after = Graph._descendants([core])
        out: dict[str, Any] = {}
        for lin in attn.kids("linear"):
            o = lin.output()
            roles = [r for r, anc in sides.items() if o in anc] + (["o_proj"] if o in after else [])
            if len(roles) != 1 or roles[0] in out:
                raise CaptureError(f"{where}: cannot tell which projection '{lin.path}' is (q, k, v or o)")
            out[roles[0]] = lin
        if len(out) != 4:
            raise CaptureError(f"{where} must have exactly the q, k, v and o projections")
        ops = {op_name(n) for n in nodes}
        if "stack" in ops and "cat" not in ops:
            out["rope"] = "interleaved"
        elif "cat" in ops and "neg" in ops and "stack" not in ops:
            out["rope"] = "half"
        else:
            raise CaptureError(f"{where}: no RoPE recognised (rotate-half: cat of -x2, x1; or interleaved "
                               "pairs: stack then flatten)")
        out["heads"] = self._heads(out["q_proj"], where)
        out["kv_heads"] = self._heads(out["k_proj"], where)
        return out

    def _heads(self, lin: Block, where: str) -> tuple[int, int]:
        """(heads, head dim) of a projection: the first 4-D view of its output."""
        width = lin.module.out_features
        todo, seen = [lin.output()], set()
        while todo:
            n = todo.pop(0)
            if n in seen:
                continue
            seen.add(n)
            s = shape(n)
            if len(s) == 4 and s[2] * s[3] == width and op_name(n) in ("view", "reshape", "_unsafe_view", "unflatten"):
                return s[2], s[3]
            todo += [u for u in n.users if op_name(u) in ("view", "reshape", "_unsafe_view", "unflatten")]
        raise CaptureError(f"{where}: the output of '{lin.path}' is never split into heads [batch, seq, heads, dim]")

    # -- the config -----------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The HF config.json fields the blocks fix (transformers 5's spelling)."""
        first = self.parts[0]
        heads, head_dim = first["heads"]
        kv_heads, kv_dim = first["kv_heads"]
        if kv_dim != head_dim:
            raise CaptureError(f"torch capture: q head dim {head_dim} differs from k head dim {kv_dim}")
        for i, p in enumerate(self.parts):
            if (p["heads"], p["kv_heads"], p["rope"]) != (first["heads"], first["kv_heads"], first["rope"]):
                raise CaptureError(f"torch capture: layer {i} ('{self.layers[i].path}') differs in heads or RoPE "
                                   "from layer 0")
        emb = self.embedding.module.weight
        biased = {r: {p[r].module.bias is not None for p in self.parts} for r in ("q_proj", "k_proj", "v_proj", "o_proj")}
        for p in self.parts:
            for b in (*p["mlp"].values(),):
                if b.module.bias is not None:
                    raise CaptureError(f"torch capture: '{b.path}' has a bias; strata's SwiGLU has none")
        if self.lm_head.module.bias is not None:
            raise CaptureError(f"torch capture: '{self.lm_head.path}' has a bias; strata's lm_head has none")
        qkv_bias, o_bias = biased["q_proj"] | biased["k_proj"] | biased["v_proj"], biased["o_proj"]
        if len(qkv_bias) > 1 or len(o_bias) > 1 or (o_bias == {True} and qkv_bias == {False}):
            raise CaptureError("torch capture: q, k and v (of every layer) must all have biases or none, "
                               "and o only with them")
        # q/k/v biases without an o bias: Qwen2's attention; the llama architecture has all or none
        arch = "Qwen2ForCausalLM" if qkv_bias != o_bias else "LlamaForCausalLM"
        dtype = _TORCH_DTYPES.get(str(emb.dtype))
        if dtype is None:
            raise CaptureError(f"torch capture: weights of dtype {emb.dtype} (supported: float32, float16, bfloat16)")
        hf = getattr(self.module, "config", None)
        max_pos = self.max_seq or getattr(hf, "max_position_embeddings", None) or DEFAULT_MAX_SEQ
        qwen2 = arch == "Qwen2ForCausalLM"
        fields: dict[str, Any] = {
            "architectures": [arch], "model_type": "qwen2" if qwen2 else "llama", "vocab_size": int(emb.shape[0]),
            "hidden_size": int(emb.shape[1]), "num_hidden_layers": len(self.layers), "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim,
            "intermediate_size": int(first["mlp"]["gate"].module.out_features), "hidden_act": "silu",
            "rms_norm_eps": self._eps(), "rope_parameters": {"rope_theta": self._theta(head_dim), "rope_type": "default"},
            "max_position_embeddings": int(max_pos), "tie_word_embeddings": self.lm_head.module.weight is emb,
            "dtype": dtype}
        fields.update({"use_sliding_window": False} if qwen2 else {"attention_bias": True in qkv_bias, "mlp_bias": False})
        return fields

    def _eps(self) -> float:
        found = set()
        for norm in [self.norm] + [p[k] for p in self.parts for k in ("attention_norm", "mlp_norm")]:
            eps = [a for n in norm.all_nodes() if op_name(n) == "add" for a in n.args if isinstance(a, float)]
            for n in norm.all_nodes():
                if op_name(n) == "rms_norm":  # nn.RMSNorm: eps None is the dtype's machine epsilon
                    w = norm.module.weight if hasattr(norm.module, "weight") else None
                    if len(n.args) < 3 or n.args[2] is None or getattr(n.args[2], "op", None) != "placeholder" or w is None:
                        raise CaptureError(f"torch capture: '{norm.path}': rms_norm without its weight")
                    given = n.args[3] if len(n.args) > 3 else n.kwargs.get("eps")
                    eps.append(float(given) if given is not None else float(np.finfo(np.float32).eps))
            if len(eps) != 1:
                raise CaptureError(f"torch capture: '{norm.path}': no eps added to the mean square")
            found.add(eps[0])
        if len(found) != 1:
            raise CaptureError(f"torch capture: the norms use different eps ({', '.join(map(str, sorted(found)))})")
        return found.pop()

    def _theta(self, head_dim: int) -> float:
        """RoPE's base, from the model's 1-D buffers of head_dim/2 frequencies."""
        tables = {**self.g.buffers, **self.g.constants}
        state = {**dict(self.module.named_buffers()), **getattr(self.g.ep, "constants", {})}
        freqs = [state[k] for k in tables.values() if k in state and state[k].dim() == 1
                 and state[k].shape[0] == head_dim // 2 and state[k].dtype.is_floating_point]
        if not freqs:
            raise CaptureError(f"torch capture: no RoPE frequencies found (a 1-D buffer of head_dim/2 = "
                               f"{head_dim // 2} values, such as HF's inv_freq)")
        inv = freqs[0].detach().double().cpu().numpy()
        if len(inv) < 2 or not (inv > 0).all():
            raise CaptureError("torch capture: the RoPE frequencies must be positive and at least 2")
        i = np.arange(1, len(inv))
        theta = float(np.exp(np.mean(-np.log(inv[1:]) * head_dim / (2 * i))))  # inv_i = theta^(-2i/d)
        if abs(theta - round(theta)) <= 1e-5 * theta:  # the float32 buffer's rounding
            theta = float(round(theta))
        want = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        for f in freqs:
            if not np.allclose(f.detach().double().cpu().numpy(), want, rtol=1e-5, atol=0):
                raise CaptureError("torch capture: the RoPE frequencies are not theta^(-2i/d) for any theta "
                                   "(scaled RoPE is not captured)")
        return theta

    # -- the weights ----------------------------------------------------------------------------

    def weights(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {"model.embed_tokens.weight": _array(self.embedding.module.weight),
                                      "model.norm.weight": _norm_weight(self.norm)}
        if self.lm_head.module.weight is not self.embedding.module.weight:
            out["lm_head.weight"] = _array(self.lm_head.module.weight)
        for i, p in enumerate(self.parts):
            pre = f"model.layers.{i}"
            out[f"{pre}.input_layernorm.weight"] = _norm_weight(p["attention_norm"])
            out[f"{pre}.post_attention_layernorm.weight"] = _norm_weight(p["mlp_norm"])
            for role, heads in (("q_proj", p["heads"][0]), ("k_proj", p["kv_heads"][0]), ("v_proj", 0), ("o_proj", 0)):
                lin = p[role].module
                w, b = _array(lin.weight), None if lin.bias is None else _array(lin.bias)
                if heads and p["rope"] == "interleaved":  # Meta's pairs -> HF's halves
                    w, b = _to_halves(w, heads), None if b is None else _to_halves(b, heads)
                out[f"{pre}.self_attn.{role}.weight"] = w
                if b is not None:
                    out[f"{pre}.self_attn.{role}.bias"] = b
            for role, hf in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
                out[f"{pre}.mlp.{hf}.weight"] = _array(p["mlp"][role].module.weight)
        return out


def _norm_weight(norm: Block) -> np.ndarray:
    (w,) = list(norm.module.parameters())
    return _array(w)


def _array(t: Any) -> np.ndarray:
    import ml_dtypes
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _to_halves(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of interleaved RoPE pairs (x0, x1), (x2, x3), ... per head -> HF's rotate-half order
    (x0, x2, ..., x1, x3, ...): transformers' convert_llama_weights_to_hf permutation."""
    rows = w.shape[0]
    d = rows // heads
    rest = w.shape[1:]
    return w.reshape(heads, d // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def _check(cap: Captured, module: Any, ids: Any) -> None:
    """Run the captured module level on the example ids and compare with the module's logits."""
    import torch

    from strata.dialects.instances import find_model, model_params
    from strata.semantics.module_interp import ModuleRunner

    model_op = find_model(cap.module)
    by_ggml = {g: cap.weights[t.hf].astype(np.float32) for g, t in model_params(model_op).items()}
    ref_module = module if cap.config.dtype == "float32" else copy.deepcopy(module).float()
    with torch.no_grad():
        ref = ref_module(ids[:1])
    ref = getattr(ref, "logits", ref)
    ref = ref.detach().float().cpu().numpy()[0]
    got = ModuleRunner(model_op, _Arrays(by_ggml)).forward(ids[0].tolist())
    if got.shape != ref.shape:
        raise CaptureError(f"torch capture: the module returns logits of shape {ref.shape}, the capture {got.shape}")
    diff = float(np.abs(got - ref).max())
    scale = max(1.0, float(np.abs(ref).max()))
    if not diff <= CHECK_TOL * scale:
        raise CaptureError(f"torch capture: the captured blocks do not reproduce {type(module).__name__}'s logits "
                           f"on the example ids (max |diff| {diff:.3g}): the module computes something the "
                           "recognised blocks do not (a different mask, scale or RoPE?)")


class _Arrays(dict):
    def get(self, name: str) -> np.ndarray:  # type: ignore[override]
        return self[name]
