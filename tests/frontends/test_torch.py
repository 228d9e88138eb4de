"""torch capture (strata.frontends.torch): the tensorviz.graph TinyLlama and an HF LlamaForCausalLM are
captured with torch.export, compiled for the CPU and run against the modules' own logits;
unsupported ops and mismatching modules give one-line errors (the op-by-op lowering:
test_torch_ops.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from support import EXAMPLES, seed_file

torch = pytest.importorskip("torch")
nn = torch.nn

from strata.dialects.instances import find_model  # noqa: E402
from strata.frontends.torch import CaptureError  # noqa: E402
from strata.pipeline import capture, capture_model, capture_to_dir  # noqa: E402
from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.targets.cpu.program import load_compiled  # noqa: E402

PROMPT = [1, 5, 9, 2, 30, 7]
TOL = 1e-5


def _example():
    spec = importlib.util.spec_from_file_location("tinyllama_torch", EXAMPLES / "tinyllama_torch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EX = _example()


def _compiled_vs_module(module, tmp: Path, steps: int = 4) -> tuple[float, float]:
    """(max |compiled - module| over prefill + greedy decode steps, max |logit|)."""
    ckpt = capture_to_dir(module, (torch.tensor([PROMPT]),), tmp / "captured")
    model = load_model(ckpt)
    compile_model(model, "cpu", tmp / "cpu", knobs={"ctx": 32})
    compiled = load_compiled(tmp / "cpu").Model(model.open_weights(quiet=True))
    ids = list(PROMPT)
    got = [compiled.prefill(np.array(ids, dtype=np.int32), 0)[-1]]
    for _ in range(steps):
        ids.append(int(np.argmax(got[-1])))
        got.append(compiled.decode(ids[-1], len(ids) - 1)[-1])
    with torch.no_grad():
        out = module(torch.tensor([ids]))
    want = getattr(out, "logits", out)[0, len(PROMPT) - 1:].numpy()
    return float(np.abs(np.stack(got) - want).max()), float(np.abs(want).max())


def test_tensorviz_tinyllama_compiled_matches_module(tmp_path):
    diff, scale = _compiled_vs_module(EX.seeded_tinyllama(), tmp_path)
    assert scale > 0.5  # logits that are not all near 0
    assert diff <= TOL, diff


def test_tensorviz_tinyllama_shape_is_the_documents():
    """vocab, dim and ffn as the tensorviz.graph document gives them; 4 heads as its walkthrough says."""
    seed = json.loads(seed_file("002").read_text())
    nodes = {n["node_id"]: n["params"] for n in seed["document"]["semantic"]["nodes"]}
    cfg = capture_model(EX.seeded_tinyllama(), (torch.tensor([PROMPT]),)).config
    assert (cfg.vocab_size, cfg.hidden_size) == (nodes["embedding"]["num_embeddings"], nodes["embedding"]["embedding_dim"])
    assert cfg.intermediate_size == nodes["block.ffn.gate"]["out_features"]
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (1, 4, 4, 4)


def test_torch_rmsnorm_is_a_norm():
    """nn.RMSNorm exports as one aten.rms_norm; its eps is read off it (the numeric check passes)."""
    module = EX.seeded_tinyllama()
    norm = nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(module.final_norm.gain)
        module.block.attention_norm.eps = module.block.ffn_norm.eps = 1e-6
    module.final_norm = norm
    assert capture_model(module, (torch.tensor([PROMPT]),)).config.rms_norm_eps == 1e-6


def test_capture_gives_the_llama_module_level():
    module = capture(EX.seeded_tinyllama(), (torch.tensor([PROMPT]),))
    kinds = {blk.attributes["path"].data for blk in find_model(module).body.block.ops}
    assert kinds == {"std.model.causal_lm", "std.layer.decoder", "std.attn.grouped_query", "std.nn.mlp",
                     "std.nn.linear", "std.nn.norm", "std.nn.embedding"}


def test_hf_llama_compiled_matches_hf(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=48, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=500000.0,
        attention_bias=True, tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(1)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
    cap = capture_model(hf, (torch.tensor([PROMPT]),))
    c = cap.config
    assert (c.num_heads, c.num_kv_heads, c.head_dim, c.rope_theta, c.rms_norm_eps) == (4, 2, 8, 500000.0, 1e-6)
    assert c.tie_word_embeddings and c.attention_bias and c.max_position_embeddings == 64
    assert hf.config.use_cache  # restored after the capture
    diff, scale = _compiled_vs_module(hf, tmp_path)
    assert scale > 0.5
    assert diff <= TOL, diff


def test_hf_qwen2_is_captured_as_qwen2():
    """q/k/v biases without an o bias: Qwen2's attention (the capture's numeric check passes)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen2Config(vocab_size=48, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   attn_implementation="eager", tie_word_embeddings=True)
    torch.manual_seed(2)
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    c = capture_model(hf, (torch.tensor([PROMPT]),)).config
    assert (c.arch, c.attention_bias, c.o_bias, c.rope_theta) == ("Qwen2ForCausalLM", True, False, 10000.0)


class _CumsumMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(16, 40, bias=False), nn.Linear(16, 40, bias=False), nn.Linear(40, 16, bias=False)

    def forward(self, x):
        return self.down(torch.cumsum(nn.functional.silu(self.gate(x)) * self.up(x), dim=-1))


def test_unsupported_op_is_one_line_naming_op_and_module():
    module = EX.seeded_tinyllama()
    module.block.ffn = _CumsumMlp()
    with pytest.raises(CaptureError) as err:
        capture(module, (torch.tensor([PROMPT]),))
    msg = str(err.value)
    assert "\n" not in msg
    assert "aten.cumsum.default" in msg and "'block.ffn'" in msg


def test_glue_op_outside_blocks_is_named():
    class Tanh(EX.TinyLlama):
        def forward(self, tokens):
            return self.lm_head(self.final_norm(torch.tanh(self.block(self.embedding(tokens)))))

    torch.manual_seed(0)
    with pytest.raises(CaptureError, match=r"unsupported op aten\.tanh\.default in the root module") as err:
        capture(Tanh().eval(), (torch.tensor([PROMPT]),))
    assert "\n" not in str(err.value)


def test_a_module_the_blocks_do_not_reproduce_is_refused():
    """No causal mask: every op is one the blocks admit, but the numeric check sees the difference."""
    module = EX.seeded_tinyllama()
    module.block.attention.forward = lambda x: _bidirectional(module.block.attention, x)
    with pytest.raises(CaptureError, match="do not reproduce TinyLlama's logits") as err:
        capture(module, (torch.tensor([PROMPT]),))
    assert "\n" not in str(err.value)


def _bidirectional(att, x):
    b, s, _ = x.shape

    def heads(t):
        return t.view(b, s, att.heads, att.head_dim).transpose(1, 2)

    q, k, v = att.query_rope(heads(att.query(x))), att.key_rope(heads(att.key(x))), heads(att.value(x))
    out = att.softmax(q @ k.transpose(-2, -1) / att.head_dim ** 0.5) @ v
    return att.project(out.transpose(1, 2).reshape(b, s, -1))


def test_capture_to_dir_keeps_existing_files(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(CaptureError, match="not an empty directory"):
        capture_to_dir(EX.seeded_tinyllama(), (torch.tensor([PROMPT]),), tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
