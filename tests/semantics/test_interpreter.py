"""The run loop the op, blueprint and fixed interpreters share (xDSL's `Interpreter`): what the
listeners see, errors raised inside an op's implementation, ops without semantics, and the
registries read off the `@impl` classes."""

from __future__ import annotations

import numpy as np
import pytest
from support import TINY, lower_fn, write_checkpoint
from xdsl.dialects import func, test as xdsl_test
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Block, Region

from strata.dialects import blueprint as B
from strata.dialects.op import Op
from strata.pipeline import blueprint_of, load_model
from strata.semantics.blueprint_interp import BLUEPRINT_INTERPRETER, BlueprintFunctions, BlueprintRunError, run_blueprint
from strata.semantics.fixed_interp import FIXED_INTERPRETER, FixedFunctions, FixedRunError, run_fixed
from strata.semantics.fixed_kv_interp import FixedKvFunctions
from strata.semantics.interpreter import first_unimplemented
from strata.semantics.op_interp import INTERPRETER, InterpreterError, OpFunctions, alloc_state, run_function

TOKENS = np.array([3, 1, 4], np.int32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = write_checkpoint(TINY["llama"], tmp_path_factory.mktemp("tiny") / "llama")
    model = load_model(d)
    return model, model.open_weights(quiet=True)


def test_observe_sees_every_op_once_in_program_order(tiny):
    _, store = tiny
    fn = lower_fn(TINY["llama"], "prefill", tokens=len(TOKENS), start=0)
    seen = []
    logits = run_function(fn, store, alloc_state(fn), TOKENS, 0, observe=lambda op, value: seen.append((op, value)))
    body = list(fn.body.block.ops)
    assert [op for op, _ in seen] == body[:-1]  # everything but the func.return
    assert seen[-1][1] is logits


def test_observe_sees_the_nodes_inside_groups_not_the_groups(tiny):
    model, store = tiny
    fn = next(op for op in blueprint_of(model, "decode", 1, "bf16").walk() if isinstance(op, func.FuncOp))
    assert any(isinstance(op, B.GroupOp) for op in fn.body.block.ops)
    seen = []
    state = alloc_state(lower_fn(TINY["llama"], "decode", ctx=64))
    run_blueprint(fn, store, state, [TOKENS[:1].reshape(1, 1)], observe=lambda op, results: seen.append(op))
    nodes = [op for op in fn.walk() if isinstance(op, B.NodeOp)]
    assert seen == nodes


def test_an_error_inside_an_op_keeps_its_type_and_message(tiny):
    _, store = tiny
    fn = lower_fn(TINY["llama"], "prefill", tokens=2, start=0)
    with pytest.raises(InterpreterError, match=r"^op.input 'tokens': the function takes 2 tokens, got 3$") as raised:
        run_function(fn, store, alloc_state(fn), TOKENS, 0)
    assert not hasattr(raised.value, "__notes__")  # one line, without the IR xDSL's loop notes


def _with_unknown_op() -> func.FuncOp:
    typ = TensorType(f32, (1, 4))
    block = Block(arg_types=[typ])
    block.add_op(op := xdsl_test.TestOp(operands=[block.args[0]], result_types=[typ]))
    block.add_op(func.ReturnOp(op.results[0]))
    return func.FuncOp("f", ((typ,), (typ,)), Region(block))


@pytest.mark.parametrize("level", ["op", "blueprint", "fixed"])
def test_an_op_without_semantics_is_named_before_anything_runs(level):
    fn = _with_unknown_op()
    assert first_unimplemented(fn, INTERPRETER) is fn.body.block.first_op
    x = np.zeros((1, 4), np.float32)
    if level == "op":
        with pytest.raises(InterpreterError, match="@f: no reference semantics for op 'test.op'"):
            run_function(fn, {}, {}, TOKENS, 0)
    elif level == "blueprint":
        with pytest.raises(BlueprintRunError, match="no blueprint semantics for op 'test.op'"):
            run_blueprint(fn, {}, {}, [x])
    else:
        with pytest.raises(FixedRunError, match="no fixed-level semantics for op 'test.op'"):
            run_fixed(fn, {}, [x])


@pytest.mark.parametrize("table, classes", [(INTERPRETER, [OpFunctions]), (BLUEPRINT_INTERPRETER, [BlueprintFunctions]),
                                            (FIXED_INTERPRETER, [FixedFunctions, FixedKvFunctions])],
                         ids=["op", "blueprint", "fixed"])
def test_each_registry_is_its_impl_classes(table, classes):
    impls = [op_type for cls in classes for op_type, _ in cls._impls()]
    assert sorted(table.keys(), key=str) == sorted(impls, key=str)
    assert len(impls) == len(set(impls))


def test_the_op_registry_covers_the_dialect():
    assert INTERPRETER.missing(Op) == []
