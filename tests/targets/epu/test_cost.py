"""The EPU cost estimate (strata/targets/epu/cost.py): per custom op MACs and DDR bytes from the
shapes, cycles by the documented roofline, labelled an estimate."""

from __future__ import annotations

import pytest
from support import TINY, write_checkpoint

from strata.dialects import parse_ir
from strata.targets.epu.stages import compile_epu
from strata.pipeline import load_model
from strata.targets.epu.cost import QCU, cost_table, step_cost


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost")
    out, _ = compile_epu(load_model(write_checkpoint(TINY["llama"], root / "tiny")), root / "out", {"ctx": 32})
    return parse_ir((out / "fixed" / "fixed.mlir").read_text()), out


def test_rows_follow_the_shapes(fixed):
    module, out = fixed
    cost = step_cost(module, pos=7)
    rows = {w: (m, b) for w, m, b, _ in cost.rows}
    # q|k|v of layer 0: x [1, 32] by N = 32 + 16 + 16; int4 B (one 128-block of 64 bytes per row),
    # int32 scales (4 bytes per row), zero points (1 byte per row)
    assert rows["w4a16PackedProj<3> Qcur-0"] == (64 * 32, 64 * (64 + 4 + 1))
    assert rows["w4a16PackedProj<2> ffn_gate-0"] == (2 * 40 * 32, 2 * 40 * (64 + 4 + 1))
    # attention at position 7: 8 keys seen, q.k and p.v over 4 heads of 8; its ropes (32 + 16
    # rotations) ride along; k and v: 8 int8 rows read and one written, 16 bytes a row each
    assert rows["qwenMultiheadAttentionFx32RoPE kqv_out-0"] == (2 * 4 * 8 * 8 + 32 + 16, 2 * 8 * 16 + 2 * 16)
    assert rows["w4a16NBitsMatMul result_output"] == (48 * 32, 48 * 69)
    assert cost.macs == sum(r[1] for r in cost.rows) and cost.ddr_bytes == sum(r[2] for r in cost.rows)
    for _, m, b, c in cost.rows:
        assert c == max(m / 8192, b / (128e9 / 1.5e9))
    assert QCU.macs_per_cycle == 8192 and cost.tokens_per_s == pytest.approx(1.5e9 / cost.cycles)
    text = cost_table(module)
    assert text.startswith("ESTIMATE (roofline, QC-U-like") and "tokens/s" in text.splitlines()[0]
    assert (out / "cpp" / "cost.txt").read_text() == text  # the cpp stage writes it
    assert step_cost(module, pos=20).macs > cost.macs  # attention grows with the position
