"""The recurrent state of a hybrid family's sequences at KV page boundaries, for its prefix cache.

    snapshots = StateSnapshots(capacity=64)
    snapshots.put(key, program.read_slot(row))   # the state after the last token of the page keyed `key`
    state = snapshots.get(key)                   # None: not kept (never taken, evicted, or its page left)
    program.write_slot(row, state)               # a sequence that starts after that page continues from it
    snapshots.drop(key)                          # the page left the KV prefix cache: its state goes too

A KV page alone cannot restart a Gated DeltaNet layer: its conv and delta-rule state after the
prefix is needed too, and it lives in the sequence's slot, overwritten as the sequence goes on.
So the scheduler copies the slot's state out when a sequence's computed tokens end exactly at a
full page, and keys the copy by that page's chain hash (`pages.page_key`): a hit means the whole
prefix up to the page's end is the same, so the copy is the state a recompute would reach.

A snapshot is only read with its page: it is dropped when the page is evicted from the KV cache,
and the store keeps at most `capacity` of them (least recently used out first), since one holds
every linear-attention layer's state (tens of MB on a large model). A restore copies the arrays
into the slot, so a snapshot has no holder to count: dropping one never breaks a sequence.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np


class StateSnapshots:
    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"the state snapshots kept must be at least 0, got {capacity}")
        self.capacity = capacity
        self._kept: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()  # oldest use first
        #: Totals over the store's life (for /metrics): snapshots taken, restored, evicted for room.
        self.taken = self.restored = self.evicted = 0
        #: The bytes the kept snapshots hold (a running sum: /metrics reads it from another thread).
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: int) -> bool:
        return key in self._kept

    def put(self, key: int, state: Mapping[str, np.ndarray]) -> None:
        """Keep `state` (the caller's copy, not copied again) as the state after the page `key`."""
        if self.capacity == 0 or key in self._kept:
            return
        while len(self._kept) >= self.capacity:
            self._forget(next(iter(self._kept)))
            self.evicted += 1
        self._kept[key] = dict(state)
        self.nbytes += _size(state)
        self.taken += 1

    def get(self, key: int) -> dict[str, np.ndarray] | None:
        """The state after page `key` (to restore, not to write into), now the most recently used."""
        state = self._kept.get(key)
        if state is not None:
            self._kept.move_to_end(key)
        return state

    def drop(self, key: int) -> None:
        """Page `key` left the KV cache: its state is of no use without it."""
        if key in self._kept:
            self._forget(key)

    def _forget(self, key: int) -> None:
        self.nbytes -= _size(self._kept.pop(key))


def _size(state: Mapping[str, np.ndarray]) -> int:
    return sum(int(a.nbytes) for a in state.values())
