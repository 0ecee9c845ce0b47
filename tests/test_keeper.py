"""The keeper: K candidates on shared test seeds, paired confirmation on fresh seeds, and state that can be saved."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from llm_policy_gen.collect import Collector, Episode, PolicyLike
from llm_policy_gen.envs import get_spec
from llm_policy_gen.keeper import Keeper, SeedPlan, Verdict, t_critical
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint


class CountingCollector(Collector):
    """A real collector that records each call (the policies it ran and on which seeds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, int, list[int]]] = []

    def collect(self, policy: PolicyLike, seeds: Sequence[int], epsilon: float = 0.0,
                rng: np.random.Generator | None = None, iteration: int = 0) -> list[Episode]:
        self.calls.append(("collect", 1, list(seeds)))
        return super().collect(policy, seeds, epsilon, rng, iteration)

    def collect_many(self, policies: Sequence[PolicyLike], seeds: Sequence[int], iteration: int = 0
                     ) -> list[list[Episode]]:
        self.calls.append(("collect_many", len(policies), list(seeds)))
        return super().collect_many(policies, seeds, iteration)


def cartpole(test_start: int = 3, test_max: int = 5, rise_every: int = 2, confirm: int = 0,
             seed: int = 0) -> tuple[Any, CountingCollector, Keeper]:
    spec = get_spec("CartPole-v1")
    c = CountingCollector(spec, workers=1)
    k = Keeper(c, spec.default_table(), seed=seed, test_start=test_start, test_max=test_max, rise_every=rise_every,
               confirm_episodes=confirm, confirm_z=1.0)
    return spec, c, k


def lean(spec: Any, angle_weight: float, omega_weight: float) -> np.ndarray:
    """Push right when angle_weight * angle + omega_weight * omega > 0 (bin centres)."""
    centres = spec.observation_discretizer().centers()
    return (centres[:, 2] * angle_weight + centres[:, 3] * omega_weight > 0).astype(np.int64)


def test_schedule_rises_from_start_to_max() -> None:
    _, c, k = cartpole()
    assert [k.n_test(i) for i in range(1, 9)] == [3, 3, 4, 4, 5, 5, 5, 5]
    assert k.seeds(3) == k.seeds(1) + [k.seeds(3)[-1]]  # the added seed extends the same list
    plan = SeedPlan(2)
    assert k.seeds(1) == [SeedPlan(0).test(j) for j in range(3)]
    ranges = plan.ranges()
    assert len(set(ranges.values())) == 4 and ranges["test"] == 2_010_000 and ranges["confirm"] == 2_600_000
    c.close()


def test_better_candidate_is_adopted_worse_is_reverted() -> None:
    spec, c, k = cartpole()
    good = spec.prior_table()
    v = k.judge([good], 1)
    assert v.accepted and v.chosen == 0 and np.array_equal(k.best_table, good) and k.best_iteration == 1
    assert v.chosen_mean is not None and v.chosen_mean > 100 and len(v.test_returns[0]) == 3
    assert v.confirmation is None  # confirm_episodes = 0
    v2 = k.judge([spec.default_table()], 2)
    assert not v2.accepted and np.array_equal(k.best_table, good) and k.best_iteration == 1
    assert v2.best_test_mean == v.chosen_mean
    assert k.test_mean(2) == v.chosen_mean
    c.close()


def test_candidate_equal_to_the_incumbent_is_not_run_and_best_is_rescored_on_added_seeds() -> None:
    spec, c, k = cartpole()
    k.judge([spec.prior_table()], 1)
    c.calls.clear()
    v = k.judge([spec.prior_table()], 3)  # 4 seeds now: the incumbent runs only the added one
    assert not v.accepted and v.chosen == 0
    assert len(v.episodes) == 1 and [e.seed for e in v.episodes] == [k.seeds(3)[-1]]
    assert c.calls == [("collect", 1, [k.seeds(3)[-1]])]
    expected = c.evaluate(spec.prior_table(), k.seeds(3)).mean
    assert v.best_test_mean == expected == v.test_means[0]
    c.close()


