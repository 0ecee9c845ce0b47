"""The goal table of issue 20: each task's budget, goal, seeds and the settings its runs add to the spec's, and how a
value is judged against its goal. Data, read by the suite (``bench/suite.py``), the peers (``bench/peers.py``), the
settings search (``bench/tune_specs.py``) and the report (:mod:`suite_report`, :mod:`suite_lines`)."""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Goal:
    key: str
    env_id: str
    budget: int
    goal: float
    anchors: str
    today: str
    exact: bool = False
    """The goal is an exact optimum (CliffWalking's -13) rather than a threshold to reach."""
    settings: tuple[tuple[str, Any], ...] = ()
    """Settings given to every run of the task on top of the spec's (shown in the table)."""
    seeds: tuple[int, ...] = tuple(range(10))
    """The seeds the goal is judged on (``--seeds`` overrides them)."""
    need: int = 8
    """How many of those seeds must meet the goal (and the median must)."""


LONG = tuple(range(5))
"""The seeds of the three tasks whose runs take 30-45 minutes each on one core (issue 20: at least 4 of 5)."""

GOALS = [
    # Issue 20's table: offline within the budget, median of seeds 0-9 and at least 8 of the 10 (0-4 and 4 of 5 for
    # the long tasks). CartPole's spec keeps the seed project's defaults (4 training episodes per iteration, 4
    # candidates tested on 3 to 10 episodes, the engine's confirmation); a budget of 100 episodes needs them leaner:
    # 8 candidates screened on 1 episode each (a table either balances the pole or drops it early). The screening
    # (test_max 1, was 2) was chosen on the tuning seeds 100-109 only, on the goal's within-budget measure
    # (bench/tune_specs.py, 2026-11-28: 10/10 there against 8/10).
    Goal("cartpole", "CartPole-v1", 100, 475, "seed paper ~20-30 iterations (80-130 episodes); SB3 DQN 50k steps",
         "463.5 (one seed 224)",
         settings=(("train_episodes", 1), ("confirm_episodes", 4), ("confirm_batches", 2), ("candidates", 8),
                   ("eval_start", 1), ("eval_max", 1))),
    # InvertedPendulum-v5: 18 candidates an iteration (was the spec's 9), each kept table confirmed in 4 batches of 1
    # episode (was 2 of 3), chosen on the tuning seeds 100-109 only (bench/tune_specs.py, 2026-11-28: 10/10 there
    # against 8/10); the whole point as the search ran it.
    Goal("invertedpendulum", "InvertedPendulum-v5", 300, 950, "ProPS 1000", "1,000 @ 500 (one other seed 246)",
         settings=(("candidates", 18), ("confirm_batches", 4), ("confirm_episodes", 1), ("test_max", 2),
                   ("test_start", 1), ("train_episodes", 1))),
    Goal("mountaincarcontinuous", "MountainCarContinuous-v0", 200, 95,
         "ProPS 89.2; R2PO 98.75; SB3 SAC 94.7 after 50k steps", "93.6 @ 100"),
    Goal("mountaincar", "MountainCar-v0", 1000, -110, "gymnasium's threshold; ProPS -116.7; R2PO -111.0", "-113.0"),
    # Acrobot-v1: candidates screened on 1 test episode (test_max 1, was the spec's 2), chosen on the tuning seeds
    # 100-109 only (bench/tune_specs.py, 2026-11-28: 10/10 there against 9/10); the whole point as the search ran it
    # (the spec's other settings), since the engine's test_start default (3) is checked before the spec's applies.
    Goal("acrobot", "Acrobot-v1", 1000, -100, "SB3 PPO -73.5 after 1M steps", "-103.4",
         settings=(("candidates", 13), ("confirm_batches", 3), ("confirm_episodes", 4), ("test_max", 1),
                   ("test_start", 1), ("train_episodes", 1))),
    # Pendulum-v1: candidates tested on up to 16 episodes (test_max, was the spec's 8), chosen on the tuning seeds
    # 100-109 only (bench/tune_specs.py, 2026-11-28: 4/10 there against 2/10); the whole point as the search ran it.
    Goal("pendulum", "Pendulum-v1", 1000, -160, "SB3 TD3 -152 after 20k steps", "-153.6 (other seeds -166)",
         settings=(("candidates", 4), ("confirm_batches", 3), ("confirm_episodes", 8), ("test_max", 16),
                   ("test_start", 4), ("train_episodes", 2))),
    Goal("taxi", "Taxi-v4", 1000, 7.5, "threshold 8", "8.16 @ 2,000, first at 730"),
    # CliffWalking-v1: 8 training episodes an iteration (train_episodes, was the spec's 4), chosen on the tuning seeds
    # 100-109 only (bench/tune_specs.py, 2026-11-28: 10/10 there against 9/10); the whole point as the search ran it.
    Goal("cliffwalking", "CliffWalking-v1", 300, -13, "optimum -13", "-13 @ 500", exact=True,
         settings=(("candidates", 4), ("confirm_batches", 4), ("confirm_episodes", 10), ("test_max", 10),
                   ("test_start", 3), ("train_episodes", 8))),
    # FrozenLake-v1.8x8: 20 training episodes an iteration (was the spec's 10), candidates tested on 10 rising to 20
    # episodes (was 20 to 40), confirmations of 20 (was 40), chosen on the tuning seeds 100-109 only
    # (bench/tune_specs.py, 2026-11-28: 10/10 there against 9/10); the whole point as the search ran it.
    Goal("frozenlake8x8", "FrozenLake-v1.8x8", 3000, 0.80, "ProPS 0.57, R2PO 0.93 on 4x4", "0.77",
         settings=(("candidates", 4), ("confirm_batches", 3), ("confirm_episodes", 20), ("test_max", 20),
                   ("test_start", 10), ("train_episodes", 20))),
    # Swimmer-v5: 18 candidates an iteration (was the spec's 9), chosen on the tuning seeds 100-109 only
    # (bench/tune_specs.py, 2026-12-02: 9/10 there against 7/10); the whole point as the search ran it.
    Goal("swimmer", "Swimmer-v5", 2000, 300, "ProPS 227; R2PO 294.6", "347.2 (one seed 40.6)",
         settings=(("candidates", 18), ("confirm_batches", 2), ("confirm_episodes", 2), ("test_max", 1),
                   ("test_start", 1), ("train_episodes", 1))),
    Goal("lunarlander", "LunarLander-v3", 3000, 200, "SB3 PPO 242 after 1M steps", "-64.6"),
    Goal("lunarlander-products", "LunarLander-v3.products", 3000, 200, "SB3 PPO 242 after 1M steps",
         "- (new: product features, issue 20 item 2)"),
    # Hopper-v5: a candidate's adoption confirmed on 4 batches of 3 episodes (confirm_batches, was the spec's 2),
    # chosen on the tuning seeds 100-109 only (bench/tune_specs.py, 2026-12-02: 10/10 there against 9/10, the tenth
    # at 1,012.4); the whole point as the search ran it.
    Goal("hopper", "Hopper-v5", 3000, 1000, "ProPS 356; CEM on this table ~1,010 at ~10,000 episodes",
         "1,095 (other seeds 882)",
         settings=(("candidates", 9), ("confirm_batches", 4), ("confirm_episodes", 3), ("test_max", 2),
                   ("test_start", 1), ("train_episodes", 1))),
    Goal("hopper-rich", "Hopper-v5.rich", 10000, 2500,
         "3-level linear rule 2,438 at 9,600 (ARS); PPO 2,410 after 1M steps", "2,522 (other seeds 2,203)",
         seeds=LONG, need=4),
    # BipedalWalker-v3.rich: candidates tested on 2 episodes from the start (test_start, was the spec's 1), chosen on
    # the tuning seeds 100-104 only (bench/tune_specs.py, 2026-12-02: 1/5 there against 0/5; test_max 1 also met the
    # goal on one seed, with a lower IQM); the whole point as the search ran it.
    Goal("bipedalwalker-rich", "BipedalWalker-v3.rich", 10000, 100,
         "3-level linear rule by ARS peaked at 72 in 11,000 episodes", "8.1", seeds=LONG, need=4,
         settings=(("candidates", 17), ("confirm_batches", 2), ("confirm_episodes", 3), ("test_max", 2),
                   ("test_start", 2), ("train_episodes", 1))),
    # InvertedDoublePendulum-v5: 18 candidates an iteration (was the spec's 9), chosen on the tuning seeds 100-109 only
    # (bench/tune_specs.py, 2026-11-28: IQM 206.9, its interval's lower end 187.2 above today's 168.4; no seed meets
    # the goal either way); the whole point as the search ran it.
    Goal("inverteddoublependulum", "InvertedDoublePendulum-v5", 3000, 1000, "ProPS 148; R2PO 254", "- (new spec)",
         settings=(("candidates", 18), ("confirm_batches", 2), ("confirm_episodes", 3), ("test_max", 2),
                   ("test_start", 1), ("train_episodes", 1))),
    Goal("walker2d", "Walker2d-v5", 5000, 1000, "ProPS 147; TRPO 519", "- (new spec)", seeds=LONG, need=4),
    Goal("reacher", "Reacher-v5", 2000, -8, "ProPS -11.3; PPO -7.3", "- (new spec)"),
]
BY_KEY = {g.key: g for g in GOALS}


