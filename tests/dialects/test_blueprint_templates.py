"""The layer collapse (strata.dialects.blueprint_templates) on plain rows: the rows of
the kbp-graph/v1 plan of Qwen3.6-35B-A3B give its own `collapsed` section and `layers`; changed rows split templates as they should."""

from __future__ import annotations

import copy
import json

import pytest

from strata.dialects.blueprint_templates import collapse, layer_of, layer_rows, strip_layer
from strata.errors import StrataError
from support import SEEDS


@pytest.fixture(scope="module")
def seed() -> dict:
    found = sorted(SEEDS.glob("001_*.txt")) if SEEDS.is_dir() else []
    if not found:
        pytest.skip("no ../shared/seeds/001_*.txt beside the checkout")
    return json.loads(found[0].read_text())


def test_seed_rows_give_the_seeds_collapsed_section(seed):
    got = collapse(seed["nodes"], seed["edges"])
    assert got == seed["collapsed"]
    # Key order too: the exporter writes this dict as it is.
    assert json.dumps(got) == json.dumps(seed["collapsed"])


def test_seed_rows_give_the_seeds_layers(seed):
    assert layer_rows(seed["nodes"], collapse(seed["nodes"], seed["edges"])) == seed["layers"]


def test_seed_templates_are_derived_from_the_rows_not_the_pattern(seed):
    got = collapse(seed["nodes"], seed["edges"])
    kinds = [layer["kind"] for layer in seed["layers"]]
    assert [i for i, k in enumerate(kinds) if k == "full_attention"] == got["templates"]["attn+moe_ffn"]["instances"]
    assert got["templates"]["gdn+moe_ffn"]["ports"] == {"in": [0, 10], "out": [22]}
    assert len(got["templates"]["gdn+moe_ffn"]["nodes"]) == 23


def test_a_layer_with_other_precision_makes_a_second_template(seed):
    nodes = copy.deepcopy(seed["nodes"])
    for n in nodes:
        if n["id"] == "l5.gdn.qkvz":
            n["precision"]["weight"] = "bf16"
    got = collapse(nodes, seed["edges"])
    assert got["layout"][5] == "gdn+moe_ffn#2"
    assert got["layout"][4] == got["layout"][6] == "gdn+moe_ffn"
    assert got["templates"]["gdn+moe_ffn#2"]["instances"] == [5]
    assert 5 not in got["templates"]["gdn+moe_ffn"]["instances"]
    assert got["templates"]["gdn+moe_ffn#2"]["nodes"][1]["precision"]["weight"] == "bf16"


def test_an_unfused_edge_makes_a_second_template(seed):
    edges = copy.deepcopy(seed["edges"])
    e = next(e for e in edges if e["id"] == "l9.gdn.ba")
    e["fused"] = False
    got = collapse(seed["nodes"], edges)
    assert got["layout"][9] == "gdn+moe_ffn#2"
    assert [n for n, t in enumerate(got["layout"]) if t.endswith("#2")] == [9]


def test_kernels_do_not_split_templates(seed):
    nodes = copy.deepcopy(seed["nodes"])
    for n in nodes:
        if n["layer"] == 6:
            n["kernel"] = "other::kernel"
    assert collapse(nodes, seed["edges"])["layout"] == seed["collapsed"]["layout"]


def test_a_node_between_layers_outside_any_is_an_error(seed):
    nodes = copy.deepcopy(seed["nodes"])
    nodes[100]["layer"] = None
    with pytest.raises(StrataError, match="lies between layers"):
        collapse(nodes, seed["edges"])


def test_layer_ids():
    assert layer_of("l12.gdn.qkvz") == 12 and layer_of("embed.embed") is None and layer_of("lm.x") is None
    assert strip_layer("l12.gdn.qkvz") == "gdn.qkvz" and strip_layer("head.lm_head") == "head.lm_head"
