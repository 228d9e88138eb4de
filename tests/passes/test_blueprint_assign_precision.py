"""blueprint-assign-precision: every recipe changes only `precision` and `steps`; fp8-bf16head
gives what the kbp-graph/v1 plan of Qwen3.6-35B-A3B shows; unknown recipes and malformed recipe files are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from strata.ir.dtypes import has_kind
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation

from strata.dialects import read_ir, strata_context
from strata.dialects.blueprint.attrs import FormatAttr
from strata.dialects.blueprint.base import NodeOp
from strata.passes import strata_passes
from strata.passes.blueprint_assign_precision import (
    RECIPE_DIR, BlueprintAssignPrecisionPass, RecipeError, apply_recipe, format_from_text, format_text, load_recipe,
    parse_recipe, recipe_names)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "tests/lit/passes/Inputs/blueprint-gdn-moe.mlir"
SEEDS = ROOT.parent / "shared" / "seeds"
CHANGED = {"precision", "steps"}


def run(recipe: str) -> tuple[ModuleOp, ModuleOp]:
    before = read_ir(MODULE)
    after = before.clone()
    BlueprintAssignPrecisionPass(recipe=recipe).apply(strata_context(), after)
    after.verify()
    return before, after


def nodes(module: ModuleOp) -> list[NodeOp]:
    return [op for op in module.walk() if isinstance(op, NodeOp)]


def test_recipes_are_the_eight():
    assert recipe_names() == ["bf16", "f32", "fp8-bf16head", "gguf", "gguf-bf16", "q4_0", "q8_0", "w4a16"]
    assert strata_passes()["blueprint-assign-precision"]() is BlueprintAssignPrecisionPass


@pytest.mark.parametrize("recipe", ["bf16", "f32", "fp8-bf16head", "w4a16", "q8_0", "q4_0", "gguf", "gguf-bf16"])
def test_only_precision_and_steps_change(recipe):
    before, after = run(recipe)
    ops_b, ops_a = list(before.walk()), list(after.walk())
    assert [o.name for o in ops_b] == [o.name for o in ops_a]
    index_b = {v: (i, j) for i, o in enumerate(ops_b) for j, v in enumerate(o.results)}
    index_a = {v: (i, j) for i, o in enumerate(ops_a) for j, v in enumerate(o.results)}
    args = lambda m: {a: ("arg", k) for k, a in enumerate(m.body.block.ops.first.body.block.args)}  # noqa: E731
    index_b |= args(before)
    index_a |= args(after)
    for b, a in zip(ops_b, ops_a, strict=True):
        assert [index_b[v] for v in b.operands] == [index_a[v] for v in a.operands], b.name
        assert [r.type for r in b.results] == [r.type for r in a.results] or isinstance(a, NodeOp), b.name
        for rb, ra in zip(b.results, a.results):  # an edge takes its producer's output format
            assert (ra.type.rows, ra.type.dim) == (rb.type.rows, rb.type.dim), b.name
            out = a.precision.fields().get("output") if isinstance(a, NodeOp) and a.precision else None
            floating = has_kind(rb.type.element, "float")
            assert ra.type.element == (out.dtype.attr if out is not None and floating else rb.type.element), b.name
        assert b.properties == a.properties, b.name
        keep_b = {k: v for k, v in b.attributes.items() if k not in CHANGED or not isinstance(b, NodeOp)}
        keep_a = {k: v for k, v in a.attributes.items() if k not in CHANGED or not isinstance(a, NodeOp)}
        if a.name == "func.func":  # the function records its recipe
            assert keep_a.pop("blueprint.recipe").data == recipe
            keep_b.pop("blueprint.recipe", None)
        assert keep_b == keep_a, b.name
    for node in nodes(after):
        assert node.precision is not None and node.steps is not None and node.steps.data, node.name


def test_w4a16_weights_are_int4_block128_asymmetric():
    _, after = run("w4a16")
    by_id = {n.node.data: n for n in nodes(after)}
    for node_id in ("l0.gdn.qkvz", "l0.gdn.out", "l0.moe_ffn.experts_gate_up", "l0.moe_ffn.experts_down",
                    "l0.moe_ffn.shared_gate_up", "l0.moe_ffn.shared_down"):
        w = by_id[node_id].precision.fields()["weight"]
        assert (w.elem.data, w.block_sizes, w.is_asymmetric) == ("int4", (128,), True), node_id
    for node_id in ("l0.gdn.ba", "l0.moe_ffn.router", "l0.moe_ffn.shared_gate", "head.lm_head"):
        assert format_text(by_id[node_id].precision.fields()["weight"]) == "bf16", node_id


def _key(op: Operation) -> tuple[str, str | None]:
    role = op.attributes.get("role")
    return op.name.removeprefix("blueprint."), role.data if isinstance(role, StringAttr) else None


def _seed_key(n: dict) -> tuple[str, str | None]:
    op, _, role = n["op"].partition(":")
    return op, (role or None)


def _seed_precision(n: dict, node: NodeOp) -> dict:
    """The seed's precision as the IR holds it; a multi-result node's output ("f32,i32") is its
    results' element types (a #blueprint.precision holds one output format)."""
    p = dict(n["precision"])
    if p.get("output") and "," in p["output"]:
        assert p["output"].split(",") == [str(r.type.element) for r in node.results], n["id"]
        p["output"] = None
    return p


