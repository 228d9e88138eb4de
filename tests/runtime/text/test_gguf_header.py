"""The GGUF metadata reader: the same values as the gguf package's own GGUFReader, and one-line errors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from strata.runtime.text.errors import TokenizerError
from strata.runtime.text.gguf_header import read_gguf_metadata


def _write(path, *, tensors: bool = False, big_endian: bool = False):
    w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -3000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✅")
    w.add_array("t.strings", ["a", "", "日本語", "\u2581x"])
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_array("t.bools", [True, False, True])
    if tensors:
        w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("tensors", [False, True], ids=["vocabulary-only", "with-tensors"])
def test_values_equal_the_gguf_readers(tmp_path, tensors, big_endian):
    path = tmp_path / "m.gguf"
    _write(path, tensors=tensors, big_endian=big_endian)
    meta = read_gguf_metadata(path)
    reference = gguf.GGUFReader(path)
    assert meta.tensor_count == (1 if tensors else 0)
    keys = [k for k in reference.fields if not k.startswith("GGUF.")]
    assert sorted(meta) == sorted(keys)
    for key in keys:
        want = reference.fields[key].contents()
        got = meta[key]
        if isinstance(got, np.ndarray):
            assert got.tolist() == pytest.approx(want), key
        else:
            assert got == want, key
    assert meta["t.strings"] == ["a", "", "日本語", "\u2581x"]
    assert meta["t.f32"] == np.float32(0.1)


def test_not_gguf_truncated_and_bad_utf8_are_one_line_errors(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(TokenizerError, match=r"junk\.gguf: not a GGUF file"):
        read_gguf_metadata(junk)

    good = tmp_path / "m.gguf"
    _write(good)
    data = good.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TokenizerError, match=r"cut\.gguf: truncated GGUF file .* it ends inside 't\.") as e:
        read_gguf_metadata(cut)
    assert "\n" not in str(e.value)

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data.replace("日本語".encode(), b"\xff" * len("日本語".encode())))
    with pytest.raises(TokenizerError, match=r"bad\.gguf: metadata key 't\.strings' item 2 is not valid UTF-8"):
        read_gguf_metadata(bad)

    with pytest.raises(TokenizerError, match=r"nothere\.gguf: cannot read"):
        read_gguf_metadata(tmp_path / "nothere.gguf")
