"""Memory bounds: what a run may allocate for its arrays, checked before anything is written.

A run's large arrays follow from its settings: a table of ``states x actions`` cells (Q values and visit counts), a
language-model learner's rollout buffer and head (``--lm-n-steps``, ``--lm-net-arch``), the arrays a checkpoint
declares. Settings that would ask for more than :func:`memory_limit` -- :data:`MEMORY_CAP` (8 GiB), or half of this
machine's physical memory when that is less -- are refused with one line naming what is too large, how much it needs
and the limit (:func:`check_memory`, a :class:`~llm_policy_gen.errors.UserError`, exit 2), before any run directory
exists, instead of a ``MemoryError`` traceback (or the kernel's OOM killer) mid-run. The estimates are lower bounds:
each counts the arrays named, not every temporary copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import UserError

__all__ = ["MEMORY_CAP", "TABLE_CELL_BYTES", "Need", "memory_limit", "check_memory", "table_need", "gib"]

MEMORY_CAP = 8 * 2**30
"""The most a run's arrays may take, on any machine (a Hopper-v5.rich Q-learner, the largest table shipped, takes
0.24 GiB: 559,872 states x 27 actions)."""

TABLE_CELL_BYTES = 16
"""Bytes per (state, action) cell of a table: the most any mode or proposer keeps per cell (Q-learning's float64 Q
value and int64 visit count)."""

Need = tuple[str, int]
"""What needs memory, in words (``"the table: 1,000,000 states x 729 actions"``), and its bytes."""


def memory_limit() -> int:
    """:data:`MEMORY_CAP`, or half of the physical memory where that is less (unknown: the cap)."""
    try:
        physical = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return MEMORY_CAP
    return min(MEMORY_CAP, physical // 2) if physical > 0 else MEMORY_CAP


def gib(n: int) -> str:
    """``n`` bytes in GiB, for messages."""
    return f"{n / 2**30:,.1f} GiB"


def table_need(n_states: int, n_actions: int) -> Need:
    """The table's cells (:data:`TABLE_CELL_BYTES` each)."""
    return (f"a table of {n_states:,} states x {n_actions:,} actions ({TABLE_CELL_BYTES} bytes per cell)",
            int(n_states) * int(n_actions) * TABLE_CELL_BYTES)


def check_memory(needs: Iterable[Need]) -> None:
    """Refuse (:class:`UserError`) when the ``needs`` together pass :func:`memory_limit`, naming the largest."""
    items = sorted(needs, key=lambda n: -n[1])
    total, limit = sum(b for _, b in items), memory_limit()
    if not items or total <= limit:
        return
    what, largest = items[0]
    others = f" ({gib(total)} in all)" if gib(total) != gib(largest) else ""
    raise UserError(f"{what} needs {gib(largest)} of memory{others}, over the limit of {gib(limit)} (the smaller of "
                    f"{gib(MEMORY_CAP)} and half of this machine's memory)")
