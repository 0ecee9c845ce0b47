"""The prompt's evidence as text, dimension by dimension: what a rules answer sees instead of the table.

:func:`evidence_by_dimension` sums the per-state evidence over every dimension but one; :func:`dimension_lines`
gives the statistics of recent episodes per dimension (``--evidence summary``).
"""

from __future__ import annotations

import numpy as np

from ..discretize import BoxDiscretizer, DiscreteDiscretizer, ObservationDiscretizer
from ..formats.base import dim_names, table_dims
from .memory import EpisodeStats, StateEvidence

__all__ = ["num", "stat", "bin_values", "terminal_counts", "evidence_by_dimension", "dimension_lines"]


def num(x: float | None, digits: int = 1) -> str:
    """``x`` with ``digits`` decimals, or ``n/a``."""
    if x is None or not np.isfinite(x):
        return "n/a"
    return f"{x:.{digits}f}"


def stat(x: float) -> str:
    """A statistic with 3 significant digits (a bin centre that is 0 up to rounding shows as 0)."""
    return f"{round(float(x), 9) + 0.0:.3g}"


def bin_values(observation: ObservationDiscretizer) -> tuple[list[np.ndarray], str]:
    """Per table dimension the value of each bin, and what the values are: the bin centres in the observation's
    units for a ``Box`` observation, else the bin indices (grid rows and columns, or the state index)."""
    if isinstance(observation, BoxDiscretizer):
        return [(b[:-1] + b[1:]) / 2 for b in observation.boundaries], "bin centres in the observation's units"
    what = "grid rows and columns" if isinstance(observation, DiscreteDiscretizer) and observation.grid else "bins"
    return [np.arange(n, dtype=np.float64) for n in table_dims(observation)], what


def terminal_counts(ev: StateEvidence) -> np.ndarray:
    """(n_states,) transitions that ended an episode (terminated) from each state."""
    t = ev.transitions
    n = ev.visits.size
    if isinstance(t, np.ndarray):
        return t[:, :, n].sum(axis=1) if t.size else np.zeros(n, dtype=np.int64)
    end = t.next_states == n
    return np.bincount(t.pairs[end] // t.n_actions, weights=t.counts[end], minlength=n)


def evidence_by_dimension(ev: StateEvidence, observation: ObservationDiscretizer) -> list[str]:
    """The evidence summed over every dimension but one: per bin, the share of visits, the mean discounted
    return-to-go of the steps there (G) and the share of episode ends there (rules answers: the table is not
    shown, so the evidence cannot be by state either)."""
    sizes = table_dims(observation)
    total = int(ev.visits.sum())
    if not total:
        return []
    visits = ev.visits.reshape(sizes)
    g_sum = np.nansum(np.where(ev.counts > 0, ev.q_mean * ev.counts, 0.0), axis=1).reshape(sizes)
    g_n = ev.counts.sum(axis=1).reshape(sizes)
    ends = terminal_counts(ev).reshape(sizes)
    n_ends = max(1, int(ends.sum()))
    names = dim_names(observation)
    rows = [f"Summed over the other dimensions ({observation.n_states} states, {total} steps, "
            f"{int(ends.sum())} episode ends); per bin: share of steps, mean G, share of ends:"]
    for j, name in enumerate(names):
        axes = tuple(i for i in range(len(sizes)) if i != j)
        v, gs, gn, e = (a.sum(axis=axes) if axes else a for a in (visits, g_sum, g_n, ends))
        parts = [f"b{b} {100 * v[b] / total:.0f}% G {num(gs[b] / gn[b] if gn[b] else None, 3)} "
                 f"end {100 * e[b] / n_ends:.0f}%" for b in range(sizes[j]) if v[b]]
        rows.append(f"dim {j} {name}: " + " | ".join(parts))
    return rows


def dimension_lines(st: EpisodeStats, observation: ObservationDiscretizer, unit: str) -> list[str]:
    """Per table dimension over every step of the episodes ``st`` describes: mean, std, min..max, mean at the last
    step (in ``unit``, what :func:`bin_values` says the values are)."""
    lines = [f"Per dimension over every step of these episodes ({unit}): mean, std, min..max; mean at the last step:"]
    for j, name in enumerate(dim_names(observation)):
        mean, std, low, high, end = (stat(a[j]) for a in (st.mean, st.std, st.low, st.high, st.last))
        lines.append(f"dim {j} {name}: mean {mean}, std {std}, {low}..{high}; last step {end}")
    return lines
