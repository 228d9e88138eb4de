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


def _mask(rng: np.random.Generator) -> np.ndarray:
    """A token bitmask [ROWS, ceil(VOCAB/32)] allowing about half the tokens, token 1 always."""
    allowed = rng.random((ROWS, 64)) < 0.5
    allowed[:, 1], allowed[:, VOCAB:] = True, False
    bits = allowed.reshape(ROWS, 2, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    return bits.sum(axis=2).astype(np.uint32).view(np.int32)


def _operands(rng: np.random.Generator, counts: bool, mask: bool = False) -> list[np.ndarray]:
    logits = (rng.standard_normal((ROWS, VOCAB)) * 2).astype(np.float32)
    args = [logits, np.asarray([11, -3], np.int64), np.asarray([7], np.int32),
            np.asarray([0.0, 0.7, 1.3], np.float32), np.asarray([5], np.int32), np.asarray([0.9], np.float32),
            np.asarray([0.05, 0.0, 0.1], np.float32), np.asarray([1.2], np.float32), np.asarray([0.3], np.float32),
            np.asarray([0.2], np.float32)]
    if counts:
        args += [rng.integers(0, 3, (ROWS, VOCAB)).astype(np.int32), rng.integers(0, 2, (ROWS, VOCAB)).astype(np.int32)]
    if mask:
        args.append(_mask(rng))
    return args


def _function(args: list[np.ndarray]) -> func.FuncOp:
    """A function of one op.sample over arguments typed as `args`."""
    elems = {np.float32: f32, np.int32: i32, np.int64: i64}
    types = [TensorType(elems[a.dtype.type], list(a.shape)) for a in args]
    block = Block(arg_types=types)
    counts = len(args) in (12, 13)
    names = ["logits", "key", "step", *(n for n, _ in O.SAMPLE_PARAMS)] + ["prompt_counts", "output_counts"] * counts
    for arg, name in zip(block.args, names + ["mask"]):
        arg.name_hint = name
    rest = list(block.args[10:])
    mask = [rest.pop()] if len(args) in (11, 13) else []
    op = O.SampleOp.build(operands=list(block.args[:10]) + ([[rest[0]], [rest[1]]] if counts else [[], []]) + [mask],
                          result_types=[TensorType(i32, [ROWS])])
    block.add_ops([op, func.ReturnOp(op.result)])
    return func.FuncOp("sample_logits", (types, [op.result.type]), Region(block))


def _reference(args: list[np.ndarray]) -> np.ndarray:
    logits, key, step, *params = args
    counts = params[7:9] if len(params) >= 9 else [None, None]
    mask = params[-1] if len(params) in (8, 10) else None
    return S.sample(logits, key, int(step[0]), *params[:7], prompt_counts=counts[0], output_counts=counts[1],
                    mask=mask)


def _allowed(mask: np.ndarray, ids: np.ndarray) -> bool:
    return bool(np.all((mask.view(np.uint32)[np.arange(len(ids)), ids // 32] >> (ids % 32).astype(np.uint32)) & 1))


@pytest.mark.parametrize("counts, mask", [(False, False), (True, False), (False, True), (True, True)])
def test_the_interpreter_draws_the_samplers_ids(counts, mask):
    rng = np.random.default_rng(4)
    for _ in range(5):
        args = _operands(rng, counts, mask)
        fn = _function(args)
        fn.verify()
        got = run_function(fn, {}, {}, [], 0, args=args)
        want = _reference(args)
        assert got.dtype == np.int32 and np.array_equal(got, want)
        masked = S.sampling_apply_mask(args[0], args[-1] if mask else None)
        assert got[0] == np.argmax(S.sampling_penalize(masked, *(args[10:12] if counts else [None, None]), 1.2, 0.3,
                                                       0.2)[0])
        if mask:
            assert _allowed(args[-1], got)


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
    masked = emit_cpu(ModuleOp([_function(_operands(rng, True, True))]), "sampler")
    namespace = {}
    exec(compile(masked, "model.py", "exec"), namespace)  # noqa: S102 - code we generated
    for _ in range(4):
        with_mask = _operands(rng, True, True)
        got = namespace["Model"]({}).sample_logits(*with_mask)
        assert np.array_equal(got, _reference(with_mask)) and _allowed(with_mask[-1], got)
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
