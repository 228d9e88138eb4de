"""`strata bench`'s rows: a pp and a tg test per batch size with the repetitions' rates (their
mean and sample standard deviation), a test left out at 0 tokens, and one-line refusals. No
speed is asserted (speed is judged in bench/)."""

from __future__ import annotations

import json
import statistics

import pytest

from strata.runtime.commands.bench import BenchError, bench, format_json, format_table, parse_batches
from support import ROOT, TINY, write_checkpoint

GGUF = ROOT / "tests" / "runtime" / "data" / "tiny-llama-spm-f32.gguf"


def test_a_pp_and_a_tg_row_per_batch(tmp_path) -> None:
    rows = bench(GGUF, n_prompt=6, n_gen=2, batches=(1, 3), repetitions=2, cache_dir=tmp_path)
    assert [(r.batch, r.test, r.n_prompt, r.n_gen) for r in rows] == [
        (1, "pp6", 6, 0), (1, "tg2", 0, 2), (3, "pp6", 6, 0), (3, "tg2", 0, 2)]
    for r in rows:
        assert len(r.samples_ts) == 2 and all(t > 0 for t in r.samples_ts)
        assert r.avg_ts == pytest.approx(statistics.fmean(r.samples_ts))
        assert r.stddev_ts == pytest.approx(statistics.stdev(r.samples_ts))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-b1", "bench-b3"]
    table = format_table(rows).splitlines()
    assert table[0] == "| model | batch | test | t/s |" and len(table) == 2 + len(rows)
    assert table[4].startswith("| tiny-llama-spm-f32.gguf | 3 | pp6 | ") and " ± " in table[4]
    data = json.loads(format_json(rows))
    assert [set(d) for d in data] == [{"model", "batch", "test", "n_prompt", "n_gen", "avg_ts", "stddev_ts",
                                      "samples_ts"}] * 4


def test_the_cuda_target_benches_in_the_interpreter(tmp_path) -> None:
    """prefill / decode for one sequence, prefill_slots / decode_rows for two, on the cuda
    target in Triton's interpreter (rows only: the interpreter's speed means nothing)."""
    pytest.importorskip("triton", reason="the cuda target needs triton (the `test` extra)")
    model = write_checkpoint(TINY["llama"], tmp_path / "tiny")  # a vocabulary of 48: the interpreter is slow
    rows = bench(model, n_prompt=3, n_gen=1, batches=(1, 2), repetitions=1, cache_dir=tmp_path / "cache",
                 target_name="cuda", interpret=True, knobs={"recipe": "f32"})
    assert [(r.batch, r.test) for r in rows] == [(1, "pp3"), (1, "tg1"), (2, "pp3"), (2, "tg1")]
    assert all(r.avg_ts > 0 for r in rows)


def test_a_test_of_zero_tokens_is_left_out(tmp_path) -> None:
    rows = bench(GGUF, n_prompt=0, n_gen=2, batches=(2,), repetitions=1, cache_dir=tmp_path)
    assert [(r.test, r.stddev_ts) for r in rows] == [("tg2", 0.0)]


@pytest.mark.parametrize("call, message", [
    (lambda: parse_batches("1,0"), r"-b '1,0': expected comma-separated batch sizes of at least 1, got '0'"),
    (lambda: parse_batches("8,8"), r"batch size 8 is given twice"),
    (lambda: bench(GGUF, n_prompt=0, n_gen=0), r"nothing to measure"),
    (lambda: bench(GGUF, n_prompt=250, n_gen=10), r"260 positions, beyond the model's context of 256 tokens"),
])
def test_refusals(call, message) -> None:
    with pytest.raises(BenchError, match=message):
        call()
