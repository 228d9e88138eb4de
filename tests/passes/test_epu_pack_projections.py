"""epu-pack-projections: the w4a16 projections of one input (q|k|v, gate|up) share the smallest
of their formats; a lone projection keeps its own."""

from __future__ import annotations

from xdsl.dialects import func

from strata.dialects import parse_ir
from strata.dialects.fixed import MatmulW4A16Op, frac_of
from strata.pipeline import run_pipeline


def _mm(name: str, x: str, n: int, frac: int) -> str:
    return (f'  %{name}b = fixed.param "w.{name}" {{part = "int4_b", block = 32 : i64}} : tensor<{n}x1x16xui8>\n'
            f'  %{name}s = fixed.param "w.{name}" {{part = "int4_scales", block = 32 : i64}} : tensor<{n}x1x!fixed.fp32<31>>\n'
            f'  %{name}z = fixed.param "w.{name}" {{part = "int4_zp", block = 32 : i64}} : tensor<{n}x1xui8>\n'
            f'  %{name} = fixed.matmul_w4a16 %{x}, %{name}b, %{name}s, %{name}z {{wfrac = 31 : i64}} : '
            f'tensor<1x32x!fixed.fp32<28>>, tensor<{n}x1x16xui8>, tensor<{n}x1x!fixed.fp32<31>>, tensor<{n}x1xui8> '
            f'-> tensor<1x{n}x!fixed.fp32<{frac}>>\n')


def test_groups_share_the_smallest_frac():
    text = ("func.func @f(%x: tensor<1x32x!fixed.fp32<28>>, %y: tensor<1x32x!fixed.fp32<28>>) -> tensor<1x16x!fixed.fp32<25>> {\n"
            + _mm("q", "x", 32, 27) + _mm("k", "x", 16, 25) + _mm("v", "x", 16, 29) + _mm("o", "y", 16, 26)
            + "  %r = fixed.add %k, %v : tensor<1x16x!fixed.fp32<25>>, tensor<1x16x!fixed.fp32<29>> -> tensor<1x16x!fixed.fp32<25>>\n"
            + "  func.return %r : tensor<1x16x!fixed.fp32<25>>\n}")
    module = parse_ir(text)
    run_pipeline(module, "epu-pack-projections")
    mms = {op.b.owner.param.data: op for op in module.walk() if isinstance(op, MatmulW4A16Op)}
    assert {n: frac_of(op.result) for n, op in mms.items()} == {"w.q": 25, "w.k": 25, "w.v": 25, "w.o": 26}
    assert {n: "packed" in op.attributes for n, op in mms.items()} == {"w.q": True, "w.k": True, "w.v": True, "w.o": False}
    add = next(op for op in module.walk() if op.name == "fixed.add")
    assert frac_of(add.rhs) == 25  # the consumer reads the new format
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    assert str(fn.function_type.outputs.data[0]) == "tensor<1x16x!fixed.fp32<25>>"
