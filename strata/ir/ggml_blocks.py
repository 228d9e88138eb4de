"""ggml's Q8_0 and Q4_0 block formats (GGUF's), as the blueprint level's `int8/block32` and
`int4/block32` weight precisions.

A weight is cut into blocks of BLOCK values along its last (input) axis; each block keeps one
f16 scale d and a small integer per value, computed in f32 exactly as ggml's reference
quantizer (ggml-quants.c, and the gguf package's numpy port) does:

* Q8_0 (`int8`): d = max|x| / 127, q = x / d rounded half away from zero, value q * d;
* Q4_0 (`int4`): d = m / -8 with m the block's value of largest magnitude, q = min(15,
  trunc(x / d + 8.5)), value (q - 8) * d.

`round_blocks` gives the values a weight has after the trip (f32). Both are idempotent: a weight
read from a Q8_0 / Q4_0 GGUF comes back unchanged, so the precision describes the file's weights.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32


def round_blocks(w: np.ndarray, elem: str) -> np.ndarray:
    """`w` (its last dim a multiple of BLOCK) through Q8_0 (`elem` "int8") or Q4_0 ("int4")."""
    w = np.asarray(w, dtype=np.float32)
    if elem not in ("int8", "int4") or w.shape[-1] % BLOCK:
        raise ValueError(f"round_blocks: {elem!r} of last dim {w.shape[-1]} (int8 or int4, a multiple of {BLOCK})")
    blocks = w.reshape(-1, BLOCK)
    if elem == "int8":
        d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    else:
        d = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=-1)[:, None], axis=-1) / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    x = blocks * inv
    if elem == "int8":
        q = np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))
    else:
        q = np.minimum(np.trunc(x + np.float32(8.5)), np.float32(15)) - np.float32(8)
    return (q * d.astype(np.float16).astype(np.float32)).astype(np.float32).reshape(w.shape)
