"""Running a table in gymnasium: training episodes with their (state, action, reward) steps, and evaluation.

Episodes run in batches: a pool of environments steps together, observations of all live environments are
encoded in one vectorised call and looked up in the table at once, and environments that finish drop out of the
batch (no wasted autoreset steps). Every episode is reset with an explicit seed, so the same table, seeds and
exploration seed give the same episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from .envs.make import make_env
from .envs.spec import EnvSpec

__all__ = ["Episode", "Rollouts", "Collector"]


@dataclass
class Episode:
    """One episode: per step the state index, action index and reward."""

    seed: int
    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool
    truncated: bool
    iteration: int = 0

    @property
    def ret(self) -> float:
        return float(self.rewards.sum())

    @property
    def length(self) -> int:
        return int(self.rewards.size)


@dataclass
class Rollouts:
    """Returns and lengths of evaluation episodes (no per-step record)."""

    seeds: np.ndarray
    returns: np.ndarray
    lengths: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.returns.mean()) if self.returns.size else float("nan")

    @property
    def steps(self) -> int:
        return int(self.lengths.sum())


class Collector:
    """Runs a table policy on one environment spec."""

    def __init__(self, spec: EnvSpec, batch_size: int = 32) -> None:
        self.spec = spec
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.batch_size = max(1, int(batch_size))
        self._envs: list[gym.Env[Any, Any]] = []

    def _pool(self, n: int) -> list[gym.Env[Any, Any]]:
        while len(self._envs) < n:
            self._envs.append(make_env(self.spec))
        return self._envs[:n]

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run_batch(
        self,
        table: np.ndarray,
        seeds: Sequence[int],
        epsilon: float,
        rng: np.random.Generator | None,
        record: bool,
    ) -> list[tuple[list[int], list[int], list[float], bool, bool]]:
        envs = self._pool(len(seeds))
        obs_list = [env.reset(seed=int(s))[0] for env, s in zip(envs, seeds, strict=False)]
        n = len(seeds)
        active = list(range(n))
        obs = list(obs_list)
        traces: list[tuple[list[int], list[int], list[float]]] = [([], [], []) for _ in range(n)]
        rets = np.zeros(n)
        lens = np.zeros(n, dtype=np.int64)
        ends = [(False, False)] * n
        while active:
            states = self.observation.encode(np.asarray([obs[i] for i in active]))
            acts = table[states]
            if epsilon > 0.0 and rng is not None:
                explore = rng.random(len(active)) < epsilon
                if explore.any():
                    acts = acts.copy()
                    acts[explore] = rng.integers(0, self.actions.n_actions, int(explore.sum()))
            env_acts = self.actions.to_env(acts)
            still = []
            for j, i in enumerate(active):
                o, r, term, trunc, _ = envs[i].step(env_acts[j])
                r = float(r)
                rets[i] += r
                lens[i] += 1
                if record:
                    tr = traces[i]
                    tr[0].append(int(states[j]))
                    tr[1].append(int(acts[j]))
                    tr[2].append(r)
                if term or trunc:
                    ends[i] = (bool(term), bool(trunc))
                else:
                    obs[i] = o
                    still.append(i)
            active = still
        if record:
            return [(t[0], t[1], t[2], e[0], e[1]) for t, e in zip(traces, ends, strict=True)]
        # Without a record, the first slot carries the length and the third the return.
        return [([int(lens[i])], [], [float(rets[i])], ends[i][0], ends[i][1]) for i in range(n)]

    def collect(
        self,
        table: np.ndarray,
        seeds: Sequence[int],
        epsilon: float = 0.0,
        rng: np.random.Generator | None = None,
        iteration: int = 0,
    ) -> list[Episode]:
        """Episodes with their steps; with ``epsilon`` > 0 each step takes a random action with that probability."""
        table = np.asarray(table, dtype=np.int64)
        out: list[Episode] = []
        for k in range(0, len(seeds), self.batch_size):
            chunk = list(seeds[k : k + self.batch_size])
            for s, (st, ac, rw, term, trunc) in zip(
                chunk, self._run_batch(table, chunk, epsilon, rng, True), strict=True
            ):
                out.append(
                    Episode(
                        seed=int(s),
                        states=np.asarray(st, dtype=np.int64),
                        actions=np.asarray(ac, dtype=np.int64),
                        rewards=np.asarray(rw, dtype=np.float64),
                        terminated=term,
                        truncated=trunc,
                        iteration=iteration,
                    )
                )
        return out

    def evaluate(self, table: np.ndarray, seeds: Sequence[int]) -> Rollouts:
        """Greedy returns and lengths on ``seeds`` (no per-step record)."""
        table = np.asarray(table, dtype=np.int64)
        rets, lens = [], []
        for k in range(0, len(seeds), self.batch_size):
            chunk = list(seeds[k : k + self.batch_size])
            for ln, _, rw, _, _ in self._run_batch(table, chunk, 0.0, None, False):
                rets.append(rw[0])
                lens.append(ln[0])
        return Rollouts(np.asarray(list(seeds), dtype=np.int64), np.asarray(rets), np.asarray(lens, dtype=np.int64))
