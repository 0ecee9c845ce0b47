"""The goal table of issue 10, measured: offline, q-learning and random on the standard tasks, seeds 0-2.

    python bench/suite.py [--tasks cartpole,taxi,...] [--backends offline,q-learning,random] [--seeds 0-2]
                          [--workers N] [--out logs/bench/suite] [--list]

Every (task, backend, seed) is one ``train`` run with ``--max-episodes`` at the task's budget (and the spec's own
training defaults: answer format, candidates, test seeds), in its own run directory under ``OUT/runs``; a run whose
``summary.json`` exists is not run again and one with only a checkpoint is resumed, so an interrupted suite continues
where it stopped. Runs go to ``--workers``
processes (each run in one process: ``LLM_POLICY_GEN_WORKERS=1``), which is where parallelism pays on a small
machine: the episodes of one run are short batches, whole runs are independent.

Written to ``OUT``: ``results.json`` (one record per run) and ``suite.md``: per task and backend the median over
seeds of the final held-out mean (100 episodes), the same kept table's held-out mean as of the last iteration that
ended within the budget (the run may pass the budget in its last iteration, by at most one iteration's episodes),
the episodes used, wall and CPU seconds, and the goal and anchor numbers beside them.

Runs of tables over 100,000 states lose their per-iteration policy files afterwards (``policies/iter_*.json``, several
MB each, one per iteration; ``--keep-policies`` keeps them); ``best_policy.json`` stays.

Not a test: it prints figures. The big tasks take long (Hopper rich and BipedalWalker rich: 10,000 episodes per run).
Random and q-learning tables of more than ``--baseline-max-states`` states are not run: a random table of 65,536
states is about 1.4 MB of answer text per candidate, written to the transcript every iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
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


GOALS = [
    # CartPole's spec keeps the seed project's defaults (4 training episodes per iteration, the engine's confirmation);
    # a budget of 100 episodes needs them leaner.
    Goal("cartpole", "CartPole-v1", 100, 475, "seed paper ~20-30 iterations (80-130 episodes); SB3 DQN 50k steps",
         "445 (solves at a median of 192)",
         settings=(("train_episodes", 1), ("confirm_episodes", 4), ("confirm_batches", 2))),
    Goal("invertedpendulum", "InvertedPendulum-v5", 500, 950, "ProPS 1000", "40"),
    Goal("mountaincarcontinuous", "MountainCarContinuous-v0", 100, 93,
         "ProPS+ 89.2; SB3 SAC 94.7 after 50k steps", "0 (93.7 first at 178)"),
    Goal("mountaincar", "MountainCar-v0", 1000, -120, "ProPS+ -117; DQN -194", "-148"),
    Goal("acrobot", "Acrobot-v1", 1000, -100, "SB3 PPO -73.5 after 1M steps", "-308"),
    Goal("pendulum", "Pendulum-v1", 1000, -160, "SB3 TD3 -152 after 20k steps", "-213"),
    Goal("taxi", "Taxi-v4", 2000, 7, "threshold 8", "-367"),
    Goal("cliffwalking", "CliffWalking-v1", 500, -13, "optimum -13", "-13 (keep it)", exact=True),
    Goal("frozenlake8x8", "FrozenLake-v1.8x8", 3000, 0.70, "threshold 0.7; ProPS 0.57 on its FrozenLake",
         "0.03 after 10 iterations"),
    Goal("swimmer", "Swimmer-v5", 2000, 220, "ProPS+ 227", "45 at 1,000"),
    Goal("lunarlander", "LunarLander-v3", 3000, 200, "SB3 PPO 242 after 1M steps", "-78"),
    Goal("hopper", "Hopper-v5", 3000, 1000, "CEM on this table ~1,010 at ~10,000 episodes", "354"),
    Goal("hopper-rich", "Hopper-v5.rich", 10000, 2000,
         "3-level linear rule 2,438 at 9,600 (ARS); PPO 2,410 after 1M steps", "-"),
    Goal("bipedalwalker-rich", "BipedalWalker-v3.rich", 10000, 100,
         "3-level linear rule by ARS peaked at 72 in 11,000 episodes", "28 at 1,000"),
]
BY_KEY = {g.key: g for g in GOALS}
BACKENDS = ("offline", "q-learning", "random")


PRUNE_ABOVE = 100_000
"""Tables with more states than this lose their per-iteration policy files after the run (several MB each, one
per iteration); ``best_policy.json`` stays, so ``evaluate`` and the summary are unchanged."""


def _n_states(run_dir: Path) -> int:
    return int(json.loads((run_dir / "best_policy.json").read_text())["n_states"])


def run_one(goal: Goal, backend: str, seed: int, out: Path, keep_policies: bool = False) -> dict[str, Any]:
    """One run (in a worker process); returns its record. Reuses a finished run's summary."""
    os.environ["LLM_POLICY_GEN_WORKERS"] = "1"
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import resume, train
    from llm_policy_gen.runlog import read_jsonl

    run_id = f"{goal.key}_{backend}_s{seed}"
    logs = out / "runs"
    record: dict[str, Any] = {"task": goal.key, "env_id": goal.env_id, "backend": backend, "seed": seed,
                              "budget": goal.budget}
    existing = [p for p in logs.glob(f"*/{run_id}") if (p / "summary.json").is_file()]
    partial = [p for p in logs.glob(f"*/{run_id}") if (p / "checkpoint.npz").is_file() and p not in existing]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    if existing:
        run_dir = existing[0]
        summary = json.loads((run_dir / "summary.json").read_text())
        record["reused"] = True
    elif partial:  # an interrupted suite: the run goes on from its last checkpoint (same result as uninterrupted)
        try:
            result = resume(partial[0], {}, log=lambda _m: None)
        except Exception as exc:
            return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
        run_dir, summary = result.run_dir, result.summary
        record["resumed"] = True
    else:
        cfg = TrainConfig.build(({"env_id": goal.env_id, "backend": backend, "seed": seed,
                                  "max_episodes": goal.budget, "iterations": 100_000, "logs_dir": str(logs),
                                  "run_id": run_id, "progress": False, "quiet": True, "plots": False,
                                  **dict(goal.settings)}, "suite"))
        try:
            result = train(cfg, log=lambda _m: None)
        except Exception as exc:  # a failed run is a row with its error
            return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
        run_dir, summary = result.run_dir, result.summary
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if not keep_policies and _n_states(run_dir) > PRUNE_ABOVE:
        pruned = list((run_dir / "policies").glob("iter_*.json"))
        for f in pruned:
            f.unlink()
        record["pruned_policies"] = len(pruned)
    events = read_jsonl(run_dir / "events.jsonl")
    within = [e for e in events if e["episodes_total"] <= goal.budget]
    record.update(
        run_dir=str(run_dir), heldout=summary["best_eval_mean"], episodes=summary["episodes_total"],
        iterations=summary["iterations"], wall_s=summary["wall_s"],
        cpu_s=None if existing or partial else round(usage.ru_utime + usage.ru_stime - cpu0, 1),
        heldout_within=within[-1]["best_eval_mean"] if within else None,
        episodes_within=within[-1]["episodes_total"] if within else 0,
        reached_at=next((e["episodes_total"] for e in events if _met(goal, e.get("best_eval_mean"))), None),
        stop=summary["stop_reason"], output_format=json.loads((run_dir / "config.json").read_text()).get(
            "output_format"))
    return record


