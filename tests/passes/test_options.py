"""Pass options from a pipeline string: an integer where a number is wanted is that number, and
every other mismatch is a line naming the pass, the option and what it takes (never xDSL's
`Incompatible types: given (2,), expected <class 'float'>`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.utils.arg_spec import parse_pipeline

from strata.cli.opt import main as opt_main
from strata.passes import strata_passes
from strata.passes.options import PassOptionError

MODULE_LEVEL = Path(__file__).resolve().parents[1] / "lit" / "passes" / "Inputs" / "llama2l.mlir"


def configured(text: str):
    (spec,) = parse_pipeline(text)
    return strata_passes()[spec.name]().from_pass_spec(spec)


def test_an_integer_is_a_number_where_a_number_is_wanted():
    p = configured('smoothquant{alpha=1 ranges="r.json"}')
    assert p.alpha == 1.0 and isinstance(p.alpha, float) and p.ranges == "r.json"
    assert configured("convert-module-to-op{entry=prefill,decode tokens=3}").entry == ("prefill", "decode")


@pytest.mark.parametrize("text, message", [
    ("smoothquant{alpha=x}", "smoothquant: option alpha takes a number, got 'x'"),
    ("convert-module-to-op{tokens=abc}", "convert-module-to-op: option tokens takes an integer, got 'abc'"),
    ("convert-module-to-op{tokens=1.5}", "option tokens takes an integer, got '1.5'"),
    ("convert-module-to-op{tokens}", "option tokens takes an integer, got no value"),
    ("convert-module-to-op{flash_attn=maybe}", "option flash_attn takes true or false, got 'maybe'"),
    ("convert-module-to-op{tokens=1,2}", "option tokens takes an integer, got '1,2'"),
    ("convert-module-to-op{no-such=1}", "convert-module-to-op: no option 'no_such' (its options: entry, tokens"),
    ("assign-frac-bits{headroom=true}", "option headroom takes an integer, got 'true'"),
])
def test_a_bad_option_names_the_pass_the_option_and_what_it_takes(text, message):
    with pytest.raises(PassOptionError) as e:
        configured(text)
    assert message in str(e.value) and "Incompatible" not in str(e.value)


@pytest.mark.parametrize("pipeline, message", [
    ("convert-module-to-op{entry=decode start=1 ctx=8},smoothquant{alpha=2 ranges=\"r.json\"}",
     "smoothquant: alpha must be in [0, 1], got 2.0"),
    ("convert-module-to-op{tokens=abc}", "-p: convert-module-to-op: option tokens takes an integer, got 'abc'"),
])
def test_strata_opt_says_it_in_one_line(capsys, pipeline, message):
    assert opt_main([str(MODULE_LEVEL), "-p", pipeline]) == 1
    err = capsys.readouterr().err
    assert err.startswith("strata-opt: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err and "Incompatible" not in err and "<class" not in err
