"""The best-policy keeper: K candidates on shared seeds, a paired confirmation on fresh seeds, revert regressions.

Like Stable-Baselines3's ``EvalCallback``, every candidate is scored on the same **test seeds** as the incumbent (the
kept table): ``test_start`` of them at iteration 1, one more every ``rise_every`` iterations up to ``test_max``; when
the count rises the incumbent is scored on the added seeds too, so both are always compared on equal samples. The K
candidates of an iteration run in one batched pass; identical candidates, and candidates equal to the incumbent, are
scored once.

**Noise-aware adoption.** Picking the best of K candidates on a few test episodes favours the luckiest one: its test
mean is biased upwards (the winner's curse), and on a noisy task (slippery FrozenLake, Blackjack) a table that is
really worse wins often. So the winner on the test seeds (the *challenger*) must be confirmed before it is adopted,
by a sequential paired test on **fresh seeds** (a range never used for anything else, never the held-out ones):
it and the incumbent run on ``confirm_episodes`` new seeds at a time, and after each batch the paired differences
``d_j = R_challenger(s_j) - R_incumbent(s_j)`` seen so far decide. The challenger is adopted as soon as their mean is
positive and at least ``t`` standard errors, ``t`` being Student's critical value at the one-sided level a z-test at
``confirm_z`` has (so ``confirm_z = 2`` means about 2.3% in every case); it is rejected as soon as the mean is not
positive; otherwise another batch runs, up to ``confirm_batches`` batches, after which it is rejected. The fresh
seeds are independent of the selection, so the test is unbiased; pairing removes the variance that seeds alone cause;
the batches spend few episodes on clear cases and more on close ones. ``confirm_episodes = 0`` turns confirmation off
(adopt on a strictly higher test mean, the seed project's rule). Every confirmation episode is counted and joins the
memory, like every test episode.

**Small confirmations** (issue 20: every adoption the suite saw lower the held-out mean by more than 2 standard
errors had been confirmed on 2 to 6 fresh seeds). A standard error estimated from a handful of differences is itself
noisy, and two equal differences give 0. So the test (a) takes Student's critical value for its degrees of freedom
instead of the normal one (with 2 differences and ``confirm_z = 2`` it is 13.9, not 2), and (b) borrows a variance
from the run's earlier confirmations: their pooled within-confirmation variance of the differences counts as up to
``PRIOR_DOF`` (4) degrees of freedom beside the challenger's own, the empirical-Bayes estimate of a variance. A run on
a deterministic task pools 0 and keeps adopting on equal differences; a run that has seen differences vary does not
trust two equal ones. With a single difference and nothing pooled there is no variance at all: a positive
difference passes, as before (``confirm_episodes * confirm_batches`` of at least 2 avoids that case). Over the 401
adoptions of the 120 suite runs before this rule, the rule applied to each adoption's final confirmation keeps none
of the 6 that drifted down and 229 of the 332 that raised the held-out mean by more than 2 standard errors (a
challenger it holds back can still pass on a later batch).

**Fresh test seeds** (``test_seeds = "fresh"``): every iteration draws its own test seeds instead of reusing the
first ones, and the incumbent is scored on them too (so both are still compared on equal samples). A search that
reads the test means (the offline population search) then cannot fit a few fixed starting states, and a table that
is perfect on the fixed test seeds can still be beaten where it is not (Taxi's other passengers).

**Ties at the ceiling.** A table that scores the best return the run has seen on every test seed (CartPole's 500)
cannot be beaten there: a challenger can only tie it. With fixed test seeds a run could then keep a table that
balances the pole on its few test seeds but not on others (467 held-out) for all its remaining iterations, while
its candidates tie at 500. So a challenger that ties the incumbent with every return of both at the highest return
seen (and some episode of the run returned less: not a flat landscape such as MountainCar's -200 everywhere) goes to
the paired confirmation as a better one would; without confirmation the strict rule holds.

The held-out seeds are for reporting only; the keeper never sees them.

Seeds are disjoint ranges per run seed (``base = seed * 1,000,000``): test ``base + 10,000 + j``, held-out
``base + 50,000 + j``, training ``base + 100,000 + k``, confirmation ``base + 600,000 + c``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from .collect import Collector, Episode

__all__ = ["SeedPlan", "seed_ranges", "Confirmation", "Verdict", "Keeper", "FRESH_TEST_SEEDS", "PRIOR_DOF",
           "t_critical"]

PRIOR_DOF = 4
"""Degrees of freedom at most that the run's pooled variance of paired differences counts for in a confirmation."""

