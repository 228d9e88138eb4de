"""The request bodies: an integer may be written as JSON Schema allows (2 or 2.0), nothing else."""

from __future__ import annotations

import pytest

from strata.runtime.serve.batch_engine import RequestLimits
from strata.runtime.serve.requests import ApiError, parse_completion

LIMITS = RequestLimits(tokenizer=None, vocab=100, n_ctx=64, kv_tokens=64)


def test_integers_may_be_whole_floats_and_nothing_else():
    parsed = parse_completion({"prompt": [5.0, 6, 7], "max_tokens": 4.0, "n": 2.0, "seed": 3.0}, LIMITS, "m")
    assert parsed.prompt == [5, 6, 7] and type(parsed.prompt[0]) is int
    assert (parsed.max_tokens, parsed.n, parsed.sampling.seed) == (4, 2, 3)
    for field, value in (("max_tokens", 4.5), ("n", True), ("n", "2"), ("seed", float("inf")), ("seed", float("nan"))):
        with pytest.raises(ApiError) as e:
            parse_completion({"prompt": [5], field: value}, LIMITS, "m")
        assert e.value.param == field and "must be an integer" in e.value.message
    with pytest.raises(ApiError) as e:
        parse_completion({"prompt": [5, 6.5]}, LIMITS, "m")
    assert e.value.param == "prompt"


def test_a_top_k_past_the_vocabulary_keeps_every_token():
    """A top_k beyond any integer the sampler holds (found by Schemathesis: it overflowed int32)."""
    for top_k, kept in ((2**53 - 1, 100), (100, 100), (7, 7), (-1, 0)):
        assert parse_completion({"prompt": [5], "top_k": top_k}, LIMITS, "m").sampling.top_k == kept


def test_a_temperature_too_small_to_divide_by_is_greedy():
    """Found by Schemathesis: 1.2e-38 overflowed the logits and drew a token past the vocabulary."""
    assert parse_completion({"prompt": [5], "temperature": 1.175494351e-38}, LIMITS, "m").sampling.greedy
    assert parse_completion({"prompt": [5], "temperature": 0.5}, LIMITS, "m").sampling.temperature == 0.5