def test_fp8_bf16head_is_the_kbp_graph_plans():
    seeds = sorted(SEEDS.glob("001_*.txt")) if SEEDS.is_dir() else []
    if not seeds:
        pytest.skip("no ../shared/seeds/001_*.txt beside the checkout")
    seed = json.loads(seeds[0].read_text())
    _, after = run("fp8-bf16head")
    ir_nodes = {n.node.data: n for n in nodes(after)}
    # Seed table: (op, role) -> the (precision, steps) pairs it shows, with the node ids.
    table: dict[tuple[str, str | None], set[str]] = {}
    for n in seed["nodes"]:
        table.setdefault(_seed_key(n), set()).add(json.dumps([n["precision"], n["steps"]], sort_keys=True))
    checked = set()
    for n in seed["nodes"]:
        node = ir_nodes.get(n["id"])
        if node is None:
            continue
        key = _key(node)
        assert key == _seed_key(n), n["id"]
        got = {k: format_text(v) for k, v in node.precision.fields().items()}
        accumulate = got.pop("accumulate", None)
        want = {k: v for k, v in _seed_precision(n, node).items() if v is not None}
        assert got == want, n["id"]
        steps = [f"{s.kind.data} {s.detail.data}" for s in node.steps.data]
        assert steps == n["steps"], n["id"]
        # f32 accumulation: a precision's accumulate is the accumulate step's.
        acc_steps = [s.split(" ", 1)[1] for s in steps if s.startswith("accumulate ")]
        if accumulate is not None:
            assert acc_steps == [accumulate], n["id"]
        checked.add(key)
    # Every (op, role) of the module that the plan has was compared (and the seed's pairs are
    # one per (op, role), except rms_norm: input norm bf16, the MoE's post norm f32).
    assert checked == {_key(n) for n in nodes(after)} & set(table)
    assert len(checked) >= 20
    for key, variants in table.items():
        assert len(variants) == 1 or key == ("rms_norm", None), key


def test_seed_nodes_without_ids_in_the_module_match_by_op_and_role():
    """The seed's nodes of every layer (not only layer 0) have the contract of their (op, role)."""
    seeds = sorted(SEEDS.glob("001_*.txt")) if SEEDS.is_dir() else []
    if not seeds:
        pytest.skip("no ../shared/seeds/001_*.txt beside the checkout")
    seed = json.loads(seeds[0].read_text())
    _, after = run("fp8-bf16head")
    by_key_and_tail: dict[tuple, NodeOp] = {}
    for node in nodes(after):
        by_key_and_tail[(_key(node), node.node.data.split(".")[-1])] = node
    compared = 0
    for n in seed["nodes"]:
        node = by_key_and_tail.get((_seed_key(n), n["id"].split(".")[-1]))
        if node is None:
            continue
        got = {k: format_text(v) for k, v in node.precision.fields().items() if k != "accumulate"}
        assert got == {k: v for k, v in _seed_precision(n, node).items() if v is not None}, n["id"]
        assert [f"{s.kind.data} {s.detail.data}" for s in node.steps.data] == n["steps"], n["id"]
        compared += 1
    assert compared >= 400


