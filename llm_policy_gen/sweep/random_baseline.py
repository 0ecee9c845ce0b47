"""The uniform random policy's return: the zero of a normalised score
(:func:`llm_policy_gen.plotting.stats.normalized`).

Not the ``random`` backend (a random *search* over tables, kept by the keeper): this is one policy that acts
uniformly at random in the environment's own action space (``env.action_space.sample()``, seeded with the episode's
seed), whatever the spec's discretisation, so that every backend and peer is measured from the same zero. Episodes
run on the run's **held-out seeds** (the keeper's :class:`~llm_policy_gen.keeper.SeedPlan` of the run's seed), under
the spec's environment settings and reward (:func:`~llm_policy_gen.envs.make.make_env`), so the baseline and the kept
table are measured on the same episodes.

``compare`` keeps the means per run seed in its folder's ``random_policy.json`` (:func:`write_random_baseline`,
:func:`read_random_baseline`), computed once for the seeds missing there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..collect import fresh_env_per_episode
from ..config import TrainConfig
from ..envs.make import make_env
from ..envs.spec import EnvSpec
from ..keeper import SeedPlan
from ..storage.runlog import read_json_object, write_json_atomic

__all__ = ["uniform_random_returns", "heldout_seeds", "heldout_random_means", "POLICY", "BASELINE_FILE",
           "read_random_baseline", "write_random_baseline", "folder_random_means"]

POLICY = "uniform random actions: env.action_space.sample(), the action space seeded with each episode's seed"


def uniform_random_returns(spec: EnvSpec, seeds: Sequence[int]) -> np.ndarray:
    """The uniform random policy's return on each of ``seeds``."""
    out = []
    env = make_env(spec)
    try:
        for s in seeds:
            if fresh_env_per_episode(spec):  # Box2D keeps a world across resets
                env.close()
                env = make_env(spec)
            env.reset(seed=int(s))
            env.action_space.seed(int(s))
            ret, done = 0.0, False
            while not done:
                _, r, term, trunc, _ = env.step(env.action_space.sample())
                ret += float(r)
                done = bool(term or trunc)
            out.append(ret)
    finally:
        env.close()
    return np.asarray(out, dtype=np.float64)


def heldout_seeds(run_seed: int, episodes: int) -> list[int]:
    """The held-out seeds of a run with seed ``run_seed`` (those its held-out mean is measured on)."""
    plan = SeedPlan(int(run_seed))
    return [plan.heldout(j) for j in range(int(episodes))]


def heldout_random_means(spec: EnvSpec, run_seeds: Sequence[int], episodes: int) -> dict[int, float]:
    """The uniform random policy's mean return on each run seed's ``episodes`` held-out seeds."""
    return {int(s): float(uniform_random_returns(spec, heldout_seeds(s, episodes)).mean()) for s in run_seeds}


BASELINE_FILE = "random_policy.json"
"""The uniform random policy's held-out mean per run seed, in a comparison directory."""


def read_random_baseline(folder: Path, key: Mapping[str, Any] | None = None) -> dict[int, float]:
    """The means per run seed that ``folder``'s ``random_policy.json`` holds (none when it is missing, unreadable
    or, given ``key``, made for another environment, held-out count or policy)."""
    try:
        data = read_json_object(Path(folder) / BASELINE_FILE, lenient=True) or {}
        if key is not None and any(data.get(k) != v for k, v in json.loads(json.dumps(dict(key))).items()):
            return {}
        return {int(k): float(v) for k, v in data["by_seed"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def write_random_baseline(folder: Path, key: Mapping[str, Any], by_seed: Mapping[int, float]) -> None:
    write_json_atomic(Path(folder) / BASELINE_FILE, {**dict(key), "by_seed": {str(k): float(v) for k, v in
                                                                              sorted(by_seed.items())}})


def folder_random_means(out: Path, cfg: TrainConfig, seeds: Sequence[int],
                        measure: bool = True) -> dict[int, float] | None:
    """The uniform random policy's held-out mean per run seed in the comparison directory ``out``
    (``random_policy.json``, measured for the seeds missing there), for the normalised score;
    None (and the score n/a) where the task has no goal. With ``measure`` False only the seeds measured before are
    given."""
    from ..run.environment import resolve_spec

    spec = resolve_spec(cfg)
    if spec.reward_threshold is None:
        return None
    key = {"env_id": spec.env_id, "env_kwargs": dict(spec.kwargs), "heldout_episodes": cfg.heldout_episodes,
           "policy": POLICY}
    known = read_random_baseline(out, key)
    missing = [s for s in seeds if s not in known]
    if missing and measure:
        known.update(heldout_random_means(spec, missing, cfg.heldout_episodes))
        write_random_baseline(out, key, known)
    return known
