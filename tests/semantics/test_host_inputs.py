"""The host side of the entries' calls (strata.semantics.host_inputs): arguments checked with
one-line errors that name them, and the inputs computed from them (cells, masks, conv windows)."""

from __future__ import annotations

import numpy as np
import pytest

from strata.semantics import host_inputs as H

LAYOUT = {"Batch": 2, "MaxSeq": 16, "PageSize": 4, "Vocab": 48, "ConvK": 0, "n_kv": 16}
SPECS = {
    "decode_rows": (("tokens", (2, 1), "int32"), ("positions", (2,), "int32")),
    "prefill_slots": (("tokens", (2, -1), "int32"), ("slots", (2,), "int32"), ("lengths", (2,), "int32")),
    "hidden_packed": (("tokens", (-1,), "int32"), ("positions", (-1,), "int32"), ("segments", (-1,), "int32")),
    "loss_packed": (("tokens", (-1,), "int32"), ("positions", (-1,), "int32"), ("segments", (-1,), "int32"),
                    ("targets", (-1,), "int64"), ("weights", (-1,), "float32")),
    "prefill_packed": (("tokens", (-1,), "int32"), ("rows", (-1,), "int32"), ("positions", (-1,), "int32"),
                       ("segments", (-1,), "int32"), ("last", (2,), "int32")),
    "step_packed": (("tokens", (-1,), "int32"), ("rows", (-1,), "int32"), ("positions", (-1,), "int32"),
                    ("segments", (-1,), "int32"), ("last", (2,), "int32"), ("step_tokens", (2, 1), "int32"),
                    ("step_positions", (2,), "int32")),
    "decode_paged": (("tokens", (2, 1), "int32"), ("positions", (2,), "int32"), ("table", (2, 4), "int32")),
    "prefill_paged": (("tokens", (-1,), "int32"), ("positions", (-1,), "int32"), ("rows", (-1,), "int32"),
                      ("slots", (-1,), "int32"), ("last", (2,), "int32"), ("table", (2, 4), "int32")),
}
KV = {"decode_rows": ("cache", "rows"), "prefill_slots": ("self", "rows"), "hidden_packed": ("self", "one"),
      "loss_packed": ("self", "one"), "prefill_packed": ("cache", "one"), "step_packed": ("cache", "one"),
      "decode_paged": ("paged", "rows"), "prefill_paged": ("paged", "one")}


def call(entry: str, conv_k: int = 0, **args):
    kv, streams = KV[entry]
    layout = {**LAYOUT, "entry": entry, "kv": kv, "streams": streams, "state": "slots", "ConvK": conv_k}
    return H.entry_call(layout, SPECS[entry], args)


def test_a_paged_call_reads_and_writes_through_the_table() -> None:
    table = [[5, 2, -1, -1], [7, 0, 3, -1]]
    c = call("decode_paged", tokens=[[1], [2]], positions=[5, 9], table=table)
    np.testing.assert_array_equal(c["cell"], [2 * 4 + 1, 3 * 4 + 1])
    assert c["cells"].shape == (2, 16) and c["cells"][0, 5] == 9 and c["col_label"][0, 8] == -1
    mask = H.attention_mask(c, (2, 1, 16))
    np.testing.assert_array_equal(np.isfinite(mask[0, 0]), np.arange(16) <= 5)
    np.testing.assert_array_equal(np.isfinite(mask[1, 0]), np.arange(16) <= 9)


def test_packed_segments_see_only_themselves() -> None:
    c = call("hidden_packed", tokens=[1, 2, 3, 4, 5], positions=[0, 1, 0, 1, 2], segments=[0, 0, 3, 3, 3])
    mask = np.isfinite(H.attention_mask(c, (5, 5)))
    want = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]], bool)
    np.testing.assert_array_equal(mask, want)
    np.testing.assert_array_equal(c["seq"], [0, 0, 1, 1, 1])


def test_conv_windows_stay_in_their_sequence() -> None:
    """Two rows, K = 3: row 1 continues (reads its state block, 2 columns), row 0 starts fresh."""
    c = call("prefill_packed", conv_k=3, tokens=[1, 2, 3, 4], rows=[1, 1, 0, 0], positions=[4, 5, 0, 1],
             segments=[0, 0, 1, 1], last=[3, 1])
    np.testing.assert_array_equal(c["state_read"], [-1, 1])
    np.testing.assert_array_equal(c["state_write"], [0, 1])
    window, tail = H.conv_rows(c, 3)
    # The table: block 0 (rows 0, 1), block 1 (rows 2, 3), then the tokens (rows 4..7).
    np.testing.assert_array_equal(window.reshape(4, 3), [[2, 3, 4], [3, 4, 5], [0, 1, 6], [1, 6, 7]])
    np.testing.assert_array_equal(tail.reshape(2, 2), [[6, 7], [4, 5]])


