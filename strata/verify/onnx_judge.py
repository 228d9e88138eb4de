"""ONNX Runtime as the judge of w4a16 weights (the judge of Quadric Chimera's pipeline).

    err = check_projections(w4a16_weights, rows=4)     # per projection: ORT's MatMulNBits vs numpy
    model = llama_prefill_onnx(cfg, weights, packed, block, seq=5)
    logits = run_onnx(model, {"input_ids": ids})    # [seq, vocab]

`check_projections` runs every int4 weight of a `strata quantize --w4a16` output through a
one-node graph, `com.microsoft.MatMulNBits(X, B, scales, zero_points)`, and compares ORT's Y
with X @ dequantize(B)^T in numpy (float64): the packed bytes mean to ORT what they mean to
Strata.

`llama_prefill_onnx` writes the first-token graph of a Llama-architecture model (no biases, no
q/k norm, plain RoPE) with standard ONNX ops and `MatMulNBits` for every int4 weight (a plain
`MatMul` with W^T for the others): Gather, RMSNorm as Mul/ReduceMean/Add/Sqrt/Div/Mul, RoPE
(rotate-half, HF's layout) from cos/sin constants, causal attention with the KV heads expanded
to the query heads (GQA), SwiGLU, the final norm and the head. It prefills `seq` tokens from an
empty cache and returns every row's logits. onnx and onnxruntime are imported only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from strata.errors import StrataError


class JudgeError(StrataError):
    """A model or weights the ONNX judge cannot build or run."""


def _onnx():
    try:
        import onnx  # noqa: PLC0415
        import onnxruntime  # noqa: PLC0415, F401
    except ImportError as e:
        raise JudgeError(f"the ONNX Runtime judge needs onnx and onnxruntime ({e}); pip install onnx onnxruntime") from None
    return onnx


OPSET = 18


class _Graph:
    def __init__(self) -> None:
        self.onnx = _onnx()
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, kind: str, *inputs: str, domain: str = "", **attrs: Any) -> str:
        self.n += 1
        out = f"{kind.lower()}_{self.n}"
        self.nodes.append(self.onnx.helper.make_node(kind, list(inputs), [out], domain=domain or None, **attrs))
        return out

    def model(self, inputs: list, outputs: list):
        h = self.onnx.helper
        graph = h.make_graph(self.nodes, "strata_w4a16", inputs, outputs, self.inits)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET), h.make_opsetid("com.microsoft", 1)],
                         producer_name="strata")
        m.ir_version = 9
        return m


def _matmulnbits(g: _Graph, x: str, name: str, packed: tuple[np.ndarray, np.ndarray, np.ndarray], k: int,
                 block: int) -> str:
    b, s, z = packed
    n = b.shape[0]
    return g.op("MatMulNBits", x, g.const(f"{name}_Q4", b), g.const(f"{name}_scales", s),
                g.const(f"{name}_zero_points", z), domain="com.microsoft", K=k, N=n, bits=4, block_size=block)


def projection_graph(name: str, packed: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, block: int):
    """The one-node graph Y [M, N] = MatMulNBits(X [M, K], ...)."""
    onnx = _onnx()
    g = _Graph()
    _matmulnbits(g, "X", name, packed, k, block)
    g.nodes[-1].output[0] = "Y"
    f = onnx.TensorProto.FLOAT
    return g.model([onnx.helper.make_tensor_value_info("X", f, ["M", k])],
                   [onnx.helper.make_tensor_value_info("Y", f, ["M", packed[0].shape[0]])])


def run_onnx(model, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    _onnx()
    import onnxruntime as ort  # noqa: PLC0415

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return sess.run(None, dict(feeds))
    except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
        raise JudgeError(f"onnxruntime: {str(e).strip().splitlines()[0][:200]}") from None


def check_projections(weights, rows: int = 4, seed: int = 0) -> dict[str, float]:
    """Per int4 weight of a `W4A16Weights`: max |ORT's MatMulNBits - X @ dequant(W)^T| over
    random X [rows, K] (N(0, 1), seeded), relative to max |reference| (or 1 when it is < 1)."""
    from strata.ir.int4 import dequantize_int4_block, unpack_int4  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weights.weights.items():
        k = shape["K"]
        b, s, z = weights.packed(name)
        x = rng.standard_normal((rows, k)).astype(np.float32)
        (y,) = run_onnx(projection_graph(name, (b, s, z), k, weights.block), {"X": x})
        q, zp = unpack_int4(b, z, k)
        ref = x.astype(np.float64) @ dequantize_int4_block(q, s, zp, weights.block).astype(np.float64).T
        out[name] = float(np.abs(y - ref).max() / max(1.0, float(np.abs(ref).max())))
    return out


def check_llama(cfg) -> None:
    problems = [what for what, bad in (
        ("attention biases", getattr(cfg, "attention_bias", False) or getattr(cfg, "o_bias", False)),
        ("q/k norms", getattr(cfg, "qk_norm", False)),
        ("rope scaling", getattr(cfg, "rope_scaling", None) is not None)) if bad]
    if not hasattr(cfg, "intermediate_size") or not hasattr(cfg, "num_kv_heads") or problems:
        raise JudgeError(f"{cfg.name}: the ONNX judge's graph covers plain Llama layers"
                         + (f"; this model has {', '.join(problems)}" if problems else ""))


def llama_prefill_onnx(cfg, weights: Any, packed: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]],
                       block: int, seq: int):
    """The prefill graph: input_ids int64 [seq] -> logits f32 [seq, vocab] (see the module docstring).
    `weights.get(name)` gives f32 tensors by llama.cpp name; `packed` the MatMulNBits tensors
    (B, scales, zero points) and K of the weights that are int4 (`packed_of`)."""
    onnx = _onnx()
    check_llama(cfg)
    g = _Graph()
    hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    eps = np.float32(cfg.rms_norm_eps)

    def w(name: str) -> np.ndarray:
        return np.asarray(weights.get(name), np.float32)

    def linear(x: str, name: str) -> str:
        if name in packed:
            b, sc, z, k = packed[name]
            return _matmulnbits(g, x, name, (b, sc, z), k, block)
        return g.op("MatMul", x, g.const(name + "_T", w(name).T.copy()))

    def rms(x: str, name: str) -> str:
        sq = g.op("ReduceMean", g.op("Mul", x, x), g.const(f"axes_{g.n}", np.array([-1], np.int64)), keepdims=1)
        den = g.op("Sqrt", g.op("Add", sq, g.const(f"eps_{g.n}", np.array(eps, np.float32))))
        return g.op("Mul", g.op("Div", x, den), g.const(name, w(name)))

    pos = np.arange(seq, dtype=np.float64)
    inv = cfg.rope_theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]
    cos = g.const("rope_cos", np.cos(ang).astype(np.float32)[None])  # [1, S, D/2]
    sin = g.const("rope_sin", np.sin(ang).astype(np.float32)[None])
    half = d // 2
    starts = {k: g.const(f"slice_{k}", np.array([v], np.int64)) for k, v in
              (("0", 0), ("h", half), ("d", d), ("ax", -1))}

    def rope(x: str) -> str:  # x [H, S, D]
        x1 = g.op("Slice", x, starts["0"], starts["h"], starts["ax"])
        x2 = g.op("Slice", x, starts["h"], starts["d"], starts["ax"])
        return g.op("Concat", g.op("Sub", g.op("Mul", x1, cos), g.op("Mul", x2, sin)),
                    g.op("Add", g.op("Mul", x2, cos), g.op("Mul", x1, sin)), axis=-1)

    mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
    mask_c = g.const("causal_mask", mask)
    scale_c = g.const("attn_scale", np.array(1.0 / np.sqrt(d), np.float32))
    shape = lambda name, dims: g.const(name, np.array(dims, np.int64))  # noqa: E731
    heads_q, heads_kv = shape("shape_q", [seq, hq, d]), shape("shape_kv", [seq, hkv, d])
    kv5, kv_exp = shape("shape_kv5", [hkv, 1, seq, d]), shape("shape_kv_exp", [hkv, hq // hkv, seq, d])
    kv_rep, flat = shape("shape_kv_rep", [hq, seq, d]), shape("shape_flat", [seq, hq * d])

    ids = "input_ids"
    h = g.op("Gather", g.const("token_embd.weight", w("token_embd.weight")), ids, axis=0)
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        x = rms(h, p + "attn_norm.weight")
        q = g.op("Transpose", g.op("Reshape", linear(x, p + "attn_q.weight"), heads_q), perm=[1, 0, 2])
        k = g.op("Transpose", g.op("Reshape", linear(x, p + "attn_k.weight"), heads_kv), perm=[1, 0, 2])
        v = g.op("Transpose", g.op("Reshape", linear(x, p + "attn_v.weight"), heads_kv), perm=[1, 0, 2])
        q, k = rope(q), rope(k)
        k = g.op("Reshape", g.op("Expand", g.op("Reshape", k, kv5), kv_exp), kv_rep)
        v = g.op("Reshape", g.op("Expand", g.op("Reshape", v, kv5), kv_exp), kv_rep)
        s = g.op("Add", g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), scale_c), mask_c)
        o = g.op("Reshape", g.op("Transpose", g.op("MatMul", g.op("Softmax", s, axis=-1), v), perm=[1, 0, 2]), flat)
        h = g.op("Add", h, linear(o, p + "attn_output.weight"))
        x = rms(h, p + "ffn_norm.weight")
        gate = linear(x, p + "ffn_gate.weight")
        act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), linear(x, p + "ffn_up.weight"))
        h = g.op("Add", h, linear(act, p + "ffn_down.weight"))
    head = "output.weight" if "output.weight" in packed or _has(weights, "output.weight") else "token_embd.weight"
    linear(rms(h, "output_norm.weight"), head)
    g.nodes[-1].output[0] = "logits"
    f = onnx.TensorProto.FLOAT
    return g.model([onnx.helper.make_tensor_value_info(ids, onnx.TensorProto.INT64, [seq])],
                   [onnx.helper.make_tensor_value_info("logits", f, [seq, cfg.vocab_size])])


def packed_of(weights) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """The MatMulNBits tensors and K of every int4 weight of a `W4A16Weights`."""
    return {name: (*weights.packed(name), int(shape["K"])) for name, shape in weights.weights.items()}


def _has(weights: Any, name: str) -> bool:
    try:
        weights.get(name)
    except Exception:  # noqa: BLE001 - any store's "no such tensor"
        return False
    return True


def judge_w4a16(model, store: Any, smoothed: Any, stage: Any, prompt, recipe: str = "w4a16") -> dict[str, Any]:
    """The w4a16 judge on one prompt's first token (`model` a `strata.pipeline.Model`, `store` its
    f32 weights, `smoothed` them after SmoothQuant (before the int4 step), `stage` the written
    `W4A16Weights`):

    - `ort_vs_dequant`: max |ORT's logits on the int4 graph - the op level's on the stage's
      dequantized weights| over the reference's max |logit| (the graph and the packing agree);
    - `blueprint_vs_f32`: `logit_metrics` of the blueprint level under `recipe` (int4 weights
      emulated from `smoothed`, bf16 activations), against the f32 op level
      on the original weights;
    - `blueprint_vs_ort`: the same blueprint logits against ORT's (rank_of_ort_argmax ...);
    - `ort_vs_f32`: ORT's logits against the f32 op level (what int4 itself costs)."""
    from strata.pipeline import blueprint_of, entry_pipeline, lower  # noqa: PLC0415
    from strata.semantics.blueprint_interp import run_blueprint  # noqa: PLC0415
    from strata.semantics.op_interp import alloc_state, find_function, run_function  # noqa: PLC0415
    from strata.verify.metrics import logit_metrics  # noqa: PLC0415

    ids = np.asarray(prompt, np.int32).reshape(-1)
    n = len(ids)
    fn = find_function(lower(model, entry_pipeline("prefill", tokens=n, start=0, ctx=max(n, 2), kv_pad=1)))
    f32 = run_function(fn, store, alloc_state(fn), ids, 0)[-1]
    dequant = run_function(fn, stage, alloc_state(fn), ids, 0)[-1]
    (ort,) = run_onnx(llama_prefill_onnx(model.config, stage, packed_of(stage), stage.block, n),
                      {"input_ids": ids.astype(np.int64)})
    ort = ort[-1]
    bp = find_function(blueprint_of(model, "prefill", n, recipe, collapse=False))
    blue = np.asarray(run_blueprint(bp, smoothed, alloc_state(fn), [ids.reshape(-1, 1)], pos=0)[1])[-1]
    return {
        "ort_vs_dequant": float(np.abs(ort - dequant).max() / max(float(np.abs(dequant).max()), 1e-30)),
        "blueprint_vs_f32": logit_metrics(blue, f32),
        "blueprint_vs_ort": logit_metrics(blue, ort),
        "ort_vs_f32": logit_metrics(ort, f32),
    }
