"""The blueprint level's precision against the op level in f32: the f32 recipe
generates the op level's 32 greedy tokens for every family; fp8-bf16head's top-1 agrees on at
least 30 of 32 steps (teacher-forced) for the dense families; the per-node error report shows each format's own rounding where the
error enters (bf16 embedding rows, fp8 block weights of the first projection)."""

from __future__ import annotations

import pytest
from support import HYBRID_FAMILIES, TINY, write_checkpoint

from strata.pipeline import load_model
from strata.verify.blueprint import error_table, greedy_agreement, node_errors

FAMILIES = {**{k: TINY[k] for k in ("llama", "qwen2", "qwen3")}, **HYBRID_FAMILIES}
PROMPT = [3, 7, 1, 9, 4]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {name: load_model(write_checkpoint(cfg, tmp_path_factory.mktemp(name))) for name, cfg in FAMILIES.items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_f32_recipe_generates_the_op_levels_tokens(family, models):
    a = greedy_agreement(models[family], "f32", PROMPT, 32)
    assert a.free_running == 32 and a.teacher_forced == 32, (a.reference, a.ours)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_fp8_bf16head_agrees_on_30_of_32(family, models):
    # top-1 agreement per step on the op level's context (teacher-forced): a free run that flips
    # one near-tie token continues another text, and counts nothing after it
    a = greedy_agreement(models[family], "fp8-bf16head", PROMPT, 32)
    assert a.teacher_forced >= 30, (a.reference, a.ours)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5_moe"])
def test_node_errors_show_where_each_format_enters(family, models):
    f32 = node_errors(models[family], "f32", PROMPT)
    assert max(r.max_abs for r in f32) == 0.0
    rows = {r.node: r for r in node_errors(models[family], "fp8-bf16head", PROMPT)}
    # bf16 rows of the embedding: half an ulp of an 8-bit mantissa
    assert 0 < rows["embed.embed"].rel <= 2.0 ** -8
    # the first projection: its fp8 weights (3-bit mantissa, one scale per 128x128 block) on bf16
    # inputs: more than bf16 alone gives, less than e4m3's half step
    first = rows["l0.gdn.qkvz"] if "l0.gdn.qkvz" in rows else rows["l0.attn.q"]
    assert 2.0 ** -8 < first.rel < 2.0 ** -4
    table = error_table(list(rows.values()))
    assert table.splitlines()[0].split() == ["node", "op", "edge", "max_abs", "rel"]
    assert len(table.splitlines()) == len(rows) + 1
