"""Differential test of convert-module-to-op: run the module interpreter (before the
pass) and the op interpreter (after it) on the same inputs; they must agree.

Also checks that both levels keep the same KV cache (in their own layouts), and that
the op interpreter reports bad functions clearly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects import test as xdsl_test
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Block, Region

from strata.models.llama_config import LlamaConfig, RopeScaling
from strata.ir.weights import WeightStore
from strata.models import build_module
from strata.semantics.module_interp import ModuleRunner
from strata.semantics.op_interp import InterpreterError, alloc_state, run_function
from support import lower_fn, open_store, write_checkpoint

TOL = 1e-5
CTX = 48
TOKENS = np.array([7, 1, 30, 99, 64, 12, 5, 77, 3], dtype=np.int32)

BASE = LlamaConfig(
    arch="Qwen3ForCausalLM", name="diff-qwen3", vocab_size=128, hidden_size=64, num_layers=2,
    num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96, rms_norm_eps=1e-6,
    rope_theta=10000.0, rope_scaling=None, max_position_embeddings=64, tie_word_embeddings=False,
    attention_bias=False, o_bias=False, qk_norm=True, dtype="float32")
CONFIGS = {
    "qwen3": BASE,
    "llama3-rope": dataclasses.replace(BASE, arch="LlamaForCausalLM", name="diff-llama", qk_norm=False,
                                       head_dim=12, num_heads=6, num_kv_heads=3,
                                       rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 16)),
    "qwen2-tied": dataclasses.replace(BASE, arch="Qwen2ForCausalLM", name="diff-qwen2", qk_norm=False,
                                      attention_bias=True, tie_word_embeddings=True, num_kv_heads=1),
}


@pytest.fixture(scope="module", params=list(CONFIGS), ids=list(CONFIGS))
def model(request, tmp_path_factory) -> tuple[LlamaConfig, WeightStore]:
    cfg = CONFIGS[request.param]
    return cfg, open_store(write_checkpoint(cfg, tmp_path_factory.mktemp(request.param)))


def lower(cfg: LlamaConfig, entry: str = "prefill", **opts) -> func.FuncOp:
    return lower_fn(cfg, entry, ctx=CTX, **opts)


def runner(cfg: LlamaConfig, weights: WeightStore) -> ModuleRunner:
    return ModuleRunner(build_module(cfg).ops.first, weights)


def assert_close(got: np.ndarray, want: np.ndarray, tol: float = TOL) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = float(np.abs(got - want).max())
    assert diff < tol, f"max abs diff {diff}"


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "unfused"])
@pytest.mark.parametrize("static", [True, False], ids=["static-S", "dynamic-S"])
def test_prefill(model, flash: bool, static: bool) -> None:
    cfg, weights = model
    fn = lower(cfg, "prefill", tokens=len(TOKENS) if static else 0, start=0 if static else -1,
               flash_attn=flash)
    got = run_function(fn, weights, alloc_state(fn), TOKENS, 0)
    want = runner(cfg, weights).prefill(TOKENS, 0)
    assert_close(got[0], want)


def test_dynamic_function_serves_several_lengths(model) -> None:
    cfg, weights = model
    fn = lower(cfg, "prefill", tokens=0, flash_attn=True)
    ref = runner(cfg, weights).forward(TOKENS)
    for s in (1, 4, len(TOKENS)):
        assert_close(run_function(fn, weights, alloc_state(fn), TOKENS[:s], 0)[0], ref[s - 1])


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "unfused"])
def test_chunked_prefill_and_decode_share_the_cache(model, flash: bool) -> None:
    """Two prefill chunks (the second at start 5 with n_kv = 16 < ctx), then decode steps."""
    cfg, weights = model
    first = lower(cfg, "prefill", tokens=5, start=0, kv_pad=8, flash_attn=flash)
    second = lower(cfg, "prefill", tokens=4, start=5, kv_pad=8, flash_attn=flash)
    decode = lower(cfg, "decode", start=-1, flash_attn=flash)
    assert second.attributes["op.n_kv"].value.data == 16
    state = alloc_state(decode)
    mod = runner(cfg, weights)
    assert_close(run_function(first, weights, state, TOKENS[:5], 0)[0], mod.prefill(TOKENS[:5], 0))
    got = run_function(second, weights, state, TOKENS[5:9], 5)[0]
    assert_close(got, mod.prefill(TOKENS[5:9], 5))
    tokens = list(TOKENS[:9])
    for pos in range(9, 13):
        tok = int(np.argmax(got))
        tokens.append(tok)
        got = run_function(decode, weights, state, np.array([tok]), pos)[0]
        assert_close(got, mod.decode(tok, pos))
    # The cached path agrees with a cache-free forward over the whole sequence.
    assert_close(got, runner(cfg, weights).forward(np.array(tokens))[-1], 1e-4)
    # Both levels hold the same K/V rows, each in its own layout.
    kvh, d = cfg.num_kv_heads, cfg.head_dim
    mstate = mod.state()
    for il in range(cfg.num_layers):
        for kind in "kv":
            op_rows = state[f"cache_{kind}_l{il}"][:13].reshape(13, kvh, d)
            mod_rows = mstate[f"layers.{il}.attention.cache_{kind}"][0, :, :13].transpose(1, 0, 2)
            assert_close(op_rows, mod_rows)
            assert not state[f"cache_{kind}_l{il}"][13:].any()


def test_bf16_checkpoint(tmp_path: Path) -> None:
    """bf16 weights and a bf16 cache: both levels compute in f32 and round K/V alike."""
    cfg = dataclasses.replace(BASE, dtype="bfloat16")
    weights = open_store(write_checkpoint(cfg, tmp_path, dtype="bfloat16"))
    fn = lower(cfg, "prefill", tokens=len(TOKENS), start=0)
    state = alloc_state(fn)
    assert state["cache_k_l0"].dtype.name == "bfloat16"
    assert_close(run_function(fn, weights, state, TOKENS, 0)[0], runner(cfg, weights).prefill(TOKENS, 0))


# ---------------------------------------------------------------------------
# Errors


def test_unknown_op_is_named(model) -> None:
    typ = TensorType(f32, (1, 4))
    block = Block()
    block.add_op(op := xdsl_test.TestOp(result_types=[typ]))
    block.add_op(func.ReturnOp(op.results[0]))
    fn = func.FuncOp("prefill", ((), (typ,)), Region(block))
    with pytest.raises(InterpreterError, match="no reference semantics for op 'test.op'"):
        run_function(fn, model[1], {}, TOKENS, 0)


def test_bad_calls_are_reported(model) -> None:
    cfg, weights = model
    fn = lower(cfg, "prefill", tokens=4, start=0)
    with pytest.raises(InterpreterError, match="no buffer given"):
        run_function(fn, weights, {}, TOKENS[:4], 0)
    with pytest.raises(InterpreterError, match="takes 4 tokens, got 9"):
        run_function(fn, weights, alloc_state(fn), TOKENS, 0)
    decode = lower(cfg, "decode")
    with pytest.raises(InterpreterError, match="exceed n_kv"):
        run_function(decode, weights, alloc_state(decode), TOKENS[:1], CTX)


# ---------------------------------------------------------------------------------------------
# Each op records the block instance it was expanded from (op.block)


def _records(module) -> list[tuple[str, str, str, str | None]]:
    """(function, op name, instance path, member) of every op; fails on an op with no record."""
    from strata.dialects import op as O

    out = []
    for fn in module.walk():
        if not isinstance(fn, func.FuncOp):
            continue
        for op in fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                continue
            origin = O.origin_of(op)
            assert origin is not None, f"@{fn.sym_name.data}: {op.name} records no block instance"
            out.append((fn.sym_name.data, op.name, origin.instance, origin.member_name))
    return out


@pytest.mark.parametrize("family", ["llama", "qwen3.5-moe"])
@pytest.mark.parametrize("entry", ["prefill", "decode", "decode_rows", "prefill_packed", "decode_paged", "generate"])
def test_every_op_records_its_block_instance(family, entry):
    from support import TINY, lower

    from strata.passes.convert_module_to_op import ENTRIES

    assert entry in ENTRIES
    records = _records(lower(TINY[family], entry))
    assert records
    for fn, name, path, member in records:
        # a param is a member of its instance; nothing else is
        assert (member is not None) == (name == "op.param"), (fn, name, path, member)
        if name == "op.input":  # host inputs are the model's
            assert path == "", (fn, name, path)


def test_the_records_name_the_instances():
    from support import TINY, lower

    from strata.dialects import op as O

    fn = next(f for f in lower(TINY["llama"], "decode").walk() if isinstance(f, func.FuncOp))
    by_label = {op.label: O.origin_of(op) for op in fn.body.block.ops if isinstance(op, O.OpBase) and op.label}
    # Qcur-1's last op is the rope (the projection and the reshape before it share the name)
    assert (by_label["Qcur-1"].kind.data, by_label["Qcur-1"].instance) == ("std.attn.grouped_query", "layers.1.attention")
    q_mm = next(op for op in fn.body.block.ops if isinstance(op, O.MulMatOp) and op.label == "Qcur-1")
    assert (O.origin_of(q_mm).kind.data, O.origin_of(q_mm).instance) == ("std.nn.linear", "layers.1.attention.q_proj")
    assert (by_label["ffn_inp-0"].kind.data, by_label["ffn_inp-0"].instance) == ("std.layer.decoder", "layers.0")
    assert by_label["result_output"].instance == "lm_head"
    params = {op.tensor_name.data: O.origin_of(op) for op in fn.body.block.ops if isinstance(op, O.ParamOp)}
    q = params["blk.1.attn_q.weight"]
    assert (q.kind.data, q.instance, q.member_name) == ("std.nn.linear", "layers.1.attention.q_proj", "weight")


def test_a_tied_weight_is_recorded_as_its_owners_member():
    """qwen2 ties its LM head to the embedding: both reads of the table are the embedding's
    weight (one op, to cse), the product is the LM head's."""
    from support import TINY, lower

    from strata.dialects import op as O

    fn = next(f for f in lower(TINY["qwen2"], "decode").walk() if isinstance(f, func.FuncOp))
    tables = [op for op in fn.body.block.ops if isinstance(op, O.ParamOp) and op.tensor_name.data == "token_embd.weight"]
    assert len(tables) == 2
    assert {(O.origin_of(t).instance, O.origin_of(t).member_name) for t in tables} == {("embedding", "weight")}
    head = next(op for op in fn.body.block.ops if isinstance(op, O.MulMatOp) and op.label == "result_output")
    assert O.origin_of(head).instance == "lm_head" and head.operands[0].owner in tables


def test_tensor_parallel_and_sampler_ops_record_their_blocks():
    from support import TINY, module_of

    from strata.passes.pipelines import run_pipeline

    module = run_pipeline(module_of(TINY["llama"]), "shard-tensor-parallel{tp=2},convert-module-to-op{entry=decode},"
                                                    "add-sampler")
    records = _records(module)
    assert ("decode", "op.all_reduce", "layers.0.attention.o_proj", None) in records
    assert ("sample_logits", "op.sample", "", None) in records
