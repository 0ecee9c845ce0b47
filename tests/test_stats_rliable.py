"""Statistics through rliable (issue 32, item 3's statistics): interquartile means with stratified bootstrap
intervals, scores normalised by the uniform random policy and the goal, and ``compare``/``report`` showing them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from rliable import library, metrics

from llm_policy_gen.cli import main
from llm_policy_gen.envs import get_spec
from llm_policy_gen.plotting.stats import DEFAULT_RESAMPLES, Interval, iqm_curve, iqm_interval, normalized
from llm_policy_gen.sweep.random_baseline import heldout_random_means, heldout_seeds, uniform_random_returns
from llm_policy_gen.sweep.results import backend_stats, read_results


def rliable_own(x: np.ndarray, reps: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    with warnings.catch_warnings():  # arch: RandomState is deprecated in favour of Generator
        warnings.simplefilter("ignore", FutureWarning)
        np.random.seed(seed)  # rliable resamples with numpy's global generator, whatever random_state says
        point, interval = library.get_interval_estimates(
            {"k": x.reshape(-1, 1)}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=reps,
            random_state=np.random.RandomState(seed))
    return float(point["k"][0]), float(interval["k"][0, 0]), float(interval["k"][1, 0])


def test_the_interval_is_rliables_own_on_known_inputs() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 80.0])
    ci = iqm_interval(x)
    assert ci.estimate == pytest.approx(4.5)  # the middle half: 3, 4, 5, 6 (the outlier 80 does not count)
    assert (ci.estimate, ci.low, ci.high) == rliable_own(x) and ci.n == 8 and ci.confidence == 0.95
    assert ci.low < ci.estimate < ci.high
    assert ci.estimate == pytest.approx(float(metrics.aggregate_iqm(x.reshape(-1, 1))))
    y = np.array([120.0, 310.5, 500.0, 87.25, 433.0])
    assert (iqm_interval(y, reps=500, seed=3).low, iqm_interval(y, reps=500, seed=3).high) == rliable_own(y, 500, 3)[1:]
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    again = [iqm_interval(y, reps=500, seed=3) for _ in range(3)]  # the same every time, the caller's state untouched
    assert again[0] == again[1] == again[2] and (np.random.get_state()[1] == before).all()
    z = np.random.default_rng(2).uniform(0.0, 500.0, 30)
    assert iqm_interval(z, reps=500, seed=4) != iqm_interval(z, reps=500, seed=3)


def test_constant_single_empty_and_nan_inputs() -> None:
    assert iqm_interval([475.0] * 5) == Interval(475.0, 475.0, 475.0, 5)
    assert iqm_interval([3.5]) == Interval(3.5, 3.5, 3.5, 1)
    assert iqm_interval([1.0, float("nan"), 1.0]).n == 2
    empty = iqm_interval([])
    assert empty.n == 0 and np.isnan(empty.estimate) and empty.format() == "n/a"
    two = iqm_interval([0.0, 10.0])  # resampled IQMs of {0, 10}: 0, 5 or 10
    assert two.format(1) == "5.0 [0.0, 10.0]"


@pytest.mark.parametrize("kwargs", [{"confidence": 1.0}, {"confidence": 0.0}, {"reps": 0}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        iqm_interval([1.0, 2.0], **kwargs)  # type: ignore[arg-type]


def test_scores_are_normalised_from_the_random_policy_to_the_goal() -> None:
    np.testing.assert_allclose(normalized([10.0, 0.0, 5.0], 0.0, 10.0), [1.0, 0.0, 0.5])
    # Negative returns: MountainCar's goal -110, the random policy -200 on both seeds.
    np.testing.assert_allclose(normalized([-110.0, -155.0], [-200.0, -200.0], -110.0), [1.0, 0.5])
    assert normalized([1.0], 0.0, None) is None  # no goal: nothing to normalise by
    assert normalized([1.0], 5.0, 4.0) is None  # the random policy already reaches the goal


def test_the_uniform_random_policy_acts_in_the_environments_own_action_space() -> None:
    spec = get_spec("CartPole-v1")
    seeds = heldout_seeds(0, 5)
    env = gym.make("CartPole-v1")
    expected = []
    for s in seeds:  # by hand: action_space.sample() seeded with the episode's seed
        env.reset(seed=s)
        env.action_space.seed(s)
        ret, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(env.action_space.sample())
            ret, done = ret + float(r), term or trunc
        expected.append(ret)
    np.testing.assert_allclose(uniform_random_returns(spec, seeds), expected)
    assert heldout_random_means(spec, [0], 5) == {0: pytest.approx(np.mean(expected))}
    assert 10.0 < np.mean(expected) < 40.0  # CartPole's random policy: about 22 steps


@pytest.mark.slow
def test_compare_and_report_show_iqm_with_intervals_and_no_ratio(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert main(["compare", "--env", "CartPole-v1", "--backends", "offline,random", "--seeds", "0-2",
                 "--iterations", "1", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    rows = read_results(out / "results.csv")
    baseline = json.loads((out / "random_policy.json").read_text())
    assert baseline["heldout_episodes"] == 100 and "action_space.sample()" in baseline["policy"]
    random = {int(k): v for k, v in baseline["by_seed"].items()}
    assert random == pytest.approx(heldout_random_means(get_spec("CartPole-v1"), [0, 1, 2], 100))
    md = (out / "results.md").read_text()
    assert "IQM held-out return [95% CI]" in md and "IQM normalised score [95% CI]" in md
    for backend in ("offline", "random"):
        mine = [r for r in rows if r.backend == backend]
        returns = np.array([r.best_heldout_mean for r in mine], dtype=float)
        base = np.array([random[r.seed] for r in mine])
        score = (returns - base) / (475.0 - base)
        shown = "| " + " | ".join(["{:.1f} [{:.1f}, {:.1f}]".format(*rliable_own(returns)),
                                   "{:.2f} [{:.2f}, {:.2f}]".format(*rliable_own(score))]) + " |"
        assert shown in md, (shown, md)
    assert "×" not in md and " ratio" not in md.replace("No ratio of returns", "")
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    stats = {s.backend: s for s in backend_stats(rows, None, random, 475.0)}
    for s in stats.values():
        assert s.returns.format(1) in page and s.score is not None and s.score.format(2) in page
    assert "IQM normalised score" in page and "interquartile mean" in page


def test_iqm_curve_is_rliables_iqm_per_point_with_an_interval_around_it() -> None:
    x = np.random.default_rng(0).normal(size=(7, 5)).cumsum(axis=1)
    x[0, 0] = np.nan  # a run without a value there: no estimate at that point
    mid, low, high = iqm_curve(x, reps=50)
    assert np.isnan(mid[0]) and np.isnan(low[0])
    assert np.allclose(mid[1:], [metrics.aggregate_iqm(x[:, j]) for j in range(1, 5)])
    assert np.all(low[1:] <= mid[1:]) and np.all(mid[1:] <= high[1:])
