"""Running policies in gymnasium: episodes with their (state, action, reward) steps, and batched evaluation.

Anything that acts can be run: a :class:`~llm_policy_gen.policy.Policy` maps a batch of raw observations to action
indices (a table policy looks its states up directly); one that acts natively
(:class:`~llm_policy_gen.policy.ActsNatively`, a peer's network on a continuous task) gives the environment's own
actions, which go to ``env.step`` as they are (such a policy is evaluated, never recorded). Episodes run in batches:
a pool of environments steps together, observations of all live environments are encoded in one vectorised call and
each policy acts on its share of the batch at once, and environments that finish drop out (no wasted autoreset
steps). **Several policies on
shared seeds** (the K candidates of an iteration) run as one batch of (policy, seed) jobs. Every episode is reset
with an explicit seed, so the same policy, seed and exploration stream give the same episode.

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
import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from .discretize import BoxDiscretizer
from .envs.generic import DEFAULT_MAX_STEPS
from .envs.make import make_env
from .envs.spec import EnvSpec
from .errors import EnvOutputError
from .policy import LearnsOnline, Policy, TablePolicy, acts_natively

__all__ = ["Episode", "Rollouts", "Collector", "default_workers", "fresh_env_per_episode", "MIN_PARALLEL_SEEDS",
           "PolicyLike"]

PolicyLike = Policy | np.ndarray
"""A policy, or a table of action indices (wrapped in a :class:`TablePolicy` of the collector's spec)."""
Job = tuple[int, int]
"""(policy index, seed)."""

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


def _remote_batches(spec: EnvSpec, batch_size: int, policies: list[Policy], jobs: list[Job],
                    record: bool) -> list[_Result]:
    """Runs in a worker process: greedy episodes on a collector kept per spec."""
    key = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    col = _REMOTE.get(key)
    if col is None:
        col = _REMOTE[key] = Collector(spec, batch_size, workers=1)
    return col._serial(policies, jobs, 0.0, None, record)


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
    uid: int = -1
    """The run's running number of this episode (set when it joins the memory; -1 before)."""

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
        self.max_steps = int(spec.max_episode_steps or DEFAULT_MAX_STEPS)
        """An episode is cut (truncated) after this many steps, whatever the environment's own limit says."""
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

    def as_policy(self, p: PolicyLike) -> Policy:
        """``p`` itself, or a table of action indices as a :class:`TablePolicy` of this spec."""
        if isinstance(p, np.ndarray):
            return TablePolicy(self.spec.env_id, self.observation, self.actions, p)
        return p

    def _run_batch(
        self,
        policies: Sequence[Policy],
        jobs: Sequence[Job],
        epsilon: float,
        rng: np.random.Generator | None,
        record: bool,
    ) -> list[_Result]:
        envs = self._pool(len(jobs))
        n = len(jobs)
        obs = [env.reset(seed=int(s))[0] for env, (_, s) in zip(envs, jobs, strict=False)]
        owner = np.array([p for p, _ in jobs], dtype=np.int64)
        active = np.arange(n)
        traces: list[tuple[list[int], list[int], list[float]]] = [([], [], []) for _ in range(n)]
        rets = np.zeros(n)
        lens = np.zeros(n, dtype=np.int64)
        ends = [(False, False)] * n
        learns = any(isinstance(p, LearnsOnline) for p in policies)
        while active.size:
            obs_batch = self._batch([obs[i] for i in active])
            if obs_batch.dtype.kind == "f" and not np.isfinite(obs_batch).all():
                bad = int(active[np.flatnonzero(~np.isfinite(obs_batch.reshape(active.size, -1)).all(axis=1))[0]])
                raise EnvOutputError(self._output_problem("observation", obs[bad], int(lens[bad]), jobs[bad][1]))
            states = self.observation.encode(obs_batch)
            acts = np.empty(active.size, dtype=np.int64)
            own = owner[active]
            native: list[tuple[np.ndarray, np.ndarray]] = []
            for p in np.unique(own):
                sel = own == p
                policy = policies[int(p)]
                if isinstance(policy, TablePolicy):
                    acts[sel] = policy.table[states[sel]]
                elif acts_natively(policy):  # the environment's own actions, handed on as they are (below)
                    acts[sel] = 0
                    native.append((np.flatnonzero(sel), np.asarray(policy.act(obs_batch[sel]))))
                else:
                    acts[sel] = policy.act(obs_batch[sel])
            if epsilon > 0.0 and rng is not None:
                explore = rng.random(active.size) < epsilon
                if explore.any():
                    acts[explore] = rng.integers(0, self.actions.n_actions, int(explore.sum()))
            env_acts: np.ndarray | list[Any] = self.actions.to_env(acts)
            if native:
                mixed: list[Any] = list(env_acts)
                for pos, given in native:
                    for j, a in zip(pos, given, strict=True):
                        mixed[int(j)] = a
                env_acts = mixed
            still = []
            steps: list[tuple[Any, float, bool]] = []
            for j, i in enumerate(active):
                o, r, term, trunc, _ = envs[i].step(env_acts[j])
                r = float(r)
                if learns:
                    steps.append((o, r, bool(term)))
                lens[i] += 1
                if not math.isfinite(r):
                    raise EnvOutputError(self._output_problem("reward", r, int(lens[i]), jobs[int(i)][1]))
                rets[i] += r
                trunc = bool(trunc) or bool(lens[i] >= self.max_steps)
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
            if learns:
                self._observe(policies, own, states, acts, steps)
            active = np.asarray(still, dtype=np.int64)
        return [_Result(*traces[i], float(rets[i]), int(lens[i]), *ends[i]) for i in range(n)]

    def _batch(self, observations: Sequence[Any]) -> np.ndarray:
        """Observations as one array for the discretizer: scalar ones (a Discrete space starting at k, binned as a
        Box) as 1-D vectors."""
        batch = np.asarray(observations)
        if batch.ndim == 1 and isinstance(self.observation, BoxDiscretizer):
            batch = batch[:, None]
        return batch

    def _output_problem(self, what: str, value: Any, step: int, seed: int) -> str:
        where = "at reset" if step == 0 else f"at step {step}"
        shown = np.array2string(np.asarray(value), threshold=8) if what == "observation" else repr(value)
        return (f"{self.spec.env_id}: the environment returned a non-finite {what} ({shown}) {where} of the episode "
                f"with seed {seed}; rewards and observations must be finite numbers (fix the environment, or wrap "
                "it to replace NaN and infinity)")

    def _observe(self, policies: Sequence[Policy], own: np.ndarray, states: np.ndarray, acts: np.ndarray,
                 steps: list[tuple[Any, float, bool]]) -> None:
        """Hand a step's transitions to the policies that learn as they act (:class:`LearnsOnline`)."""
        for p in np.unique(own):
            policy = policies[int(p)]
            if not isinstance(policy, LearnsOnline):
                continue
            sel = np.flatnonzero(own == p)
            nxt = self.observation.encode(self._batch([steps[j][0] for j in sel]))
            policy.observe(states[sel], acts[sel], np.asarray([steps[j][1] for j in sel]), nxt,
                           np.asarray([steps[j][2] for j in sel], dtype=bool))

    def _serial(
        self, policies: Sequence[Policy], jobs: Sequence[Job], epsilon: float, rng: np.random.Generator | None,
        record: bool,
    ) -> list[_Result]:
        out: list[_Result] = []
        for k in range(0, len(jobs), self.batch_size):
            out.extend(self._run_batch(policies, list(jobs[k : k + self.batch_size]), epsilon, rng, record))
        return out

    def _parallel(self, policies: list[Policy], jobs: list[Job], record: bool) -> list[_Result]:
        parts = [p for p in np.array_split(np.arange(len(jobs)), self.workers) if len(p)]
        if self._executor is None:
            # fork: workers start fast and never re-run the caller's __main__ (spawn would, in unguarded scripts).
            ctx = multiprocessing.get_context("fork")
            self._executor = ProcessPoolExecutor(max_workers=self.workers - 1, mp_context=ctx)
        futures = [self._executor.submit(_remote_batches, self.spec, self.batch_size, policies,
                                         [jobs[int(i)] for i in part], record) for part in parts[1:]]
        local = self._serial(policies, [jobs[int(i)] for i in parts[0]], 0.0, None, record)
        return local + [r for f in futures for r in f.result()]

    def _episodes(
        self, policies: Sequence[Policy], jobs: Sequence[Job], epsilon: float, rng: np.random.Generator | None,
        record: bool,
    ) -> list[_Result]:
        """Results in job order; greedy calls of picklable policies use the worker processes when there are any."""
        jobs = [(int(p), int(s)) for p, s in jobs]
        if record and any(acts_natively(p) for p in policies):
            raise TypeError("a policy acting in the environment's own actions is evaluated, never recorded: its "
                            "actions are no action indices")
        greedy = epsilon <= 0.0 or rng is None
        picklable = all(isinstance(p, TablePolicy) for p in policies)
        if self.workers > 1 and greedy and picklable and len(jobs) >= MIN_PARALLEL_SEEDS:
            try:
                return self._parallel(list(policies), jobs, record)
            except (BrokenProcessPool, OSError):  # no worker processes here: run everything in this one
                self.workers = 1
                if self._executor is not None:
                    self._executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = None
        return self._serial(policies, jobs, epsilon, rng, record)

    @staticmethod
    def _episode(seed: int, r: _Result, iteration: int) -> Episode:
        return Episode(
            seed=int(seed),
            states=np.asarray(r.states, dtype=np.int64),
            actions=np.asarray(r.actions, dtype=np.int64),
            rewards=np.asarray(r.rewards, dtype=np.float64),
            terminated=r.terminated,
            truncated=r.truncated,
            iteration=iteration,
        )

    def collect(
        self,
        policy: PolicyLike,
        seeds: Sequence[int],
        epsilon: float = 0.0,
        rng: np.random.Generator | None = None,
        iteration: int = 0,
    ) -> list[Episode]:
        """Episodes with their steps; with ``epsilon`` > 0 each step takes a random action with that probability."""
        results = self._episodes([self.as_policy(policy)], [(0, s) for s in seeds], epsilon, rng, True)
        return [self._episode(s, r, iteration) for s, r in zip(seeds, results, strict=True)]

    def collect_many(self, policies: Sequence[PolicyLike], seeds: Sequence[int], iteration: int = 0
                     ) -> list[list[Episode]]:
        """Greedy episodes of every policy on the same ``seeds``, in one batched pass; one list per policy."""
        pols = [self.as_policy(p) for p in policies]
        jobs = [(k, int(s)) for k in range(len(pols)) for s in seeds]
        results = self._episodes(pols, jobs, 0.0, None, True)
        n = len(seeds)
        return [[self._episode(s, r, iteration) for s, r in zip(seeds, results[k * n:(k + 1) * n], strict=True)]
                for k in range(len(pols))]

    def evaluate(self, policy: PolicyLike, seeds: Sequence[int]) -> Rollouts:
        """Greedy returns and lengths on ``seeds`` (no per-step record)."""
        results = self._episodes([self.as_policy(policy)], [(0, s) for s in seeds], 0.0, None, False)
        return Rollouts(
            np.asarray(list(seeds), dtype=np.int64),
            np.asarray([r.ret for r in results]),
            np.asarray([r.length for r in results], dtype=np.int64),
        )
