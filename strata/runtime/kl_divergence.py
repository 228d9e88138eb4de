"""`strata perplexity --kl-divergence-base FILE [--kl-divergence]`: a model's next-token
distributions over a text saved as a base (the f32 model's), and another precision of the same
model judged against it, as `llama-perplexity --kl-divergence` judges a quantization.

    strata perplexity model-f32.gguf -f wiki.txt --kl-divergence-base base.npz           # save
    strata perplexity model-q8_0.gguf -f wiki.txt --kl-divergence-base base.npz --kl-divergence

The base file (.npz, no pickles) holds the chunks' tokens [n, ctx] (after the BOS rule), the
f32 log-softmax of every scored position [n, ctx - ctx//2 - 1, Vocab], and the model's shape
(architecture, vocabulary, hidden size, layers, heads): a file of another model or another
vocabulary (tokens that differ from this model's tokenization of the text) is refused in one
line. The comparison reports, per chunk and over all scored tokens: the mean KL divergence
KL(base || model), Δp (the model's probability of the right token minus the base's) and how
often both put the same token first, with llama-perplexity's ± errors.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from strata.artifacts.files import write_output
from strata.errors import StrataError

KEYS = ("tokens", "log_probs", "model")
#: A model's shape, in the order a mismatch is reported.
SHAPE_KEYS = ("arch", "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "intermediate_size")


class KlBaseError(StrataError):
    """A base file that cannot be read, or that belongs to another model, vocabulary or text."""


def model_shape(config: Any) -> dict[str, Any]:
    """What must agree between the base's model and the judged one (a quantization keeps it)."""
    return {n: getattr(config, n) for n in SHAPE_KEYS if isinstance(getattr(config, n, None), (int, str))}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """A stable log-softmax over the last axis, in f64, returned in f32."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    z -= np.log(np.exp(z).sum(-1, keepdims=True))
    return z.astype(np.float32)


def save_base(path: str | Path, tokens: np.ndarray, log_probs: np.ndarray, shape: dict[str, Any]) -> None:
    buf = io.BytesIO()
    np.savez(buf, tokens=np.asarray(tokens, np.int64), log_probs=np.asarray(log_probs, np.float32),
             model=np.frombuffer(json.dumps(shape, sort_keys=True).encode("utf-8"), np.uint8))
    write_output(path, buf.getvalue())


@dataclass
class KlBase:
    tokens: np.ndarray
    log_probs: np.ndarray
    shape: dict[str, Any]

    @property
    def ctx(self) -> int:
        return int(self.tokens.shape[1])


def read_base(path: str | Path) -> KlBase:
    path = Path(path)
    if not path.is_file():
        raise KlBaseError(f"{path}: no such file (save a base first: --kl-divergence-base FILE without "
                          "--kl-divergence)")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in KEYS if k not in f.files]
            if missing:
                raise KlBaseError(f"{path}: not a base of strata perplexity (no {missing[0]!r} array)")
            tokens, log_probs, shape = f["tokens"], f["log_probs"], json.loads(f["model"].tobytes().decode("utf-8"))
    except KlBaseError:
        raise
    except Exception as e:  # a truncated zip, a bad member: whatever numpy raises for a file that is not one
        raise KlBaseError(f"{path}: not a base of strata perplexity ({type(e).__name__}: {e})") from None
    if (tokens.ndim != 2 or log_probs.ndim != 3 or len(log_probs) != len(tokens)
            or log_probs.shape[1] != tokens.shape[1] - tokens.shape[1] // 2 - 1 or not isinstance(shape, dict)):
        raise KlBaseError(f"{path}: a base whose arrays do not fit together (tokens {tokens.shape}, "
                          f"log_probs {log_probs.shape})")
    return KlBase(tokens, log_probs, shape)


def check_base(base: KlBase, path: str | Path, shape: dict[str, Any], chunks: np.ndarray) -> None:
    """Refuse a base of another model or vocabulary, or of another text or context."""
    for key in [k for k in SHAPE_KEYS if k in base.shape or k in shape] + sorted(set(base.shape) - set(SHAPE_KEYS)):
        if base.shape.get(key) != shape.get(key):
            raise KlBaseError(f"{path}: saved from another model ({key} {base.shape.get(key)!r}, this model's "
                              f"{shape.get(key)!r})")
    if base.log_probs.shape[2] != shape.get("vocab_size", base.log_probs.shape[2]):
        raise KlBaseError(f"{path}: log-probs over {base.log_probs.shape[2]} tokens, this model's vocabulary has "
                          f"{shape.get('vocab_size')}")
    if chunks.shape != base.tokens.shape or not np.array_equal(chunks, base.tokens):
        first = next((i for i, (a, b) in enumerate(zip(chunks.reshape(-1), base.tokens.reshape(-1))) if a != b), None)
        where = f" (first difference at token {first})" if first is not None else ""
        raise KlBaseError(f"{path}: saved for other tokens: {base.tokens.shape[0]} chunks of {base.ctx}, this text "
                          f"gives {chunks.shape[0]} of {chunks.shape[1]}{where}; another vocabulary or another text")


def _mean_err(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, np.float64)
    mean = float(x.mean())
    err = math.sqrt(max(float((x * x).mean()) - mean * mean, 0.0) / (x.size - 1)) if x.size > 1 else math.nan
    return mean, err


@dataclass
class KlStats:
    """Per scored token: the KL divergence, Δp, same-top, and both models' NLL of the target."""

    kld: list[np.ndarray] = field(default_factory=list)
    dp: list[np.ndarray] = field(default_factory=list)
    same: list[np.ndarray] = field(default_factory=list)
    nll: list[np.ndarray] = field(default_factory=list)
    nll_base: list[np.ndarray] = field(default_factory=list)

    def add(self, log_probs: np.ndarray, base: np.ndarray, targets: np.ndarray) -> None:
        """One chunk's scored positions: this model's and the base's log-softmax [n, V] and the targets [n]."""
        q, p = np.asarray(log_probs, np.float64), np.asarray(base, np.float64)
        self.kld.append((np.exp(p) * (p - q)).sum(-1))
        rows = np.arange(len(targets))
        self.dp.append(np.exp(q[rows, targets]) - np.exp(p[rows, targets]))
        self.same.append((q.argmax(-1) == p.argmax(-1)).astype(np.float64))
        self.nll.append(-q[rows, targets])
        self.nll_base.append(-p[rows, targets])

    def all(self, name: str) -> np.ndarray:
        return np.concatenate(getattr(self, name))

    def chunk_line(self, i: int) -> str:
        kld, kerr = _mean_err(self.all("kld"))
        same = self.all("same")
        return (f"[{i + 1}] PPL {math.exp(self.all('nll').mean()):.4f}  "
                f"ln(PPL(Q)/PPL(base)) {(self.all('nll') - self.all('nll_base')).mean():.6f}  "
                f"KLD {kld:.6f} +/- {kerr:.6f}  RMS dp {100 * math.sqrt((self.all('dp') ** 2).mean()):.3f} %  "
                f"same top {100 * same.mean():.3f} %")

    def report(self, out: TextIO) -> None:
        kld, dp, same = self.all("kld"), self.all("dp"), self.all("same")
        nll, nll_base = self.all("nll"), self.all("nll_base")
        n = kld.size
        ln_ratio, ln_err = _mean_err(nll - nll_base)
        print("====== Perplexity statistics ======", file=out)
        print(f"Mean PPL(Q)                   : {math.exp(nll.mean()):.6f}", file=out)
        print(f"Mean PPL(base)                : {math.exp(nll_base.mean()):.6f}", file=out)
        print(f"Mean ln(PPL(Q)/PPL(base))     : {ln_ratio:.6f} +/- {ln_err:.6f}", file=out)
        print("====== KL divergence statistics ======", file=out)
        mean, err = _mean_err(kld)
        print(f"Mean    KLD: {mean:10.6f} +/- {err:10.6f}", file=out)
        for label, q in (("Maximum", 100), ("99.9%  ", 99.9), ("99.0%  ", 99), ("Median ", 50), ("1.0%   ", 1),
                         ("Minimum", 0)):
            print(f"{label} KLD: {np.percentile(kld, q):10.6f}", file=out)
        print("====== Token probability statistics ======", file=out)
        mean, err = _mean_err(dp)
        print(f"Mean    Δp: {100 * mean:8.3f} +/- {100 * err:.3f} %", file=out)
        for label, q in (("Maximum", 100), ("99.9%  ", 99.9), ("Median ", 50), ("0.1%   ", 0.1), ("Minimum", 0)):
            print(f"{label} Δp: {100 * np.percentile(dp, q):8.3f} %", file=out)
        ms, ms_err = _mean_err(dp * dp)
        rms = math.sqrt(ms)
        print(f"RMS Δp    : {100 * rms:8.3f} +/- {100 * ms_err / (2 * rms) if rms > 0 else 0.0:.3f} %", file=out)
        p = float(same.mean())
        same_err = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else math.nan
        print(f"Same top p: {100 * p:7.3f} +/- {100 * same_err:.3f} %", file=out, flush=True)