def test_idle_rows_keep_their_state_and_output_zeros() -> None:
    c = call("step_packed", tokens=[9, 9], rows=[1, 1], positions=[3, 4], segments=[0, 0], last=[-1, 1],
             step_tokens=[[5], [0]], step_positions=[7, -1])
    np.testing.assert_array_equal(c["cell"], [7, -1, 16 + 3, 16 + 4])  # row 1's step writes nothing
    np.testing.assert_array_equal(c["out"], [-1, 3, 0, -1])
    np.testing.assert_array_equal(c["seq"], [0, -1, 1, 1])
    assert np.isfinite(H.attention_mask(c, (4, 32))).any(axis=-1).all()  # no row of NaNs


@pytest.mark.parametrize("entry, args, message", [
    ("decode_rows", dict(tokens=[[1], [2]], positions=[3, 16]),
     r"decode_rows: positions\[1\] = 16 is not in \[0, 15\] \(the context, MaxSeq = 16\)"),
    ("decode_rows", dict(tokens=[[1], [48]], positions=[3, 4]),
     r"decode_rows: tokens\[1, 0\] = 48 is not in \[0, 47\] \(the vocabulary\)"),
    ("decode_rows", dict(tokens=[[1], [2]]), "decode_rows: missing argument 'positions'"),
    ("decode_rows", dict(tokens=[[1], [2]], positions=[1, 2], pos=3),
     r"decode_rows: no argument 'pos' \(it takes tokens, positions\)"),
    ("decode_rows", dict(tokens=[[1], [2], [3]], positions=[1, 2]),
     r"decode_rows: argument 'tokens' must have shape \[2, 1\], got \[3, 1\]"),
    ("decode_rows", dict(tokens=[[1], [2]], positions=[1.0, 2]),
     "decode_rows: argument 'positions' must hold integers, got floats"),
    ("decode_rows", dict(tokens=[[1], [2]], positions=[[1], 2]),
     "decode_rows: argument 'positions' must hold integers, got something that is not a rectangular array"),
    ("prefill_slots", dict(tokens=[[1, 2], [3, 4]], slots=[1, 1], lengths=[2, 2]),
     r"prefill_slots: slots\[0\] and slots\[1\] are both 1"),
    ("prefill_slots", dict(tokens=[[1, 2], [3, 4]], slots=[0, 1], lengths=[3, 2]),
     r"prefill_slots: lengths\[0\] = 3 is not in \[1, 2\]"),
    ("hidden_packed", dict(tokens=[1, 2, 3], positions=[0, 1, 0], segments=[1, 1, 0]),
     r"hidden_packed: segments out of order: segments\[2\] = 0 after segments\[1\] = 1"),
    ("hidden_packed", dict(tokens=[1, 2, 3], positions=[0, 2, 0], segments=[0, 0, 1]),
     r"hidden_packed: positions\[1\] = 2 does not follow positions\[0\] = 0 within segment 0"),
    ("hidden_packed", dict(tokens=[1, 2, 3], positions=[0, 1, 1], segments=[0, 0, 1]),
     r"hidden_packed: positions\[2\] = 1 starts segment 1; each segment starts at position 0"),
    ("loss_packed", dict(tokens=[1, 2], positions=[0, 1], segments=[0, 0], targets=[1, 2], weights=[0, 0]),
     "loss_packed: the weights sum to 0"),
    ("prefill_packed", dict(tokens=[1, 2, 3], rows=[0, 1, 0], positions=[0, 0, 1], segments=[0, 1, 2], last=[2, 1]),
     r"prefill_packed: row 0 gets two runs of tokens"),
    ("prefill_packed", dict(tokens=[1, 2], rows=[0, 0], positions=[0, 1], segments=[0, 0], last=[1, 0]),
     r"prefill_packed: last\[1\] = 0 is a token of row 0, not of row 1"),
    ("step_packed", dict(tokens=[1], rows=[0], positions=[0], segments=[0], last=[0, -1], step_tokens=[[1], [2]],
                         step_positions=[3, -1]),
     "step_packed: row 0 takes a decode step and chunk tokens in one call"),
    ("decode_paged", dict(tokens=[[1], [2]], positions=[1, 2], table=[[0, 8, -1, -1], [1, -1, -1, -1]]),
     r"decode_paged: table\[0, 1\] = 8 points at a page that does not exist \(the cache has 8 pages of 4 cells"),
    ("decode_paged", dict(tokens=[[1], [2]], positions=[1, 5], table=[[0, -1, -1, -1], [1, -1, -1, -1]]),
     r"decode_paged: position 5 of row 1 is in page entry table\[1, 1\] = -1 \(no page\)"),
    ("decode_paged", dict(tokens=[[1], [2]], positions=[1, 1], table=[[0, -1, -1, -1], [0, -1, -1, -1]]),
     "decode_paged: tokens 0 and 1 would both write cache cell 1"),
    ("prefill_paged", dict(tokens=[1, 2], positions=[0, 1], rows=[0, 0], slots=[0, 2], last=[1, -1],
                           table=[[0, -1, -1, -1], [1, -1, -1, -1]]),
     r"prefill_paged: slots\[1\] = 2, but row 0's position 1 is cell 1 by the table"),
])
def test_bad_arguments_are_one_line_errors(entry, args, message) -> None:
    with pytest.raises(ValueError, match=message) as e:
        call(entry, **args)
    assert "\n" not in str(e.value)
