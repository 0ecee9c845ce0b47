"""Running a table in gymnasium: training episodes with their (state, action, reward) steps, and evaluation.

Episodes run in batches: a pool of environments steps together, observations of all live environments are
encoded in one vectorised call and looked up in the table at once, and environments that finish drop out of the
batch (no wasted autoreset steps). Every episode is reset with an explicit seed, so the same table, seeds and
exploration seed give the same episodes.

Greedy episodes (evaluation, and ``collect`` without exploration) of MuJoCo and Box2D tasks also run across the
machine's cores: the seeds are cut into one contiguous part per core, the first part runs here and the others in
worker processes (each keeps its own pool of environments between calls), and the results come back in seed order.
An episode depends only on the table and its seed, so the split changes nothing but the wall time. Episodes with
exploration always run here, so that one random stream serves them in order. ``LLM_POLICY_GEN_WORKERS=N`` sets the
number of processes (1: never use workers).

Box2D environments (BipedalWalker, LunarLander) keep one physics world across resets, and an episode's course then
depends on the episodes run before it in the same environment (BipedalWalker seed 50064 scores 53.4 in a fresh
environment and 30.3 after seed 50001). Their environments are therefore made afresh for every episode, so that an
episode depends only on the table and its seed (about 4 ms per episode).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from .envs.make import make_env
from .envs.spec import EnvSpec

__all__ = ["Episode", "Rollouts", "Collector", "default_workers", "fresh_env_per_episode", "MIN_PARALLEL_SEEDS"]

MIN_PARALLEL_SEEDS = 4
"""Greedy calls with fewer seeds run in this process only."""
MAX_WORKERS = 8
_HEAVY_ENTRY_POINTS = (".mujoco.", ".box2d.")
_STATEFUL_ENTRY_POINTS = (".box2d.",)

class _Result(NamedTuple):
    """One episode's outcome; the per-step lists are empty when the steps were not recorded."""

    states: list[int]
    actions: list[int]
    rewards: list[float]
    ret: float
    length: int
    terminated: bool
    truncated: bool


def _entry_point(spec: EnvSpec) -> str:
    try:
        entry = gym.spec(spec.env_id).entry_point
    except gym.error.Error:
        return ""
    return entry if isinstance(entry, str) else ""


def fresh_env_per_episode(spec: EnvSpec) -> bool:
    """True for environments whose episodes depend on earlier ones in the same instance (Box2D)."""
    return any(k in _entry_point(spec) for k in _STATEFUL_ENTRY_POINTS)


def default_workers(spec: EnvSpec) -> int:
    """Processes for greedy episodes: one per core for MuJoCo and Box2D tasks, else 1.

    The environment variable ``LLM_POLICY_GEN_WORKERS`` overrides it.
    """
    env = os.environ.get("LLM_POLICY_GEN_WORKERS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            return 1
    heavy = any(k in _entry_point(spec) for k in _HEAVY_ENTRY_POINTS)
    return min(os.cpu_count() or 1, MAX_WORKERS) if heavy else 1


_REMOTE: dict[str, Collector] = {}


def _remote_batches(spec: EnvSpec, batch_size: int, table: np.ndarray, seeds: list[int], record: bool) -> list[_Result]:
    """Runs in a worker process: greedy episodes on a collector kept per spec."""
    key = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    col = _REMOTE.get(key)
    if col is None:
        col = _REMOTE[key] = Collector(spec, batch_size, workers=1)
    return col._serial(table, seeds, 0.0, None, record)


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

    def __init__(self, spec: EnvSpec, batch_size: int = 32, workers: int | None = None) -> None:
        self.spec = spec
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.batch_size = max(1, int(batch_size))
        self.workers = default_workers(spec) if workers is None else max(1, int(workers))
        """Processes that share greedy episodes (this one included); see the module docstring."""
        self.fresh_envs = fresh_env_per_episode(spec)
        """Make every episode's environment afresh (see the module docstring)."""
        self._envs: list[gym.Env[Any, Any]] = []
        self._executor: Executor | None = None

    def _pool(self, n: int) -> list[gym.Env[Any, Any]]:
        if self.fresh_envs:
            for env in self._envs:
                env.close()
            self._envs.clear()
        while len(self._envs) < n:
            self._envs.append(make_env(self.spec))
        return self._envs[:n]

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

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
    ) -> list[_Result]:
        envs = self._pool(len(seeds))
        n = len(seeds)
        obs = [env.reset(seed=int(s))[0] for env, s in zip(envs, seeds, strict=False)]
        active = list(range(n))
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
        return [_Result(*traces[i], float(rets[i]), int(lens[i]), *ends[i]) for i in range(n)]

    def _serial(
        self, table: np.ndarray, seeds: Sequence[int], epsilon: float, rng: np.random.Generator | None, record: bool
    ) -> list[_Result]:
        out: list[_Result] = []
        for k in range(0, len(seeds), self.batch_size):
            out.extend(self._run_batch(table, list(seeds[k : k + self.batch_size]), epsilon, rng, record))
        return out

    def _parallel(self, table: np.ndarray, seeds: list[int], record: bool) -> list[_Result]:
        parts = [[int(s) for s in p] for p in np.array_split(np.asarray(seeds), self.workers) if len(p)]
        if self._executor is None:
            # fork: workers start fast and never re-run the caller's __main__ (spawn would, in unguarded scripts).
            ctx = multiprocessing.get_context("fork")
            self._executor = ProcessPoolExecutor(max_workers=self.workers - 1, mp_context=ctx)
        futures = [self._executor.submit(_remote_batches, self.spec, self.batch_size, table, p, record)
                   for p in parts[1:]]
        local = self._serial(table, parts[0], 0.0, None, record)
        return local + [r for f in futures for r in f.result()]

    def _episodes(
        self, table: np.ndarray, seeds: Sequence[int], epsilon: float, rng: np.random.Generator | None, record: bool
    ) -> list[_Result]:
        """Results in seed order; greedy calls use the worker processes when there are any."""
        seeds = [int(s) for s in seeds]
        if self.workers > 1 and (epsilon <= 0.0 or rng is None) and len(seeds) >= MIN_PARALLEL_SEEDS:
            try:
                return self._parallel(table, seeds, record)
            except (BrokenProcessPool, OSError):  # no worker processes here: run everything in this one
                self.workers = 1
                if self._executor is not None:
                    self._executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = None
        return self._serial(table, seeds, epsilon, rng, record)

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
        return [
            Episode(
                seed=int(s),
                states=np.asarray(r.states, dtype=np.int64),
                actions=np.asarray(r.actions, dtype=np.int64),
                rewards=np.asarray(r.rewards, dtype=np.float64),
                terminated=r.terminated,
                truncated=r.truncated,
                iteration=iteration,
            )
            for s, r in zip(seeds, self._episodes(table, seeds, epsilon, rng, True), strict=True)
        ]

    def evaluate(self, table: np.ndarray, seeds: Sequence[int]) -> Rollouts:
        """Greedy returns and lengths on ``seeds`` (no per-step record)."""
        table = np.asarray(table, dtype=np.int64)
        results = self._episodes(table, seeds, 0.0, None, False)
        return Rollouts(
            np.asarray(list(seeds), dtype=np.int64),
            np.asarray([r.ret for r in results]),
            np.asarray([r.length for r in results], dtype=np.int64),
        )
