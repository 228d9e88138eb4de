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

    def expert_ids(self, node, ids: str, weight: str) -> tuple[str, str | None]:
        """The ids an expert node's launch reads, and the mask of the slots it computes (None:
        every slot): with whole experts per rank (a node with `ranks`), the rank's own experts'
        slots (`expert_slots`), the others zeroed after the launch (`zero_foreign`)."""
        if B.rank_sharded(node) is None:
            return ids, None
        local, mask = (f"{self.name(node.results[0])}_{what}" for what in ("ids", "mine"))
        self.emit(f"{local}, {mask} = self.expert_slots({ids}, {weight})")
        return local, mask

    def zero_foreign(self, rows: str, mask: str | None) -> None:
        """Zero the rows of the slots routed to another rank (a slot's result there is zeros)."""
        if mask is not None:
            self.emit(f"{rows}.masked_fill_(~{mask}, 0.0)")

    def embed_call(self, op) -> str:
        """The function an embed node's lookup calls: the rank's rows of a vocabulary-split
        table (a node with `ranks`), or the kernel's launcher."""
        return "K.launch_embed" if B.rank_sharded(op) is None else "self.embed_rows"