def meets(goal: Goal, value: float | None) -> bool:
    """Whether ``value`` meets the task's goal: reaches it, or equals it for an exact optimum (None never does)."""
    if value is None:
        return False
    return abs(value - goal.goal) < 1e-9 if goal.exact else value >= goal.goal - 1e-9


def median(xs: list[float | None]) -> float | None:
    """The median of the values given (None left out); None when there are none."""
    vals = [float(x) for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def fmt(x: float | None, goal: Goal | None = None) -> str:
    """A figure as the tables print it: two decimals for a goal under 10 in size, else one; ``-`` for None."""
    if x is None:
        return "-"
    digits = 2 if goal is not None and abs(goal.goal) < 10 else 1
    return f"{x:,.{digits}f}"


def seed_stats(goal: Goal, values: list[float | None]) -> tuple[float | None, str]:
    """The worst seed's value and the count of seeds that meet the goal, as ``"8/10"`` (a missing value counts as
    not met)."""
    vals = [float(v) for v in values if v is not None]
    return (min(vals) if vals else None), f"{sum(meets(goal, v) for v in values)}/{len(values)}"


def list_tasks() -> None:
    """Print the goal table, one task a line (``--list``)."""
    for g in GOALS:
        print(f"{g.key:<22} {g.env_id:<26} goal {g.goal:>8g} within {g.budget:>6,} episodes, seeds "
              f"{g.seeds[0]}-{g.seeds[-1]} (at least {g.need} of {len(g.seeds)})")


def tasks_and_seeds(prog: str, tasks: str, seeds: str) -> tuple[list[str], list[int]] | None:
    """The task keys of ``--tasks`` and the seeds of ``--seeds``; None after printing what is wrong in one line."""
    unknown = [t for t in tasks.split(",") if t not in BY_KEY]
    if unknown:
        print(f"{prog}: unknown task {unknown[0]!r}; accepted: {', '.join(BY_KEY)}", file=sys.stderr)
        return None
    from bench_args import seeds as seeds_arg

    parsed = seeds_arg(prog, seeds)
    return None if parsed is None else (tasks.split(","), parsed)

