"""The standard ``q-learning`` mode on CliffWalking-v1 and Taxi-v4: its hyperparameters tuned, and its figures.

    python bench/qlearning_tune.py --grid --seeds 100-109     # tuning: every grid point on the tuning seeds
    python bench/qlearning_tune.py --seeds 0-9                # the mode's declared settings on the judged seeds

A run is ``train --backend q-learning`` with ``--max-episodes`` the suite's budget for the task (CliffWalking-v1:
500 here, the goal's "within 500 episodes"; Taxi-v4: 1,000, the goal suite's), every counted episode included
(learner, test and confirmation); the figure is the kept table's held-out mean (100 episodes) at the end. The grid
point chosen is the one with the most tuning seeds at CliffWalking's optimum, then the highest mean on Taxi; the
judged seeds 0-9 never choose anything. Prints a Markdown table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_pool import worker_pool

TASKS = {"CliffWalking-v1": 500, "Taxi-v4": 1000}
GRID = {"q_alpha": (0.1, 0.5, 1.0), "q_epsilon_start": (1.0, 0.1), "q_epsilon_episodes": (50, 100, 200)}
#: alpha = 1 is run but never chosen: it keeps only each value's last sample, right only for deterministic
#: transitions (these two tasks), and the mode serves every task.
CHOOSABLE = {"q_alpha": (0.1, 0.5)}


def run_one(env_id: str, seed: int, point: dict[str, Any], budget: int) -> dict[str, Any]:
    os.environ["LLM_POLICY_GEN_WORKERS"] = "1"
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import train
    from llm_policy_gen.run.files import RunDir

    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig.build(({"env_id": env_id, "mode": "q-learning", "seed": seed, "iterations": 100_000,
                                  "max_episodes": budget, "logs_dir": tmp, "progress": False,
                                  "quiet": True, "plots": False, **point}, "bench"))
        result = train(cfg, log=lambda _m: None)
        events = RunDir(result.run_dir).load_events()  # none when the budget ended before the first iteration
    s = result.summary
    return {"env_id": env_id, "seed": seed, **point, "budget": budget, "heldout": s["best_eval_mean"],
            "episodes": s["episodes_total"], "steps": s["env_steps_total"],
            "optimum_at": next((e["episodes_total"] for e in events if e.get("heldout_mean") == -13.0), None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100-109")
    ap.add_argument("--grid", action="store_true", help="every grid point (else the mode's declared settings)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="qlearning_tune.json")
    ap.add_argument("--budgets", default="", help="ENV=EPISODES,... instead of the default budgets")
    args = ap.parse_args()
    from bench_args import out_file, workers_ok
    from bench_args import seeds as seeds_arg

    seeds = seeds_arg("qlearning_tune", args.seeds)
    if seeds is None or not workers_ok("qlearning_tune", args.workers) or out_file("qlearning_tune", args.out) is None:
        return 2
    budgets = dict(TASKS)
    for item in filter(None, args.budgets.split(",")):
        env, _, n = item.partition("=")
        if env not in budgets or not n.isdigit() or int(n) < 1:
            print(f"qlearning_tune: bad --budgets item {item!r}: ENV=EPISODES with ENV one of {', '.join(budgets)}",
                  file=sys.stderr)
            return 2
        budgets[env] = int(n)
    from llm_policy_gen.modes.qlearning import QLearningOptions

    points = [dict(zip(GRID, v, strict=True)) for v in itertools.product(*GRID.values())] if args.grid else \
        [{k: QLearningOptions().model_dump()[k] for k in GRID}]
    jobs = [(env, s, p, budgets[env]) for p in points for env in TASKS for s in seeds]
    with worker_pool(args.workers) as pool:
        rows = list(pool.map(run_one, *zip(*jobs, strict=True)))
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"budgets: {budgets}\n")
    print("| " + " | ".join(GRID) + " | CliffWalking at -13 (of seeds) | CliffWalking mean | Taxi mean | per seed |")
    print("|" + " --- |" * (len(GRID) + 4))
    ranked = []
    for p in points:
        mine = [r for r in rows if all(r[k] == v for k, v in p.items())]
        cliff = [r for r in mine if r["env_id"] == "CliffWalking-v1"]
        taxi = [r for r in mine if r["env_id"] == "Taxi-v4"]
        hits = sum(r["optimum_at"] is not None and r["optimum_at"] <= budgets["CliffWalking-v1"] for r in cliff)
        cm, tm = statistics.mean(r["heldout"] for r in cliff), statistics.mean(r["heldout"] for r in taxi)
        if all(p[k] in v for k, v in CHOOSABLE.items()):
            ranked.append((hits, tm, p))
        per = "; ".join(f"{e}: " + ", ".join(f"{r['heldout']:.2f}" for r in mine if r["env_id"] == e) for e in TASKS)
        print("| " + " | ".join(str(v) for v in p.values()) + f" | {hits} of {len(cliff)} | {cm:.2f} | {tm:.2f} | "
              f"{per} |")
    for r in rows:
        if r["env_id"] == "CliffWalking-v1" and not args.grid:
            print(f"CliffWalking-v1 seed {r['seed']}: -13 first held out after {r['optimum_at']} counted episodes")
    if args.grid and ranked:
        best = max(ranked, key=lambda t: (t[0], t[1]))
        print(f"\nchosen (most CliffWalking seeds at -13, then Taxi's mean; {CHOOSABLE}): {best[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
