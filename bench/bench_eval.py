"""Throughput of evaluating a table on CartPole-v1 next to raw vectorised random stepping, in the same process.

    python bench/bench_eval.py [--episodes 400] [--repeats 3]

Prints environment steps per second for
  raw:  gymnasium.make_vec("CartPole-v1", num_envs=32, vectorization_mode="sync") with random actions
  eval: Collector.evaluate(table, seeds) -- encode a batch of observations, look up the table, step
  collect: Collector.collect (per-step record of state, action, reward)
and the ratio eval/raw. The table is the spec's prior (episodes of ~200 steps). Best of --repeats runs.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec


def time_vector_stepping(env: gym.vector.VectorEnv, steps: int) -> float:
    """Steps per second of random actions in a vector environment (autoreset), over at least ``steps`` steps."""
    env.reset(seed=0)
    env.action_space.seed(0)
    done = 0
    t0 = time.perf_counter()
    while done < steps:
        env.step(env.action_space.sample())
        done += env.num_envs
    dt = time.perf_counter() - t0
    env.close()
    return done / dt


def raw_rate(steps: int, num_envs: int = 32) -> float:
    """Raw CartPole stepping: ``gymnasium.make_vec`` in sync mode with random actions."""
    return time_vector_stepping(gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync"), steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    spec = get_spec("CartPole-v1")
    table = spec.prior_table()
    assert table is not None
    seeds = list(range(args.episodes))
    best: dict[str, float] = {"raw": 0.0, "eval": 0.0, "collect": 0.0}
    with Collector(spec) as c:
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = c.evaluate(table, seeds)
            best["eval"] = max(best["eval"], r.steps / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            eps = c.collect(table, seeds)
            best["collect"] = max(best["collect"], sum(e.length for e in eps) / (time.perf_counter() - t0))
            best["raw"] = max(best["raw"], raw_rate(r.steps))
    print(f"CartPole-v1, {args.episodes} episodes of the prior table ({r.steps} steps, mean return {r.mean:.1f})")
    print(f"raw vectorised random stepping : {best['raw']:>10,.0f} steps/s")
    ratio = best["eval"] / best["raw"]
    print(f"table evaluation (Collector)   : {best['eval']:>10,.0f} steps/s  ({ratio:.2f}x raw)")
    ratio = best["collect"] / best["raw"]
    print(f"table collection with record   : {best['collect']:>10,.0f} steps/s  ({ratio:.2f}x raw)")


if __name__ == "__main__":
    main()
