"""How often ``checkpoint.npz`` is written: after every iteration, unless the state is large and writing it costs
more than a tenth of the run's time.

A checkpoint holds a run's whole state. For most runs that is kilobytes to a few MB, written after every iteration. A
large table's learner is another matter: a Hopper-v5.rich ``q-learning`` run (559,872 states by 27 actions: its Q
values and visit counts) writes 250 MB, and writing it after every iteration took 77% of a 300-episode run's time
(95.0 of 122.8 s, cProfile). So once a checkpoint of more than :data:`PACE_ABOVE_BYTES` has been written, the next
is written only when the iterations since have taken :data:`SHARE`'s complement of the time, ``cost * (1 - SHARE) /
SHARE`` with ``cost`` the last write's: the checkpoints take about ``SHARE`` of the run's wall time at most. Smaller
states are written after every iteration, as before.

A finished iteration whose checkpoint waits is kept in memory (a copy of its state) and written when the run ends,
however it ends (its stops, Ctrl-C, SIGTERM, an error), so that the files keep every finished iteration as before;
only a process killed outright (SIGKILL, a machine lost) leaves the last checkpoint written, a few iterations back,
and ``--resume`` redoes the iterations since, to the same result (the events of those iterations are cut, as for
the one unfinished iteration). An iteration that asked a model is always written at once (the driver's rule): its
calls were paid for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CheckpointPace", "PACE_ABOVE_BYTES", "SHARE", "may_wait"]

PACE_ABOVE_BYTES = 32 * 2**20
"""Checkpoints up to this size are written after every iteration (decided by size, not by a time that a busy disk
changes, so a small run writes the same checkpoints on any machine)."""

SHARE = 0.1
"""The share of the run's wall time that writing larger checkpoints may take."""


def may_wait(size: int) -> bool:
    """Whether a checkpoint of ``size`` bytes may be followed by iterations whose checkpoints wait."""
    return size > PACE_ABOVE_BYTES


class CheckpointPace:
    """Whether the checkpoint after this iteration is written now; told the size and cost of each write."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, share: float | None = None,
                 above_bytes: int | None = None) -> None:
        self.clock = clock
        self.share = SHARE if share is None else share
        self.above_bytes = PACE_ABOVE_BYTES if above_bytes is None else above_bytes
        self._size = 0
        self._cost = 0.0
        self._ended = 0.0
        self.skipped = 0
        """Checkpoints not written at their iteration so far (each written later, or replaced by a later one)."""

    def due(self) -> bool:
        """True when the next checkpoint is to be written now."""
        if self._size <= self.above_bytes:
            return True
        if self.clock() - self._ended >= self._cost * (1 - self.share) / self.share:
            return True
        self.skipped += 1
        return False

    def started(self) -> float:
        return self.clock()

    def wrote(self, started: float, size: int) -> None:
        """A checkpoint of ``size`` bytes was written, from ``started`` (:meth:`started`) to now."""
        self._ended = self.clock()
        self._cost, self._size = self._ended - started, size