def test_unknown_recipe_lists_the_recipes():
    with pytest.raises(RecipeError) as e:
        BlueprintAssignPrecisionPass(recipe="fp4").apply(strata_context(), read_ir(MODULE))
    assert str(e.value) == ("blueprint-assign-precision: unknown recipe 'fp4' "
                            "(known: bf16, f32, fp8-bf16head, gguf, gguf-bf16, q4_0, q8_0, w4a16)")


GOOD_RULE = {"op": "embed", "precision": {"output": "bf16"}, "steps": ["gather bf16"]}


@pytest.mark.parametrize("rule, message", [
    ({"op": "linear", "precision": {"weight": "fp9"}, "steps": []}, "unknown element kind 'fp9'"),
    ({"op": "linear", "precision": {"weight": "fp8/blk128"}, "steps": []}, "neither blockN[xM] nor asymmetric"),
    ({"op": "linear", "precision": {"weights": "bf16"}, "steps": []}, "'precision' is an object with keys"),
    ({"op": "linear", "precision": {}, "steps": ["multiply f32"]}, "unknown step 'multiply'"),
    ({"op": "linear", "precision": {}, "steps": ["act"]}, "is not \"verb detail\""),
    ({"op": "linear", "precision": {}}, "no 'steps'"),
    ({"op": "linear", "roles": "q", "precision": {}, "steps": []}, "unknown key(s) roles"),
    ({"op": [], "precision": {}, "steps": []}, "'op' must be a name"),
    ({"op": "linear", "weight": "yes", "precision": {}, "steps": []}, "'weight' must be true or false"),
    ({"op": "bf16", "precision": {"weight": "bf16/asymmetric"}, "steps": []}, "only an integer format is asymmetric"),
])
def test_malformed_rule_names_the_file_and_the_rule(rule, message):
    path = Path("/recipes/bad.json")
    with pytest.raises(RecipeError) as e:
        parse_recipe("bad", path, json.dumps({"rules": [GOOD_RULE, rule]}))
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"blueprint-assign-precision: malformed recipe file {path}: rule 1 {json.dumps(rule)}: ")
    assert message in text


@pytest.mark.parametrize("text", ["[1, 2]", "{\"rules\": 3}", "{\"rules\": [], \"extra\": 1}", "{nope"])
def test_malformed_recipe_file(text):
    with pytest.raises(RecipeError, match=r"^blueprint-assign-precision: malformed recipe file /r/x.json: "):
        parse_recipe("x", Path("/r/x.json"), text)


def test_node_without_a_rule_and_weight_format_on_weightless_node():
    recipe = parse_recipe("partial", Path("/r/partial.json"), json.dumps({"rules": [GOOD_RULE]}))
    module = read_ir(MODULE)
    with pytest.raises(RecipeError, match=r"recipe 'partial' \(/r/partial.json\) has no rule for blueprint.rms_norm$"):
        apply_recipe(recipe, module)
    rules = json.loads((RECIPE_DIR / "fp8-bf16head.json").read_text())["rules"]
    bad = parse_recipe("w", Path("/r/w.json"), json.dumps(
        {"rules": [{"op": "residual_add", "precision": {"weight": "bf16"}, "steps": ["compute f32"]}] + rules}))
    with pytest.raises(RecipeError, match=r"rule 0 \(op residual_add\) gives a weight format to blueprint.residual_add"):
        apply_recipe(bad, read_ir(MODULE))
    assert str(read_ir(MODULE)) == str(module)  # nothing changed before the error


