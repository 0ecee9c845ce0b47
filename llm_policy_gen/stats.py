"""Statistics of a comparison: bootstrap confidence intervals, medians with censoring, interquartile bands.

The confidence interval of a backend's mean final score is a **percentile bootstrap**: draw ``n_resamples``
samples of the per-seed scores with replacement (all at once, ``numpy.random.default_rng(seed)``), take each
sample's mean, and report the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those means
(``numpy.quantile``, linear interpolation). Defaults: 10,000 resamples, 95 %, seed 0, so the same scores always give
the same interval. With few seeds (5) the interval is narrow-biased -- the bootstrap cannot see variation the
seeds did not show -- and a paper should say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap_ci", "median_censored", "step_curves", "quartile_band"]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float = DEFAULT_CONFIDENCE

    def format(self, digits: int = 1) -> str:
        if self.n == 0 or not np.isfinite(self.estimate):
            return "n/a"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Interval:
    """Percentile-bootstrap interval of the mean of ``values`` (NaNs dropped); see the module docstring.

    ``statistic`` maps a ``(n_resamples, n)`` array to ``(n_resamples,)`` values (default: the row means).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    stat = statistic or (lambda a: a.mean(axis=1))
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, confidence)
    estimate = float(stat(x[None, :])[0])
    rng = np.random.default_rng(seed)
    samples = x[rng.integers(0, x.size, size=(n_resamples, x.size))]
    dist = stat(samples)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(dist, [tail, 1.0 - tail])
    return Interval(estimate, float(low), float(high), int(x.size), confidence)


def median_censored(values: Sequence[float | None]) -> float | None:
    """Median where ``None`` means "never happened" (counted as +infinity); ``None`` when that median is infinite.

    Used for episodes-to-solve: runs that never solved still count, so a backend solving 2 of 5 seeds has no
    median (it is beyond the budget) rather than the median of its 2 lucky seeds.
    """
    if not values:
        return None
    x = np.array([np.inf if v is None else float(v) for v in values])
    m = float(np.median(x))
    return m if np.isfinite(m) else None


def step_curves(curves: Sequence[tuple[Sequence[float], Sequence[float]]], grid: np.ndarray) -> np.ndarray:
    """Sample step curves ``(x, y)`` on ``grid``: each value holds until the next point and after the last one;
    before a curve's first point the value is NaN. Returns ``(n_curves, grid.size)``."""
    out = np.full((len(curves), grid.size), np.nan)
    for i, (xs, ys) in enumerate(curves):
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)
        if x.size == 0:
            continue
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        idx = np.searchsorted(x, grid, side="right") - 1
        ok = idx >= 0
        out[i, ok] = y[idx[ok]]
    return out


def quartile_band(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column: median, 25th and 75th percentiles over the rows that are not NaN (NaN where none is)."""
    s = np.asarray(samples, dtype=np.float64)
    med = np.full(s.shape[1], np.nan)
    q1, q3 = med.copy(), med.copy()
    have = np.isfinite(s).any(axis=0)
    if have.any():
        q = np.nanpercentile(s[:, have], [50, 25, 75], axis=0)
        med[have], q1[have], q3[have] = q[0], q[1], q[2]
    return med, q1, q3
