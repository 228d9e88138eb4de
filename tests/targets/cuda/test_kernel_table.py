"""The CUDA kernel table: every group rule a blueprint can carry has launchers, and
they exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import HYBRID_FAMILIES, ROOT, TINY, write_checkpoint
from strata.dialects import blueprint as B
from strata.pipeline import blueprint_of, load_model
from strata.targets.cuda import kernel_table as KT

RULES_JSON = ROOT / "strata" / "passes" / "fusion" / "rules.json"
RECIPES = ("f32", "bf16", "fp8-bf16head", "w4a16")


def test_table_covers_rules_json():
    """The table's rule names are exactly rules.json's, and its name tables the same."""
    data = json.loads(RULES_JSON.read_text())
    # The collectives' rules (a tensor-parallel program's) are entries without a launcher: the
    # host calls torch.distributed.
    rules = {r["rule"] for r in data["rules"]}
    assert set(KT.RULES) == rules
    assert KT.lookup("all_reduce_bf16").launchers == () and KT.lookup("all_gather_f32").ops == ("all_gather",)
    for name, spellings in data["tables"].items():
        assert set(KT.TABLES[name]) == set(spellings.values()), name
    for r in data["rules"]:  # the members' ops are among the entry's
        if r["rule"] not in KT.RULES:
            continue
        assert {m["op"] for m in r["members"]} <= set(KT.RULES[r["rule"]].ops), r["rule"]


def test_every_produced_group_has_a_kernel(tmp_path: Path):
    """Every group of every tiny family's blueprint (decode and prefill, four recipes) resolves,
    and its nodes are the entry's ops."""
    seen = set()
    for fam, cfg in {**TINY, **HYBRID_FAMILIES}.items():
        model = load_model(write_checkpoint(cfg, tmp_path / fam))
        for mode, rows in (("decode", 1), ("prefill", 5)):
            for recipe in RECIPES:
                for g in blueprint_of(model, mode, rows, recipe).walk():
                    if isinstance(g, B.GroupOp):
                        entry = KT.lookup(g.rule.data)
                        ops = {op.name.removeprefix("blueprint.") for op in g.body.block.ops} - {"yield"}
                        assert ops <= set(entry.ops), (g.rule.data, ops)
                        seen.add(g.rule.data)
    assert {"w8a16_m32", "w4a16_m32", "gdn_recurrence_f32_per_row", "moe_silu_down_shared_fp8",
            "paged_attention_bf16", "rope_mrope_interleaved"} <= seen


def test_lookup_errors():
    assert KT.lookup("single_linear").launchers == ("gemm.launch_linear",)
    with pytest.raises(KT.NoKernel, match="no CUDA kernel for group rule 'w9a16_m32'"):
        KT.lookup("w9a16_m32")
    with pytest.raises(KT.NoKernel, match="lone 'state_snapshot'"):
        KT.lookup("single_state_snapshot")


def test_launchers_and_kernels_exist():
    pytest.importorskip("triton", reason="resolving the launchers imports triton")
    entries = list(KT.ENTRIES) + [KT.lookup("single_" + op) for op in KT.SINGLE]
    for e in entries:
        for name in e.launchers:
            assert callable(KT.launcher(name)), name
        for name in e.kernels:
            assert hasattr(KT.kernel(name), "fn"), name  # a @triton.jit function
