"""The GEMV / GEMM templates on GGUF's packed block formats (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K),
run by the Triton interpreter (f32 activations), against the gguf package's numpy dequantizer
(`gguf.quants.dequantize`, a port of ggml's dequantize_row_*) followed by an f64 matmul.

The blocks are random bytes (every bit pattern of the values, the 6-bit scales and mins, Q6_K's
high bits), with each block's f16 scale fields replaced by random finite f16 values: the kernels
must read every field where ggml puts it. Row counts are odd and K spans several blocks.
Tolerance 1e-5 of the output's largest magnitude: the kernels dequantize exactly (f16 -> f32 is
exact, the products d * sc * q are the reference's) and differ only in the order of f32 sums.
The packed token-embedding gather (`launch_embed` of a packed table) has no sums: its rows (an
odd vocabulary, repeated ids, the last row) equal the dequantized rows bit for bit.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")
gguf = pytest.importorskip("gguf", reason="the reference dequantizer is the gguf package's")

from strata.targets.cuda.kernels import elementwise, gemm, moe  # noqa: E402
from strata.targets.cuda.kernels.ggml_packed import GGML_FORMATS  # noqa: E402

#: ggml type -> the byte offsets of its f16 fields within a block
F16_FIELDS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q4_K": (0, 2), "q5_K": (0, 2), "q6_K": (208,)}
QTYPE = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q4_K": "Q4_K", "q5_K": "Q5_K", "q6_K": "Q6_K"}


def random_blocks(ggml_type: str, n: int, k: int, seed: int) -> np.ndarray:
    """uint8 [n, row bytes]: random blocks with finite f16 scales of magnitude ~0.01..0.1."""
    _, qk, nbytes, _ = GGML_FORMATS[ggml_type]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n * (k // qk), nbytes), dtype=np.uint8)
    for off in F16_FIELDS[ggml_type]:
        n_blocks = blocks.shape[0]
        d = (rng.uniform(0.01, 0.1, size=n_blocks) * rng.choice([-1, 1], size=n_blocks)).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(n, -1)


def dequantized(ggml_type: str, blocks: np.ndarray, k: int) -> np.ndarray:
    qt = getattr(gguf.GGMLQuantizationType, QTYPE[ggml_type])
    return gguf.quants.dequantize(blocks, qt).reshape(blocks.shape[0], k).astype(np.float64)


def _check(y: torch.Tensor, ref: np.ndarray) -> None:
    err = np.abs(y.numpy().astype(np.float64) - ref).max()
    assert err <= 1e-5 * max(1.0, np.abs(ref).max()), err


@pytest.mark.parametrize("ggml_type", list(GGML_FORMATS))
def test_packed_gemv_and_gemm_equal_the_dequantized_matmul(ggml_type):
    qk = GGML_FORMATS[ggml_type][1]
    n, k = 19, 3 * qk if qk == 32 else 2 * qk  # odd rows, several blocks (K = 96 or 512)
    blocks = random_blocks(ggml_type, n, k, seed=len(ggml_type) + qk)
    w = gemm.ggml_weight(torch.from_numpy(blocks), k, ggml_type)
    ref_w = dequantized(ggml_type, blocks, k)
    rng = np.random.default_rng(7)
    for rows in (1, 3, gemm.GEMV_MAX_ROWS + 3):  # GEMV (1 and 3 rows) and the tiled GEMM
        x = rng.standard_normal((rows, k)).astype(np.float32)
        y = gemm.launch_linear(torch.from_numpy(x), w)
        _check(y, x.astype(np.float64) @ ref_w.T)


@pytest.mark.parametrize("ggml_type", ["q4_K", "q6_K"])
def test_packed_gate_up_silu(ggml_type):
    """[gate; up] in one packed weight (2N rows) and the SiLU-mul of the two products."""
    qk = GGML_FORMATS[ggml_type][1]
    n, k = 7, qk
    blocks = random_blocks(ggml_type, 2 * n, k, seed=3)
    ref_w = dequantized(ggml_type, blocks, k)
    x = (0.01 * np.random.default_rng(1).standard_normal((2, k))).astype(np.float32)  # products of O(1)
    y = gemm.launch_linear(torch.from_numpy(x), gemm.ggml_weight(torch.from_numpy(blocks), k, ggml_type), silu_out=True)
    g, u = x.astype(np.float64) @ ref_w[:n].T, x.astype(np.float64) @ ref_w[n:].T
    _check(y, g / (1 + np.exp(-g)) * u)


def test_parts_of_different_formats():
    """A merged projection whose parts are stored in different formats (q4_K q, k and q6_K v):
    each part's launch writes its columns, with a bias."""
    k = 256
    parts = [("q4_K", 5), ("q4_K", 3), ("q6_K", 3)]
    blocks = [random_blocks(t, n, k, seed=i) for i, (t, n) in enumerate(parts)]
    w = gemm.Parts([gemm.ggml_weight(torch.from_numpy(b), k, t) for b, (t, _) in zip(blocks, parts)])
    ref_w = np.concatenate([dequantized(t, b, k) for b, (t, _) in zip(blocks, parts)])
    rng = np.random.default_rng(2)
    bias = rng.standard_normal(11).astype(np.float32)
    for rows in (1, gemm.GEMV_MAX_ROWS + 1):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        y = gemm.launch_linear(torch.from_numpy(x), w, bias=torch.from_numpy(bias))
        _check(y, x.astype(np.float64) @ ref_w.T + bias)


