"""kbp-graph/v1 export of one rank's blueprint of a tensor-parallel program: the rows of the
rank-dependent nodes carry `ranks`, each collective's row its kind, group and cost, and
`tensor_parallel` (before `provenance`) sums them; the costs are the ring's, worked out here from
the config; an unsharded blueprint exports as before, field for field."""

from __future__ import annotations

import pytest
from support import HYBRID_FAMILIES, TINY, module_of

from strata.exporters.kbp_graph import export_kbp_graph
from strata.passes.pipelines import blueprint_pipeline
from strata.pipeline import run_pipeline
from strata.semantics.op_interp import find_function

BF16 = 2  # bytes


def _doc(cfg, tp: int = 1, ep: int = 1, mode: str = "decode", rows: int = 1, recipe: str = "bf16") -> dict:
    fn = find_function(run_pipeline(module_of(cfg), blueprint_pipeline(mode, rows, recipe, tp=tp, ep=ep)))
    return export_kbp_graph(fn, provenance={"test": True})


def _ring(cfg, tp: int) -> tuple[int, int]:
    """(an all-reduce of a hidden row, the all-gather of a logits row): the bytes one rank sends."""
    return 2 * (tp - 1) * cfg.hidden_size * BF16 // tp, (tp - 1) * (cfg.vocab_size // tp) * BF16


@pytest.mark.parametrize("tp", [2, 4])
def test_dense_collectives_and_their_cost(tp):
    cfg = TINY["qwen3"]
    doc = _doc(cfg, tp)
    assert list(doc)[-2:] == ["tensor_parallel", "provenance"]
    reduce_row, gather_row = _ring(cfg, tp)
    rows = [n for n in doc["nodes"] if "collective" in n]
    # the vocabulary-split embed's, one after each attention and FFN, the head's gather
    assert [n["id"] for n in rows] == (["embed.all_reduce"]
                                       + [f"l{i}.{b}.all_reduce" for i in range(cfg.num_layers) for b in ("attn", "ffn")]
                                       + ["head.all_gather"])
    for n in rows:
        kind = n["op"]
        assert n["collective"] == {"kind": kind, "group": "tp", "ranks": tp,
                                   "bytes_per_row": reduce_row if kind == "all_reduce" else gather_row,
                                   "bytes_per_call": reduce_row if kind == "all_reduce" else gather_row}
        assert n["ranks"] == tp and n["family"] == "collective"
        # a launch of its own
        assert [m["id"] for m in doc["nodes"] if m["group"] == n["group"]] == [n["id"]]
    assert [n["id"] for n in doc["nodes"] if "ranks" in n and "collective" not in n] == ["embed.embed"]
    total = (1 + 2 * cfg.num_layers) * reduce_row + gather_row
    assert doc["tensor_parallel"] == {"group": "tp", "ranks": tp, "collectives": 2 + 2 * cfg.num_layers,
                                      "kinds": {"all_gather": 1, "all_reduce": 1 + 2 * cfg.num_layers},
                                      "bytes_per_row": total, "bytes_per_call": total}


def test_a_prefill_call_moves_its_rows():
    cfg = HYBRID_FAMILIES["qwen3_5_moe"]
    doc = _doc(cfg, 2, mode="prefill", rows=5)
    tp = doc["tensor_parallel"]
    assert tp["bytes_per_call"] == 5 * tp["bytes_per_row"]
    for n in doc["nodes"]:
        if "collective" in n:
            assert n["collective"]["bytes_per_call"] == 5 * n["collective"]["bytes_per_row"]


def test_whole_experts_are_rank_dependent_without_a_collective():
    cfg = HYBRID_FAMILIES["qwen3_5_moe"]
    doc = _doc(cfg, 2, 2)
    moe = [n["id"] for n in doc["nodes"] if "ranks" in n and "collective" not in n and n["block_type"] == "moe_ffn"]
    assert moe == [f"l{i}.moe_ffn.{k}" for i in range(cfg.num_layers) for k in ("experts_gate_up", "experts_down")]
    # routed + shared combined by one all-reduce per MoE layer, one per mixer, embed and head
    assert doc["tensor_parallel"]["kinds"] == {"all_gather": 1, "all_reduce": 1 + 2 * cfg.num_layers}


def test_the_layers_collapse_as_unsharded_and_one_rank_adds_nothing():
    cfg = HYBRID_FAMILIES["qwen3_5_moe"]
    whole, sharded = _doc(cfg), _doc(cfg, 2)
    assert sharded["collapsed"]["layout"] == whole["collapsed"]["layout"]
    assert list(sharded["collapsed"]["templates"]) == list(whole["collapsed"]["templates"])
    assert "tensor_parallel" not in whole
    assert not any("ranks" in n or "collective" in n for n in whole["nodes"])
    assert sharded["arm"]["digest"] != whole["arm"]["digest"]


def test_strata_blueprint_tp_records_the_ranks():
    import json

    from support import EXAMPLES, run_tool

    r = run_tool("blueprint", str(EXAMPLES / "qwen3-0.6b"), "--tp", "2", "--recipe", "bf16")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    prov = doc["provenance"]
    assert (prov["tp"], prov["ep"]) == (2, 1) and prov["commands"][0].endswith("--tp 2")
    # Qwen3-0.6B: 28 layers, hidden 1024, vocabulary 151936, bf16 on a ring of 2
    assert doc["tensor_parallel"] == {"group": "tp", "ranks": 2, "collectives": 58,
                                      "kinds": {"all_gather": 1, "all_reduce": 57},
                                      "bytes_per_row": 57 * 2048 + 151936, "bytes_per_call": 57 * 2048 + 151936}