def _met(goal: Goal, value: float | None) -> bool:
    if value is None:
        return False
    return abs(value - goal.goal) < 1e-9 if goal.exact else value >= goal.goal - 1e-9


def _median(xs: list[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, goal: Goal | None = None) -> str:
    if x is None:
        return "-"
    digits = 2 if goal is not None and abs(goal.goal) < 10 else 1
    return f"{x:,.{digits}f}"


def markdown(records: list[dict[str, Any]], note: str) -> str:
    lines = [
        "# Goal table (bench/suite.py)", "", note, "",
        "Held-out mean over 100 episodes of the kept table, median of the seeds (each seed's value in brackets); "
        "'within' is the same as of the last iteration that ended within the budget; episodes are all counted "
        "episodes (training, test, confirmation); 'reached' is the median episode count at which the kept table's "
        "held-out mean first met the goal (- if not in every seed: the count of seeds that met it is given).", "",
        "| task | goal | budget | backend | held-out (seeds) | within budget | episodes used | reached | wall s | "
        "CPU s | today | anchors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for goal in GOALS:
        rows = [r for r in records if r["task"] == goal.key]
        for backend in BACKENDS:
            rs = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["seed"])
            if not rs:
                continue
            goal_txt = f"{'=' if goal.exact else '>='} {_fmt(goal.goal, goal)}"
            task = goal.env_id + "".join(f" --{k.replace('_', '-')} {v}" for k, v in goal.settings)
            if any("error" in r or "skipped" in r for r in rs):
                why = next(r.get("error") or r.get("skipped") for r in rs if "error" in r or "skipped" in r)
                lines.append(f"| {task} | {goal_txt} | {goal.budget:,} | {backend} | not run: {why} | | | | | "
                             f"| {goal.today} | {goal.anchors} |")
                continue
            held = _median([r["heldout"] for r in rs])
            seeds = ", ".join(_fmt(r["heldout"], goal) for r in rs)
            reached = [r["reached_at"] for r in rs]
            n_met = sum(x is not None for x in reached)
            reached_txt = f"{_median(reached):,.0f}" if n_met == len(rs) else f"- ({n_met}/{len(rs)} seeds)"
            cpu = _median([r.get("cpu_s") for r in rs])
            lines.append(
                f"| {task} | {goal_txt} | {goal.budget:,} | {backend} | **{_fmt(held, goal)}** ({seeds}) | "
                f"{_fmt(_median([r['heldout_within'] for r in rs]), goal)} | "
                f"{_median([r['episodes'] for r in rs]):,.0f} | {reached_txt} | "
                f"{_median([r['wall_s'] for r in rs]):,.0f} | {'-' if cpu is None else f'{cpu:,.0f}'} | "
                f"{goal.today} | {goal.anchors} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(BY_KEY), help="comma-separated task keys (see --list)")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="logs/bench/suite")
    ap.add_argument("--baseline-max-states", type=int, default=5000,
                    help="run q-learning and random only on tables up to this many states")
    ap.add_argument("--keep-policies", action="store_true",
                    help=f"keep the per-iteration policy files of tables over {PRUNE_ABOVE:,} states")
    ap.add_argument("--list", action="store_true", help="list the tasks and exit")
    args = ap.parse_args(argv)
    if args.list:
        for g in GOALS:
            print(f"{g.key:<22} {g.env_id:<26} goal {g.goal:>8g} within {g.budget:>6,} episodes")
        return 0
    unknown = [t for t in args.tasks.split(",") if t not in BY_KEY]
    if unknown:
        print(f"suite: unknown task {unknown[0]!r}; accepted: {', '.join(BY_KEY)}", file=sys.stderr)
        return 2
    from llm_policy_gen.errors import UserError
    from llm_policy_gen.sweep.plan import parse_seeds

    try:
        seeds = parse_seeds(args.seeds)
    except UserError as exc:
        print(f"suite: {exc}", file=sys.stderr)
        return 2
    from llm_policy_gen.envs import get_spec

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    records: dict[tuple[str, str, int], dict[str, Any]] = {}
    if results_file.is_file():
        for r in json.loads(results_file.read_text()):
            records[(r["task"], r["backend"], r["seed"])] = r
    jobs: list[tuple[Goal, str, int]] = []
    for key in args.tasks.split(","):
        goal = BY_KEY[key]
        n_states = get_spec(goal.env_id).n_states
        for backend in args.backends.split(","):
            for seed in seeds:
                if backend != "offline" and n_states > args.baseline_max_states:
                    records[(key, backend, seed)] = {"task": key, "env_id": goal.env_id, "backend": backend,
                                                     "seed": seed, "skipped": f"{n_states:,} states (text answers "
                                                     f"too big; --baseline-max-states {args.baseline_max_states})"}
                    continue
                done = records.get((key, backend, seed))
                if done is None or "error" in done or "skipped" in done:
                    jobs.append((goal, backend, seed))
    # The longest runs first, so that the pool's last minutes are not one big run alone.
    jobs.sort(key=lambda j: -j[0].budget)
    started = time.time()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        futures = {pool.submit(run_one, g, b, s, out, args.keep_policies): (g.key, b, s) for g, b, s in jobs}
        for fut in as_completed(futures):
            key = futures[fut]
            rec = fut.result()
            records[key] = rec
            shown = rec.get("error") or f"held-out {_fmt(rec['heldout'])} after {rec['episodes']} episodes, " \
                                         f"{rec['wall_s']:.0f} s"
            print(f"{key[0]} {key[1]} seed {key[2]}: {shown}", flush=True)
            results_file.write_text(json.dumps(sorted(records.values(), key=lambda r: (r["task"], r["backend"],
                                                                                       r["seed"])), indent=1))
    note = (f"Measured on {os.cpu_count()} cores shared with other work (load average {load:.1f} at the start), "
            f"{args.workers} runs at a time; wall seconds are inflated by the sharing, CPU seconds much less. "
            f"This invocation took {time.time() - started:,.0f} s.")
    (out / "suite.md").write_text(markdown(sorted(records.values(), key=lambda r: (r["task"], r["seed"])), note))
    print(f"wrote {out / 'suite.md'} and {results_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