def test_blocks_that_do_not_hold_the_rows_are_refused():
    with pytest.raises(ValueError, match="do not hold rows of 100 values"):
        gemm.ggml_weight(torch.zeros((3, 34), dtype=torch.uint8), 100, "q8_0")


@pytest.mark.parametrize("ggml_type", ["q4_0", "q5_K"])
def test_packed_routed_experts(ggml_type):
    """Stacked experts [E, N, row bytes] (the file's rows of each expert in turn): each routed
    row's gate-up GEMV, and the SiLU-mul + down GEMV, by the expert ids."""
    qk = GGML_FORMATS[ggml_type][1]
    e, inter, k, top_k = 3, 5, qk if qk == 256 else 64, 2
    gu = random_blocks(ggml_type, e * 2 * inter, k, seed=5)
    ref_gu = dequantized(ggml_type, gu, k).reshape(e, 2 * inter, k)
    w_gu = gemm.ggml_weight(torch.from_numpy(gu).reshape(e, 2 * inter, -1), k, ggml_type)
    rng = np.random.default_rng(4)
    x = (0.1 * rng.standard_normal((2, k))).astype(np.float32)
    ids = np.array([[2, 0], [1, 2]], dtype=np.int32)
    y = moe.launch_expert_gate_up(torch.from_numpy(x), torch.from_numpy(ids), w_gu)
    want = np.stack([x[r // top_k].astype(np.float64) @ ref_gu[ids.flat[r]].T for r in range(ids.size)])
    _check(y, want)
    # the down projection: K = inter values per row would not be whole blocks; use K = k
    down = random_blocks(ggml_type, e * 7, k, seed=6)
    ref_down = dequantized(ggml_type, down, k).reshape(e, 7, k)
    w_down = gemm.ggml_weight(torch.from_numpy(down).reshape(e, 7, -1), k, ggml_type)
    g = (0.1 * rng.standard_normal((ids.size, 2 * k))).astype(np.float32)
    y = moe.launch_expert_silu_down(torch.from_numpy(g), torch.from_numpy(ids), w_down)
    act = g[:, :k].astype(np.float64) / (1 + np.exp(-g[:, :k].astype(np.float64))) * g[:, k:]
    _check(y, np.stack([act[r] @ ref_down[ids.flat[r]].T for r in range(ids.size)]))


@pytest.mark.parametrize("ggml_type", list(GGML_FORMATS))
def test_gather_equals_the_dequantized_rows(ggml_type):
    qk = GGML_FORMATS[ggml_type][1]
    vocab, k = 37, 3 * qk if qk == 32 else 2 * qk
    blocks = random_blocks(ggml_type, vocab, k, seed=7 + qk)
    table = gemm.ggml_weight(torch.from_numpy(blocks), k, ggml_type)
    ids = np.array([5, 0, 36, 5, 17, 5], dtype=np.int32)
    y = elementwise.launch_embed(torch.from_numpy(ids)[:, None], table)
    assert y.dtype == torch.float32 and tuple(y.shape) == (len(ids), k)
    np.testing.assert_array_equal(y.numpy(), dequantized(ggml_type, blocks, k)[ids].astype(np.float32))



def test_embed_of_a_weight_holding_values_copies_its_rows():
    """A packed embedding's weight whose store could not give the file's blocks holds the values
    (a dense Weight, as `Model` builds from a mapping of arrays): launch_embed copies its rows."""
    values = torch.from_numpy(np.random.default_rng(1).standard_normal((11, 40)).astype(np.float32))
    y = elementwise.launch_embed(torch.tensor([10, 3, 3], dtype=torch.int32), gemm.Weight(values, 40))
    assert torch.equal(y, values[[10, 3, 3]])