FRESH_TEST_SEEDS = 40_000
"""Size of the test seed range (``base + 10,000`` up to the held-out range); fresh test seeds wrap around in it."""


@functools.lru_cache(maxsize=256)
def t_critical(z: float, dof: int) -> float:
    """Student's t quantile, with ``dof`` degrees of freedom, at the one-sided level of a normal ``z``.

    The t density is integrated (Simpson's rule, 4,000 intervals) and the quantile found by bisection; exact to
    about 1e-6 (with ``z = 1.959964`` and 1, 5, 30 degrees of freedom: 12.7062, 2.5706, 2.0423)."""
    if dof < 1:
        raise ValueError("t_critical needs at least 1 degree of freedom")
    p = NormalDist().cdf(z)
    if dof > 10_000 or p <= 0.5:
        return float(z) if p > 0.5 else float(z) * (1.0 + 1.0 / dof)  # normal limit; z <= 0 rarely matters
    norm = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 4001)
        f = norm * (1.0 + x * x / dof) ** (-(dof + 1) / 2)
        return 0.5 + float((f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()) * (t / 4000) / 3)

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class SeedPlan:
    """The run's disjoint seed ranges."""

    seed: int

    @property
    def base(self) -> int:
        return int(self.seed) * 1_000_000

    def test(self, j: int) -> int:
        return self.base + 10_000 + j

    def heldout(self, j: int) -> int:
        return self.base + 50_000 + j

    def train(self, k: int) -> int:
        return self.base + 100_000 + k

    def confirm(self, c: int) -> int:
        return self.base + 600_000 + c

    def ranges(self) -> dict[str, int]:
        return {"test": self.test(0), "heldout": self.heldout(0), "train": self.train(0), "confirm": self.confirm(0)}


def seed_ranges(seed: int) -> dict[str, int]:
    """The first seed of each range of run seed ``seed`` (recorded in config.json)."""
    return SeedPlan(seed).ranges()


