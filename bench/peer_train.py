"""One peer run for bench/lm_trpo_vs_ppo.py: Stable-Baselines3 (or sb3-contrib) with the zoo's settings, trained
in segments to a budget, a held-out curve point after each segment, checkpointed and resumable.

A run trains in segments of ``eval_every`` environment steps (``learn(..., reset_num_timesteps=False)``), and after
each one scores the agent deterministically on the first ``curve_episodes`` of the suite's held-out seeds (frozen
normalisation statistics, new environments: not counted as interaction). Schedules (``lin_X``, DQN's epsilon) run
over the run's ``horizon`` in steps whatever the segments, through
:class:`~llm_policy_gen.peers.sb3_learner.Horizon`, and stay at their final value past it. The budget stops
training at the exact step or episode (a callback), mid-rollout if need be.

**Checkpoint**: after a segment, at most every ``checkpoint_cpu_s`` CPU seconds, the folder ``RUN/checkpoint``
is replaced atomically by: the model (``save``: weights, optimiser, counters, the last observation), the replay
buffer, the training environments (pickled, so that episodes go on where they were), the ``VecNormalize``
statistics with its running returns, the random generators (torch, numpy, ``random``, the action space's) and the
run's own books (steps, episodes, curve, CPU seconds). Resuming from it gives the same run as an uninterrupted one
(``tests/test_peers.py`` checks it). An environment that cannot be pickled (some MuJoCo builds) is reset on resume;
the record then says ``fresh_episodes_on_resume``.

**One trainer per run**: a run holds its folder's lock (:class:`~llm_policy_gen.storage.locks.FolderLock`, as a
``train`` does) while it trains, so a second process given the same run gets an error row naming the
holder, never a second writer of the same checkpoint.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zoo

from llm_policy_gen.peers.sb3_learner import Horizon, algo_class  # noqa: F401  (the package's: one copy)


@dataclass
class Books:
    """What a run counts, saved with each checkpoint."""

    steps: int = 0
    episodes: int = 0
    cpu_s: float = 0.0
    """Training CPU seconds (all invocations), evaluation excluded."""
    eval_cpu_s: float = 0.0
    curve: list[list[float]] = field(default_factory=list)
    """``[steps, episodes, held-out mean]`` after each segment."""
    resumed: int = 0
    fresh_episodes_on_resume: bool = False
    before_last: list[int] = field(default_factory=list)
    """``[steps, episodes]`` before the last environment step taken (:func:`stops_where`)."""


@dataclass
class Budget:
    kind: str
    """``steps`` (equal environment steps), ``episodes`` (equal episodes) or ``zoo`` (the zoo's n_timesteps)."""
    target: int
    horizon: int
    """Steps over which schedules run (the target for step budgets; for an episode budget, the equal-steps one)."""

    def done(self, books: Books) -> bool:
        return (books.episodes if self.kind == "episodes" else books.steps) >= self.target

    def fraction(self, books: Books) -> float:
        return (books.episodes if self.kind == "episodes" else books.steps) / max(1, self.target)


def stops_where(finished: dict[str, Any], budget: Budget, eval_every: int, curve_episodes: int) -> bool:
    """Whether ``budget`` would have stopped the finished run ``finished`` (a record's fields) at the step where it
    stopped: the same horizon (so the same schedules), the same curve cadence, met at the last step taken and not
    before, and no environment reset by a resume. Training is seeded and the stop rule is the only difference, so a
    run under ``budget`` would be this run, step for step. Pendulum-v1's episodes all last 200 steps: an
    equal-episodes budget stops its SAC run where the equal-steps one stopped."""
    before = finished.get("before_last")
    if not finished.get("reached") or not before or finished.get("fresh_episodes_on_resume") \
            or (finished.get("horizon"), finished.get("eval_every"), finished.get("curve_episodes")) \
            != (budget.horizon, eval_every, curve_episodes):
        return False
    at = {"steps": (before[0], finished["steps"]), "episodes": (before[1], finished["episodes"])}.get(budget.kind)
    return at is not None and at[0] < budget.target <= at[1]


def make_venv(make_one: Any, hyper: zoo.Hyper, n_envs: int, train: bool) -> tuple[Any, Any]:
    """(inner DummyVecEnv, the wrapped one): ``VecNormalize`` (frozen, raw rewards unless ``train``) and
    ``VecFrameStack`` as the zoo sets them."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize

    inner = DummyVecEnv([make_one] * n_envs)
    env: Any = inner
    if hyper.normalize is not None:
        kw = dict(hyper.normalize)
        if not train:
            kw.update(training=False, norm_reward=False)
        env = VecNormalize(env, **kw)
    if hyper.frame_stack:
        env = VecFrameStack(env, int(hyper.frame_stack))
    return inner, env


def evaluate(model: Any, train_env: Any, make_one: Any, hyper: zoo.Hyper, seeds: list[int],
             batch: int = 25) -> list[float]:
    """Deterministic returns (the environment's own rewards) on consecutive ``seeds``, each the first episode of a
    new environment, with the training normalisation statistics frozen."""
    from stable_baselines3.common.vec_env import sync_envs_normalization

    if any(b - a != 1 for a, b in zip(seeds, seeds[1:], strict=False)):
        raise ValueError("held-out seeds must be consecutive")
    out: list[float] = []
    for k in range(0, len(seeds), batch):
        part = seeds[k:k + batch]
        _, env = make_venv(make_one, hyper, len(part), train=False)
        if hyper.normalize is not None:
            sync_envs_normalization(train_env, env)
        env.seed(part[0])
        obs = env.reset()
        rets, done = np.zeros(len(part)), np.zeros(len(part), dtype=bool)
        while not done.all():
            acts, _ = model.predict(obs, deterministic=True)
            obs, rew, dones, infos = env.step(acts)
            rets += np.where(done, 0.0, rew)  # raw: an evaluation VecNormalize leaves rewards as they are
            done |= dones
        env.close()
        out.extend(float(r) for r in rets)
    return out


def _rng_state(model: Any) -> dict[str, Any]:
    import torch

    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate(),
            "action_space": model.action_space.np_random.bit_generator.state}


def _set_rng_state(model: Any, state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])
    model.action_space.np_random.bit_generator.state = state["action_space"]


def save_checkpoint(run_dir: Path, model: Any, inner: Any, env: Any, books: Books) -> None:
    """Replace ``run_dir/checkpoint`` atomically (written beside it, then renamed)."""
    import cloudpickle

    tmp, final, old = run_dir / "checkpoint.tmp", run_dir / "checkpoint", run_dir / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.zip")
    if getattr(model, "replay_buffer", None) is not None:
        model.save_replay_buffer(tmp / "replay.pkl")
    try:
        (tmp / "envs.pkl").write_bytes(cloudpickle.dumps(inner))
    except Exception:  # an environment that cannot be pickled: reset on resume, and said so
        pass
    norm = model.get_vec_normalize_env()
    if norm is not None:
        (tmp / "vecnormalize.pkl").write_bytes(pickle.dumps((norm, norm.returns)))
    (tmp / "rng.pkl").write_bytes(pickle.dumps(_rng_state(model)))
    (tmp / "books.json").write_text(json.dumps(asdict(books)))
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(run_dir: Path, algo: str, make_one: Any,
                    hyper: zoo.Hyper) -> tuple[Any, Any, Any, Books] | None:
    """(model, its inner DummyVecEnv, its wrapped environment, books) from ``run_dir/checkpoint``; None when there
    is none."""
    import cloudpickle
    from stable_baselines3.common.vec_env import VecFrameStack

    ck = run_dir / "checkpoint"
    if not (ck / "books.json").is_file():
        return None
    books = Books(**json.loads((ck / "books.json").read_text()))
    fresh = not (ck / "envs.pkl").is_file()
    inner, env = make_venv(make_one, hyper, hyper.n_envs, train=True)
    if not fresh:
        inner = cloudpickle.loads((ck / "envs.pkl").read_bytes())
        env = inner
    if (ck / "vecnormalize.pkl").is_file():
        norm, returns = pickle.loads((ck / "vecnormalize.pkl").read_bytes())
        norm.set_venv(inner)
        norm.returns = returns
        env = norm
    if hyper.frame_stack and not fresh:
        env = VecFrameStack(env, int(hyper.frame_stack))  # its stacked frames restart: said by fresh_episodes
        fresh = True
    model = algo_class(algo).load(ck / "model.zip", env=env, device="cpu", force_reset=fresh)
    if (ck / "replay.pkl").is_file():
        model.load_replay_buffer(ck / "replay.pkl", truncate_last_traj=False)
    _set_rng_state(model, pickle.loads((ck / "rng.pkl").read_bytes()))
    books.resumed += 1
    books.fresh_episodes_on_resume = books.fresh_episodes_on_resume or fresh
    return model, inner, env, books


def train(run_dir: Path, algo: str, hyper: zoo.Hyper, make_one: Any, budget: Budget, seed: int,
          heldout: list[int], curve_episodes: int, eval_every: int, cpu_budget_s: float,
          checkpoint_cpu_s: float = 600.0, stop_after_segments: int | None = None) -> dict[str, Any]:
    """Train (or resume) one run to ``budget``; returns its record fields. ``stop_after_segments`` ends the
    invocation early, as an interruption would (tests).

    Raises:
        FolderBusy: Another process trains this run (it holds ``RUN/.lock``).
    """
    from llm_policy_gen.storage.locks import FolderLock

    run_dir.mkdir(parents=True, exist_ok=True)
    with FolderLock(run_dir, "the peer run", program="bench/lm_trpo_vs_ppo.py"):
        return _train(run_dir, algo, hyper, make_one, budget, seed, heldout, curve_episodes, eval_every,
                      cpu_budget_s, checkpoint_cpu_s, stop_after_segments)


def _train(run_dir: Path, algo: str, hyper: zoo.Hyper, make_one: Any, budget: Budget, seed: int,
           heldout: list[int], curve_episodes: int, eval_every: int, cpu_budget_s: float,
           checkpoint_cpu_s: float, stop_after_segments: int | None) -> dict[str, Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    loaded = load_checkpoint(run_dir, algo, make_one, hyper)
    if loaded is None:
        inner, env = make_venv(make_one, hyper, hyper.n_envs, train=True)
        model = algo_class(algo)(hyper.policy, env, seed=seed, verbose=0, device="cpu", **hyper.kwargs)
        books = Books()
    else:
        model, inner, env, books = loaded
    model.horizon = budget.horizon

    class Counter(BaseCallback):  # type: ignore[misc]
        def _on_step(self) -> bool:
            books.before_last = [books.steps, books.episodes]
            books.steps = int(self.model.num_timesteps)
            books.episodes += int(np.sum(self.locals["dones"]))
            return not budget.done(books)

    segments, last_ck = 0, books.cpu_s
    out_of_reach = None
    while not budget.done(books):
        cpu0 = time.process_time()
        boundary = (books.steps // eval_every + 1) * eval_every
        if budget.kind != "episodes":
            boundary = min(boundary, budget.target)
        model.learn(total_timesteps=boundary - books.steps, callback=Counter(), reset_num_timesteps=False)
        books.cpu_s += time.process_time() - cpu0
        cpu1 = time.process_time()
        returns = evaluate(model, env, make_one, hyper, heldout[:curve_episodes])
        books.eval_cpu_s += time.process_time() - cpu1
        books.curve.append([books.steps, books.episodes, round(statistics.fmean(returns), 4)])
        segments += 1
        projected = books.cpu_s / max(1e-9, budget.fraction(books))
        if not budget.done(books) and projected > cpu_budget_s:
            out_of_reach = (f"needs about {projected / 3600:,.1f} CPU-h at the rate measured over "
                            f"{books.steps:,} steps; the budget per run is {cpu_budget_s / 3600:,.2f} CPU-h")
        if budget.done(books) or out_of_reach or books.cpu_s - last_ck >= checkpoint_cpu_s \
                or segments == stop_after_segments:
            save_checkpoint(run_dir, model, inner, env, books)
            last_ck = books.cpu_s
        if out_of_reach or segments == stop_after_segments:
            break
    fields: dict[str, Any] = {**asdict(books), "reached": budget.done(books), "target": budget.target,
                              "horizon": budget.horizon, "eval_every": eval_every, "curve_episodes": curve_episodes}
    fields["cpu_s"], fields["eval_cpu_s"] = round(books.cpu_s, 3), round(books.eval_cpu_s, 3)
    if out_of_reach:
        fields["out_of_reach"] = out_of_reach
    if budget.done(books):
        cpu1 = time.process_time()
        returns = evaluate(model, env, make_one, hyper, heldout)
        fields.update(heldout=float(statistics.fmean(returns)), heldout_episodes=len(returns),
                      final_eval_cpu_s=round(time.process_time() - cpu1, 3))
    env.close()
    return fields


def make_one(env_id: str) -> Any:
    """The suite's environment for ``env_id`` (spec kwargs, time limit, reward wrappers), one-hot if its
    observation is one integer."""
    import gymnasium as gym

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.envs.make import make_env

    env = make_env(get_spec(env_id))
    if isinstance(env.observation_space, gym.spaces.Discrete):
        env = gym.wrappers.FlattenObservation(env)
    return env


class EnvFactory:
    """A picklable ``make_one`` for one task (the DummyVecEnv and its checkpoint keep it)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self) -> Any:
        return make_one(self.env_id)
