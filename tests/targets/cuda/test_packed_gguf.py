"""GGUF weights kept in their block formats on the cuda target (recipe `gguf`), in Triton's
interpreter: tiny llama GGUFs whose projections are Q8_0, Q4_0, Q4_1, Q4_K, Q5_K or Q6_K (and a
Q4_K_M-like mix: q, k, gate, up Q4_K; v, down, output Q6_K), written here with the gguf package
(K-quants by strata.ir.ggml_kquants, which the gguf package cannot quantize to).

* the blueprint's projections say the file's type (`q4_K`; `gguf` for a merged projection whose
  parts differ), and the program binds them as the file's bytes (uint8, never dequantized);
* the greedy ids and logits equal those of recipe `f32` on the same file (the store's
  dequantized weights, f32 math) and, for the file of every type, those of the cpu target
  compiled with `--set act_quant=false` (its numpy kernels with float activations: by default
  they quantize a block weight's activations to Q8 as ggml-cpu does, which no float kernel
  reproduces to 1e-4), within 1e-4 of the largest logit;
* the weights' device bytes: packed against f32 (the Q4_K_M-like file's ratio is printed), and
  recipe gguf-bf16 (bf16 activations) binds the same blocks;
* `strata compile --recipe gguf-bf16 --aot sm_90a` of the Q4_K_M-like file: every launch of the
  model (its packed GEMVs and GEMMs among them) compiles for sm_90a without spills;
* the Q8_0 GGUFs of llama.cpp's converter (tests/frontends/data) of two MoE families, one a
  hybrid: the same, the routed experts packed, the weights the store cannot give as the file's
  blocks (Qwen3.5's attn_qkv, whose rows it reorders) bound as their values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton", reason="the CUDA target tests need triton (the `test` extra)")
torch = pytest.importorskip("torch", reason="the CUDA target tests need torch (the `test` extra)")
gguf = pytest.importorskip("gguf", reason="the GGUF files are written with the gguf package")

from strata.ir import ggml_kquants  # noqa: E402
from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.targets.cuda.program import load_model_py  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "frontends" / "data"
FIXTURE = DATA / "llama-f32.gguf"
HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 256, 256, 4, 2, 64
PROMPT = [3, 1]
STEPS = 2  # the prefill's token and a decode step
Q = gguf.GGMLQuantizationType
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
Q4_K_M = {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K", "attn_output": "Q4_K", "ffn_gate": "Q4_K",
          "ffn_up": "Q4_K", "ffn_down": "Q6_K", "output": "Q6_K"}


def _quantized(w: np.ndarray, kind: str) -> np.ndarray:
    if kind.endswith("_K"):
        return ggml_kquants.quantize(w, kind.lower().replace("_k", "_K"))
    return gguf.quants.quantize(w, Q[kind])


def write_llama(path: Path, types: dict[str, str], seed: int = 0) -> Path:
    """A one-layer llama (hidden 256, 4 heads / 2 KV heads of 64, FFN 256, the fixture's vocabulary
    of 272) with random weights, each projection (and the output) in `types[name]`; the token
    embedding in `types["token_embd"]` (f32 without it); no output.weight (a head tied to the
    embedding) when `types["output"]` is None."""
    r = gguf.GGUFReader(FIXTURE)
    w = gguf.GGUFWriter(path, "llama")
    sizes = {"llama.block_count": 1, "llama.embedding_length": HIDDEN, "llama.feed_forward_length": FFN,
             "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS,
             "llama.attention.key_length": HEAD_DIM, "llama.attention.value_length": HEAD_DIM,
             "llama.rope.dimension_count": HEAD_DIM}
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = sizes.get(key, field.contents())
        sub = {"sub_type": field.types[-1]} if field.types[0] == gguf.GGUFValueType.ARRAY else {}
        w.add_key_value(key, value, field.types[0], **sub)
    rng = np.random.default_rng(seed)
    vocab = 272
    rows = {"attn_q": HEADS * HEAD_DIM, "attn_k": KV_HEADS * HEAD_DIM, "attn_v": KV_HEADS * HEAD_DIM,
            "attn_output": HIDDEN, "ffn_gate": FFN, "ffn_up": FFN, "ffn_down": HIDDEN}
    embd = rng.standard_normal((vocab, HIDDEN)).astype(np.float32)
    if "token_embd" in types:
        w.add_tensor("token_embd.weight", _quantized(embd, types["token_embd"]), raw_dtype=Q[types["token_embd"]])
    else:
        w.add_tensor("token_embd.weight", embd)
    for name in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.0.{name}.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    for name in PROJECTIONS:
        k = FFN if name == "ffn_down" else HEADS * HEAD_DIM if name == "attn_output" else HIDDEN
        x = (rng.standard_normal((rows[name], k)) / np.sqrt(k)).astype(np.float32)
        w.add_tensor(f"blk.0.{name}.weight", _quantized(x, types[name]), raw_dtype=Q[types[name]])
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    head = (rng.standard_normal((vocab, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    if types["output"] is not None:
        w.add_tensor("output.weight", _quantized(head, types["output"]), raw_dtype=Q[types["output"]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _program(path: Path, out: Path, recipe: str):
    model = load_model(path)
    stage = compile_model(model, "cuda", out, {"ctx": 16, "recipe": recipe})
    return load_model_py(stage), model.open_weights(quiet=True)


def weight_bytes(m) -> int:
    """The device bytes of a Model's weight table (a packed weight's blocks; each tensor once)."""
    tensors = {}
    for w in m.w:
        for part in getattr(w, "parts", [w]):
            t = part if torch.is_tensor(part) else part.data  # a raw tensor, or a kernels.Weight's
            tensors[t.data_ptr()] = t.numel() * t.element_size()
    return sum(tensors.values())


def _check_same_as_f32(path: Path, tmp_path: Path, want_types: set[str]):
    module, store = _program(path, tmp_path / "gguf", "gguf")
    ref_module, ref_store = _program(path, tmp_path / "f32", "f32")
    specs = {spec[1]: spec[2] for spec in module.Model.WEIGHTS if spec[0] == "linear"}
    assert set(specs.values()) == want_types, specs
    m, ref = module.Model(store), ref_module.Model(ref_store)
    packed = [p for w in m.w for p in getattr(w, "parts", [w]) if getattr(p, "fmt", 0) > 2]
    assert packed and all(p.data.dtype == torch.uint8 for p in packed)
    ids, got = m.generate(PROMPT, STEPS)
    want_ids, want = ref.generate(PROMPT, STEPS)
    assert ids == want_ids
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))
    return m, ref, ids, got


#: Every block type in one file: one run covers them all (the interpreter is slow); gate and up
#: differ, so the merged gate_up projection is read as parts (`gguf`).
ALL_TYPES = {"attn_q": "Q8_0", "attn_k": "Q4_0", "attn_v": "Q4_1", "attn_output": "Q4_K", "ffn_gate": "Q5_K",
             "ffn_up": "Q6_K", "ffn_down": "Q4_K", "output": "Q6_K"}


def cpu_target_logits(path: Path, out: Path, prompt: list[int], ids: list[int]) -> np.ndarray:
    """The cpu target's program compiled with float activations (act_quant=false: no Q8 rounding
    of the rows a block weight multiplies; its numpy kernels), teacher-forced on `ids`: the logits
    of the prefill's last row and of each decode step."""
    from strata.targets.cpu.program import load

    model = load_model(path)
    stage = compile_model(model, "cpu", out, {"ctx": 16, "act_quant": False})
    program = load(stage, model.open_weights(quiet=True))
    rows = [program.prefill(prompt, 0).logits]
    for i, tok in enumerate(ids[:-1]):
        rows.append(program.decode(tok, len(prompt) + i).logits)
    return np.stack(rows)


