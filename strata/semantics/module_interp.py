"""Execute a `module.model` directly: the module level's semantics, one class per block kind.

    runner = ModuleRunner(model_op, WeightStore.open(d, names))
    last = runner.prefill(tokens, start=0)      # [Vocab] logits of the last token
    nxt = runner.decode(int(last.argmax()), pos=len(tokens))
    full = runner.forward(tokens)               # [S, Vocab], no cache

The runner walks the model's block instances (`strata.dialects.instances`): each
instance becomes an object of the class registered for its kind (`BLOCK_SEMANTICS`,
keyed by the block's `path`), with its params read from the weight store by their
llama.cpp names and checked against the shapes the block types give.

This is deliberately a second reference, written independently of the op-level
kernels (`kernels.py`): activations keep a batch dim [B, S, H], heads are split as
[B, Heads, S, D], K/V heads are repeated explicitly, rope follows HF (rotate_half and
its own llama3 frequency scaling), softmax is the plain textbook one, and the KV
cache has the module's layout [Batch, KvHeads, MaxSeq, HeadDim]. Running both levels
on one input checks the lowering pass between them.
"""

from __future__ import annotations

import numpy as np

from strata.dialects import module as M
from strata.dialects.instances import instantiate
from strata.semantics import module_hybrid  # noqa: F401  (registers the hybrid and MoE kinds)
from strata.semantics.module_blocks import BLOCK_SEMANTICS, Block, ModuleRunError, Weights, make_block
from strata.semantics.module_entries import run_entry

__all__ = ["BLOCK_SEMANTICS", "Block", "ModuleRunError", "ModuleRunner", "make_block"]


# ---------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------


class ModuleRunner:
    """Runs the entries of a causal-LM `module.model` on a weight store (`bind`: the root's dim
    generics set, Batch, MaxSeq, PageSize, over the model's)."""

    def __init__(self, model_op: M.ModelOp, weights: Weights, bind: dict[str, int] | None = None):
        self.model_op = model_op
        inst = instantiate(model_op, bind)
        if int(inst.env.get("Shards", 1)) != 1:  # its blocks hold one rank's pieces
            raise ModuleRunError(f"module.model @{model_op.sym_name.data} is one rank of {inst.env['Shards']} "
                                 "(shard-tensor-parallel): run its op level, whose interpreter simulates the ranks")
        self.root = make_block(inst, weights)
        self.vocab = self.root.inst.dim("Vocab")

    def _ids(self, tokens: np.ndarray | list[int]) -> np.ndarray:
        ids = np.asarray(tokens, dtype=np.int64).reshape(1, -1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise ModuleRunError(f"token ids must be in [0, {self.vocab})")
        return ids

    def forward(self, tokens: np.ndarray | list[int]) -> np.ndarray:
        """Logits of every position [S, Vocab], without the KV cache."""
        return self.root.forward(self._ids(tokens))[0]

    def prefill(self, tokens: np.ndarray | list[int], start: int = 0) -> np.ndarray:
        """Write the cache rows start.. and return the last position's logits [Vocab]."""
        return self.root.prefill(self._ids(tokens), int(start))[0]

    def decode(self, token: int, pos: int) -> np.ndarray:
        """One token at position pos through the cache; logits [Vocab]."""
        return self.root.decode(self._ids([token]), int(pos))[0]

    def call(self, entry: str, inputs: dict, steps: int = 16):
        """Entry `entry` of the module level on `inputs` (its arguments by name): each sequence run alone
        in its own row of the state (see `strata.semantics.module_entries`); `steps` is the
        device loops' Steps (or MaxNew)."""
        if entry not in getattr(self.root, "ENTRIES", ()):
            raise ModuleRunError(f"the module interpreter has no entry '{entry}' for a {self.root.inst.kind}")
        return run_entry(self.root, entry, {**inputs, "steps": steps})

    def state(self) -> dict[str, np.ndarray]:
        """Every state buffer by instance path (`layers.0.attention.cache_k`: [Batch, KvHeads, MaxSeq, D])."""
        out: dict[str, np.ndarray] = {}

        def walk(block: Block) -> None:
            for name, buf in block.state.items():
                out[f"{block.path}.{name}" if block.path else name] = buf
            for c in block.children.values():
                for b in c if isinstance(c, list) else [c]:
                    walk(b)

        walk(self.root)
        return out

    def reset(self) -> None:
        """Zero the KV caches."""
        for buf in self.state().values():
            buf[...] = 0
