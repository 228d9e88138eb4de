"""The ranks of a tensor-parallel program, for the interpreters: a process group's interface,
the one-rank group, and N simulated ranks in one process (one thread each).

    results = run_ranks(2, lambda group: run_function(fn, store, states[group.rank], tokens, 0, group=group))

A group has a `rank`, a `size` and the collectives the op level names (`op.all_reduce`,
`op.all_gather`). The simulated ranks meet at a barrier in every collective, as real ranks
meet in gloo or NCCL; each sums or joins the ranks' tensors in rank order, so every rank
computes the same value. A rank that fails breaks the barrier: the others stop too, and the
first error is raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np

from strata.errors import StrataError

T = TypeVar("T")

#: How long a simulated rank waits for the others in a collective before giving up.
BARRIER_TIMEOUT_S = 300.0


class RankError(StrataError):
    """Ranks that disagree (a group of the wrong size, a rank that failed)."""


class Group(Protocol):
    rank: int
    size: int

    def all_reduce(self, x: np.ndarray) -> np.ndarray:
        """The sum over the ranks of `x` (each rank's of the same shape)."""

    def all_gather(self, x: np.ndarray, axis: int) -> np.ndarray:
        """The ranks' `x` joined along `axis`, rank 0's first."""


class SoloGroup:
    """A group of one rank: the collectives are the identity."""

    rank = 0
    size = 1

    def all_reduce(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x)

    def all_gather(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.asarray(x)


class _Meeting:
    """What the simulated ranks of one group share: a slot per rank and a barrier."""

    def __init__(self, size: int):
        self.slots: list[np.ndarray | None] = [None] * size
        self.barrier = threading.Barrier(size, timeout=BARRIER_TIMEOUT_S)


class SimulatedRank:
    """One of `size` ranks simulated by threads of one process."""

    def __init__(self, meeting: _Meeting, rank: int):
        self.meeting, self.rank, self.size = meeting, rank, len(meeting.slots)

    def _exchange(self, x: np.ndarray) -> list[np.ndarray]:
        m = self.meeting
        m.slots[self.rank] = np.asarray(x)
        m.barrier.wait()  # every rank has put its tensor
        shapes = {s.shape for s in m.slots}  # type: ignore[union-attr]
        values = list(m.slots)
        m.barrier.wait()  # every rank has read them: the slots may be reused
        if len(shapes) != 1:
            raise RankError(f"a collective over ranks with different shapes: {sorted(shapes)}")
        return values  # type: ignore[return-value]

    def all_reduce(self, x: np.ndarray) -> np.ndarray:
        values = self._exchange(x)
        total = values[0].copy()
        for v in values[1:]:
            total += v
        return total

    def all_gather(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.concatenate(self._exchange(x), axis=axis)


def simulated_group(size: int) -> list[SimulatedRank]:
    """`size` simulated ranks sharing one group."""
    meeting = _Meeting(size)
    return [SimulatedRank(meeting, r) for r in range(size)]


def run_ranks(size: int, work: Callable[[Group], T]) -> list[T]:
    """`work(group)` on each of `size` simulated ranks, concurrently; the results by rank."""
    ranks = simulated_group(size)
    if size == 1:
        return [work(ranks[0])]
    results: list[T | None] = [None] * size
    errors: list[BaseException] = []

    def main(rank: SimulatedRank) -> None:
        try:
            results[rank.rank] = work(rank)
        except threading.BrokenBarrierError:
            pass  # another rank failed first
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors.append(e)
            rank.meeting.barrier.abort()

    threads = [threading.Thread(target=main, args=(r,), name=f"rank-{r.rank}") for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if any(r is None for r in results):
        raise RankError("a simulated rank stopped in a collective that the others never reached")
    return results  # type: ignore[return-value]