def test_k_candidates_run_on_the_same_seeds_in_one_pass() -> None:
    spec, c, k = cartpole(confirm=0)
    prior = spec.prior_table()
    other = lean(spec, 1.0, 1.0)
    assert not np.array_equal(other, prior)
    candidates: list[np.ndarray | None] = [prior, prior.copy(), spec.default_table(), None, other]
    v = k.judge(candidates, 1)
    seeds = k.seeds(1)
    # The incumbent runs its 3 seeds once; the two distinct new tables share one batched pass on the same seeds.
    assert c.calls == [("collect", 1, seeds), ("collect_many", 2, seeds)]
    assert len(v.episodes) == 3 + 2 * 3
    assert sorted(e.seed for e in v.episodes) == sorted(seeds * 3)
    assert v.test_returns[0] == v.test_returns[1] and v.test_means[0] == v.test_means[1]
    assert v.test_means[2] == v.best_test_mean and v.test_returns[3] == [] and v.test_means[3] is None
    separately = [c.evaluate(t, seeds).returns.tolist() for t in (prior, other)]
    assert [v.test_returns[0], v.test_returns[4]] == separately
    best = max(range(5), key=lambda i: (v.test_means[i] if v.test_means[i] is not None else -1e9, -i))
    assert v.chosen == best and v.accepted
    c.close()


def test_no_valid_candidate_keeps_the_incumbent() -> None:
    spec, c, k = cartpole()
    v = k.judge([None, None], 1)
    assert v.chosen is None and not v.accepted and v.test_means == [None, None] and v.chosen_mean is None
    assert len(v.episodes) == 3 and np.array_equal(k.best_table, spec.default_table())
    c.close()


def test_confirmation_on_fresh_seeds_adopts_a_real_improvement() -> None:
    spec, c, k = cartpole(confirm=6)
    v = k.judge([spec.prior_table()], 1)
    conf = v.confirmation
    assert conf is not None and conf.passed and v.accepted
    assert conf.seeds == [SeedPlan(0).confirm(j) for j in range(6)]
    assert conf.diff_mean == pytest.approx(np.mean(np.subtract(conf.challenger_returns, conf.incumbent_returns)))
    assert len(v.episodes) == 3 + 3 + 2 * 6
    d = conf.to_dict()
    assert d["passed"] is True and d["challenger_mean"] > d["incumbent_mean"]
    # The next confirmation uses new fresh seeds.
    v2 = k.judge([lean(spec, 1.0, 1.0)], 2)
    if v2.confirmation is not None:
        assert v2.confirmation.seeds[0] == SeedPlan(0).confirm(6)
    c.close()


# ----------------------------------------------------------------------------------- scripted returns
class ScriptedCollector:
    """Returns chosen per (table, seed), so that a winner's curse can be staged exactly. Only the two methods the
    keeper calls; every episode is one step whose reward is the scripted return."""

    def __init__(self, returns: Callable[[np.ndarray, int], float]) -> None:
        self.returns = returns
        self.episodes = 0

    def _run(self, table: np.ndarray, seeds: Sequence[int], iteration: int) -> list[Episode]:
        self.episodes += len(seeds)
        return [Episode(int(s), np.zeros(1, np.int64), np.zeros(1, np.int64),
                        np.array([self.returns(np.asarray(table), int(s))]), True, False, iteration) for s in seeds]

    def collect(self, policy: Any, seeds: Sequence[int], epsilon: float = 0.0, rng: Any = None,
                iteration: int = 0) -> list[Episode]:
        return self._run(policy, seeds, iteration)

    def collect_many(self, policies: Sequence[Any], seeds: Sequence[int], iteration: int = 0) -> list[list[Episode]]:
        return [self._run(p, seeds, iteration) for p in policies]


INCUMBENT = np.zeros(4, dtype=np.int64)
LUCKY = np.array([1, 0, 0, 0])
"""Wins on the test seeds, loses on every fresh seed."""
GOOD = np.array([2, 0, 0, 0])
"""Better on every seed."""


def staged(table: np.ndarray, seed: int) -> float:
    confirm = seed >= SeedPlan(0).confirm(0)
    if table[0] == 1:
        return 0.0 if confirm else 20.0
    if table[0] == 2:
        return 15.0 + seed % 3
    return 10.0 + seed % 2


