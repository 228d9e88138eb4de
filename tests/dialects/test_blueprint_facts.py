"""A blueprint function's facts: `blueprint.dims` and `blueprint.weights` are typed attributes,
written by convert-op-to-blueprint, read through `function_dims` / `function_weights`, and
their text round-trips."""

from __future__ import annotations

import pytest
from support import HYBRID_FAMILIES, TINY, module_of
from xdsl.dialects import func

from strata.dialects import parse_ir
from strata.dialects.blueprint import DimsAttr, WeightRead, WeightsAttr, function_dims, function_weights
from strata.dialects.blueprint.facts import FunctionFactsError
from strata.ir.text import print_ir
from strata.pipeline import blueprint_pipeline, run_pipeline


def _blueprint(cfg):
    module = run_pipeline(module_of(cfg), blueprint_pipeline("decode", 1, "fp8-bf16head"))
    return module, next(op for op in module.walk() if isinstance(op, func.FuncOp))


def test_a_blueprint_carries_typed_facts():
    cfg = HYBRID_FAMILIES["qwen3_next"]
    _, fn = _blueprint(cfg)
    assert isinstance(fn.attributes["blueprint.dims"], DimsAttr)
    assert isinstance(fn.attributes["blueprint.weights"], WeightsAttr)
    dims = function_dims(fn)
    assert dims["hidden"] == cfg.hidden_size and dims["top_k"] == cfg.top_k and list(dims) == sorted(dims)
    reads = function_weights(fn)
    # in_proj_qkvz, grouped per key head, is llama.cpp's attn_qkv: parts 0..2 of every group
    qkv = reads["blk.0.attn_qkv.weight"]
    assert qkv.convert == "ungroup_rows" and qkv.source == "blk.0.ssm_in.weight" and qkv.args[:3] == (cfg.lin_k_heads, 0, 3)
    assert reads["blk.0.ssm_a"] == WeightRead("blk.0.ssm_a", "neg_exp")
    assert "token_embd.weight" not in reads  # read as stored


@pytest.mark.parametrize("cfg", [TINY["llama"], HYBRID_FAMILIES["qwen3_next"]], ids=["llama", "qwen3_next"])
def test_the_facts_round_trip(cfg):
    module, fn = _blueprint(cfg)
    text = print_ir(module)
    back = parse_ir(text)
    assert print_ir(back) == text
    fn2 = next(op for op in back.walk() if isinstance(op, func.FuncOp))
    assert function_dims(fn2) == function_dims(fn) and function_weights(fn2) == function_weights(fn)


def test_a_function_without_facts_has_none():
    fn = next(op for op in parse_ir("func.func @f() { func.return }").walk() if isinstance(op, func.FuncOp))
    assert function_dims(fn) == {} and function_weights(fn) == {}


def test_an_untyped_dims_dictionary_is_refused_naming_the_function():
    text = "func.func @decode() attributes {blueprint.dims = {hidden = 32 : i64}} { func.return }"
    fn = next(op for op in parse_ir(text).walk() if isinstance(op, func.FuncOp))
    with pytest.raises(FunctionFactsError, match=r"@decode: blueprint.dims must be a #blueprint.dims<...>, got \{hidden"):
        function_dims(fn)
