"""The op-by-op lowering of a torch module (strata.frontends.torch_ops): a module that is not a
causal LM of recognised blocks, lowered ATen op by ATen op and run by the op interpreter,
matches torch; an op with no lowering is a one-line error naming it and its module."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from strata.frontends.torch import CaptureError  # noqa: E402
from strata.pipeline import capture  # noqa: E402
from strata.frontends.torch_ops import capture_ops, weights_of  # noqa: E402
from strata.semantics.op_interp import find_function, run_function  # noqa: E402

TOL = 1e-5


class _Bag(nn.Module):
    """Not a causal LM: embedding, gated linear, a norm by mean square, self-similarity."""

    def __init__(self):
        super().__init__()
        self.emb, self.a, self.b, self.out = nn.Embedding(20, 8), nn.Linear(8, 12), nn.Linear(12, 8, bias=False), nn.Linear(8, 20)

    def forward(self, ids):
        x = self.emb(ids)
        y = x + self.b(nn.functional.silu(torch.sigmoid(self.a(x)) * 2.0)) / 3.0
        y = y * y.pow(2).mean(-1, keepdim=True)
        return self.out(torch.softmax(y @ y.transpose(1, 2), dim=-1) @ y - y)


def test_op_level_lowering_runs_like_torch():
    torch.manual_seed(0)
    module = _Bag().eval()
    ids = torch.tensor([[1, 4, 7, 3, 19]])
    ir = capture(module, (ids,), level="op")
    got = run_function(find_function(ir), weights_of(module), {}, ids[0].numpy().astype(np.int32), 0)
    with torch.no_grad():
        want = module(ids).numpy()
    assert np.abs(got - want).max() <= TOL


def test_op_level_unsupported_op_is_one_line():
    class Cum(_Bag):
        def forward(self, ids):
            return self.out(torch.cumsum(self.emb(ids), dim=1))

    with pytest.raises(CaptureError, match=r"unsupported op aten\.cumsum\.default in the root module") as err:
        capture_ops(Cum().eval(), (torch.tensor([[1, 2, 3]]),))
    assert "\n" not in str(err.value)
