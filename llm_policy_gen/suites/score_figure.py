"""The suite's figure: each method's normalised score per task (0: the uniform random policy, 1: gymnasium's
threshold, else the reference the suite cites), rliable's IQM with its 95 % interval over 5 or more seeds (the median
alone, without a bar, below that), only on tasks with such a yardstick. Drawn from the records as the tables are; a
PNG the test of the published figures leaves out (its bytes depend on matplotlib's version)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..plotting.figure import plt, save_figure
from .summary import Summary

__all__ = ["FIGURE_METHODS", "normalised_figure"]

FIGURE_METHODS = ("offline", "q-learning", "random", "ppo", "ppo-at-offline")
"""The methods drawn (the README's columns and the table methods at the same budget), where they have records."""


def normalised_figure(rows: Sequence[Summary], out: Path, methods: Sequence[str] = FIGURE_METHODS) -> Path:
    """Draw the figure into ``out`` (a PNG)."""
    tasks = list(dict.fromkeys(r.task.env_id for r in rows if r.normalised is not None))
    drawn = [m for m in methods if any(r.method == m and r.normalised is not None for r in rows)]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(tasks) + 1.4), dpi=110)
    step = 0.8 / max(len(drawn), 1)
    for j, method in enumerate(drawn):
        ys, xs, lo, hi = [], [], [], []
        for i, task in enumerate(tasks):
            row = next((r for r in rows if r.task.env_id == task and r.method == method), None)
            if row is None or row.normalised is None:
                continue
            iv = row.norm_iqm
            y = i - 0.4 + step * (j + 0.5)
            if iv is None:
                ax.plot([sorted(row.normalised)[len(row.normalised) // 2]], [y], "o", mfc="none",
                        color=f"C{j}")
                continue
            ys.append(y)
            xs.append(iv.estimate)
            lo.append(iv.estimate - iv.low)
            hi.append(iv.high - iv.estimate)
        ax.errorbar(xs, ys, xerr=[lo, hi], fmt="o", ms=4, capsize=2, color=f"C{j}", label=method)
    ax.axvline(0.0, color="0.6", lw=0.8)
    ax.axvline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_yticks(range(len(tasks)))
    ax.set_yticklabels(tasks, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("normalised score: 0 uniform random policy, 1 gymnasium's threshold or the cited reference "
                  "(IQM, 95% CI)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, out)