def test_every_block_type_runs_packed_and_equals_f32(tmp_path):
    """... and the cpu target's float math (`--set act_quant=false`) on the same file."""
    path = write_llama(tmp_path / "all.gguf", ALL_TYPES)
    m, ref, ids, got = _check_same_as_f32(path, tmp_path, {"q8_0", "q4_0", "q4_1", "q4_K", "gguf", "q6_K"})
    gate_up = next(w for w in m.w if isinstance(w, m.kernels.Parts))
    assert [p.fmt for p in gate_up.parts] == [m.kernels.GGML_FORMATS[t][0] for t in ("q5_K", "q6_K")]
    assert weight_bytes(m) < weight_bytes(ref)
    want = cpu_target_logits(path, tmp_path / "cpu", PROMPT, ids)
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_q4_k_m_like_weights_stay_packed(tmp_path, capsys):
    """Q4_K_M's mix (q, k, o, gate, up Q4_K; v, down, output Q6_K): the program binds the file's
    bytes; the device bytes of the weights against recipe f32's (and bf16's, half of those)."""
    path = write_llama(tmp_path / "q4_k_m.gguf", Q4_K_M)
    module, store = _program(path, tmp_path / "gguf", "gguf")
    ref_module, ref_store = _program(path, tmp_path / "f32", "f32")
    assert {spec[2] for spec in module.Model.WEIGHTS if spec[0] == "linear"} == {"q4_K", "q6_K"}
    m, ref = module.Model(store), ref_module.Model(ref_store)
    g = gguf.GGUFReader(path)
    stored = sum(int(t.n_bytes) for t in g.tensors if t.name.split(".")[-2] in (*PROJECTIONS, "output"))
    linear = [w for w in m.w if isinstance(w, m.kernels.Weight) and w.fmt > 2]
    assert sum(w.data.numel() for w in linear) == stored  # the file's bytes, no more
    packed, f32 = weight_bytes(m), weight_bytes(ref)
    with capsys.disabled():
        print(f"\nQ4_K_M-like tiny llama: weights on the device {packed} B packed, {f32} B with recipe f32 "
              f"({f32 / packed:.2f}x)")
    assert packed < f32
    # gguf-bf16 (bf16 activations, as on a GPU: bound without the interpreter) keeps the same blocks
    bf16_module, bf16_store = _program(path, tmp_path / "gguf-bf16", "gguf-bf16")
    mb = bf16_module.Model(bf16_store, interpret=False, device="cpu")
    assert [(w.fmt, w.data.shape) for w in mb.w if isinstance(w, mb.kernels.Weight) and w.fmt > 2] == \
        [(w.fmt, w.data.shape) for w in linear]


