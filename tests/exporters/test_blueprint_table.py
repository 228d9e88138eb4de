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


def _tp_table(cfg, tp: int, ep: int = 1) -> list[str]:
    from support import module_of

    from strata.passes.pipelines import blueprint_pipeline
    from strata.pipeline import run_pipeline
    from strata.semantics.op_interp import find_function

    fn = find_function(run_pipeline(module_of(cfg), blueprint_pipeline("decode", 1, "bf16", tp=tp, ep=ep)))
    return inspect_table(fn).splitlines()


def test_a_tensor_parallel_blueprint_shows_what_each_rank_sends_and_holds():
    from support import TINY

    cfg = TINY["qwen3"]
    lines = _tp_table(cfg, 2)
    assert lines[0].split()[-2:] == ["per", "rank"]
    by_node = {line.split()[3]: line for line in lines[1:-1]}
    hidden_row, logits_row = 2 * cfg.hidden_size * 2 // 2, cfg.vocab_size // 2 * 2  # bf16 on a ring of 2
    for i in range(cfg.num_layers):
        for block in ("attn", "ffn"):
            assert by_node[f"l{i}.{block}.all_reduce"].endswith(
                f"all_reduce tp ranks=2: {hidden_row} B/call, {hidden_row} B/row")
        assert by_node[f"l{i}.attn.q"].endswith("weight axis 0 / 2")  # heads: rows of q
        assert by_node[f"l{i}.attn.o"].endswith("weight axis 1 / 2")  # then o's columns
        assert by_node[f"l{i}.ffn.down"].endswith("weight axis 1 / 2")
        assert by_node[f"l{i}.attn.q_norm"].endswith("  -")  # norms replicated
    assert by_node["head.all_gather"].endswith(f"all_gather tp ranks=2: {logits_row} B/call, {logits_row} B/row")
    total = (1 + 2 * cfg.num_layers) * hidden_row + logits_row
    assert lines[-1] == (f"tensor parallel: 2 ranks (group tp), the same groups on each rank's piece of the weights; "
                         f"{2 + 2 * cfg.num_layers} collectives (1 all_gather, {1 + 2 * cfg.num_layers} all_reduce); "
                         f"each rank sends {total} B per call ({total} B per row)")


def test_whole_experts_per_rank_are_the_rank_piece_of_the_experts():
    from support import HYBRID_FAMILIES

    lines = _tp_table(HYBRID_FAMILIES["qwen3_moe"], 2, 2)
    by_node = {line.split()[3]: line for line in lines[1:-1]}
    assert by_node["l0.moe_ffn.experts_gate_up"].endswith("weight axis 0 / 2")  # the experts' dim
    assert by_node["l0.moe_ffn.router"].endswith("  -")  # replicated


def test_strata_inspect_tp_and_its_bad_input():
    from support import EXAMPLES, run_tool

    r = run_tool("inspect", str(EXAMPLES / "qwen3-0.6b"), "--level", "blueprint", "--tp", "2", "--recipe", "bf16")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # Qwen3-0.6B: 28 layers; hidden 1024 and vocabulary 151936 in bf16 on a ring of 2
    assert lines[-1].startswith("tensor parallel: 2 ranks (group tp)") and "58 collectives" in lines[-1]
    assert "all_reduce tp ranks=2: 2.0 KiB/call, 2.0 KiB/row" in r.stdout
    assert "all_gather tp ranks=2: 148.4 KiB/call, 148.4 KiB/row" in r.stdout
    bad = run_tool("inspect", str(EXAMPLES / "qwen3-0.6b"), "--level", "blueprint", "--tp", "3")
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "strata: error: shard-tensor-parallel{tp=3}: Vocab = 151936 (the model) is not divisible by 3"]
    bad = run_tool("inspect", str(EXAMPLES / "qwen3-0.6b"), "--level", "blueprint", "--tp", "2", "--ep", "4")
    assert bad.returncode == 1 and bad.stderr.strip() == "strata: error: --ep is 1 or the ranks of --tp (2), got 4"