@pytest.mark.parametrize("text", ["bf16", "fp8/block128x128", "int4/block128/asymmetric", "i32", "q4_K", "q6_K",
                                  "gguf"])
def test_format_text_round_trips(text):
    assert isinstance(format_from_text(text), FormatAttr)
    assert format_text(format_from_text(text)) == text


def test_a_gguf_block_format_takes_no_block():
    with pytest.raises(ValueError, match="'q4_K' is a GGUF block format"):
        format_from_text("q4_K/block32")


def _gguf_weight_formats(path: Path, recipe: str = "gguf") -> dict[str, str]:
    from strata.passes.pipelines import lowered
    from strata.pipeline import load_model

    module = lowered(load_model(path).module, "convert-module-to-op{entry=decode ctx=16},"
                     f"convert-op-to-blueprint{{mode=decode}},blueprint-assign-precision{{recipe={recipe}}}")
    out = {}
    for op in module.walk():
        if isinstance(op, NodeOp) and "precision" in op.attributes and "weight" in op.precision.fields():
            out[op.attributes["node"].data] = op.precision.fields()["weight"].elem.data
    return out


def test_recipe_gguf_keeps_each_weight_in_its_files_type():
    """llama-q8_0.gguf stores every projection, the output and the token embedding in Q8_0 (the
    nodes say q8_0, the merged gate_up and the embedding lookup too); llama-f32.gguf stores floats
    (f32)."""
    q8 = _gguf_weight_formats(ROOT / "tests/frontends/data/llama-q8_0.gguf")
    assert q8["l0.ffn.gate_up"] == q8["l1.attn.q"] == q8["head.lm_head"] == q8["embed.embed"] == "q8_0"
    assert set(q8.values()) == {"q8_0"}
    assert set(_gguf_weight_formats(ROOT / "tests/frontends/data/llama-f32.gguf").values()) == {"f32"}
    assert _gguf_weight_formats(ROOT / "tests/frontends/data/llama-q8_0.gguf", "gguf-bf16") == q8


def test_every_recipe_file_loads_and_is_package_data():
    for name in recipe_names():
        assert load_recipe(name).rules
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"strata.passes" = ["recipes/*.json"]' in pyproject
    assert RECIPE_DIR == ROOT / "strata/passes/recipes"


# ---------------------------------------------------------------------------------------------
# Executed before and after the pass (the blueprint interpreter emulates each node's precision)


def _run_decode_step(recipe: str | None):
    """One decode step of the interpreter tests' tiny GDN + MoE layer, after the pass with `recipe`."""
    from xdsl.dialects import func

    import blueprint_step as step  # the interpreter tests' step: its IR, weights and state
    from strata.dialects import parse_ir
    from strata.pipeline import run_pipeline
    from strata.semantics.blueprint_interp import run_blueprint

    module = parse_ir(step._decode_text(None))
    if recipe is not None:
        run_pipeline(module, f"blueprint-assign-precision{{recipe={recipe}}}")
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    state = step._tiny_state()
    _, logits = run_blueprint(fn, step._tiny_weights(), state, [np.array([[7]], np.int32)], dims=step.DIMS)
    return logits, state


def test_the_f32_recipe_changes_no_value():
    before, state0 = _run_decode_step(None)
    after, state1 = _run_decode_step("f32")
    np.testing.assert_array_equal(after, before)
    for name in state0:
        np.testing.assert_array_equal(state1[name], state0[name])


@pytest.mark.parametrize("recipe, low, high", [("bf16", 1e-4, 0.05), ("fp8-bf16head", 1e-3, 0.1)])
def test_a_low_precision_recipe_changes_values_by_its_rounding(recipe, low, high):
    before, _ = _run_decode_step(None)
    after, _ = _run_decode_step(recipe)
    rel = float(np.abs(after - before).max() / np.abs(before).max())
    assert low < rel < high, rel
