"""Pooled figures across tasks, drawn only over a task set every method in the figure ran.

:func:`pooled` compares two methods: the tasks both ran with a normalised score (gymnasium's threshold or a cited
reference) on every seed the task is judged on; of those, the tasks judged on the most common seed set (the long
tasks' 0-4 are not pooled with 0-9, so no seed is dropped silently); rliable's IQM of the normalised scores over that
``seeds x tasks`` array with its stratified bootstrap interval (seeds resampled within each task).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..plotting.stats import Interval, iqm_interval
from .summary import MIN_SEEDS, Summary

__all__ = ["Pooled", "pooled"]


@dataclass(frozen=True)
class Pooled:
    methods: tuple[str, str]
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    intervals: tuple[Interval, Interval]


def pooled(rows: Sequence[Summary], a: str, b: str) -> Pooled | None:
    """``a`` against ``b`` over their common task set (None: fewer than 2 tasks or 5 seeds in common)."""
    by = {(r.task.key, r.method): r for r in rows}
    common = []
    for r in rows:
        if r.method != a or (r.task.key, b) not in by:
            continue
        other = by[(r.task.key, b)]
        full = tuple(r.task.seeds)
        if r.normalised is not None and other.normalised is not None and r.seeds == full == other.seeds:
            common.append((r, other))
    if not common:
        return None
    seeds = Counter(r.seeds for r, _ in common).most_common(1)[0][0]
    chosen = [(x, y) for x, y in common if x.seeds == seeds]
    if len(chosen) < 2 or len(seeds) < MIN_SEEDS:
        return None

    def interval(k: int) -> Interval:
        cols = [pair[k].normalised for pair in chosen]
        return iqm_interval(np.array(cols, dtype=np.float64).T)

    return Pooled(methods=(a, b), tasks=tuple(x.task.env_id for x, _ in chosen), seeds=seeds,
                  intervals=(interval(0), interval(1)))
