"""The launch lines of a tensor-parallel blueprint's rank-dependent nodes, a part of the host
printer of its own (`host._Printer` derives from `CollectivePrinter`): each collective node
prints as a call of the generated `Model`'s method of the same name (`rank_runtime.py`:
torch.distributed on the step's device tensors), and a vocabulary-split embed as the rank's
row lookup (`embed_rows`)."""

from __future__ import annotations

from strata.dialects import blueprint as B


class CollectivePrinter:
    """The printer's handlers of `blueprint.all_reduce` and `blueprint.all_gather` (one node a
    group, as blueprint-fuse leaves them)."""

    def g_all_reduce(self, op: B.AllReduceOp, snap=False):
        # in place when the node is the summed rows' only reader (the projection's own output)
        inplace = sum(1 for _ in op.src.uses) == 1
        r = op.results[0]
        self.emit(f"{self.name(r)} = self.all_reduce({self.x(op.src)}, inplace={inplace})")

    def g_all_gather(self, op: B.AllGatherOp, snap=False):
        r = op.results[0]
        self.emit(f"{self.name(r)} = self.all_gather({self.x(op.src)}, out={self.new(r)})")

    def embed_call(self, op) -> str:
        """The function an embed node's lookup calls: the rank's rows of a vocabulary-split
        table (a node with `ranks`), or the kernel's launcher."""
        return "K.launch_embed" if B.rank_sharded(op) is None else "self.embed_rows"