@pytest.mark.parametrize("embd, output", [("Q6_K", "Q8_0"), ("Q4_0", None)], ids=["untied", "tied"])
def test_packed_token_embedding(tmp_path, embd, output):
    """A block-typed token_embd stays packed: the lookup gathers its rows from the file's blocks,
    and a tied head (no output.weight) multiplies by the same blocks (one weight, one copy on the
    device). The device holds exactly the file's tensor bytes."""
    types = dict(Q4_K_M, token_embd=embd, output=output)
    path = write_llama(tmp_path / "embd.gguf", types)
    name = embd.lower().replace("_k", "_K")  # ggml's spelling
    m, ref, *_ = _check_same_as_f32(path, tmp_path, {"q4_K", "q6_K", name} | ({output.lower()} if output else set()))
    reads = [spec for spec in m.WEIGHTS if "token_embd.weight" in spec[1]]
    assert reads == [("linear", ("token_embd.weight",), name, (1, 1))]
    table = m.w[m.WEIGHTS.index(reads[0])]
    assert table.data.dtype == torch.uint8 and table.fmt == m.kernels.GGML_FORMATS[reads[0][2]][0]
    assert weight_bytes(m) == sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


@pytest.mark.parametrize("family", ["qwen3moe", "qwen35moe"])
def test_converted_q8_0_families(tmp_path, family):
    """MoE (routed experts packed [experts, rows, row bytes]; Qwen3.5's shared expert too) and a
    hybrid whose attn_qkv the store reorders (bound as its values)."""
    m, *_ = _check_same_as_f32(DATA / f"{family}-q8_0.gguf", tmp_path, {"q8_0", "f32"})
    experts = [w for spec, w in zip(m.WEIGHTS, m.w) if "ffn_down_exps" in spec[1][0]]
    assert experts and all(w.fmt == m.kernels.GGML_FORMATS["q8_0"][0] and w.data.dim() == 3 for w in experts)


def test_aot_of_the_packed_model_within_limits(tmp_path):
    """The model's own launches, recorded on the meta device with the blocks as meta uint8
    tensors (aot_model), compiled for sm_90a (TRITON_INTERPRET unset, in a subprocess); the token
    embedding Q4_K as llama.cpp's Q4_K_M stores it (its packed gather among the launches)."""
    path = write_llama(tmp_path / "q4_k_m.gguf", dict(Q4_K_M, token_embd="Q4_K"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3]) + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / "o"
    proc = subprocess.run([sys.executable, "-m", "strata.cli", "compile", str(path), "--target", "cuda", "--recipe",
                           "gguf-bf16", "--aot", "sm_90a", "-o", str(out)], capture_output=True, text=True, env=env,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "aot" / "report.json").read_text())
    assert report and all(r["ok"] and r["target"] == "sm_90a" for r in report)
    ptx = "".join((out / "aot" / f"{r['name']}.ptx").read_text() for r in report if r["kernel"] == "gemv_kernel")
    assert re.search(r"ld\.global(\.nc)?\.[bu]8", ptx)  # the GEMVs load single bytes: the packed blocks
    assert any(r["kernel"] == "gather_ggml_rows_kernel" for r in report)
