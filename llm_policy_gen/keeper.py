"""The best-policy keeper: evaluate every candidate on the same seeds, keep the best, revert regressions.

Like Stable-Baselines3's ``EvalCallback``: every candidate is scored on the same test seeds as the best. The number
of test episodes rises from ``eval_start`` to ``eval_max`` (one more every ``rise_every`` iterations); when it rises,
the best is scored on the added seeds too, so both are always compared on equal samples. A candidate is adopted
only if its mean is strictly higher. Invalid proposals never reach the keeper.

Seeds are disjoint ranges per run seed: test seeds ``seed*100000 + 10000 + j``, held-out seeds
``seed*100000 + 50000 + j``, training seeds ``seed*100000 + 20000 + k``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .collect import Collector, Episode

__all__ = ["Decision", "Keeper", "seed_ranges"]


def seed_ranges(seed: int) -> dict[str, int]:
    base = int(seed) * 100_000
    return {"test": base + 10_000, "train": base + 20_000, "heldout": base + 50_000}


@dataclass
class Decision:
    """The keeper's verdict on one candidate."""

    accepted: bool
    eval_returns: list[float]
    eval_mean: float
    best_eval_mean: float
    episodes: list[Episode] = field(default_factory=list)
    """The candidate's test episodes (real experience; they join the memory)."""
    episodes_used: int = 0
    steps_used: int = 0


class Keeper:
    """Holds the best table and its per-seed test returns."""

    def __init__(
        self,
        collector: Collector,
        initial_table: np.ndarray,
        seed: int,
        eval_start: int = 3,
        eval_max: int = 10,
        rise_every: int = 1,
    ) -> None:
        self.collector = collector
        self.best_table = np.asarray(initial_table, dtype=np.int64).copy()
        self.test_base = seed_ranges(seed)["test"]
        self.eval_start, self.eval_max, self.rise_every = eval_start, eval_max, rise_every
        self._best_returns: dict[int, float] = {}
        self.best_iteration = 0

    def n_eval(self, iteration: int) -> int:
        return min(self.eval_max, self.eval_start + max(0, iteration - 1) // self.rise_every)

    def seeds(self, iteration: int) -> list[int]:
        return [self.test_base + j for j in range(self.n_eval(iteration))]

    def score_best(self, iteration: int) -> tuple[float, list[Episode]]:
        """Mean of the best on this iteration's seeds, running only seeds not scored yet."""
        seeds = self.seeds(iteration)
        missing = [s for s in seeds if s not in self._best_returns]
        eps: list[Episode] = []
        if missing:
            eps = self.collector.collect(self.best_table, missing, iteration=iteration)
            for s, e in zip(missing, eps, strict=True):
                self._best_returns[s] = e.ret
        return float(np.mean([self._best_returns[s] for s in seeds])), eps

    def consider(self, candidate: np.ndarray, iteration: int) -> Decision:
        best_mean, extra = self.score_best(iteration)
        seeds = self.seeds(iteration)
        eps = self.collector.collect(np.asarray(candidate, dtype=np.int64), seeds, iteration=iteration)
        rets = [e.ret for e in eps]
        mean = float(np.mean(rets))
        accepted = mean > best_mean
        if accepted:
            self.best_table = np.asarray(candidate, dtype=np.int64).copy()
            self._best_returns = {s: r for s, r in zip(seeds, rets, strict=True)}
            self.best_iteration = iteration
            best_mean = mean
        all_eps = extra + eps
        return Decision(
            accepted=accepted,
            eval_returns=rets,
            eval_mean=mean,
            best_eval_mean=best_mean,
            episodes=all_eps,
            episodes_used=len(all_eps),
            steps_used=sum(e.length for e in all_eps),
        )