def scripted(confirm: int = 5, z: float = 1.0) -> tuple[ScriptedCollector, Keeper]:
    col = ScriptedCollector(staged)
    return col, Keeper(col, INCUMBENT, seed=0, test_start=3, test_max=5, rise_every=1,  # type: ignore[arg-type]
                       confirm_episodes=confirm, confirm_z=z)


def test_a_test_seed_winner_that_loses_the_paired_confirmation_is_not_adopted() -> None:
    col, k = scripted(confirm=5)
    v = k.judge([LUCKY], 1)
    assert v.chosen == 0 and v.test_means[0] == 20.0 > v.best_test_mean
    conf = v.confirmation
    assert conf is not None and not conf.passed and not v.accepted
    assert conf.challenger_returns == [0.0] * 5 and conf.diff_mean < 0
    assert np.array_equal(k.best_table, INCUMBENT) and k.best_iteration == 0
    # The incumbent's returns on the confirmation seeds are kept (the state holds them; nothing re-runs them).
    kept = dict(zip(k.state_dict()["best_seeds"].tolist(), k.state_dict()["best_returns"].tolist(), strict=True))
    assert {s: kept[s] for s in conf.seeds} == dict(zip(conf.seeds, conf.incumbent_returns, strict=True))
    assert len(v.episodes) == 3 + 3 + 2 * 5 and col.episodes == 16
    # A really better table is confirmed on the next fresh seeds and adopted, with its returns on those seeds.
    v2 = k.judge([GOOD], 2)
    assert v2.accepted and v2.confirmation is not None and v2.confirmation.passed
    assert v2.confirmation.seeds == [SeedPlan(0).confirm(5 + j) for j in range(5)]
    assert np.array_equal(k.best_table, GOOD) and k.best_iteration == 2
    kept = dict(zip(k.state_dict()["best_seeds"].tolist(), k.state_dict()["best_returns"].tolist(), strict=True))
    assert all(kept[s] == staged(GOOD, s) for s in k.seeds(2) + v2.confirmation.seeds)


def test_confirmation_needs_z_standard_errors() -> None:
    def noisy(table: np.ndarray, seed: int) -> float:
        if table[0] == 1:  # on fresh seeds: +1 on average, but with a spread of 10 -> mean < 1 SE
            return 10.0 + (11.0 if seed % 2 else -9.0) if seed >= SeedPlan(0).confirm(0) else 30.0
        return 10.0

    k = Keeper(ScriptedCollector(noisy), INCUMBENT, seed=0, test_start=3, test_max=3,  # type: ignore[arg-type]
               confirm_episodes=4, confirm_z=1.0)
    v = k.judge([LUCKY], 1)
    assert v.confirmation is not None and v.confirmation.diff_mean == 1.0 and v.confirmation.diff_se > 1.0
    assert not v.accepted
    k0 = Keeper(ScriptedCollector(noisy), INCUMBENT, seed=0, test_start=3, test_max=3,  # type: ignore[arg-type]
                confirm_episodes=4, confirm_z=0.0)
    assert k0.judge([LUCKY], 1).accepted  # z = 0: a positive paired mean suffices


def test_the_critical_value_is_students_for_the_degrees_of_freedom() -> None:
    # Two-sided 5% table values (one-sided 2.5%, z = 1.959964): 1, 5 and 30 degrees of freedom.
    for dof, table in ((1, 12.7062), (5, 2.5706), (30, 2.0423)):
        assert abs(t_critical(1.959964, dof) - table) < 1e-3
    assert t_critical(2.0, 10**6) == 2.0  # the normal limit


