"""The generated host's weight quantizers (strata/targets/cuda/runtime.py, in torch) against
strata's own (numpy): fp8 block and ONNX Runtime's int4, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the CUDA runtime needs torch (the `test` extra)")

from strata.ir import fp8  # noqa: E402
from strata.ir.int4 import quantize_int4_block  # noqa: E402
from strata.targets.cuda import runtime  # noqa: E402


@pytest.mark.parametrize("shape,block", [((300, 260), (128, 128)), ((3, 40, 70), (32, 16)), ((5, 7), (128, 128))])
def test_fp8_block_matches_numpy(shape, block):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 5, shape)).astype(np.float32)
    w.reshape(-1)[:40] = 0.0  # a block of zeros keeps scale 1
    q, s = runtime.quantize_fp8_block(torch.from_numpy(w), block)
    for i, m in enumerate(w.reshape(-1, *shape[-2:])):
        wq, ws = fp8.quantize_fp8_block(m, block)
        got_q = q.reshape(-1, *shape[-2:])[i].view(torch.uint8).numpy()
        assert np.array_equal(got_q, wq.view(np.uint8))
        assert np.array_equal(s.reshape(-1, *ws.shape)[i].numpy(), ws)


@pytest.mark.parametrize("shape,block", [((6, 300), 128), ((2, 3, 33), 16)])
def test_int4_block_matches_numpy(shape, block):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(shape).astype(np.float32)
    w[0, :block] = 0.0  # an all-zero block: scale 0, zero point 0
    q, s, z = runtime.quantize_int4_block(torch.from_numpy(w), block)
    wq, ws, wz = quantize_int4_block(w, block)
    assert np.array_equal(q.numpy(), wq) and np.array_equal(s.numpy(), ws) and np.array_equal(z.numpy(), wz)


def test_conversions():
    w = np.arange(24, dtype=np.float32).reshape(6, 4)
    from strata.semantics.kernels import convert_ungroup_rows

    args = (2, 0, 2, 1, 2)
    got = runtime._convert(torch.from_numpy(w), "ungroup_rows", args).numpy()
    assert np.array_equal(got, convert_ungroup_rows(w, args))
    assert np.allclose(runtime._convert(torch.from_numpy(w), "neg_exp", ()).numpy(), -np.exp(w))


def test_the_paged_cache_pages_are_the_one_default():
    """The runtime copied into every model.py imports nothing from strata: its page size is pinned
    to the one default here (the server's pages are the same)."""
    from strata.targets.target import KV_PAGE_SIZE

    assert runtime.PAGE == KV_PAGE_SIZE


def test_the_kernels_are_state_of_the_model_not_of_the_module():
    """Each Model holds the kernels module it loaded (`self.kernels`, `K` in its entry methods);
    the runtime keeps no module global that a constructor sets."""
    assert "K" not in vars(runtime)
    assert "global " not in Path(runtime.__file__).read_text(encoding="utf-8")

