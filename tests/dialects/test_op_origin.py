"""The op level's record of where an op came from (`op.block`): it prints, parses back to the
same text, and a malformed record is refused."""

from __future__ import annotations

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from strata.dialects import op as O

TEXT = """builtin.module {
  func.func @f(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
    %w = op.param "blk.0.attn_q.weight" {op.block = #op.block<"std.nn.linear", "layers.0.attention.q_proj", "weight">} : tensor<3x4xf32>
    %y = op.mul_mat %w, %x {name = "Qcur-0", op.block = #op.block<"std.nn.linear", "layers.0.attention.q_proj">} : tensor<3x4xf32>, tensor<2x4xf32> -> tensor<2x3xf32>
    func.return %y : tensor<2x3xf32>
  }
}"""


def _parse(text: str):
    ctx = Context()
    for dialect in (Builtin, Func, O.Op):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def test_round_trip():
    module = _parse(TEXT)
    module.verify()
    assert str(module) == TEXT
    assert str(_parse(str(module))) == TEXT


def test_the_record_reads_back():
    module = _parse(TEXT)
    param, mm = list(module.walk())[2:4]
    assert O.origin_of(param) == O.BlockOriginAttr("std.nn.linear", "layers.0.attention.q_proj", "weight")
    origin = O.origin_of(mm)
    assert (origin.kind.data, origin.instance, origin.member_name) == ("std.nn.linear", "layers.0.attention.q_proj", None)


@pytest.mark.parametrize("bad, error", [
    ('#op.block<"", "layers.0">', VerifyException),
    ('#op.block<"std.nn.linear", "layers..0">', VerifyException),
    ('#op.block<"std.nn.linear">', ParseError),
])
def test_malformed_records_are_refused(bad, error):
    text = TEXT.replace('#op.block<"std.nn.linear", "layers.0.attention.q_proj">', bad)
    with pytest.raises(error):
        _parse(text).verify()