def test_a_small_confirmation_needs_students_critical_value() -> None:
    def small(table: np.ndarray, seed: int) -> float:  # on fresh seeds the differences are 2, 4, 6: z 3.5, t(2) 4.5
        if table[0] == 1:
            return 10.0 + 2.0 * (1 + (seed - SeedPlan(0).confirm(0)) % 3) if seed >= SeedPlan(0).confirm(0) else 30.0
        return 10.0

    k = Keeper(ScriptedCollector(small), INCUMBENT, seed=0, test_start=1, test_max=1,  # type: ignore[arg-type]
               confirm_episodes=3, confirm_batches=1, confirm_z=2.0)
    conf = k.judge([LUCKY], 1).confirmation
    assert conf is not None and conf.diff_mean == 4.0 and conf.diff_se == pytest.approx(2 / 3**0.5)
    assert conf.diff_mean / conf.diff_se > 2.0 and conf.critical == pytest.approx(4.5265, abs=1e-3)
    assert not conf.passed and conf.to_dict()["critical"] == conf.critical


def test_equal_differences_pass_only_where_the_run_has_seen_no_spread() -> None:
    """Two equal differences have a standard error of 0; a run whose earlier confirmations varied lends its variance."""
    def world(spread: float) -> Any:
        def returns(table: np.ndarray, seed: int) -> float:
            c = seed - SeedPlan(0).confirm(0)
            if table[0] == 1:  # the first challenger: differences +-spread about -1 (rejected, but pooled)
                return 9.0 + (spread if c % 2 else -spread) if c >= 0 else 30.0
            if table[0] == 2:  # the second: +1 on both fresh seeds
                return 11.0 if c >= 0 else 30.0
            return 10.0
        return returns

    verdicts = {}
    for spread in (0.0, 5.0):
        k = Keeper(ScriptedCollector(world(spread)), INCUMBENT, seed=0, test_start=1,  # type: ignore[arg-type]
                   test_max=1, confirm_episodes=2, confirm_batches=1, confirm_z=2.0)
        assert not k.judge([LUCKY], 1).accepted
        assert k.pool_dof == 1 and k.pool_ss == pytest.approx(2 * spread**2)
        v = k.judge([GOOD], 2)
        assert v.confirmation is not None and v.confirmation.diff_mean == 1.0
        verdicts[spread] = v.accepted
        restored = Keeper(ScriptedCollector(world(spread)), INCUMBENT, seed=0)  # type: ignore[arg-type]
        restored.load_state_dict(k.state_dict())
        assert (restored.pool_ss, restored.pool_dof) == (k.pool_ss, k.pool_dof)
    assert verdicts == {0.0: True, 5.0: False}


def test_without_confirmation_the_strict_improvement_rule_holds() -> None:
    col, k = scripted(confirm=0)
    v = k.judge([LUCKY], 1)  # wins on the test seeds: adopted at once, no fresh seeds
    assert v.accepted and v.confirmation is None and len(v.episodes) == 6 and col.episodes == 6
    same_score = np.array([1, 1, 0, 0])  # a different table with the same test returns as the incumbent
    assert staged(same_score, 10_000) == staged(LUCKY, 10_000)
    v2 = k.judge([same_score], 2)
    assert v2.test_means[0] == v2.best_test_mean and not v2.accepted  # equal is not better
    assert np.array_equal(k.best_table, LUCKY)


def test_state_round_trip_gives_identical_future_verdicts(tmp_path: Any) -> None:
    spec = get_spec("CartPole-v1")
    tables = [spec.prior_table(), lean(spec, 1.0, 1.0), lean(spec, 1.0, 0.05), lean(spec, 1.0, 0.02)]

    def make() -> tuple[Collector, Keeper]:
        col = Collector(spec, workers=1)
        return col, Keeper(col, spec.default_table(), seed=1, test_start=2, test_max=4, rise_every=1,
                           confirm_episodes=4)

    ca, a = make()
    a.judge([tables[0]], 1)
    save_checkpoint(tmp_path / "k.npz", {"keeper": a.state_dict()})
    cb, b = make()
    b.load_state_dict(load_checkpoint(tmp_path / "k.npz")["keeper"])
    assert np.array_equal(b.best_table, a.best_table) and b.best_iteration == a.best_iteration
    assert b.confirm_next == a.confirm_next > 0 and b.test_mean(1) == a.test_mean(1)

    def summary(v: Verdict) -> tuple[Any, ...]:
        conf = v.confirmation.to_dict() if v.confirmation is not None else None
        return (v.test_means, v.test_returns, v.chosen, v.best_test_mean, v.accepted, conf,
                [(e.seed, e.ret) for e in v.episodes])

    confirmed = 0
    for it, cands in ((2, [tables[1], tables[2]]), (3, [tables[3], tables[1]]), (4, [tables[0], tables[3]])):
        va, vb = a.judge(cands, it), b.judge(cands, it)
        assert summary(va) == summary(vb)
        assert np.array_equal(a.best_table, b.best_table) and a.state_dict()["confirm_next"] == b.confirm_next
        confirmed += va.confirmation is not None
    assert confirmed >= 1  # the restored keeper confirms on the same fresh seeds
    ca.close()
    cb.close()


