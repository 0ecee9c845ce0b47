"""Every method of the goal table as runs with curves: the suite's backends, the peers, the zero-episode prior; the
curve data (``curves.csv``), a figure per task and the performance profiles across tasks (issue 32 item 3).

A **run** is one seed of one method on one task: its final held-out mean (100 held-out episodes) and its curve,
held-out return against environment steps and against episodes (every counted episode: training, test and
confirmation; held-out episodes are never counted):

* a suite run (``offline``, ``offline-neutral``, ``q-learning``, ``random``): after every iteration the kept table's
  held-out mean (``best_eval_mean`` in ``events.jsonl``: 100 held-out episodes, measured whenever the kept table
  changes), at the run's step and episode counts then;
* a peer (``bench/peers.py``): its curve points (the first ``--curve-episodes`` held-out seeds, every
  ``horizon / --curve-points`` steps), then its final mean on the 100 held-out seeds at the end of training; a
  peer that did not reach its budget has no run here;
* the prior: one point at zero steps and episodes.

Figures draw, per method, rliable's interquartile mean over seeds and its 95 % stratified bootstrap band
(:func:`llm_policy_gen.plotting.stats.iqm_curve`, ``CURVE_RESAMPLES`` resamples) on a log-spaced grid, starting where
every seed of the method has a point (a curve holds its last value after a run's last point: the table or agent stands).
The performance profile (:func:`llm_policy_gen.plotting.stats.performance_profile`) is the fraction of runs whose
normalised final score exceeds each threshold, over the tasks a method ran on every seed of the common set.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CURVE_RESAMPLES = 200
"""Bootstrap resamples per curve (each grid point's interval; the tables use 2,000)."""
GRID_POINTS = 60
PRIOR = "prior, 0 episodes"
PEER_KIND_LABEL = {"steps": "= steps", "episodes": "= episodes", "zoo": "zoo budget"}
"""How bench/peers.py's budget kinds are named in columns and legends."""
SUITE_ORDER = ("offline", "offline-neutral", "offline-from-prior", "q-learning", "random")


@dataclass
class Run:
    """One seed of one method on one task."""

    task: str
    method: str
    seed: int
    final: float
    """Held-out mean over 100 episodes at the end."""
    steps: list[float] = field(default_factory=list)
    episodes: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    """The curve: held-out mean at (steps[i], episodes[i])."""
    total_steps: int | None = None
    total_episodes: int | None = None


def peer_method(record: Mapping[str, Any]) -> str:
    """A peer's method (and ``suite.md`` column) name: ``PPO = steps``, ``DQN zoo budget``."""
    return f"{str(record['algo']).upper()} {PEER_KIND_LABEL.get(str(record.get('kind')), record.get('kind'))}"


def curve_of(events: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    """A suite run's curve from its ``events.jsonl`` records: ``[env_steps, episodes, held-out mean]`` after every
    iteration that has them. Kept in the run's record (``results.json``), so that the report draws the curve without
    the run folder: the records outlive the folders (a new machine, a pruned disk)."""
    return [[float(e["env_steps_total"]), float(e["episodes_total"]), float(e["best_eval_mean"])]
            for e in events if e.get("best_eval_mean") is not None and e.get("env_steps_total") is not None]


def suite_runs(records: Sequence[Mapping[str, Any]]) -> list[Run]:
    """The suite's finished runs with their curves: from the record's ``curve``, else from the run folder's
    ``events.jsonl`` (a record written before records kept curves), else the final point alone."""
    out = []
    for r in records:
        if r.get("heldout") is None:
            continue
        run = Run(str(r["task"]), str(r["backend"]), int(r["seed"]), float(r["heldout"]),
                  total_steps=r.get("env_steps_total"), total_episodes=r.get("episodes"))
        events = Path(str(r.get("run_dir", ""))) / "events.jsonl"
        points = r.get("curve")
        if points is None and r.get("run_dir") and events.is_file():
            from llm_policy_gen.storage.runlog import read_jsonl

            points = curve_of(read_jsonl(events))
        if points is not None:
            for steps, episodes, mean in points:
                run.steps.append(float(steps))
                run.episodes.append(float(episodes))
                run.values.append(float(mean))
        elif run.total_steps is not None:
            run.steps, run.episodes, run.values = [float(run.total_steps)], [float(r["episodes"])], [run.final]
        out.append(run)
    return out


def peer_runs(records: Sequence[Mapping[str, Any]]) -> list[Run]:
    """The peers that reached their budget: their curve points, then the final held-out mean."""
    out = []
    for r in records:
        if r.get("heldout") is None or not r.get("reached"):
            continue
        run = Run(str(r["task"]), peer_method(r), int(r["seed"]), float(r["heldout"]),
                  total_steps=r.get("steps"), total_episodes=r.get("episodes"))
        for steps, episodes, mean in r.get("curve") or []:
            run.steps.append(float(steps))
            run.episodes.append(float(episodes))
            run.values.append(float(mean))
        run.steps.append(float(r["steps"]))
        run.episodes.append(float(r["episodes"]))
        run.values.append(run.final)
        out.append(run)
    return out


def prior_runs(priors: Mapping[str, Mapping[int, float]], seeds: Mapping[str, Sequence[int]]) -> list[Run]:
    """The zero-episode prior of each task on the seeds given for it."""
    return [Run(task, PRIOR, s, by_seed[s], [0.0], [0.0], [by_seed[s]], 0, 0)
            for task, by_seed in priors.items() for s in seeds.get(task, ()) if s in by_seed]


def methods(runs: Sequence[Run]) -> list[str]:
    """The methods in a fixed order: the prior, the suite's backends, then the peers as they come."""
    names = list(dict.fromkeys(r.method for r in runs))
    first = [m for m in (PRIOR, *SUITE_ORDER) if m in names]
    return first + [m for m in names if m not in first]


def write_csv(path: Path, runs: Sequence[Run]) -> Path:
    """``curves.csv``: one line per curve point (task, method, seed, point, env_steps, episodes, heldout_mean)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "method", "seed", "point", "env_steps", "episodes", "heldout_mean"])
        for r in sorted(runs, key=lambda r: (r.task, r.method, r.seed)):
            for i, (s, e, v) in enumerate(zip(r.steps, r.episodes, r.values, strict=True)):
                w.writerow([r.task, r.method, r.seed, i, int(s), int(e), repr(float(v))])
    tmp.replace(path)
    return path


def read_csv(path: Path) -> list[Run]:
    """The runs of a ``curves.csv`` (curves only: ``final`` is each curve's last value)."""
    runs: dict[tuple[str, str, int], Run] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            key = (row["task"], row["method"], int(row["seed"]))
            run = runs.setdefault(key, Run(*key, final=float("nan")))
            run.steps.append(float(row["env_steps"]))
            run.episodes.append(float(row["episodes"]))
            run.values.append(float(row["heldout_mean"]))
            run.final = run.values[-1]
    return list(runs.values())


def _band(runs: Sequence[Run], axis: str, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from llm_policy_gen.plotting.stats import iqm_curve, step_curves

    curves = [(r.steps if axis == "steps" else r.episodes, r.values) for r in runs]
    return iqm_curve(step_curves(curves, grid), reps=CURVE_RESAMPLES)


def task_figure(path: Path, title: str, runs: Sequence[Run], goal: float, random_return: float | None) -> Path:
    """Two panels, held-out return against environment steps and against episodes: per method the IQM over seeds
    and its 95 % band; the prior (zero episodes) a dotted line, the goal dashed, the uniform random policy grey."""
    from llm_policy_gen.plotting.curves import group_colours
    from llm_policy_gen.plotting.figure import plt, save_figure

    order = methods(runs)
    colours = dict(zip(order, group_colours(len(order)), strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), dpi=110)
    for ax, axis, label in ((axes[0], "steps", "environment steps (log)"),
                            (axes[1], "episodes", "environment episodes (log)")):
        xs = [x for r in runs for x in (r.steps if axis == "steps" else r.episodes) if x > 0]
        lo, hi = (min(xs), max(xs)) if xs else (1.0, 10.0)
        grid = np.geomspace(lo, max(hi, lo * 1.01), GRID_POINTS)
        drawn: dict[str, np.ndarray] = {}
        for m in order:
            mine = [r for r in runs if r.method == m]
            if m == PRIOR:
                iqm = _band(mine, axis, np.array([0.0]))[0][0]
                ax.axhline(iqm, color=colours[m], linestyle=":", linewidth=1.5, label=f"{m} (IQM of {len(mine)})")
                continue
            mid, low, high = _band(mine, axis, grid)
            # a method whose curve is another's (offline-neutral where the spec has no prior) is drawn dashed over
            # it and says so, instead of hiding the first
            same = next((k for k, v in drawn.items() if np.array_equal(v, mid, equal_nan=True)), None)
            drawn[m] = mid
            ax.plot(grid, mid, color=colours[m], linewidth=2, linestyle="--" if same else "-",
                    label=f"{m} (IQM of {len(mine)})" + (f", the same curve as {same}" if same else ""))
            ax.fill_between(grid, low, high, color=colours[m], alpha=0.18, linewidth=0)
        ax.axhline(goal, color="black", linestyle="--", linewidth=1, label=f"goal {goal:g}")
        if random_return is not None:
            ax.axhline(random_return, color="grey", linestyle="-.", linewidth=1, label="uniform random policy")
        if xs:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out mean return")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle(f"{title}: held-out return, IQM over seeds and 95% stratified bootstrap band")
    fig.tight_layout()
    return save_figure(fig, path)


@dataclass
class Profile:
    method: str
    tasks: list[str]
    seeds: int
    taus: np.ndarray
    fraction: np.ndarray
    low: np.ndarray
    high: np.ndarray


def profiles(runs: Sequence[Run], scores: Mapping[tuple[str, str, int], float],
             taus: np.ndarray) -> list[Profile]:
    """Per method, rliable's performance profile of the normalised final scores (``scores[(task, method, seed)]``)
    over the tasks it has scores on, on the seeds common to all of them (at least 1)."""
    from llm_policy_gen.plotting.stats import performance_profile

    out = []
    for m in methods(runs):
        by_task: dict[str, set[int]] = {}
        for (task, method, seed) in scores:
            if method == m:
                by_task.setdefault(task, set()).add(seed)
        common = set.intersection(*by_task.values()) if by_task else set()
        if not common:
            continue
        tasks, seeds = sorted(by_task), sorted(common)
        x = np.array([[scores[(t, m, s)] for t in tasks] for s in seeds])
        frac, low, high = performance_profile(x, taus)
        out.append(Profile(m, tasks, len(seeds), taus, frac, low, high))
    return out


def profile_figure(path: Path, found: Sequence[Profile]) -> Path:
    """rliable's ``plot_performance_profiles`` of ``found`` (95 % bands), on a figure of the package's own."""
    import warnings

    from llm_policy_gen.plotting.curves import group_colours
    from llm_policy_gen.plotting.figure import plt, save_figure

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from rliable import plot_utils

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    names = {p.method: f"{p.method} ({len(p.tasks)} tasks x {p.seeds} seeds)" for p in found}
    colours = dict(zip(names.values(), group_colours(len(found)), strict=True))
    plot_utils.plot_performance_profiles(
        {names[p.method]: p.fraction for p in found}, found[0].taus if found else np.linspace(0, 1, 2),
        performance_profile_cis={names[p.method]: (p.low, p.high) for p in found}, ax=ax, colors=colours,
        xlabel="normalised score τ: (return - uniform random) / (goal - uniform random)",
        ylabel="fraction of runs with score > τ", labelsize="medium", ticklabelsize="medium")
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, path)


def write_profiles_csv(path: Path, found: Sequence[Profile]) -> Path:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "tasks", "seeds", "tau", "fraction", "low", "high"])
        for p in found:
            for i, tau in enumerate(p.taus):
                w.writerow([p.method, " ".join(p.tasks), p.seeds, f"{tau:g}", repr(float(p.fraction[i])),
                            repr(float(p.low[i])), repr(float(p.high[i]))])
    tmp.replace(path)
    return path
