"""`strata perplexity` is llama-perplexity: on a tiny f32 Llama GGUF with Llama 2's SentencePiece
vocabulary, the same text and context give llama-perplexity's running and final estimates
(its output kept beside the data by make_perplexity_data.py) within 0.01% relative; batching
chunks changes nothing; the chunking, BOS rule and scored half as llama-perplexity's."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from strata.pipeline import load_model
from strata.runtime.commands import perplexity as P
from strata.runtime.opener import model_tokenizer, open_program
from support import ROOT

DATA = ROOT / "tests" / "runtime" / "data"
GGUF = DATA / "tiny-llama-spm-f32.gguf"
TEXT = DATA / "perplexity.txt"
CTX = 64


def llama_perplexity() -> tuple[list[float], float, float, int]:
    """The running estimates, the final PPL and error, and the chunk count llama-perplexity printed."""
    out = (DATA / "tiny-llama-spm-f32.perplexity.txt").read_text(encoding="utf-8")
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", out)]
    ppl, err = map(float, re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out).groups())
    chunks = int(re.search(r"perplexity over (\d+) chunks, n_ctx=(\d+)", out).group(1))
    assert f"n_ctx={CTX}," in out
    return running, ppl, err, chunks


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    model = load_model(GGUF)
    tok = model_tokenizer(model)
    assert tok.adds_bos
    program = open_program(model, "cpu", {"ctx": CTX, "entries": P.ENTRIES}, cache_dir=tmp_path_factory.mktemp("c"))
    yield program, tok.encode(TEXT.read_text(encoding="utf-8")), tok.bos_id
    program.close()


def test_equals_llama_perplexity(opened) -> None:
    program, ids, bos = opened
    running, ppl, err, chunks = llama_perplexity()
    got = P.run_perplexity(program, ids, CTX, 3, bos)  # 3 per call: the last call has 2 of the 8 chunks
    assert got.chunks == chunks == len(running) and got.count == chunks * (CTX - CTX // 2 - 1)
    # Both score in f32 (numpy here, ggml there) and llama-perplexity prints 9 or more significant
    # digits, so what differs is f32 rounding in the logits and log-softmax: a PPL's relative
    # difference is the mean NLL's absolute one. Measured: 2.4e-5 (PPL), 7e-6 (its error),
    # 6.3e-5 (the running estimate after the first chunk, 31 tokens). Log-probabilities rounded
    # to f16 on the way (3.7e-4 on the running estimate) fail this.
    assert abs(got.ppl / ppl - 1) < 1e-4, (got.ppl, ppl)
    assert abs(got.error / err - 1) < 1e-4, (got.error, err)
    np.testing.assert_allclose([r[0] for r in got.running], running, rtol=1e-4)


def test_the_cuda_target_scores_as_llama_perplexity(opened, tmp_path) -> None:
    """log_probs_packed on the cuda target in Triton's interpreter (f32): two chunks in one call,
    llama-perplexity's running estimates within 1e-4."""
    pytest.importorskip("triton", reason="the cuda target needs triton (the `test` extra)")
    _, ids, bos = opened
    running = llama_perplexity()[0]
    program = open_program(load_model(GGUF), "cuda", {"ctx": CTX, "entries": P.ENTRIES, "recipe": "f32"},
                           cache_dir=tmp_path, interpret=True)
    got = P.run_perplexity(program, ids, CTX, 2, bos, max_chunks=2)
    np.testing.assert_allclose([r[0] for r in got.running], running[:2], rtol=1e-4)


def test_batching_chunks_changes_nothing(opened) -> None:
    program, ids, bos = opened
    one, all_ = (P.run_perplexity(program, ids, CTX, b, bos) for b in (1, 8))
    np.testing.assert_allclose([r[0] for r in one.running], [r[0] for r in all_.running], rtol=1e-6)


def test_the_chunks_and_the_scored_half() -> None:
    ids = list(range(10, 33))  # 23 tokens: 2 chunks of 8 and 7 not scored (one chunk short of a third)
    chunks = P.chunk_ids(ids, 8, bos=1)
    assert chunks.tolist() == [[1] + ids[1:8], [1] + ids[9:16]]
    assert P.chunk_ids(ids, 8, bos=None)[1].tolist() == ids[8:16]
    call = P.packed_call(chunks)
    assert call["positions"].tolist() == list(range(8)) * 2 and call["segments"].tolist() == [0] * 8 + [1] * 8
    assert call["targets"].tolist()[:7] == ids[1:8] and call["targets"].tolist()[8:15] == ids[9:16]
    seen = []

    class Uniform:  # log-probs that name their token's position: which ones are scored
        def call(self, entry, **args):
            assert entry == "log_probs_packed"
            return (-np.asarray(args["positions"], np.float32) - 1,)

    P.score_chunks(Uniform(), chunks, 1, lambda i, lp: seen.append((i, lp.tolist())))
    assert seen == [(0, [-5.0, -6.0, -7.0]), (1, [-5.0, -6.0, -7.0])]  # positions 4..6 predict tokens 5..7
    with pytest.raises(P.PerplexityError, match="tokenizes to 23 token.*needs at least 24"):
        P.chunk_ids(ids, 12, bos=1)


def test_the_estimate_is_llama_perplexity_s() -> None:
    nll = np.random.default_rng(0).uniform(0, 5, 40)
    sums = P.NllSums()
    sums.add(-nll[:15])
    sums.add(-nll[15:])
    ppl, err = sums.estimate()
    assert ppl == pytest.approx(math.exp(nll.mean()), rel=1e-12)
    assert err == pytest.approx(math.sqrt(((nll ** 2).mean() - nll.mean() ** 2) / 39) * ppl, rel=1e-9)
