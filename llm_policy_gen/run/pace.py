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

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["CheckpointPace", "PACE_ABOVE_BYTES", "SHARE", "may_wait", "snapshot"]

PACE_ABOVE_BYTES = 32 * 2**20
"""Checkpoints up to this size are written after every iteration (decided by size, not by a time that a busy disk
changes, so a small run writes the same checkpoints on any machine)."""

SHARE = 0.1
"""The share of the run's wall time that writing larger checkpoints may take."""

State = dict[str, Any]
"""A run's checkpoint state (:meth:`.Run.state_dict`): what :class:`CheckpointPace` holds and is told of."""


def snapshot(state: Any, into: Any = None) -> Any:
    """A copy of ``state`` that no later change of the run alters (a waiting checkpoint's state). ``into``, an
    earlier snapshot that nothing else holds, lends its arrays: one of the same shape and type is overwritten in place,
    about ten times faster than a new copy of a large array (whose fresh pages are the cost: 0.28 s against 0.02 s for
    a Q table and its visit counts of 559,872 x 27)."""
    if isinstance(state, dict):
        lent = into if isinstance(into, dict) else {}
        return {k: snapshot(v, lent.get(k)) for k, v in state.items()}
    if isinstance(state, list):
        items = into if isinstance(into, list) and len(into) == len(state) else [None] * len(state)
        return [snapshot(v, w) for v, w in zip(state, items, strict=True)]
    if (isinstance(state, np.ndarray) and isinstance(into, np.ndarray) and into is not state
            and into.shape == state.shape and into.dtype == state.dtype and into.flags.writeable
            and into.flags.owndata and not np.shares_memory(into, state)):
        np.copyto(into, state)
        return into
    return copy.deepcopy(state)


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
        self.waiting: State | None = None
        """A later finished iteration's state (a copy, :meth:`hold`) whose checkpoint waits: the run writes it when
        it ends, however it ends."""
        self._spare: State | None = None
        """A waiting copy that a newer checkpoint replaced unwritten: its arrays are lent to the next copy."""

    def due(self) -> bool:
        """True when the next checkpoint is to be written now."""
        if self._size <= self.above_bytes:
            return True
        if self.clock() - self._ended >= self._cost * (1 - self.share) / self.share:
            return True
        self.skipped += 1
        return False

    def hold(self, state: State) -> None:
        """Keep a copy of ``state`` (:func:`snapshot`), whose checkpoint waits; the next iteration changes the arrays
        it may share. It replaces a waiting copy, into whose arrays (or a spare's) it is copied."""
        lent = self.waiting if self.waiting is not None else self._spare
        self.waiting, self._spare = snapshot(state, lent), None

    def started(self) -> float:
        return self.clock()

    def wrote(self, started: float, size: int, state: State) -> None:
        """``state``, a checkpoint of ``size`` bytes, was written from ``started`` (:meth:`started`) to now. A waiting
        copy it replaces unwritten lends its arrays to the next; the waiting copy itself, once written, is the
        committed state and is never lent."""
        self._ended = self.clock()
        self._cost, self._size = self._ended - started, size
        self._spare = self.waiting if self.waiting is not state else None
        self.waiting = None

    def drop(self) -> None:
        """A write failed: the waiting copy goes (the run's files go back to the last checkpoint written)."""
        self.waiting = None
