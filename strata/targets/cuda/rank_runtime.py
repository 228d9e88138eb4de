"""The host runtime of one rank of a tensor-parallel CUDA program: the part of `model.py` a
sharded blueprint (`blueprint.ranks` > 1) adds after `runtime.py`'s.

`strata.targets.cuda.emit` copies the text below the marker line into `OUT/model.py`, after
the runtime; the generated `Model` then derives from `RankRuntime` and carries two tables more,
`RANKS` (the program's ranks) and `PIECES` (weight name -> the split of its stored tensor this
rank holds, op.param's `(axis, pieces, part sizes...)`). `Model(weights, group=G)` takes the
torch.distributed process group its ranks meet on: NCCL on GPUs, gloo when the kernels run in
Triton's interpreter on CPU tensors (`strata.runtime.tp` chooses). Each collective node of
the blueprint prints as a call of one method here on the step's device tensors:

* `all_reduce(x, inplace)`: the ranks' partial rows summed (after a row-split projection);
* `all_gather(x, out)`: the ranks' column pieces joined, rank 0's first (the vocabulary-split logits);
* `embed_rows(ids, table, out)`: the rank's rows of a vocabulary-split embedding table (rows
  rank*R .. rank*R + R-1 of the whole), zero rows for the other ids, summed by an all-reduce after.

Above the marker, the imports that make this file importable on its own (its tests); model.py
already has them from the runtime's text.
"""

from __future__ import annotations

import numpy as np
import torch

from strata.targets.cuda.runtime import ModelError, Runtime, _tensor

# -- copied into model.py from here --------------------------------------------------------------
import torch.distributed as dist  # noqa: E402


def split_piece(w, axis: int, pieces: int, parts, index: int):
    """op.param's `split` of a stored weight (a numpy array or a torch tensor): piece `index` of
    `pieces` of every part of dim `axis` (parts of pieces * p rows each for the per-piece sizes p
    in `parts`; none: one part), joined in part order. One part of a numpy array is a view (a
    memory-mapped checkpoint reads only the piece's pages)."""
    shape = tuple(w.shape)
    sizes = [int(p) for p in parts] or [shape[axis] // pieces]
    if sum(sizes) * pieces != shape[axis]:
        raise ModelError(f"split: dim {axis} of {list(shape)} is not {pieces} pieces of {sizes}")
    out, start = [], 0
    for p in sizes:
        lo = start + index * p
        out.append(w[(slice(None),) * axis + (slice(lo, lo + p),)])
        start += pieces * p
    if len(out) == 1:
        return out[0]
    return torch.cat(out, dim=axis) if torch.is_tensor(w) else np.concatenate(out, axis=axis)


class RankRuntime(Runtime):
    """One rank's compiled model: `Model(weights, group=G)`, G of `RANKS` ranks."""

    RANKS = 1
    #: weight name -> (axis, pieces, part sizes...) of the stored tensor this rank holds
    PIECES: dict = {}

    def __init__(self, weights, *, group=None, **options):
        if group is None:
            raise ModelError(f"this model runs on {self.RANKS} ranks: give Model a torch.distributed process group")
        size = group.size()  # a torch.distributed ProcessGroup's size and this process's rank in it
        if size != self.RANKS:
            raise ModelError(f"this model runs on {self.RANKS} ranks, the process group has {size}")
        self.group, self.rank = group, group.rank()
        #: a store that reads one piece of a tensor (strata's: only the piece's bytes), if it has that
        self._pieces = getattr(weights, "piece", None)
        super().__init__(weights, **options)

    def _stored(self, name: str):
        split = self.PIECES.get(name)
        if split is None:
            return super()._stored(name)
        source, kind, args = self.CONVERT.get(name, (name, None, ()))
        axis, pieces, *parts = split
        index = self.rank * pieces // self.RANKS  # ranks share a piece where there are fewer (KV heads)
        try:
            a = self._pieces(source, axis, pieces, tuple(parts), index) if self._pieces is not None else None
            if a is None:
                whole = self._get(source)
                a = None if whole is None else split_piece(whole, axis, pieces, parts, index)
        except KeyError:
            a = None
        if a is None:
            raise ModelError(f"weight '{source}' is missing")
        return _tensor(a, self.device), kind, args

    # -- the collectives (each a node of the blueprint) ----------------------------------------

    def all_reduce(self, x: torch.Tensor, inplace: bool) -> torch.Tensor:
        """The sum over the ranks of x's rows; in x's own memory when nothing else reads x."""
        out = x if inplace else x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        return out

    def all_gather(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The ranks' pieces of each row of x joined along the columns into `out`, rank 0's first."""
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.RANKS)]
        dist.all_gather(parts, x, group=self.group)
        return torch.cat(parts, dim=-1, out=out)

    def embed_rows(self, ids: torch.Tensor, table, out: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a vocabulary-split embedding (`table` holds rows rank*R ..
        rank*R + R-1 of the whole): each id's row where the rank holds it, zeros elsewhere."""
        rows = int(table.shape[0])
        local = ids.to(torch.int64) - self.rank * rows
        mine = (local >= 0) & (local < rows)
        out = self.kernels.launch_embed(torch.where(mine, local, 0).to(ids.dtype), table, out=out)
        return out.masked_fill_(~mine.reshape(-1, 1), 0.0)

    def expert_slots(self, ids: torch.Tensor, w):
        """Whole experts per rank: this rank's weight `w` holds experts rank*E .. rank*E + E-1 of
        the whole set. (each routed id as an index of `w`, a slot routed elsewhere at expert 0;
        the mask of this rank's slots, [n*k, 1]): the caller zeroes the other slots' rows."""
        experts = int(w.data.shape[0])
        local = ids.to(torch.int64) - self.rank * experts
        mine = (local >= 0) & (local < experts)
        return torch.where(mine, local, 0).to(ids.dtype), mine.reshape(-1, 1)
