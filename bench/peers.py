"""Peers beside the goal table: Stable-Baselines' JAX agents (``sbx-rl``) on the suite's tasks and episode budgets.

    python bench/peers.py [--tasks cartpole,taxi,...] [--seeds 0-2] [--algos ppo,dqn,sac]
                          [--out ~/llm-policy-gen-bench/suite] [--cap-minutes 10] [--workers N] [--list]

Needs the ``peers`` extra (``make peers``: sbx-rl, and torch 2.13.0's CPU build for stable-baselines3).

Every (task, algorithm, seed) is one run: PPO on every task, DQN on tasks with discrete actions, SAC on those with
continuous ones, with the library's default hyperparameters, on the environment the suite uses (the spec's
``gymnasium.make`` arguments, time limit and reward wrappers; an observation that is one integer, as in Taxi or
FrozenLake, is given one-hot). **Episode budget**: the agent trains until it has finished as many training episodes
as the suite's budget for the task (a callback counts finished episodes and stops training at the budget, mid-rollout
if need be); ``learn`` is only bounded by the budget times the episode step limit, which it never reaches.
**Time cap**: a run whose training has used ``--cap-minutes`` of CPU time (one core: JAX and torch are held to one
thread) is stopped there and marked ``capped`` with the episodes it got to. **Evaluation as in the suite**: the
trained agent acts deterministically on the same 100 held-out seeds as the suite's run of that seed
(``seed * 1,000,000 + 50,000 + j``), each episode in a new environment; training episodes start from the training
range (the model is seeded with ``seed * 1,000,000 + 100,000``), disjoint from them.

**Shared runs**: a task that differs from an earlier one only in its spec's table or rules (the same environment
and budget, as LunarLander-v3.products and LunarLander-v3) is not trained again: its cells show the other task's
runs, marked so.

``--out`` is the suite's folder (default outside the work tree): records go to ``OUT/peers.json``, one per run,
written after each run, so an interrupted invocation goes on where it stopped (a run that failed is run again; a
run cut short by the interruption starts afresh: none takes more than the cap). ``OUT/suite.md`` is then rewritten
from the suite's ``results.json`` (the suite is not run) with one column per algorithm: median held-out mean of the
seeds, each seed's, the worst seed, the seeds meeting the goal, the ratio to ``offline`` and the capped runs.

Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import suite

ALGOS = ("ppo", "dqn", "sac")
COLUMN = {"ppo": "sbx PPO", "dqn": "sbx DQN", "sac": "sbx SAC"}
HELDOUT_EPISODES = 100
"""As the suite's runs (``heldout_episodes``' default)."""
ONE_THREAD = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
              "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def algos_for(discrete_actions: bool) -> tuple[str, ...]:
    """PPO everywhere; DQN for discrete actions, SAC for continuous ones."""
    return ("ppo", "dqn") if discrete_actions else ("ppo", "sac")


def timestep_bound(budget: int, max_episode_steps: int) -> int:
    """The ``total_timesteps`` given to ``learn``: the most ``budget`` episodes can take. The episode counter stops
    training at the budget first; the bound only keeps ``learn`` from stopping earlier."""
    if budget < 1 or max_episode_steps < 1:
        raise ValueError(f"budget and max_episode_steps must be >= 1, got {budget} and {max_episode_steps}")
    return budget * max_episode_steps


@dataclass
class BudgetClock:
    """Counts finished training episodes and the CPU seconds spent; says when to stop (the budget, or the cap)."""

    budget: int
    cap_s: float
    start_cpu: float = 0.0
    episodes: int = 0
    steps: int = 0
    capped: bool = False

    def tick(self, finished: int, cpu_now: float) -> bool:
        """One environment step with ``finished`` episodes ending at it; False: stop training."""
        self.steps += 1
        self.episodes += int(finished)
        if self.episodes >= self.budget:
            return False
        if cpu_now - self.start_cpu > self.cap_s:
            self.capped = True
            return False
        return True


def _make(env_id: str) -> Any:
    """The suite's environment for ``env_id`` (spec kwargs, time limit, reward wrappers), one-hot if its
    observation is one integer."""
    import gymnasium as gym

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.envs.make import make_env

    env = make_env(get_spec(env_id))
    if isinstance(env.observation_space, gym.spaces.Discrete):
        env = gym.wrappers.FlattenObservation(env)
    return env


def evaluate(model: Any, env_id: str, seeds: list[int], batch: int = 25) -> list[float]:
    """Deterministic returns on ``seeds``, each episode in a new environment, ``batch`` episodes stepping together."""
    import numpy as np

    returns: list[float] = []
    for k in range(0, len(seeds), batch):
        part = seeds[k:k + batch]
        envs = [_make(env_id) for _ in part]
        obs = [env.reset(seed=int(s))[0] for env, s in zip(envs, part, strict=True)]
        rets = [0.0] * len(part)
        active = list(range(len(part)))
        while active:
            acts, _ = model.predict(np.stack([obs[i] for i in active]), deterministic=True)
            still = []
            for a, i in zip(acts, active, strict=True):
                o, r, term, trunc, _ = envs[i].step(a)
                rets[i] += float(r)
                if not (term or trunc):
                    obs[i] = o
                    still.append(i)
            active = still
        for env in envs:
            env.close()
        returns.extend(rets)
    return returns


def run_one(task: str, algo: str, seed: int, cap_s: float, budget: int | None = None,
            heldout_episodes: int = HELDOUT_EPISODES) -> dict[str, Any]:
    """Train and evaluate one peer (in a fresh worker process); returns its record. ``budget`` overrides the task's
    (tests)."""
    os.environ.update(ONE_THREAD)
    goal = suite.BY_KEY[task]
    budget = goal.budget if budget is None else budget
    record: dict[str, Any] = {"task": task, "env_id": goal.env_id, "algo": algo, "seed": seed, "budget": budget}
    try:
        import numpy as np
        import sbx
        import torch
        from stable_baselines3.common.callbacks import BaseCallback

        from llm_policy_gen.keeper import SeedPlan

        torch.set_num_threads(1)
        plan = SeedPlan(seed)
        cpu0, wall0 = time.process_time(), time.time()
        clock = BudgetClock(budget, cap_s, start_cpu=cpu0)

        class EpisodeBudget(BaseCallback):  # type: ignore[misc]
            def _on_step(self) -> bool:
                return clock.tick(int(np.sum(self.locals["dones"])), time.process_time())

        env = _make(goal.env_id)
        limit = env.spec.max_episode_steps if env.spec is not None else None
        bound = timestep_bound(budget, int(limit or 10_000))
        cls = {"ppo": sbx.PPO, "dqn": sbx.DQN, "sac": sbx.SAC}[algo]
        kwargs: dict[str, Any] = {} if algo == "ppo" else {"buffer_size": min(1_000_000, bound)}
        model = cls("MlpPolicy", env, seed=plan.train(0), verbose=0, **kwargs)
        model.learn(total_timesteps=bound, callback=EpisodeBudget())
        train_cpu, train_wall = time.process_time() - cpu0, time.time() - wall0
        returns = evaluate(model, goal.env_id, [plan.heldout(j) for j in range(heldout_episodes)])
    except Exception as exc:  # a failed run is a row with its error
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
    record.update(heldout=float(statistics.fmean(returns)), heldout_episodes=len(returns), episodes=clock.episodes,
                  timesteps=clock.steps, capped=clock.capped, train_cpu_s=round(train_cpu, 1),
                  train_wall_s=round(train_wall, 1), eval_wall_s=round(time.time() - wall0 - train_wall, 1),
                  hyperparameters="library defaults" + (f", buffer_size {kwargs['buffer_size']}" if kwargs else ""))
    return record


def run_tasks() -> dict[str, str]:
    """Each task's key -> the task whose runs stand for it: the first of the suite's tasks with the same environment
    (gymnasium id, ``make`` arguments, time limit, reward wrappers) and episode budget. A peer sees the environment,
    not the spec's table or rules, so LunarLander-v3.products would train the very runs of LunarLander-v3. Each spec
    is read once."""
    from llm_policy_gen.envs import get_spec

    first: dict[tuple[Any, ...], str] = {}
    found: dict[str, str] = {}
    for goal in suite.GOALS:
        spec = get_spec(goal.env_id)
        setup = (spec.env_id, json.dumps(spec.kwargs, sort_keys=True), spec.max_episode_steps,
                 tuple(spec.reward_wrappers), goal.budget)
        found[goal.key] = first.setdefault(setup, goal.key)
    return found


def cells(records: list[dict[str, Any]]) -> list[suite.PeerCell]:
    """The suite's peer columns from the records: per task and algorithm, the seeds' held-out means (None for a
    failed run), the capped count; only runs at the task's own budget count. A task whose runs are another's
    (``run_tasks``) shows that task's, marked."""
    out: list[suite.PeerCell] = []
    sources = run_tasks()
    for goal in suite.GOALS:
        source = sources[goal.key]
        for algo in ALGOS:
            rs = sorted((r for r in records if r["task"] == source and r["algo"] == algo
                         and r["budget"] == goal.budget), key=lambda r: r["seed"])
            if not rs:
                continue
            errors = [r["error"] for r in rs if "error" in r]
            out.append(suite.PeerCell(
                task=goal.key, column=COLUMN[algo], values=tuple(r.get("heldout") for r in rs),
                capped=sum(bool(r.get("capped")) for r in rs),
                error=errors[0] if len(errors) == len(rs) else None,
                same_as=None if source == goal.key else suite.BY_KEY[source].env_id))
    return out


