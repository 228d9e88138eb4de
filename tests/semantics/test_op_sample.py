"""`op.sample` in every consumer of the op level: the interpreter and the CPU target draw the ids
of the numpy sampler (`strata.semantics.sampling.sample`) for the same operands, the generated
sampler carries the sampler's own source, and the trace and ONNX exporters refuse it in one line."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32, i32, i64
from xdsl.ir import Block, Region

from strata.dialects import op as O
from strata.exporters.trace import TraceError, trace_table
from strata.semantics import sampling as S
from strata.semantics.op_interp import InterpreterError, run_function
from strata.targets.cpu import emit_cpu

VOCAB, ROWS = 50, 3


def _operands(rng: np.random.Generator, counts: bool) -> list[np.ndarray]:
    logits = (rng.standard_normal((ROWS, VOCAB)) * 2).astype(np.float32)
    args = [logits, np.asarray([11, -3], np.int64), np.asarray([7], np.int32),
            np.asarray([0.0, 0.7, 1.3], np.float32), np.asarray([5], np.int32), np.asarray([0.9], np.float32),
            np.asarray([0.05, 0.0, 0.1], np.float32), np.asarray([1.2], np.float32), np.asarray([0.3], np.float32),
            np.asarray([0.2], np.float32)]
    if counts:
        args += [rng.integers(0, 3, (ROWS, VOCAB)).astype(np.int32), rng.integers(0, 2, (ROWS, VOCAB)).astype(np.int32)]
    return args


def _function(args: list[np.ndarray]) -> func.FuncOp:
    """A function of one op.sample over arguments typed as `args`."""
    elems = {np.float32: f32, np.int32: i32, np.int64: i64}
    types = [TensorType(elems[a.dtype.type], list(a.shape)) for a in args]
    block = Block(arg_types=types)
    names = ["logits", "key", "step", *(n for n, _ in O.SAMPLE_PARAMS), "prompt_counts", "output_counts"]
    for arg, name in zip(block.args, names):
        arg.name_hint = name
    op = O.SampleOp.build(operands=list(block.args[:10]) + ([[block.args[10]], [block.args[11]]] if len(args) > 10 else [[], []]),
                          result_types=[TensorType(i32, [ROWS])])
    block.add_ops([op, func.ReturnOp(op.result)])
    return func.FuncOp("sample_logits", (types, [op.result.type]), Region(block))


def _reference(args: list[np.ndarray]) -> np.ndarray:
    logits, key, step, *params = args
    counts = params[7:] or [None, None]
    return S.sample(logits, key, int(step[0]), *params[:7], prompt_counts=counts[0], output_counts=counts[1])


@pytest.mark.parametrize("counts", [False, True])
def test_the_interpreter_draws_the_samplers_ids(counts):
    rng = np.random.default_rng(4)
    for _ in range(5):
        args = _operands(rng, counts)
        fn = _function(args)
        fn.verify()
        got = run_function(fn, {}, {}, [], 0, args=args)
        want = _reference(args)
        assert got.dtype == np.int32 and np.array_equal(got, want)
        assert got[0] == np.argmax(S.sampling_penalize(args[0], *(args[10:] or [None, None]), 1.2, 0.3, 0.2)[0])


def test_the_interpreter_checks_its_arguments():
    args = _operands(np.random.default_rng(0), False)
    with pytest.raises(InterpreterError, match="takes 10 arguments, got 9"):
        run_function(_function(args), {}, {}, [], 0, args=args[:9])
    bad = list(args)
    bad[1] = np.zeros(3, np.int64)
    with pytest.raises(InterpreterError, match=r"argument 1 has shape \[3\], the IR type is tensor<2xi64>"):
        run_function(_function(args), {}, {}, [], 0, args=bad)


def test_the_cpu_target_prints_the_sampler_with_its_source():
    rng = np.random.default_rng(9)
    args = _operands(rng, True)
    source = emit_cpu(ModuleOp([_function(args)]), "sampler")
    # the generated module carries the sampler's functions (Philox included), not an import
    for name in ("def sample(", "def philox_4x32(", "def exp_f32(", "def sample_from_masses("):
        assert name in source
    assert "strata" not in [line.split()[1] for line in source.splitlines() if line.startswith("import ")]
    namespace: dict = {}
    exec(compile(source, "model.py", "exec"), namespace)  # noqa: S102 - code we generated
    model = namespace["Model"]({})
    for _ in range(4):
        args = _operands(rng, True)
        assert np.array_equal(model.sample_logits(*args), _reference(args))
    with pytest.raises(ValueError, match=r"sample_logits: key has shape \[3\], expected \[2\]"):
        model.sample_logits(args[0], np.zeros(3), *args[2:])


def test_the_trace_refuses_the_sampler():
    args = _operands(np.random.default_rng(0), False)
    with pytest.raises(TraceError, match="llama.cpp samples outside its graph"):
        trace_table(ModuleOp([_function(args)]))


def test_onnx_refuses_the_sampler():
    from strata.exporters.onnx import ONNX_EXPORT, OnnxExportError

    args = _operands(np.random.default_rng(0), False)
    op = next(o for o in _function(args).walk() if isinstance(o, O.SampleOp))
    with pytest.raises(OnnxExportError, match="no counter-based .Philox 4x32-10. random op"):
        ONNX_EXPORT[O.SampleOp](None, op)