def test_a_challenger_with_mean_zero_beats_a_negative_incumbent() -> None:
    col = ScriptedCollector(lambda table, seed: 0.0 if table[0] == 1 else -1.0)
    k = Keeper(col, INCUMBENT, seed=0, test_start=3, test_max=3, confirm_episodes=0)  # type: ignore[arg-type]
    v = k.judge([LUCKY], 1)
    assert v.test_means == [0.0] and v.best_test_mean == -1.0
    assert v.accepted and np.array_equal(k.best_table, LUCKY)


def test_a_challenger_with_a_negative_mean_beats_a_worse_incumbent() -> None:
    col = ScriptedCollector(lambda table, seed: -0.5 if table[0] == 1 else -1.0)
    k = Keeper(col, INCUMBENT, seed=0, test_start=3, test_max=3, confirm_episodes=0)  # type: ignore[arg-type]
    assert k.judge([LUCKY], 1).accepted


# ----------------------------------------------------------------------------------- ties at the ceiling
LOW = np.array([3, 0, 0, 0])
CAPPED = np.array([4, 0, 0, 0])
"""The incumbent of the tie tests scores the cap on the test seeds only; CAPPED scores it everywhere."""


def capped(table: np.ndarray, seed: int) -> float:
    if table[0] == 3:
        return 10.0
    if table[0] == 4:
        return 500.0
    return 500.0 if seed < SeedPlan(0).confirm(0) else 400.0 + seed % 7


def test_a_tie_at_the_highest_return_seen_is_confirmed_and_adopted_when_it_holds() -> None:
    col = ScriptedCollector(capped)
    k = Keeper(col, INCUMBENT, seed=0, test_start=3, test_max=3, confirm_episodes=5)  # type: ignore[arg-type]
    v = k.judge([LOW], 1)  # a return below the cap has been seen: the landscape is not flat
    assert not v.accepted and v.confirmation is None
    v = k.judge([CAPPED], 2)
    assert v.test_means[0] == v.best_test_mean == 500.0
    assert v.confirmation is not None and v.confirmation.passed and v.accepted
    assert np.array_equal(k.best_table, CAPPED)


def test_ties_are_not_confirmed_on_a_flat_landscape_nor_below_the_ceiling_nor_without_confirmation() -> None:
    flat = ScriptedCollector(lambda table, seed: -200.0)
    k = Keeper(flat, INCUMBENT, seed=0, test_start=3, test_max=3, confirm_episodes=5)  # type: ignore[arg-type]
    assert not k.judge([GOOD], 1).accepted and flat.episodes == 6  # no confirmation ran

    def below(table: np.ndarray, seed: int) -> float:  # LOW is lucky: 80 on the test seeds, 0 on fresh ones
        return (80.0 if seed < SeedPlan(0).confirm(0) else 0.0) if table[0] == 3 else 50.0

    k = Keeper(ScriptedCollector(below), INCUMBENT, seed=0, test_start=3, test_max=3,  # type: ignore[arg-type]
               confirm_episodes=5)
    assert not k.judge([LOW], 1).accepted  # 80 seen: 50 is not the ceiling
    v = k.judge([GOOD], 2)
    assert v.test_means[0] == v.best_test_mean and v.confirmation is None and not v.accepted
    col = ScriptedCollector(capped)
    k = Keeper(col, INCUMBENT, seed=0, test_start=3, test_max=3, confirm_episodes=0)  # type: ignore[arg-type]
    k.judge([LOW], 1)
    assert not k.judge([CAPPED], 2).accepted  # without confirmation: a strictly higher test mean only
