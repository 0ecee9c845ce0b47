"""Censored medians and step-curve bands: known inputs give known answers (intervals: test_stats_rliable.py)."""

from __future__ import annotations

import numpy as np

from llm_policy_gen.plotting.stats import median_censored, quartile_band, step_curves


def test_median_counts_unsolved_runs_as_never() -> None:
    assert median_censored([100, 300, 200]) == 200
    assert median_censored([100, None, 200]) == 200
    assert median_censored([100, None, None]) is None
    assert median_censored([100, 200, None, None]) is None  # the median lies beyond the budget
    assert median_censored([]) is None


def test_step_curves_hold_values_and_start_with_nan() -> None:
    grid = np.array([0.0, 5.0, 10.0, 15.0, 30.0])
    out = step_curves([([5, 15], [1.0, 2.0]), ([0, 10], [3.0, 4.0]), ([], [])], grid)
    np.testing.assert_array_equal(out[0], [np.nan, 1.0, 1.0, 2.0, 2.0])
    np.testing.assert_array_equal(out[1], [3.0, 3.0, 4.0, 4.0, 4.0])
    assert np.isnan(out[2]).all()


def test_quartile_band_ignores_missing_curves() -> None:
    s = np.array([[1.0, np.nan], [2.0, np.nan], [3.0, 7.0], [4.0, np.nan], [5.0, np.nan]])
    med, q1, q3 = quartile_band(s)
    np.testing.assert_allclose([med[0], q1[0], q3[0]], [3.0, 2.0, 4.0])
    np.testing.assert_allclose([med[1], q1[1], q3[1]], [7.0, 7.0, 7.0])
    med, _, _ = quartile_band(np.full((2, 3), np.nan))
    assert np.isnan(med).all()