@dataclass
class Confirmation:
    """The paired test of a challenger against the incumbent on fresh seeds."""

    seeds: list[int]
    challenger_returns: list[float]
    incumbent_returns: list[float]
    diff_mean: float
    diff_se: float
    passed: bool
    critical: float = 0.0
    """The standard errors the mean had to reach (Student's, see the module docstring; 0: no variance known)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "challenger_mean": float(np.mean(self.challenger_returns)),
            "incumbent_mean": float(np.mean(self.incumbent_returns)),
            "diff_mean": self.diff_mean,
            "diff_se": self.diff_se,
            "critical": self.critical,
            "passed": self.passed,
        }


@dataclass
class Verdict:
    """The keeper's decision on one iteration's candidates."""

    test_means: list[float | None]
    """Per candidate, its mean on the test seeds (None: no valid candidate in that slot)."""
    test_returns: list[list[float]]
    chosen: int | None
    """Index of the challenger (the best test mean), or None when no candidate was valid."""
    best_test_mean: float
    """The incumbent's mean on this iteration's test seeds, before any adoption."""
    accepted: bool
    confirmation: Confirmation | None = None
    episodes: list[Episode] = field(default_factory=list)
    """Every episode the decision ran (incumbent's added seeds, candidates, confirmation): real experience."""
    chosen_table: np.ndarray | None = None
    """The challenger as it was given (None when no candidate was valid)."""
    chosen_source: dict[str, Any] | None = None
    """What the challenger was compiled from (its rules), when it was."""

    @property
    def chosen_mean(self) -> float | None:
        return None if self.chosen is None else self.test_means[self.chosen]


class Keeper:
    """Holds the incumbent table and its returns on every seed it ran; judges candidates."""

    def __init__(
        self,
        collector: Collector,
        initial_table: np.ndarray,
        seed: int,
        test_start: int = 3,
        test_max: int = 10,
        rise_every: int = 1,
        confirm_episodes: int = 10,
        confirm_z: float = 2.0,
        confirm_batches: int = 4,
        fresh_test_seeds: bool = False,
    ) -> None:
        self.collector = collector
        self.best_table = np.asarray(initial_table, dtype=np.int64).copy()
        self.best_source: dict[str, Any] | None = None
        self.plan = SeedPlan(seed)
        self.test_start, self.test_max, self.rise_every = test_start, test_max, rise_every
        self.confirm_episodes, self.confirm_z = int(confirm_episodes), float(confirm_z)
        self.confirm_batches = max(1, int(confirm_batches))
        self._best_returns: dict[int, float] = {}
        self.best_iteration = 0
        self.confirm_next = 0
        """How many confirmation seeds were used (the next one's offset)."""
        self.fresh_test_seeds = bool(fresh_test_seeds)
        """Draw new test seeds every iteration (see the module docstring)."""
        self.pool_ss = 0.0
        self.pool_dof = 0
        """Sum of squared deviations of the paired differences from their mean, and its degrees of freedom, over
        every finished confirmation of the run (the pooled variance the test borrows)."""
        self.ret_top = -math.inf
        self.ret_low = math.inf
        """The highest and lowest return of any episode the keeper has scored."""

    def n_test(self, iteration: int) -> int:
        return min(self.test_max, self.test_start + max(0, iteration - 1) // self.rise_every)

    def seeds(self, iteration: int) -> list[int]:
        first = (max(0, iteration - 1) * self.test_max) % FRESH_TEST_SEEDS if self.fresh_test_seeds else 0
        return [self.plan.test((first + j) % FRESH_TEST_SEEDS) for j in range(self.n_test(iteration))]

    def _incumbent_on(self, seeds: Sequence[int], iteration: int) -> list[Episode]:
        """Run the incumbent on the seeds it has no return for yet; remember the returns."""
        missing = [s for s in seeds if s not in self._best_returns]
        eps: list[Episode] = []
        if missing:
            eps = self.collector.collect(self.best_table, missing, iteration=iteration)
            for s, e in zip(missing, eps, strict=True):
                self._best_returns[s] = e.ret
        return eps

    def test_mean(self, iteration: int) -> float | None:
        """The incumbent's mean on this iteration's test seeds, if it ran on all of them (runs nothing)."""
        seeds = self.seeds(iteration)
        if not all(s in self._best_returns for s in seeds):
            return None
        return float(np.mean([self._best_returns[s] for s in seeds]))

    def score_best(self, iteration: int) -> tuple[float, list[Episode]]:
        """Mean of the incumbent on this iteration's test seeds, running only seeds not scored yet."""
        seeds = self.seeds(iteration)
        eps = self._incumbent_on(seeds, iteration)
        return float(np.mean([self._best_returns[s] for s in seeds])), eps

    def judge(
        self, candidates: Sequence[np.ndarray | None], iteration: int,
        sources: Sequence[dict[str, Any] | None] | None = None,
    ) -> Verdict:
        """Score every valid candidate on the test seeds, confirm the best one, adopt it if it holds."""
        verdict = self._decide(candidates, iteration, sources)
        if verdict.chosen is not None:
            verdict.chosen_table = candidates[verdict.chosen]
            verdict.chosen_source = sources[verdict.chosen] if sources is not None else None
        return verdict

    def _decide(
        self, candidates: Sequence[np.ndarray | None], iteration: int,
        sources: Sequence[dict[str, Any] | None] | None,
    ) -> Verdict:
        best_mean, episodes = self.score_best(iteration)
        seeds = self.seeds(iteration)
        best_rets = [self._best_returns[s] for s in seeds]
        # Distinct tables to run: candidates equal to the incumbent or to an earlier candidate are not run again.
        tables: list[np.ndarray] = []
        slot: list[int | None] = []  # candidate -> index into tables (-1: the incumbent; None: invalid)
        for c in candidates:
            if c is None:
                slot.append(None)
                continue
            c = np.asarray(c, dtype=np.int64)
            if np.array_equal(c, self.best_table):
                slot.append(-1)
                continue
            same = next((i for i, t in enumerate(tables) if np.array_equal(t, c)), None)
            if same is None:
                tables.append(c)
                same = len(tables) - 1
            slot.append(same)
        runs = self.collector.collect_many(tables, seeds, iteration=iteration) if tables else []
        for r in runs:
            episodes.extend(r)
        for e in episodes:
            self.ret_top, self.ret_low = max(self.ret_top, e.ret), min(self.ret_low, e.ret)
        returns: list[list[float]] = []
        means: list[float | None] = []
        for s in slot:
            if s is None:
                returns.append([])
                means.append(None)
            else:
                rets = best_rets if s == -1 else [e.ret for e in runs[s]]
                returns.append(list(rets))
                means.append(float(np.mean(rets)))
        valid = [i for i, m in enumerate(means) if m is not None]
        if not valid:
            return Verdict(means, returns, None, best_mean, False, None, episodes)
        chosen = max(valid, key=lambda i: (means[i], -i))  # the first of equal bests
        chosen_mean = means[chosen]
        at_ceiling = (self.confirm_episodes > 0 and chosen_mean == best_mean and self.ret_low < self.ret_top
                      and all(r == self.ret_top for r in returns[chosen] + best_rets))
        if slot[chosen] == -1 or chosen_mean is None or (chosen_mean <= best_mean and not at_ceiling):
            return Verdict(means, returns, chosen, best_mean, False, None, episodes)
        challenger = tables[slot[chosen]]  # type: ignore[index]
        confirmation = None
        if self.confirm_episodes > 0:
            seeds_c: list[int] = []
            ch_rets: list[float] = []
            inc_rets: list[float] = []
            for _ in range(self.confirm_batches):
                fresh = [self.plan.confirm(self.confirm_next + j) for j in range(self.confirm_episodes)]
                self.confirm_next += self.confirm_episodes
                inc_eps, ch_eps = self.collector.collect_many([self.best_table, challenger], fresh,
                                                              iteration=iteration)
                episodes.extend(inc_eps + ch_eps)
                seeds_c += fresh
                ch_rets += [e.ret for e in ch_eps]
                inc_rets += [e.ret for e in inc_eps]
                confirmation = self._paired(seeds_c, ch_rets, inc_rets)
                if confirmation.passed or confirmation.diff_mean <= 0:
                    break
            assert confirmation is not None
            d = np.asarray(ch_rets) - np.asarray(inc_rets)
            self.pool_ss += float(((d - d.mean()) ** 2).sum())
            self.pool_dof += d.size - 1
            if not confirmation.passed:
                for seed_c, ret_c in zip(seeds_c, inc_rets, strict=True):
                    self._best_returns[seed_c] = ret_c
                return Verdict(means, returns, chosen, best_mean, False, confirmation, episodes)
        self.best_table = challenger.copy()
        self.best_source = sources[chosen] if sources is not None else None
        self._best_returns = dict(zip(seeds, returns[chosen], strict=True))
        if confirmation is not None:
            self._best_returns.update(zip(confirmation.seeds, confirmation.challenger_returns, strict=True))
        self.best_iteration = iteration
        return Verdict(means, returns, chosen, best_mean, True, confirmation, episodes)

    def adopt(self, table: np.ndarray, iteration: int) -> None:
        """Take ``table`` as the kept one without judging it (``--select none``: the learner's final read-out is
        the run's policy); its test returns are forgotten (none were played)."""
        self.best_table = np.asarray(table, dtype=np.int64).copy()
        self.best_source = None
        self._best_returns = {}
        self.best_iteration = iteration

    def _paired(self, seeds: list[int], challenger: list[float], incumbent: list[float]) -> Confirmation:
        d = np.asarray(challenger) - np.asarray(incumbent)
        mean = float(d.mean())
        prior = min(self.pool_dof, PRIOR_DOF)
        dof = d.size - 1 + prior
        if dof < 1:  # one difference, nothing pooled: no variance to judge by
            return Confirmation(seeds, list(challenger), list(incumbent), mean, 0.0, mean > 0, 0.0)
        ss = float(((d - mean) ** 2).sum()) + (prior * self.pool_ss / self.pool_dof if prior else 0.0)
        se = math.sqrt(ss / dof / d.size)
        critical = t_critical(self.confirm_z, dof)
        passed = mean > 0 and mean >= critical * se
        return Confirmation(seeds, list(challenger), list(incumbent), mean, se, passed, critical)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        seeds = sorted(self._best_returns)
        return {
            "best_table": self.best_table,
            "best_source": self.best_source,
            "best_iteration": self.best_iteration,
            "confirm_next": self.confirm_next,
            "best_seeds": np.asarray(seeds, dtype=np.int64),
            "best_returns": np.asarray([self._best_returns[s] for s in seeds], dtype=np.float64),
            "pool_ss": self.pool_ss,
            "pool_dof": self.pool_dof,
            "ret_top": self.ret_top,
            "ret_low": self.ret_low,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_table = np.asarray(state["best_table"], dtype=np.int64).copy()
        self.best_source = state.get("best_source")
        self.best_iteration = int(state["best_iteration"])
        self.confirm_next = int(state["confirm_next"])
        self._best_returns = {int(s): float(r) for s, r in zip(state["best_seeds"], state["best_returns"],
                                                                strict=True)}
        self.pool_ss = float(state.get("pool_ss", 0.0))  # absent in checkpoints written before the pooled test
        self.pool_dof = int(state.get("pool_dof", 0))
        self.ret_top = float(state.get("ret_top", -math.inf))
        self.ret_low = float(state.get("ret_low", math.inf))
