"""Spec settings chosen on the tuning seeds only (issue 32 item 5): a coordinate search over each task's training
settings on seeds 100-109 (100-104 for the long tasks), never on the judged seeds 0-9.

    python bench/tune_specs.py [--tasks cartpole,mountaincar,...] [--seeds 100-109] [--workers N]
                               [--out ~/llm-policy-gen-bench/tune] [--report-only] [--full-grid]
    python bench/tune_specs.py --tasks swimmer,hopper --plan [--out DIR]   # what is left, in CPU hours (tune_plan.md)

A task's **settings today** are the package defaults, overlaid with its spec's ``train_defaults`` and the suite's
per-task settings (``goals.toml``, through ``bench/goal_runs.py``); its budget is the suite's. The **grid** is one
pass of a coordinate search around them: every tuned setting (``candidates``, ``train_episodes``, ``test_start``,
``test_max``, ``confirm_episodes``, ``confirm_batches``) at half and at double today's value, one setting changed at
a time (values below 1, and a ``test_max`` below ``test_start``, are left out), then every change that beat today's
settings combined into one more point. Structure (the bins, the answer format, the prior) is not tuned: it is the spec
itself, not a setting; nor is the offline search's ``[search]`` table (``restart_after`` and the step sizes, set only
by Swimmer-v5's spec), which a run's settings cannot change.

A point is judged on the tuning seeds by the measure the goal table is judged on (``suites/summary.py``): the
**within-budget** held-out mean (100 episodes) of each seed, the kept table's as of the last iteration that ended
within the task's episode budget. First the count of seeds whose within-budget mean meets the goal, then the
interquartile mean of those means (:mod:`llm_policy_gen.plotting.stats`, rliable). (The run's final held-out mean would
reward settings whose last iteration runs far past the budget's check: a larger confirmation, say; an earlier
version judged on it and chose such a point for CartPole-v1.) A change **beats** today's settings only beyond the
seeds' noise: it meets the goal on more tuning seeds, or on as many with the lower end of its IQM's 95% bootstrap
interval above today's IQM (a difference of a fraction of a point between IQMs, which ten seeds cannot tell apart,
changes nothing). The changes that beat today's are combined into one more point (where both values of one setting
beat today's, the better of the two), which must beat today's the same way. The **chosen** point is the best, by
seeds met then IQM, of those that beat today's; with none, today's settings stay.
Today's point runs on every tuning seed first; the changes then run one seed at a time (each round every change
still in the race on its next seed), and a change **stops** as soon as it has missed the goal on more seeds than
today's missed in all: it can then meet the goal on fewer seeds than today's at most, so it cannot beat today's, and
the seeds it has not run cannot change the choice. The chosen point is the one the whole grid would choose, at a
fraction of the runs where today's meets the goal on most seeds (the long tasks' grids are tens of CPU-hours);
``--full-grid`` runs every point on every seed anyway.
Every run is a ``bench/goal_runs.py`` run (the same code: resumed if interrupted, reused if finished) in
``OUT/runs``, so the search goes on across sessions. Each finished run's record is also kept in
``OUT/tune_runs.json`` as soon as it ends, and a run found there is not run again: a copy of that file (and
``tune.json``) in a fresh ``OUT`` carries a search that is not finished to another machine, which loses only the
runs in progress (``bench/data/tune/`` keeps these copies).

Written to ``OUT``: ``tune.json`` (per task: every point, its figures and its runs' ids, when the task's search
has finished; an older file's run records are moved to ``tune_runs.json`` first), ``tune_runs.json`` (every
finished run's record, as it ends) and ``tune_specs.md``
(per task: the settings today, the grid tried with each point's seeds met, IQM and verdict, the chosen point and
which settings it changes). Two invocations may share one ``OUT`` (another task beside a long one): each replaces only
its own tasks' entries of ``tune.json``, under the file's lock (:mod:`results_file`).
Applying a choice is an edit of the spec's ``[train_defaults]`` (or the task's settings in ``goals.toml``) by hand,
after which the goal table is re-judged on seeds 0-9 with ``llm-policy-gen bench goals``. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from concurrent.futures import as_completed
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402
from bench_args import out_dir, read_json, run_main, workers_ok  # noqa: E402
from bench_pool import worker_pool  # noqa: E402
from goal_runs import BY_KEY, LONG, Goal, meets, run_one, tasks_and_seeds  # noqa: E402
from tune_store import RUNS_FILE, kept_runs, lift, run_name  # noqa: E402

DEFAULT_OUT = Path.home() / "llm-policy-gen-bench" / "tune"
TUNED = ("candidates", "train_episodes", "test_start", "test_max", "confirm_episodes", "confirm_batches")
TUNING_SEEDS = tuple(range(100, 110))
LONG_TUNING_SEEDS = tuple(range(100, 105))
SUITE_RESULTS = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "goals" / "records.jsonl"
"""The goal suite's committed records: a task's CPU seconds per run for ``--plan``."""

Point = tuple[tuple[str, Any], ...]


def today(goal: Goal) -> dict[str, Any]:
    """The task's settings today, under the code's names: defaults < spec ``train_defaults`` < the suite's."""
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.schema.aliases import settings_in

    spec = get_spec(goal.env_id)
    defaults = TrainConfig.model_fields
    values = {k: defaults[k].default for k in TUNED if k in defaults}
    values.update({k: v for k, v in settings_in(spec.train_defaults, "spec").items() if k in TUNED})
    values.update({k: v for k, v in settings_in(dict(goal.settings), "suite").items() if k in TUNED})
    return values


