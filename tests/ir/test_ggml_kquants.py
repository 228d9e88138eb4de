"""ggml's K-quants (strata/ir/ggml_kquants.py) against llama-quantize's own blocks.

tests/ir/data/ggml_kquants.gguf (made by tests/verify/data_ggml/make_refs.py) holds 32 rows of
a checkpoint's weight, 16 of them designed edge cases (an all-zero super-block, a constant one,
all positive, all negative, tiny values whose f16 scales underflow, outliers, ...), and
llama-quantize's --pure blocks of those rows in Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.ir import ggml_kquants as Q
from strata.ir.ggml_blocks import round_blocks
from strata.ir.ggml_types import TYPES, GgmlTypeError, ggml_type, gguf_type_name

gguf = pytest.importorskip("gguf")
FIXTURE = Path(__file__).resolve().parent / "data" / "ggml_kquants.gguf"


@pytest.fixture(scope="module")
def fixture() -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(FIXTURE).tensors}


@pytest.mark.parametrize("kind", ["Q4_K", "Q5_K", "Q6_K"])
def test_quantize_is_llama_quantizes_byte_for_byte(fixture, kind: str) -> None:
    name = gguf_type_name(kind)
    src, theirs = fixture["src"], fixture[kind]
    np.testing.assert_array_equal(Q.quantize(src, name), theirs.reshape(src.shape[0], -1))
    ref = gguf.quants.dequantize(theirs, gguf.GGMLQuantizationType[kind]).reshape(src.shape)
    np.testing.assert_array_equal(Q.dequantize(theirs, name, src.shape), ref)
    np.testing.assert_array_equal(Q.round_trip(src, name), ref)
    assert not np.array_equal(ref, src)
    np.testing.assert_array_equal(ref[0], 0)  # the all-zero super-block


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_q8_0_and_q4_0_round_as_llama_quantize(fixture, kind: str) -> None:
    src = fixture["src"]
    ref = gguf.quants.dequantize(fixture[kind], gguf.GGMLQuantizationType[kind]).reshape(src.shape)
    np.testing.assert_array_equal(round_blocks(src, "int8" if kind == "Q8_0" else "int4"), ref)


def test_round_trip_keeps_every_row_apart() -> None:
    """A 3-D expert weight quantizes row by row: each [256] slice as alone."""
    w = np.random.default_rng(3).standard_normal((2, 3, 512)).astype(np.float32)
    whole = Q.round_trip(w, "q4_K")
    np.testing.assert_array_equal(whole[1, 2], Q.round_trip(w[1, 2], "q4_K"))


def test_a_partial_super_block_is_refused() -> None:
    with pytest.raises(ValueError, match="not a multiple of 256"):
        Q.round_trip(np.zeros((2, 96), np.float32), "q6_K")


def test_the_type_table_matches_the_gguf_package() -> None:
    """Block sizes and bytes as gguf-py (and ggml) have them, for every type both know (but Q8_1,
    an activation type no file stores, whose two scales ggml now keeps in f16: 36 bytes, where
    gguf-py still counts two f32s)."""
    for kind, (block, nbytes) in gguf.GGML_QUANT_SIZES.items():
        name = kind.name.lower()
        if name == "q8_1":
            continue
        match = [t for t in TYPES.values() if t.name.lower() == name]
        if match:
            assert (match[0].block, match[0].nbytes) == (block, nbytes), kind.name
    assert ggml_type("q4_K").activation == "q8_K" and ggml_type("iq4_nl").activation == "q8_0"
    assert not ggml_type("q4_1").emulated  # Q8_1 activations: not emulated
    with pytest.raises(GgmlTypeError, match="unknown ggml type 'q4_k'"):
        ggml_type("q4_k")
