"""A rank's piece of a weight (op.param's `split`): the cut itself, and the weight stores that read
only the piece (safetensors and GGUF), each equal to cutting the whole tensor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.ir.split import split_piece
from strata.ir.weights import WeightStore, write_safetensors
from strata.pipeline import load_model

DATA = Path(__file__).resolve().parent.parent / "frontends" / "data"


def test_pieces_of_parts():
    w = np.arange(12 * 3).reshape(12, 3)
    # parts of 2*2, 2*1 and 2*3 rows: rank 1 takes the second piece of each
    assert split_piece(w, 0, 2, (2, 1, 3), 1).tolist() == np.concatenate([w[2:4], w[5:6], w[9:12]]).tolist()
    assert split_piece(w, 1, 3, (), 2).tolist() == w[:, 2:3].tolist()
    assert split_piece(w, 0, 2, (), 0).tolist() == w[:6].tolist()
    with pytest.raises(ValueError, match="is not 2 pieces of"):
        split_piece(w, 0, 2, (5,), 0)


@pytest.mark.parametrize("axis,pieces,parts,index", [(0, 2, (), 1), (1, 2, (), 0), (0, 2, (3, 1, 4), 1), (1, 4, (), 3),
                                                     (0, 1, (), 0)])
def test_safetensors_pieces(tmp_path, axis, pieces, parts, index):
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    write_safetensors(tmp_path / "model.safetensors", {"w": w, "n": np.ones(8, np.float32)})
    store = WeightStore.open(tmp_path)
    got = store.piece("w", axis, pieces, parts, index)
    np.testing.assert_array_equal(got, split_piece(w, axis, pieces, parts, index))
    assert got.base is None or not isinstance(got.base, np.memmap)  # its own bytes, not a view of the map
    with pytest.raises(Exception, match="is not 3 pieces"):
        store.piece("w", 0, 3, (), 0)


@pytest.mark.parametrize("name", ["llama-q8_0.gguf", "llama-f32.gguf", "llama-bf16.gguf"])
def test_gguf_pieces(name):
    pytest.importorskip("gguf")
    model = load_model(DATA / name)
    store = model.open_weights()
    for tensor in ("blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "token_embd.weight", "blk.0.attn_q.weight"):
        whole = store.get(tensor)
        for axis in (0, 1):
            for index in (0, 1):
                np.testing.assert_array_equal(store.piece(tensor, axis, 2, (), index),
                                              split_piece(whole, axis, 2, (), index))
