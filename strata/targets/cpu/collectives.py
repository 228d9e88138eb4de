"""The collectives of a tensor-parallel CPU program, copied into its generated module.

These functions are the generated code's, not strata's (the emitter copies their source, as it
copies the kernels): they import only numpy and torch, and call torch.distributed on the
process group the generated `Model` is given (gloo on CPUs). The tensors cross as zero-copy
`torch.from_numpy` views of the numpy arrays, so an all-reduce sums in place in the array
the kernels computed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist


def tp_rank(group, ranks: int) -> int:
    """This process's rank in `group`, which must have `ranks` ranks (the IR's)."""
    if group is None:
        raise ValueError(f"this model runs on {ranks} ranks: give Model a torch.distributed process group")
    size = dist.get_world_size(group)
    if size != ranks:
        raise ValueError(f"this model runs on {ranks} ranks, the process group has {size}")
    return dist.get_rank(group)


def all_reduce(x: np.ndarray, group, inplace: bool) -> np.ndarray:
    """The sum over the ranks of x (float32); in x's own memory when the caller is done with x."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = x if inplace and x.flags.writeable else x.copy()
    dist.all_reduce(torch.from_numpy(out), op=dist.ReduceOp.SUM, group=group)
    return out


def all_gather(x: np.ndarray, axis: int, group, ranks: int) -> np.ndarray:
    """The ranks' x joined along `axis`, rank 0's first."""
    x = np.ascontiguousarray(x)
    parts = [np.empty_like(x) for _ in range(ranks)]
    dist.all_gather([torch.from_numpy(p) for p in parts], torch.from_numpy(x), group=group)
    return np.concatenate(parts, axis=axis)


#: The functions a tensor-parallel module carries (the emitter reads this file's text: it
#: never imports it, so compiling needs no torch).
FUNCTIONS = ("tp_rank", "all_reduce", "all_gather")
