"""The TinyLlama of seed 002 as a plain `torch.nn.Module`, captured, compiled for the CPU and run.

    python examples/tinyllama_torch.py [OUT_DIR]

The module mirrors the seed's module graph: `embedding` (vocab 32, dim 16), one `block` (a
pre-norm decoder: `attention_norm`, `attention` with `query`/`key`/`value`, `query_rope`/`key_rope`
(interleaved pairs: stack and flatten, as the seed's Rotary) and `project`; `ffn_norm`, `ffn` with
`gate`/`up`/`silu`/`down`), `final_norm` and `lm_head`; RMSNorms with a `gain`, 4 heads, ffn 40,
seeded random weights. `strata.pipeline.capture_to_dir` captures it with `torch.export`
into a checkpoint directory, `strata.pipeline.compile_model` compiles that for the CPU, and the
compiled model's prefill and decode logits are compared with the module's own. The last line
prints the largest difference.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain


class Rotary(nn.Module):
    """RoPE on interleaved pairs (x[2i], x[2i+1]), as Meta's Llama and the seed's Rotary."""

    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, Heads, S, D]
        pos = torch.arange(x.shape[-2], dtype=torch.float32, device=x.device)
        angles = pos[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.query_rope = Rotary(self.head_dim)
        self.key_rope = Rotary(self.head_dim)
        self.softmax = nn.Softmax(dim=-1)
        self.project = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q = self.query_rope(heads(self.query(x)))
        k = self.key_rope(heads(self.key(x)))
        v = heads(self.value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = self.softmax(scores) @ v
        return self.project(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.silu = nn.SiLU()
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.silu(self.gate(x)) * self.up(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = SwiGLU(dim, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.ffn(self.ffn_norm(h))


class TinyLlama(nn.Module):
    """Seed 002's model: vocab 32, dim 16, 4 heads, ffn 40, one decoder block."""

    def __init__(self, vocab: int = 32, dim: int = 16, heads: int = 4, ffn: int = 40):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.block = DecoderBlock(dim, heads, ffn)
        self.final_norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [B, S] -> [B, S, vocab]
        return self.lm_head(self.final_norm(self.block(self.embedding(tokens))))


def seeded_tinyllama(seed: int = 0) -> TinyLlama:
    """The model with seeded random weights (norm gains near 1, so that they matter)."""
    torch.manual_seed(seed)
    model = TinyLlama()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gain"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model.eval()


def main(argv: list[str]) -> int:
    import numpy as np

    from strata.pipeline import capture_to_dir
    from strata.pipeline import compile_model, load_model
    from strata.targets.cpu.program import load_compiled

    module = seeded_tinyllama()
    prompt = torch.tensor([[1, 5, 9, 2, 30, 7]])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(argv[0]) if argv else Path(tmp) / "build"
        ckpt = capture_to_dir(module, (prompt,), Path(tmp) / "captured")
        model = load_model(ckpt)
        print(model.module)
        compile_model(model, "cpu", out, knobs={"ctx": 64})
        compiled = load_compiled(out).Model(model.open_weights())
        ids = prompt[0].tolist()
        got = [compiled.prefill(np.array(ids, dtype=np.int32), 0)[-1]]
        for step in range(4):  # greedy decode steps, each checked against the whole sequence
            ids.append(int(np.argmax(got[-1])))
            got.append(compiled.decode(ids[-1], len(ids) - 1)[-1])
        with torch.no_grad():
            want = module(torch.tensor([ids]))[0, len(prompt[0]) - 1:].numpy()
        diff = float(np.abs(np.stack(got) - want).max())
    print(f"generated ids {ids[len(prompt[0]):]}")
    print(f"max |compiled - nn.Module| over prefill + 4 decode steps: {diff:.3g}")
    return 0 if diff <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
