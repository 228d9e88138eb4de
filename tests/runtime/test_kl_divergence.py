"""`strata perplexity --kl-divergence-base`: the f32 model's distributions saved and a model judged
against them: the statistics as llama-perplexity --kl-divergence defines them (on made-up
distributions, against direct formulas), a model judged against its own base (KL 0, the same top
token everywhere, the base's PPL), and a base of another model, text or context refused in one line."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from strata.errors import StrataError
from strata.runtime import kl_divergence as K
from strata.runtime.commands.perplexity import perplexity
from support import ROOT

DATA = ROOT / "tests" / "runtime" / "data"
GGUF = DATA / "tiny-llama-spm-f32.gguf"
OTHER = DATA / "tiny-llama-spm.gguf"  # the same vocabulary, another (wider) model
TEXT = DATA / "perplexity.txt"


def test_the_statistics() -> None:
    rng = np.random.default_rng(1)
    p, q = (K.log_softmax(rng.normal(0, 2, (30, 50))) for _ in range(2))
    targets = rng.integers(0, 50, 30)
    stats = K.KlStats()
    stats.add(q[:12], p[:12], targets[:12])
    stats.add(q[12:], p[12:], targets[12:])
    P, Q = np.exp(p.astype(np.float64)), np.exp(q.astype(np.float64))
    np.testing.assert_allclose(stats.all("kld"), (P * np.log(P / Q)).sum(-1), rtol=1e-6)
    rows = np.arange(30)
    np.testing.assert_allclose(stats.all("dp"), Q[rows, targets] - P[rows, targets], atol=1e-7)
    assert stats.all("same").tolist() == (P.argmax(-1) == Q.argmax(-1)).tolist()
    out = io.StringIO()
    stats.report(out)
    kld = (P * np.log(P / Q)).sum(-1)
    assert f"Mean    KLD: {kld.mean():10.6f} +/- {kld.std() / math.sqrt(29):10.6f}" in out.getvalue()
    same = (P.argmax(-1) == Q.argmax(-1)).mean()
    assert f"Same top p: {100 * same:7.3f} +/- {100 * math.sqrt(same * (1 - same) / 29):.3f} %" in out.getvalue()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("kl")
    saved = perplexity(GGUF, TEXT, ctx=64, batch=2, max_chunks=3, kl_base=d / "base.npz", cache_dir=d / "c", out=None)
    return d, saved


def test_a_model_judged_against_its_own_base(base) -> None:
    d, saved = base
    b = K.read_base(d / "base.npz")
    assert b.tokens.shape == (3, 64) and b.log_probs.shape == (3, 31, 32000) and b.log_probs.dtype == np.float32
    assert b.tokens[:, 0].tolist() == [1, 1, 1]
    out = io.StringIO()
    judged = perplexity(GGUF, TEXT, batch=3, kl_base=d / "base.npz", kl_divergence=True, cache_dir=d / "c2", out=out)
    assert judged.chunks == 3 and judged.ppl == pytest.approx(saved.ppl, rel=1e-6)
    assert np.abs(judged.kl.all("kld")).max() < 1e-5 and judged.kl.all("same").all()
    assert "Same top p: 100.000 +/- 0.000 %" in out.getvalue()
    assert out.getvalue().splitlines()[-1].startswith("Final estimate: PPL = ")


@pytest.mark.parametrize("case, message", [
    ("other-model", r"base\.npz: saved from another model \(hidden_size 8, this model's 16\)"),
    ("other-text", r"base\.npz: saved for other tokens: 3 chunks of 64, .*first difference at token \d+"),
    ("other-ctx", r"--ctx 32: the base .* was saved with chunks of 64 tokens"),
    ("not-a-base", r"junk\.npz: not a base of strata perplexity"),
])
def test_a_base_of_something_else_is_refused(base, tmp_path, case, message) -> None:
    d, _ = base
    model, text, ctx, path = GGUF, TEXT, None, d / "base.npz"
    if case == "other-model":
        model = OTHER
    elif case == "other-text":
        text = tmp_path / "t.txt"
        text.write_text(TEXT.read_text(encoding="utf-8").replace("lighthouse", "tower"), encoding="utf-8")
    elif case == "other-ctx":
        ctx = 32
    else:
        path = tmp_path / "junk.npz"
        path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(StrataError, match=message):
        perplexity(model, text, ctx=ctx, kl_base=path, kl_divergence=True, cache_dir=tmp_path / "c", out=None)
    assert not (tmp_path / "c").exists()
