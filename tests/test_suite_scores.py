"""bench/suite_scores.py (the spec's prior scored with zero episodes, kept for bench/lm_features_report.py) and
rliable's IQM curves of llm_policy_gen/plotting/stats.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from run_helpers import bench_module


@pytest.fixture
def scores(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_module(monkeypatch, "suite_scores")


def test_iqm_curve_is_rliables_iqm_per_point_with_an_interval_around_it() -> None:
    from rliable import metrics

    from llm_policy_gen.plotting.stats import iqm_curve

    x = np.random.default_rng(0).normal(size=(7, 5)).cumsum(axis=1)
    x[0, 0] = np.nan  # a run without a value there: no estimate at that point
    mid, low, high = iqm_curve(x, reps=50)
    assert np.isnan(mid[0]) and np.isnan(low[0])
    assert np.allclose(mid[1:], [metrics.aggregate_iqm(x[:, j]) for j in range(1, 5)])
    assert np.all(low[1:] <= mid[1:]) and np.all(mid[1:] <= high[1:])


def test_prior_scores_are_measured_once_and_kept(scores: ModuleType, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    got = scores.priors(tmp_path, [("cartpole", "CartPole-v1", 0)])
    kept = json.loads((tmp_path / "priors.json").read_text())
    assert kept["tasks"]["cartpole"]["table"] == "prior rule" and kept["heldout_episodes"] == 100
    assert got["cartpole"][0] > 100.0  # the prior rule balances the pole for a while; the default table does not
    monkeypatch.setattr(scores, "_prior_means", lambda *_a: pytest.fail("measured again"))
    assert scores.priors(tmp_path, [("cartpole", "CartPole-v1", 0)]) == got
    assert scores.prior_kind("Acrobot-v1") == "no prior: default action 1 everywhere"