def valid(values: dict[str, Any]) -> bool:
    return all(isinstance(v, int) and v >= 1 for k, v in values.items() if k in TUNED) and \
        values.get("test_max", 1) >= values.get("test_start", 1)


def single_changes(base: dict[str, Any]) -> list[dict[str, Any]]:
    """Each tuned setting at half and at double today's value, one at a time (invalid points left out)."""
    points = []
    for key, value in base.items():
        for new in sorted({max(1, value // 2), value * 2} - {value}):
            point = {**base, key: new}
            if valid(point):
                points.append(point)
    return points


def as_goal(goal: Goal, values: dict[str, Any], base: dict[str, Any]) -> Goal:
    """The suite's goal with the point's settings; today's point is the suite's own run id (no digest added)."""
    if values == base:
        return goal
    from llm_policy_gen.schema.aliases import settings_in

    kept = {k: v for k, v in settings_in(dict(goal.settings), "suite").items() if k not in TUNED}
    return replace(goal, settings=tuple(sorted({**kept, **values}.items())))


def judge(goal: Goal, rows: list[dict[str, Any]]) -> tuple[int, float | None, float | None]:
    """(seeds that meet the goal, IQM of the within-budget held-out means, the lower end of its 95% interval) of
    one point's runs."""
    import numpy as np

    from llm_policy_gen.plotting.stats import iqm_interval

    vals = [r.get("heldout_within") for r in rows]
    met = len(rows) - misses(goal, rows)
    finite = [float(v) for v in vals if v is not None]
    if not finite:
        return met, None, None
    iv = iqm_interval(np.asarray(finite))
    return met, iv.estimate, iv.low


Scored = tuple[dict[str, Any], int, float | None, float | None]


def beats(point: Scored, base: Scored) -> bool:
    """More seeds at the goal, or as many and the IQM's interval wholly above today's IQM (see the module doc)."""
    _, met, _, low = point
    _, base_met, base_iqm, _ = base
    if met != base_met:
        return met > base_met
    return low is not None and base_iqm is not None and low > base_iqm


def run_points(jobs: list[tuple[Goal, int]], out: Path, workers: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Run (or reuse) every (goal, seed); records keyed by (run id digest of the goal, seed). A run whose record is
    ``OUT`` keeps (:func:`kept_runs`) is not run again (its folder may be gone); each finished run's record goes to
    ``OUT/tune_runs.json`` (merged under the file's lock, :mod:`results_file`) as soon as it ends."""
    from goal_runs import run_id as _run_id

    store = out / RUNS_FILE
    kept = kept_runs(out)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    todo: list[tuple[Goal, int]] = []
    for g, s in jobs:
        rid = _run_id(g, "offline", s)
        if rid in kept:
            done[(rid, s)] = {**kept[rid], "reused": True}
        else:
            todo.append((g, s))
    if done:
        print(f"{len(done)} run(s) read back from the records in {out}", flush=True)
    with worker_pool(workers) as pool:
        futures = {pool.submit(run_one, g, "offline", s, out): (g, s) for g, s in todo}
        for fut in as_completed(futures):
            g, s = futures[fut]
            rec = fut.result()
            done[(_run_id(g, "offline", s), s)] = rec
            if "heldout" in rec:  # a failed run is tried again next time
                results_file.merge_save(store, [rec], key=run_name, order=run_name)
            print(f"{g.key} {dict(g.settings) or 'today'} seed {s}: held-out {rec.get('heldout')}"
                  f"{' (reused)' if rec.get('reused') else ''}", flush=True)
    return done


def _missed(goal: Goal, record: Mapping[str, Any]) -> bool:
    """Whether a run missed the goal on the within-budget measure."""
    return not meets(goal, record.get("heldout_within"))


def misses(goal: Goal, rows: list[dict[str, Any]]) -> int:
    """How many of a point's runs missed the goal on the within-budget measure."""
    return sum(_missed(goal, r) for r in rows)


def tune(goal: Goal, seeds: list[int], out: Path, workers: int, full: bool = False) -> dict[str, Any]:
    from goal_runs import run_id as _run_id

    base = today(goal)
    points = [base, *single_changes(base)]
    ran = [0] * len(points)  # how many of the seeds (in order) each point has run
    recs: dict[tuple[str, int], dict[str, Any]] = {}

    def ids_of(i: int) -> list[tuple[str, int]]:
        g = as_goal(goal, points[i], base)
        return [(_run_id(g, "offline", s), s) for s in seeds[:ran[i]]]

    def rows_of(i: int) -> list[dict[str, Any]]:
        return [recs[k] for k in ids_of(i)]

    def run(indices: list[int], upto: int) -> None:
        recs.update(run_points([(as_goal(goal, points[i], base), s) for i in indices for s in seeds[ran[i]:upto]],
                               out, workers))
        for i in indices:
            ran[i] = upto

    run([0], len(seeds))
    may_miss = misses(goal, rows_of(0))  # a change that misses more cannot meet as many seeds as today's
    for n in range(1, len(seeds) + 1):  # the changes one seed at a time; a change out of the race stops
        in_race = [i for i in range(1, len(points)) if ran[i] == n - 1]
        run([i for i in in_race if full or misses(goal, rows_of(i)) <= may_miss], n)
    scored: list[Scored] = [(p, *judge(goal, rows_of(i))) for i, p in enumerate(points)]

    def key(t: Scored) -> tuple[int, float]:
        return t[1], -1e18 if t[2] is None else t[2]

    # worst first, so that where two values of one setting beat today's (half and double), the better one is combined
    better = [t[0] for t in sorted((t for t in scored[1:] if beats(t, scored[0])), key=key)]
    combined = dict(base)
    for p in better:
        combined.update({k: v for k, v in p.items() if v != base[k]})
    if len(better) > 1 and valid(combined) and combined not in points:
        points.append(combined)
        ran.append(0)
        run([len(points) - 1], len(seeds))
        scored.append((combined, *judge(goal, rows_of(len(points) - 1))))
    winners = [t for t in scored[1:] if beats(t, scored[0])]
    best = max(winners, key=key) if winners else scored[0]
    runs = [rid for i in range(len(points)) for rid, _ in ids_of(i)]
    return {"task": goal.key, "env_id": goal.env_id, "budget": goal.budget, "goal": goal.goal, "seeds": seeds,
            "today": base, "points": [{"settings": p, "met": m, "iqm": q, "iqm_low": lo,
                                       "beats_today": i > 0 and beats((p, m, q, lo), scored[0]),
                                       "heldout_within": [r.get("heldout_within") for r in rows_of(i)],
                                       "heldout": [r.get("heldout") for r in rows_of(i)],
                                       **({"stopped_after": ran[i]} if ran[i] < len(seeds) else {})}
                                      for i, (p, m, q, lo) in enumerate(scored)],
            "chosen": best[0], "changed": {k: v for k, v in best[0].items() if v != base[k]}, "runs": runs}


def write_report(out: Path, results: list[dict[str, Any]]) -> Path:
    lines = ["## Spec settings tuned on seeds 100-109 (100-104 for the long tasks)", "",
             "Regenerate: `python bench/tune_specs.py --tasks " + ",".join(r["task"] for r in results) +
             f" --out {out}`", "",
             "One pass of a coordinate search (each setting at half and double today's value, then the changes "
             "that beat today's combined), judged on each seed's within-budget held-out mean, the measure of the "
             "goal table. A change beats today's when it meets the goal on more tuning seeds, or "
             "on as many with the lower end of its IQM's 95% interval above today's IQM; the chosen point is the "
             "best (seeds met, then IQM) of those that beat today's, else today's. A change runs one seed at a "
             "time and stops once it has missed the goal on more seeds than today's missed in all (it cannot beat "
             "today's then); its figures are over the seeds it ran.", ""]
    for r in results:
        names = list(r["today"])
        lines += [f"### {r['env_id']} (budget {r['budget']:,} episodes, goal {r['goal']}, seeds "
                  f"{r['seeds'][0]}-{r['seeds'][-1]})", "",
                  "| " + " | ".join(names) + " | seeds met | IQM within budget [95% CI low] | beats today's |"
                  " per seed (within budget) |",
                  "|" + " --- |" * (len(names) + 4)]
        for p in r["points"]:
            cells = [(f"**{p['settings'][k]}**" if p["settings"][k] != r["today"][k] else str(p["settings"][k]))
                     for k in names]
            iqm = "-" if p["iqm"] is None else f"{p['iqm']:,.2f} [{p.get('iqm_low') or float('nan'):,.2f}]"
            per = ", ".join("-" if v is None else f"{v:.1f}" for v in p.get("heldout_within", p["heldout"]))
            verdict = "today's" if p["settings"] == r["today"] else ("yes" if p.get("beats_today") else "no")
            met = f"{p['met']}/{len(r['seeds'])}"
            if "stopped_after" in p:
                met = f"{p['met']}/{p['stopped_after']}, stopped"
                verdict = f"no: missed more seeds than today's in {p['stopped_after']}"
            lines.append("| " + " | ".join(cells) + f" | {met} | {iqm} | {verdict} | {per} |")
        changed = ", ".join(f"{k} {r['today'][k]} -> {v}" for k, v in r["changed"].items()) or "none (today's kept)"
        lines += ["", f"Chosen: {changed}.", ""]
    path = out / "tune_specs.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def tuning_seeds(goal: Goal, given: list[int] | None) -> list[int]:
    return given if given else list(LONG_TUNING_SEEDS if goal.seeds == LONG else TUNING_SEEDS)


def _label(point: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """A point's name in a table: "today's", or each setting it moves from today's value."""
    moved = [f"{k} {base[k]} -> {v}" for k, v in point.items() if v != base[k]]
    return ", ".join(moved) or "today's"


def plan(tasks: list[str], given: list[int] | None, out: Path, suite_results: Path) -> int:
    """``--plan``: the tasks' grids against the runs ``OUT`` keeps, projected in CPU hours (:mod:`tune_plan`)."""
    import tune_plan
    from goal_runs import run_id as _run_id

    grids = []
    for key in tasks:
        goal = BY_KEY[key]
        base, seeds = today(goal), tuning_seeds(goal, given)
        points = [base, *single_changes(base)]
        grids.append(tune_plan.Grid(key, goal.env_id, tuple(seeds),
                                    tuple(tuple(_run_id(as_goal(goal, p, base), "offline", s) for s in seeds)
                                          for p in points),
                                    partial(_missed, goal), tuple(_label(p, base) for p in points)))
    from llm_policy_gen.suites.store import read_records

    suite = [{"task": r.task, "backend": r.method, "cpu_s": r.result.get("cpu_s"), "heldout": r.heldout}
             for r in read_records(suite_results) if r.heldout is not None]
    page = tune_plan.markdown(grids, kept_runs(out), suite)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune_plan.md").write_text(page)
    print(page, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="cartpole,mountaincar,acrobot,pendulum")
    ap.add_argument("--seeds", default="", help="e.g. 100-104; default 100-109 (100-104 for the long tasks)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--report-only", action="store_true", help="rewrite tune_specs.md from OUT/tune.json")
    ap.add_argument("--full-grid", action="store_true",
                    help="run every change on every seed (by default a change that can no longer beat today's stops)")
    ap.add_argument("--plan", action="store_true",
                    help="run nothing: project the CPU hours the tasks' grids still need (OUT/tune_plan.md)")
    ap.add_argument("--suite-results", type=Path, default=SUITE_RESULTS,
                    help="the goal suite's records.jsonl, whose offline runs give a task's CPU seconds per run for "
                         "--plan "
                         "before any of its tuning runs has finished")
    args = ap.parse_args(argv)
    if not workers_ok("tune_specs", args.workers):
        return 2
    parsed = tasks_and_seeds("tune_specs", args.tasks, args.seeds or "100")
    if parsed is None:
        return 2
    tasks, seeds = parsed
    if args.seeds and min(seeds) < 100:
        print("tune_specs: tuning seeds start at 100 (0-99 are the judged seeds' range)", file=sys.stderr)
        return 2
    out = out_dir("tune_specs", args.out)
    if out is None:
        return 2
    store = out / "tune.json"
    if args.report_only and not store.is_file():
        print(f"tune_specs: --report-only: no {store}", file=sys.stderr)
        return 2
    if args.plan:
        return plan(tasks, seeds if args.seeds else None, out, args.suite_results)
    if not args.report_only:
        lift(out)
    results: dict[str, Any] = read_json(store, {})
    if not args.report_only:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        for key in tasks:
            goal = BY_KEY[key]
            task_seeds = tuning_seeds(goal, seeds if args.seeds else None)
            # another invocation may tune other tasks into the same --out: only this task's entry is replaced
            record = tune(goal, task_seeds, out, args.workers, args.full_grid)
            results = results_file.merge_entries(store, {key: record})
    print(f"wrote {write_report(out, list(results.values()))}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main("tune_specs", main))
