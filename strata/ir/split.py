"""The pieces of a tensor-parallel weight: op.param's `split` (see `strata.dialects.op.leaves`).

One function, used by the weight stores, the op interpreter and (copied from this file's text,
as the kernels are) the CPU target's generated module: so it imports only numpy and uses
nothing else of this file.
"""

from __future__ import annotations

import numpy as np


def split_piece(w: np.ndarray, axis: int, pieces: int, parts, index: int) -> np.ndarray:
    """op.param's `split`: piece `index` of `pieces` of every part of w's dim `axis` (parts of
    pieces * p rows each for the per-piece sizes p in `parts`; none: one part), joined in part
    order. One part gives a view (of a memory map: only the piece's pages are read)."""
    w = np.asarray(w)
    sizes = [int(p) for p in parts] or [w.shape[axis] // pieces]
    if sum(sizes) * pieces != w.shape[axis]:
        raise ValueError(f"split: dim {axis} of {list(w.shape)} is not {pieces} pieces of {sizes}")
    out, start = [], 0
    for p in sizes:
        lo = start + index * p
        out.append(w[(slice(None),) * axis + (slice(lo, lo + p),)])
        start += pieces * p
    return out[0] if len(out) == 1 else np.concatenate(out, axis=axis)
