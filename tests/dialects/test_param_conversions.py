"""op.param's conversions: llama.cpp's values from the checkpoint's (HF's) stored ones.

The vocabulary is `O.PARAM_CONVERSIONS`; every consumer that binds weights implements each
conversion once (the op interpreter's `PARAM_CONVERSIONS`, the CPU target's
`CPU_PARAM_CONVERSIONS`), and both compute the same arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.errors import StrataError

from strata.dialects import op as O
from strata.dialects import parse_ir
from strata.semantics.op_interp import PARAM_CONVERSIONS, alloc_state, find_function, run_function
from strata.targets.cpu.emit import CPU_PARAM_CONVERSIONS, emit_cpu

#: Each consumer's table of conversions.
CONSUMERS = {"interpreter": set(PARAM_CONVERSIONS.keys()), "cpu": set(CPU_PARAM_CONVERSIONS)}


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_every_conversion_has_one_implementation_per_consumer(consumer):
    assert set(O.PARAM_CONVERSIONS) == {"plus_one", "neg_exp", "squeeze", "ungroup_rows"}
    assert CONSUMERS[consumer] == set(O.PARAM_CONVERSIONS), "a conversion lacks an implementation (or a stray one)"


def test_a_conversion_without_an_implementation_is_refused_by_each_consumer(monkeypatch):
    # A conversion added to the vocabulary only: the verifier admits it, and each consumer,
    # meeting it, must refuse it by name rather than compute something else or crash.
    monkeypatch.setitem(O.PARAM_CONVERSIONS, "transpose", 0)
    module = parse_ir('func.func @main() -> tensor<4x4xf32> attributes {"op.n_kv" = 1 : i64} {\n'
                      '  %w = op.param "w" {convert = "transpose"} : tensor<4x4xf32>\n'
                      '  func.return %w : tensor<4x4xf32>\n}\n')
    fn = find_function(module)
    with pytest.raises(StrataError, match="transpose"):
        run_function(fn, {"w": np.eye(4, dtype=np.float32)}, alloc_state(fn), np.array([0]), 0)
    with pytest.raises(StrataError, match="transpose"):
        emit_cpu(module)


GRAPH = """
func.func @main() -> tensor<3x4xf32> attributes {"op.n_kv" = 8 : i64} {
  %n = op.param "blk.0.attn_norm.weight" {convert = "plus_one"} : tensor<4xf32>
  %a = op.param "blk.0.ssm_a" {convert = "neg_exp"} : tensor<4xf32>
  %c = op.param "blk.0.ssm_conv1d.weight" {convert = "squeeze"} : tensor<6x3xf32>
  %q = op.param "blk.0.attn_qkv.weight" {source = "blk.0.ssm_in.weight", convert = "ungroup_rows", convert_args = array<i64: 2, 0, 3, 1, 1, 2, 2>} : tensor<8x4xf32>
  %z = op.param "blk.0.attn_gate.weight" {source = "blk.0.ssm_in.weight", convert = "ungroup_rows", convert_args = array<i64: 2, 3, 4, 1, 1, 2, 2>} : tensor<4x4xf32>
  %t = op.input "tokens" : tensor<3xi32>
  %x = op.get_rows %q, %t : tensor<8x4xf32>, tensor<3xi32> -> tensor<3x4xf32>
  %y = op.mul %x, %n : tensor<3x4xf32>, tensor<4xf32> -> tensor<3x4xf32>
  %w = op.mul %y, %a : tensor<3x4xf32>, tensor<4xf32> -> tensor<3x4xf32>
  %u = op.mul_mat %z, %w : tensor<4x4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
  func.return %u : tensor<3x4xf32>
}
"""


def _stored() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"blk.0.attn_norm.weight": rng.normal(0, 0.1, 4).astype(np.float32),
            "blk.0.ssm_a": rng.normal(0, 1, 4).astype(np.float32),
            "blk.0.ssm_conv1d.weight": rng.normal(0, 1, (6, 1, 3)).astype(np.float32),
            "blk.0.ssm_in.weight": np.arange(12 * 4, dtype=np.float32).reshape(12, 4)}


def test_conversions_compute_llama_cpps_values():
    stored = _stored()
    fn = find_function(parse_ir(GRAPH))
    seen = {}
    run_function(fn, stored, alloc_state(fn), np.array([0, 5, 7]), 0,
                 observe=lambda op, v: seen.setdefault(op.attributes.get("tensor", op.name), v))
    value = {k.data: v for k, v in seen.items() if not isinstance(k, str)}
    np.testing.assert_array_equal(value["blk.0.attn_norm.weight"], 1 + stored["blk.0.attn_norm.weight"])
    np.testing.assert_allclose(value["blk.0.ssm_a"], -np.exp(stored["blk.0.ssm_a"]), rtol=1e-6)
    np.testing.assert_array_equal(value["blk.0.ssm_conv1d.weight"], stored["blk.0.ssm_conv1d.weight"][:, 0, :])
    # Two groups (key heads) of [q(1) | k(1) | v(2) | z(2)] rows: attn_qkv is q q k k v v v v, attn_gate z z z z.
    rows = stored["blk.0.ssm_in.weight"]
    np.testing.assert_array_equal(value["blk.0.attn_qkv.weight"], rows[[0, 6, 1, 7, 2, 3, 8, 9]])
    np.testing.assert_array_equal(value["blk.0.attn_gate.weight"], rows[[4, 5, 10, 11]])


def test_interpreter_and_cpu_target_convert_alike():
    stored = _stored()
    module = parse_ir(GRAPH)
    fn = find_function(module)
    want = run_function(fn, stored, alloc_state(fn), np.array([1, 2, 3]), 0)
    source = emit_cpu(module)
    assert "convert_ungroup_rows" in source and "'blk.0.ssm_in.weight'" in source
    ns: dict = {}
    exec(compile(source, "model.py", "exec"), ns)  # noqa: S102
    model = ns["Model"](stored)
    np.testing.assert_array_equal(model.main([1, 2, 3], 0), want)
    np.testing.assert_array_equal(model.blk_0_attn_norm_weight, 1 + stored["blk.0.attn_norm.weight"])


@pytest.mark.parametrize("attrs, message", [
    ('{convert = "transpose"}', "unknown conversion 'transpose'"),
    ('{convert = "plus_one", convert_args = array<i64: 1>}', "takes 0 convert_args"),
    ('{source = "x"}', "go with a conversion"),
    ('{convert = "ungroup_rows", convert_args = array<i64: 2, 0, 3, 1, 1, 2, 2>}', "gives 8 rows"),
    ('{convert = "ungroup_rows", convert_args = array<i64: 2, 3, 3, 1, 1, 2, 2>}', "0 <= lo < hi"),
])
def test_bad_conversions_are_refused(attrs, message):
    text = f'func.func @f() -> tensor<6x4xf32> {{\n  %w = op.param "w" {attrs} : tensor<6x4xf32>\n' \
           "  func.return %w : tensor<6x4xf32>\n}\n"
    with pytest.raises(StrataError, match=message):
        parse_ir(text)
