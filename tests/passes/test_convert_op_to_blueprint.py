"""convert-op-to-blueprint, executed before and after: the blueprint of every family's op
level (prefill and decode) generates the same greedy ids as the op level, logits within 1e-4
(f32, no precision assigned); its structure follows the config's layer pattern; bad input is a
one-line error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support import HYBRID_FAMILIES, TINY, greedy, lower, lower_fn, max_diff, open_store, write_checkpoint
from xdsl.dialects import func

from strata.dialects import blueprint as B
from strata.dialects import op as O
from strata.passes.convert_op_to_blueprint import ConversionError, ConvertOpToBlueprintPass, convert_function
from strata.semantics.blueprint_interp import run_blueprint
from strata.semantics.op_interp import alloc_state, run_function

from strata.models.llama_config import RopeScaling  # noqa: E402

#: Llama 3's frequency-dependent rope scaling (the rope's frequency factors)
LLAMA3 = dataclasses.replace(TINY["llama"], rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 32))
FAMILIES = {**{k: TINY[k] for k in ("llama", "qwen2", "qwen3")}, "llama3": LLAMA3, **HYBRID_FAMILIES}
PROMPT = np.array([3, 7, 1, 9, 4], np.int32)


def _nodes(fn: func.FuncOp) -> list[str]:
    return [op.node.data for op in fn.walk() if isinstance(op, B.NodeOp)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {name: write_checkpoint(cfg, tmp_path_factory.mktemp(name)) for name, cfg in FAMILIES.items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_blueprint_generates_as_the_op_level(family, checkpoints):
    cfg, store = FAMILIES[family], open_store(checkpoints[family])
    pre, dec = lower_fn(cfg, "prefill", tokens=len(PROMPT)), lower_fn(cfg, "decode")
    state = alloc_state(dec)
    want_ids, want = greedy(lambda p: run_function(pre, store, state, p, 0)[-1],
                            lambda t, pos: run_function(dec, store, state, np.array([t], np.int32), pos)[-1],
                            PROMPT, 8)
    bpre, bdec = convert_function(pre, "prefill", len(PROMPT)), convert_function(dec, "decode", 1)
    bstate = alloc_state(dec)

    def step(fn, tokens, pos):
        ids, logits = run_blueprint(fn, store, bstate, [np.asarray(tokens, np.int32).reshape(-1, 1)], pos=pos)
        assert ids[-1, 0] == int(np.argmax(logits[-1]))
        return logits[-1]

    ids, got = greedy(lambda p: step(bpre, p, 0), lambda t, pos: step(bdec, [t], pos), PROMPT, 8)
    np.testing.assert_array_equal(ids, want_ids)
    assert max_diff(got, want) < 1e-4
    for name, buf in state.items():  # the state the blueprint left is the op level's
        np.testing.assert_allclose(bstate[name], buf, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("pattern", [("linear_attention", "full_attention", "linear_attention"),
                                     ("full_attention", "full_attention", "linear_attention", "linear_attention")])
def test_structure_follows_the_layer_pattern(pattern):
    cfg = dataclasses.replace(HYBRID_FAMILIES["qwen3_5_moe"], num_layers=len(pattern), layer_types=pattern,
                              moe_layers=(True,) * len(pattern))
    fn = convert_function(lower_fn(cfg, "decode"), "decode", 1)
    fn.verify()
    assert [s.data for s in fn.attributes["blueprint.layers"].data] == list(pattern)
    nodes = _nodes(fn)
    for i, kind in enumerate(pattern):
        mixer = "gdn" if kind == "linear_attention" else "attn"
        assert f"l{i}.{mixer}.input_norm" in nodes and f"l{i}.moe_ffn.blend" in nodes
        assert (f"l{i}.gdn.conv_ckpt" in nodes) == (kind == "linear_attention")
    per_layer = {"linear_attention": 11 + 12, "full_attention": 13 + 12}
    assert len(nodes) == 1 + sum(per_layer[k] for k in pattern) + 3
    dims = B.function_dims(fn)
    assert dims["lin_v_heads"] == cfg.lin_v_heads and dims["top_k"] == cfg.top_k and dims["hidden"] == cfg.hidden_size


def test_modes():
    cfg = HYBRID_FAMILIES["qwen3_next"]
    dec = lower_fn(cfg, "decode")
    for mode in ("decode", "multi_seq", "verify", "draft"):
        fn = convert_function(dec, mode, 1)
        assert fn.attributes["blueprint.mode"].data == mode and "l0.gdn.conv_ckpt" in _nodes(fn)
    assert "l0.gdn.conv_ckpt" not in _nodes(convert_function(lower_fn(cfg, "prefill", tokens=4), "prefill", 4))
    with pytest.raises(ConversionError, match="mode draft takes exactly 1 row, got 4"):
        convert_function(dec, "draft", 4)
    with pytest.raises(ConversionError, match="unknown mode 'chat'"):
        convert_function(dec, "chat", 1)


def test_a_layer_without_known_blocks_is_a_one_line_error():
    module = lower(TINY["llama"], "decode")
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    for op in fn.walk():  # layer 1's attention recorded as a block kind nobody knows
        origin = O.origin_of(op)
        if origin is not None and origin.instance == "layers.1.attention":
            op.attributes[O.ORIGIN] = O.BlockOriginAttr("std.attn.unknown", origin.instance, origin.member.data)
    with pytest.raises(ConversionError, match="neither attention nor a Gated DeltaNet") as e:
        ConvertOpToBlueprintPass().apply(None, module)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_an_op_level_without_block_records_is_a_one_line_error():
    module = lower(TINY["llama"], "decode")
    for op in module.walk():
        op.attributes.pop(O.ORIGIN, None)
    with pytest.raises(ConversionError, match="records no block instances") as e:
        ConvertOpToBlueprintPass().apply(None, module)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def _unusual(names: dict) -> dict:
    """A family's name table with every llama.cpp segment spelled otherwise (`blk` -> `nblk`,
    `attn_q` -> `nattn_q`; the names keep their order): no tensor keeps a name llama.cpp gives it."""
    return {key: ("n" + ggml if ggml else ggml, hf) for key, (ggml, hf) in names.items()}


def _ggml_names(module) -> dict[str, str]:
    """module path of each param -> its llama.cpp name."""
    from strata.dialects.instances import find_model, instantiate

    out: dict[str, str] = {}
    todo = [instantiate(find_model(module))]
    while todo:
        inst = todo.pop()
        out.update({t.path: t.ggml for t in inst.params.values()})
        for child in inst.children.values():
            todo.extend(child if isinstance(child, list) else [child])
    return out


@pytest.mark.parametrize("family", ["llama", "qwen3.5-moe"])
def test_blocks_are_grouped_by_their_instances_not_by_tensor_names(family, monkeypatch):
    """A family whose tensors have names nobody taught convert-op-to-blueprint (its name table
    changed) gives the blueprint of the usual names, node for node, each weight renamed."""
    import strata.models.llama as llama_family
    import strata.models.qwen35 as qwen35_family

    from support import module_of

    cfg = TINY[family]
    usual = module_of(cfg)
    table = llama_family if family == "llama" else qwen35_family
    monkeypatch.setattr(table, "NAMES", _unusual(table.NAMES))
    renamed = module_of(cfg)
    old, new = _ggml_names(usual), _ggml_names(renamed)
    assert not set(old.values()) & set(new.values())
    for entry, mode, rows in (("decode", "decode", 1), ("prefill", "prefill", 4)):
        want = convert_function(lower_fn(usual, entry, tokens=rows if entry == "prefill" else 0), mode, rows)
        got = convert_function(lower_fn(renamed, entry, tokens=rows if entry == "prefill" else 0), mode, rows)
        def usual_names(text: str) -> str:
            for path in new:
                text = text.replace(f'"{new[path]}"', f'"{old[path]}"')
            return text

        # the weight table is sorted by name: the same reads, maybe in another order
        tables = [sorted(usual_names(str(w)) for w in fn.attributes.pop("blueprint.weights").entries)  # type: ignore[attr-defined]
                  for fn in (want, got)]
        assert tables[0] == tables[1]
        assert usual_names(str(got)) == str(want)


def test_deterministic():
    a = convert_function(lower_fn(HYBRID_FAMILIES["qwen3_5_moe"], "decode"), "decode", 1)
    b = convert_function(lower_fn(HYBRID_FAMILIES["qwen3_5_moe"], "decode"), "decode", 1)
    assert str(a) == str(b)
