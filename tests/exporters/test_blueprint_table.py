"""The group table of a blueprint (strata.exporters.blueprint_table.inspect_table) on
tests/blueprint_graph_ir.py's blueprint."""

from __future__ import annotations

from blueprint_graph_ir import blueprint_fn
from strata.exporters.blueprint_table import COLUMNS, abbreviate, inspect_table


def test_one_aligned_line_per_group():
    lines = inspect_table(blueprint_fn()).splitlines()
    assert len(lines) == 1 + 49
    assert lines[0].split() == ["group", "rule", "nodes", "node", "ids", "weight", "act", "out", "state"]
    starts = [lines[0].index(c) for c in COLUMNS]
    for line in lines[1:]:
        for s in starts[1:]:
            assert line[s - 2:s] == "  " and line[s] != " "


def test_rows():
    lines = {line.split()[0]: line.split() for line in inspect_table(blueprint_fn()).splitlines()[1:]}
    assert lines["0"] == ["0", "embed_row_copy", "1", "embed.embed", "-", "-", "bf16", "-"]
    assert lines["4"] == ["4", "gdn_conv_l2_f32_per_row", "3", "l0.gdn.{conv,conv_ckpt,l2}", "-", "bf16,f32", "f32",
                          "conv:update,conv:snapshot"]
    assert lines["14"] == ["14", "cross_layer_add_norm", "2", "l0.moe_ffn.add", "l1.gdn.input_norm", "-", "bf16",
                           "bf16", "-"]
    assert lines["35"][1:] == ["kv_write_bf16", "1", "l2.attn.kv_write", "-", "bf16", "-", "k:write,v:write"]
    assert lines["2"][4:7] == ["fp8/block128x128", "bf16", "bf16"]


def test_abbreviate():
    assert abbreviate(["l0.gdn.conv", "l0.gdn.l2", "l1.gdn.x"]) == "l0.gdn.{conv,l2} l1.gdn.x"
    assert abbreviate(["a"]) == "a"
    long = abbreviate([f"l0.moe_ffn.node_{i}" for i in range(20)], width=30)
    assert len(long) == 30 and long.endswith("...")
