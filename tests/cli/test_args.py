"""The CLI's shared flags: sampling flags that a greedy run would not read are warned about."""

from __future__ import annotations

import argparse

import pytest

from strata.cli.args import add_sampling, sampling_of


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_sampling(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("argv, flags", [
    (("--seed", "3"), "--seed does"),
    (("--top-k", "5", "--seed", "3"), "--top-k, --seed do"),
    (("--top-p", "0.5"), "--top-p does"),
])
def test_a_flag_greedy_decoding_ignores_is_warned_about(capsys, argv, flags) -> None:
    params = sampling_of(_parse(*argv))
    assert params.temperature == 0
    assert capsys.readouterr().err == f"strata: warning: {flags} nothing at temperature 0 (greedy); give --temperature to sample\n"


def test_a_sampled_run_is_not_warned_about(capsys) -> None:
    params = sampling_of(_parse("--temperature", "0.7", "--seed", "3", "--top-k", "5"))
    assert (params.temperature, params.seed, params.top_k) == (0.7, 3, 5)
    assert capsys.readouterr().err == ""
