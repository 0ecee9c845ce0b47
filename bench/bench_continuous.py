"""Throughput of evaluating tables on Hopper-v5 and BipedalWalker-v3 next to raw random stepping.

    python bench/bench_continuous.py [--episodes 100] [--repeats 2] [--envs Hopper-v5 BipedalWalker-v3]
    python bench/bench_continuous.py --sizes     # answer sizes only: full table vs edits

For each environment it prints environment steps per second of
  raw 1 env:        one gymnasium environment stepped with random actions in this process (resets included)
  raw async xN:     gymnasium's AsyncVectorEnv with one environment per core, random actions
  eval 1 process:   Collector.evaluate(table, seeds) in this process only (workers=1)
  eval N processes: the same call with the seeds split across N processes (the default for MuJoCo and Box2D)
and says whether both evaluations gave the same returns (they must: an episode depends only on table and seed).
The table is the spec's prior, so that episodes last long enough to measure stepping rather than resets. The
held-out seeds of run seed 0 are used (50000...). Best of --repeats runs.
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np
from bench_eval import time_vector_stepping  # bench/ is on sys.path when this script runs

from llm_policy_gen.collect import Collector, default_workers
from llm_policy_gen.envs import get_spec, make_env
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.edits import EditsFormat
from llm_policy_gen.formats.table import TableFormat

RATIONALE = "one sentence of rationale."


def answer_sizes(env_ids: list[str]) -> None:
    """Characters of a full-table answer next to edits answers for a few changed states (from the prior table)."""
    for env_id in env_ids:
        spec = get_spec(env_id)
        obs, n_actions = spec.observation_discretizer(), spec.n_actions
        cur = spec.prior_table() if spec.prior is not None else spec.default_table()
        ctx = FormatContext(obs, spec.action_discretizer(), cur, Target("action", n_actions=n_actions), spec)
        full = len(TableFormat().render(cur, ctx, RATIONALE))
        print(f"\n{env_id}: {spec.n_states} states; full-table answer {full:,} chars")
        rng = np.random.default_rng(0)
        for k in (1, 5, 20):
            sizes = []
            for _ in range(20):
                new = cur.copy()
                idx = rng.choice(spec.n_states, k, replace=False)
                new[idx] = (new[idx] + rng.integers(1, n_actions, k)) % n_actions
                sizes.append(len(EditsFormat().render(new, ctx, RATIONALE)))
            mean = float(np.mean(sizes))
            print(f"  {k:>2} random states changed      : edits {mean:>7,.0f} chars ({full / mean:.0f}x smaller)")
        new = cur.copy().reshape(tuple(d.bins for d in spec.dims))
        new[:, :, 2, :] = 0
        text = EditsFormat().render(new.reshape(-1), ctx, RATIONALE)
        print(f"  bin 2 of dim 2 set to action 0: edits {len(text):>7,} chars ({int((new.reshape(-1) != cur).sum())} "
              "states changed)")


def raw_rate(env_id: str, steps: int) -> float:
    """Random actions in one environment, resets included."""
    env = make_env(get_spec(env_id))
    env.reset(seed=0)
    env.action_space.seed(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return steps / dt


def raw_async_rate(env_id: str, steps: int, num_envs: int) -> float:
    """Random actions in gymnasium's AsyncVectorEnv (one process per environment, autoreset)."""
    spec = get_spec(env_id)
    return time_vector_stepping(gym.vector.AsyncVectorEnv([lambda: make_env(spec) for _ in range(num_envs)]), steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--envs", nargs="+", default=["Hopper-v5", "BipedalWalker-v3"])
    ap.add_argument("--sizes", action="store_true", help="only print answer sizes (CartPole-v1, BipedalWalker-v3)")
    args = ap.parse_args()
    if args.sizes:
        answer_sizes(["CartPole-v1", "BipedalWalker-v3"])
        return
    seeds = list(range(50_000, 50_000 + args.episodes))
    print(f"{os.cpu_count()} cores; {args.episodes} episodes of each spec's prior table; best of {args.repeats}")
    for env_id in args.envs:
        spec = get_spec(env_id)
        table = spec.prior_table() if spec.prior is not None else spec.default_table()
        n = max(2, default_workers(spec))
        rates: dict[str, float] = {}
        returns: dict[int, np.ndarray] = {}
        steps = 0
        for workers in (1, n):
            with Collector(spec, workers=workers) as c:
                c.evaluate(table, seeds[: 2 * workers])  # start the worker processes outside the timing
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    r = c.evaluate(table, seeds)
                    rate = r.steps / (time.perf_counter() - t0)
                    rates[f"eval {workers}"] = max(rates.get(f"eval {workers}", 0.0), rate)
            returns[workers] = r.returns
            steps = r.steps
        raw = max(raw_rate(env_id, min(steps, 20_000)) for _ in range(args.repeats))
        raw_async = max(raw_async_rate(env_id, min(steps, 20_000), n) for _ in range(args.repeats))
        same = np.array_equal(returns[1], returns[n])
        print(f"\n{env_id}: {spec.n_states} states x {spec.n_actions} actions; {steps} steps, "
              f"mean return {float(np.mean(returns[1])):.1f}")
        print(f"  raw 1 env, random actions      : {raw:>8,.0f} steps/s")
        print(f"  raw AsyncVectorEnv x{n}          : {raw_async:>8,.0f} steps/s  ({raw_async / raw:.2f}x raw)")
        one = rates["eval 1"]
        print(f"  table eval, 1 process          : {one:>8,.0f} steps/s  ({one / raw:.2f}x raw)")
        print(f"  table eval, {n} processes        : {rates[f'eval {n}']:>8,.0f} steps/s  "
              f"({rates[f'eval {n}'] / raw:.2f}x raw, {rates[f'eval {n}'] / rates['eval 1']:.2f}x 1 process)")
        print(f"  same returns in both           : {same}")


if __name__ == "__main__":
    main()