def _write_records(path: Path, records: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(records.values(), key=lambda r: (r["task"], r["algo"], r["seed"])), indent=1))
    tmp.replace(path)


def _discrete(env_id: str) -> bool:
    import gymnasium as gym

    env = _make(env_id)
    try:
        return isinstance(env.action_space, gym.spaces.Discrete)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(suite.BY_KEY), help="comma-separated task keys (see --list)")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--algos", default=",".join(ALGOS), help="of ppo,dqn,sac (each only where it applies)")
    ap.add_argument("--out", default=str(suite.DEFAULT_OUT), help="the suite's results folder")
    ap.add_argument("--cap-minutes", type=float, default=10.0, help="CPU minutes of training before a run is capped")
    ap.add_argument("--workers", type=int, default=1, help="runs at a time (each on one core)")
    ap.add_argument("--list", action="store_true", help="list the tasks and exit")
    args = ap.parse_args(argv)
    if args.list:
        suite.list_tasks()
        return 0
    wanted = args.algos.split(",")
    unknown = [a for a in wanted if a not in ALGOS]
    if unknown:
        print(f"peers: unknown algorithm {unknown[0]!r}; accepted: {', '.join(ALGOS)}", file=sys.stderr)
        return 2
    parsed = suite.tasks_and_seeds("peers", args.tasks, args.seeds)
    if parsed is None:
        return 2
    tasks, seeds = parsed
    try:
        import sbx  # noqa: F401
    except ImportError:
        print("peers: sbx-rl is not installed; `make peers` installs the `peers` extra", file=sys.stderr)
        return 2
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "peers.json"
    records: dict[tuple[str, str, int], dict[str, Any]] = {}
    if results_file.is_file():
        for r in json.loads(results_file.read_text()):
            records[(r["task"], r["algo"], r["seed"])] = r
    jobs: list[tuple[str, str, int]] = []
    sources = run_tasks()
    for key in dict.fromkeys(sources[k] for k in tasks):
        goal = suite.BY_KEY[key]
        for algo in algos_for(_discrete(goal.env_id)):
            if algo not in wanted:
                continue
            for seed in seeds:
                done = records.get((key, algo, seed))
                if done is None or "error" in done or done.get("budget") != goal.budget:
                    jobs.append((key, algo, seed))
    jobs.sort(key=lambda j: -suite.BY_KEY[j[0]].budget)
    os.environ.update(ONE_THREAD)
    cap_s = args.cap_minutes * 60
    # spawn, one run a process: JAX does not survive fork, and each run's CPU time is its own.
    with ProcessPoolExecutor(max_workers=max(1, args.workers), mp_context=get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        futures = {pool.submit(run_one, *job, cap_s): job for job in jobs}
        for fut in as_completed(futures):
            job = futures[fut]
            rec = fut.result()
            records[job] = rec
            shown = rec.get("error") or (
                f"held-out {rec['heldout']:,.1f} after {rec['episodes']:,} episodes ({rec['timesteps']:,} steps), "
                f"{rec['train_cpu_s']:,.0f} CPU s" + (" (capped)" if rec["capped"] else ""))
            print(f"{job[0]} {job[1]} seed {job[2]}: {shown}", flush=True)
            _write_records(results_file, records)
    page = suite.write_report(out, peers=cells(list(records.values())))
    print(f"wrote {page} (from {out / 'results.json'}) and {results_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
