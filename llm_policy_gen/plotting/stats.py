"""Statistics of a comparison (drawn by the figures, tabled by the sweep and the report): interquartile means with
stratified bootstrap intervals (rliable), normalised scores, medians with censoring, interquartile bands.

A backend's final score over seeds is reported as rliable's **interquartile mean** (Agarwal et al., NeurIPS 2021:
the mean of the middle 50 % of the runs, ``rliable.metrics.aggregate_iqm``) with a **95 % stratified bootstrap
interval** (``rliable.library.get_interval_estimates``, percentile method: runs resampled with replacement within
each task), :func:`iqm_interval`. Defaults: 2,000 resamples, seed 0, so the same scores always give the same
interval: rliable 1.2 draws its resamples from numpy's global generator (``StratifiedBootstrap.update_indices`` calls
``np.random.choice``) whatever ``random_state`` says, so :func:`iqm_interval` seeds that generator for the call and
puts its state back afterwards. With few seeds (5) the interval is narrow-biased -- the bootstrap cannot see
variation the seeds did not show -- and a paper should say so.

Scores are **normalised** where the task has a goal (:func:`normalized`): ``(return - R) / (goal - R)``, with ``R``
the uniform random policy's return (:mod:`llm_policy_gen.sweep.random_baseline`, never the ``random`` backend, which is
a random search), so 0 is acting at random and 1 is the goal. Ratios of returns are never reported: a ratio of two
negative returns means nothing.

rliable (and its ``arch``, ``scipy``, ``pandas`` and ``statsmodels``) is imported only when an interval is asked for.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "iqm_interval", "iqm_curve", "performance_profile", "normalized", "median_censored",
           "step_curves", "quartile_band"]

DEFAULT_RESAMPLES = 2_000
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


def iqm_interval(
    scores: Sequence[float] | np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    reps: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """rliable's interquartile mean of ``scores`` and its stratified bootstrap interval (module docstring).

    ``scores``: one score per run (a task's seeds), or a ``(runs, tasks)`` array; runs with a NaN are dropped."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps!r}")
    x = np.asarray(scores, dtype=np.float64)
    x = x.reshape(-1, 1) if x.ndim <= 1 else x
    x = x[np.isfinite(x).all(axis=1)]
    if x.shape[0] == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, confidence)
    point, interval = _rliable_estimate(x, lambda s: np.array([float(_iqm(s))]), confidence, reps, seed)
    return Interval(float(point[0]), float(interval[0, 0]), float(interval[1, 0]), int(x.shape[0]), confidence)


def _iqm(scores: np.ndarray, axis: int | None = None) -> np.ndarray:
    """rliable's ``aggregate_iqm`` (scipy's ``trim_mean``, a quarter cut from each end), over all values or along
    ``axis``, computed here: scipy's per-call checks cost more than the mean in a 2,000-resample bootstrap."""
    x = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1) if axis is None else np.asarray(scores), axis=0 if
                axis is None else axis)
    n = x.shape[0 if axis is None else axis]
    cut = int(0.25 * n)
    return np.asarray(np.take(x, np.arange(cut, n - cut), axis=0 if axis is None else axis).mean(
        axis=0 if axis is None else axis))


def _rliable_estimate(x: np.ndarray, func: Callable[[np.ndarray], np.ndarray], confidence: float, reps: int,
                      seed: int) -> tuple[np.ndarray, np.ndarray]:
    """rliable's point estimate of ``func`` over the runs (rows) of ``x`` and its stratified bootstrap interval
    (``(2, n)``), the resamples drawn from numpy's global generator seeded with ``seed`` and put back after."""
    outside = np.random.get_state()  # rliable 1.2 resamples with numpy's global generator (module doc)
    try:
        with warnings.catch_warnings():  # arch warns that RandomState will give way to Generator; rliable passes one
            warnings.simplefilter("ignore", FutureWarning)
            from rliable import library

            np.random.seed(seed)
            point, interval = library.get_interval_estimates(
                {"s": x}, func, reps=reps, confidence_interval_size=confidence,
                random_state=np.random.RandomState(seed))
    finally:
        np.random.set_state(outside)
    return np.asarray(point["s"], dtype=np.float64), np.asarray(interval["s"], dtype=np.float64)


def iqm_curve(samples: np.ndarray, confidence: float = DEFAULT_CONFIDENCE, reps: int = 500,
              seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``samples`` (runs x points, e.g. :func:`step_curves` on a grid): rliable's interquartile mean
    over the runs and its stratified bootstrap interval (the runs resampled together, as rliable's
    sample-efficiency curves do). Returns ``(iqm, low, high)``; a column where a run has no value is NaN."""
    s = np.asarray(samples, dtype=np.float64)
    out = np.full((3, s.shape[1]), np.nan)
    have = np.isfinite(s).all(axis=0)
    if s.shape[0] == 0 or not have.any():
        return out[0], out[1], out[2]
    x = s[:, None, have]  # one task whose runs carry every point: a resample keeps a run's whole curve
    point, interval = _rliable_estimate(
        x, lambda r: _iqm(r[:, 0, :], axis=0), confidence, reps, seed)
    out[0, have], out[1, have], out[2, have] = point, interval[0], interval[1]
    return out[0], out[1], out[2]


def performance_profile(scores: np.ndarray, taus: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
                        reps: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rliable's performance profile (score distribution) of ``scores`` (runs x tasks, normalised): the fraction of
    runs above each ``tau``, with its stratified bootstrap interval (runs resampled within each task). Returns
    ``(fraction, low, high)``."""
    x = np.asarray(scores, dtype=np.float64)
    t = np.asarray(taus, dtype=np.float64)
    # rliable's score_distributions (np.mean(scores > tau) for each tau), taken for every tau at once
    point, interval = _rliable_estimate(x, lambda r: (r.reshape(-1, 1) > t).mean(axis=0), confidence, reps, seed)
    return point, interval[0], interval[1]


def normalized(returns: Sequence[float] | np.ndarray, random_return: float | Sequence[float] | np.ndarray,
               goal: float | None) -> np.ndarray | None:
    """``(return - random_return) / (goal - random_return)`` elementwise (``random_return`` one number or one per
    return); None where there is no goal, or a goal the random policy already reaches."""
    if goal is None:
        return None
    r = np.asarray(returns, dtype=np.float64)
    base = np.broadcast_to(np.asarray(random_return, dtype=np.float64), r.shape)
    span = float(goal) - base
    if not np.all(span > 0):
        return None
    return (r - base) / span


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


def step_curves(curves: Sequence[tuple[Sequence[float], Sequence[float]]], grid: np.ndarray,
                until_shortest: bool = False) -> np.ndarray:
    """Sample step curves ``(x, y)`` on ``grid``: each value holds until the next point and after the last one;
    before a curve's first point the value is NaN. ``until_shortest``: every curve is NaN past the smallest last x
    of them all, so that a median over the curves ends where the shortest run ended (beyond it fewer than all the
    runs have data, and no run is drawn past its own end). Returns ``(n_curves, grid.size)``."""
    out = np.full((len(curves), grid.size), np.nan)
    ends = [max(float(x) for x in xs) for xs, _ in curves if len(xs)]
    inside = grid <= min(ends) if until_shortest and ends else np.ones(grid.size, dtype=bool)
    for i, (xs, ys) in enumerate(curves):
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)
        if x.size == 0:
            continue
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        idx = np.searchsorted(x, grid, side="right") - 1
        ok = (idx >= 0) & inside
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
