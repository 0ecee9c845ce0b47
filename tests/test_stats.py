"""Bootstrap intervals, censored medians and step-curve bands: known inputs give known answers."""

from __future__ import annotations

import numpy as np
import pytest

from llm_policy_gen.stats import Interval, bootstrap_ci, median_censored, quartile_band, step_curves


def test_constant_scores_give_a_zero_width_interval() -> None:
    ci = bootstrap_ci([475.0, 475.0, 475.0, 475.0, 475.0])
    assert (ci.estimate, ci.low, ci.high, ci.n) == (475.0, 475.0, 475.0, 5)


def test_two_values_give_the_exact_percentile_interval() -> None:
    # Resampled means of {0, 10} with n=2 are 0, 5, 10 with probabilities 1/4, 1/2, 1/4:
    # the 2.5 % and 97.5 % quantiles are exactly 0 and 10.
    ci = bootstrap_ci([0.0, 10.0])
    assert (ci.estimate, ci.low, ci.high) == (5.0, 0.0, 10.0)


def test_single_value_interval_is_that_value() -> None:
    assert bootstrap_ci([3.5]) == Interval(3.5, 3.5, 3.5, 1)


def test_large_sample_matches_the_normal_interval() -> None:
    x = np.random.default_rng(1).normal(10.0, 2.0, 400)
    ci = bootstrap_ci(x)
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert ci.estimate == pytest.approx(x.mean())
    assert ci.low == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert ci.high == pytest.approx(x.mean() + half, abs=0.1 * half)


def test_seeded_and_documented_defaults() -> None:
    x = [120.0, 310.5, 500.0, 87.25, 433.0]
    a, b = bootstrap_ci(x), bootstrap_ci(x, seed=0, n_resamples=10_000, confidence=0.95)
    assert a == b
    y = np.random.default_rng(2).uniform(0, 500, 30)
    assert bootstrap_ci(y, seed=1) != bootstrap_ci(y, seed=0)
    assert a.low < a.estimate < a.high
    narrow = bootstrap_ci(x, confidence=0.5)
    assert a.low < narrow.low < narrow.high < a.high


def test_nans_are_dropped_and_empty_input_is_not_a_number() -> None:
    assert bootstrap_ci([1.0, float("nan"), 1.0]).n == 2
    empty = bootstrap_ci([])
    assert empty.n == 0 and np.isnan(empty.estimate) and empty.format() == "n/a"
    assert bootstrap_ci([0.0, 10.0]).format(1) == "5.0 [0.0, 10.0]"


@pytest.mark.parametrize("kwargs", [{"confidence": 1.0}, {"confidence": 0.0}, {"n_resamples": 0}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], **kwargs)  # type: ignore[arg-type]


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
