"""What the tuning grids still cost: ``bench/tune_specs.py --plan`` (issue 32 item 5), without running anything.

For every task asked: its grid (today's point and each single change, on the task's tuning seeds; the one point
that combines the changes that beat today's is left out, as it exists only if two do), the runs already kept
(``OUT/tune_runs.json``, a finished task's ``tune.json``), and the CPU hours still needed at the median CPU seconds
of one recorded run of the task: its kept tuning runs, else the suite's ``offline`` runs of the task in
``--suite-results`` (the same budget; other settings may cost a little more or less; a record from another machine
is a guide to this one, not a measurement of it). With neither the projection is unknown, never guessed.

Two projections, since the search stops a change once it can no longer beat today's point (``bench/tune_specs.py``):
the **whole grid** (``--full-grid``: every point on every seed, the most the search can need) and the **least** it
can need (today's point on every seed, and each change stopped at its first possible miss: once it has missed one
seed more than today's point has missed so far, a count that can only grow, every seed it has still to run taken as
a miss). Below the projection, each task with kept runs shows its **grid so far**: every point's within-budget held-out
mean on each tuning seed it has run (bold where it meets the goal), so a grid longer than a session is read from the
records, not retold by hand. Written to ``OUT/tune_plan.md`` and printed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Grid:
    task: str
    env_id: str
    seeds: tuple[int, ...]
    runs: tuple[tuple[str, ...], ...]
    """Run ids: one row per point (today's first), one id per tuning seed in order."""
    missed: Callable[[Mapping[str, Any]], bool]
    """Whether a kept run missed the task's goal (on the within-budget measure the search judges)."""
    labels: tuple[str, ...] = ()
    """One name per point, in the order of ``runs`` ("today's", then the setting each change moves)."""


def cost_per_run(task: str, kept: list[Mapping[str, Any]], suite: list[Mapping[str, Any]]) -> tuple[float, str] | None:
    """Median CPU seconds of one run of ``task`` and where that comes from, or None with nothing measured."""
    for records, source in ((kept, "tuning runs"), (suite, "suite's offline runs")):
        cpu = [float(r["cpu_s"]) for r in records if r.get("task") == task and r.get("cpu_s")
               and r.get("backend", "offline") == "offline" and "heldout" in r]
        if cpu:
            return statistics.median(cpu), f"{source} ({len(cpu)})"
    return None


def _ran(grid: Grid, point: tuple[str, ...],
         kept: Mapping[str, Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """A point's kept runs, in seed order, and how many of them missed the goal."""
    runs = [kept[rid] for rid in point if rid in kept]
    return runs, sum(grid.missed(r) for r in runs)


def _least_left(grid: Grid, point: tuple[str, ...], kept: Mapping[str, Mapping[str, Any]], stop_at: int) -> int:
    """The fewest runs a change still needs: none once it has missed ``stop_at`` seeds (stopped) or run them all,
    else its misses still to come to ``stop_at``, every next seed a miss, at most the seeds it has left."""
    runs, missed = _ran(grid, point, kept)
    return 0 if missed >= stop_at else min(stop_at - missed, len(point) - len(runs))


def row(grid: Grid, kept: Mapping[str, Mapping[str, Any]], cost: tuple[float, str] | None) -> tuple[str, float, float]:
    """The table row of one task, and its projected CPU hours (whole grid, least)."""
    n_seeds = len(grid.seeds)
    today, misses = _ran(grid, grid.runs[0], kept)
    done = sum(rid in kept for point in grid.runs for rid in point)
    whole = len(grid.runs) * n_seeds - done
    least = (n_seeds - len(today)) + sum(_least_left(grid, point, kept, misses + 1) for point in grid.runs[1:])
    if cost is None:
        hours, per, source = (float("nan"), float("nan")), "?", "unknown: no run of this task recorded"
    else:
        hours, per, source = (whole * cost[0] / 3600, least * cost[0] / 3600), f"{cost[0]:,.0f}", cost[1]
    shown = "?" if cost is None else f"{hours[0]:,.1f}"
    least_shown = "?" if cost is None else f"{hours[1]:,.1f}"
    line = (f"| {grid.task} ({grid.env_id}) | {grid.seeds[0]}-{grid.seeds[-1]} | {len(grid.runs)} | "
            f"{len(today)}/{n_seeds}, {misses} missed | {done} | {whole} | {least} | {per} | {source} | {shown} | "
            f"{least_shown} |")
    return line, hours[0], hours[1]


def so_far(grid: Grid, kept: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The grid's kept figures: one row per point, the within-budget held-out mean per tuning seed (bold at the goal,
    "-" not run yet, "?" a run with no figure), and the seeds met of those run."""
    lines = ["| point | seeds met / run | " + " | ".join(str(s) for s in grid.seeds) + " |",
             "|---|---|" + "---|" * len(grid.seeds)]
    for i, point in enumerate(grid.runs):
        runs = [kept.get(rid) for rid in point]
        cells = []
        for r in runs:
            value = None if r is None else r.get("heldout_within")
            if r is None:
                cells.append("-")
            elif not isinstance(value, (int, float)):
                cells.append("?")
            else:
                cells.append(f"{value:,.1f}" if grid.missed(r) else f"**{value:,.1f}**")
        ran, missed = _ran(grid, point, kept)
        label = grid.labels[i] if i < len(grid.labels) else ("today's" if i == 0 else f"change {i}")
        lines.append(f"| {label} | {len(ran) - missed}/{len(ran)} | " + " | ".join(cells) + " |")
    return lines


def markdown(grids: list[Grid], kept: Mapping[str, Mapping[str, Any]], suite: list[Mapping[str, Any]]) -> str:
    lines = ["# Tuning grids: what is left, projected (bench/tune_specs.py --plan)", "",
             "Runs still to make: the whole grid (every point on every tuning seed, `--full-grid`) and the least the "
             "early stop can need (today's point on every seed, each change stopped at its first possible miss). "
             "CPU s per run: the median of the task's recorded runs (its tuning runs, else the suite's "
             "`offline` runs, perhaps of another machine); CPU-h = runs x that median, one core.", "",
             "| task | seeds | points | today's point run | runs kept | runs left (whole grid) | runs left (least) | "
             "CPU s per run | from | CPU-h left (whole grid) | CPU-h left (least) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    total_whole = total_least = 0.0
    unknown = []
    records = list(kept.values())
    for grid in grids:
        line, whole, least = row(grid, kept, cost_per_run(grid.task, records, suite))
        lines.append(line)
        if whole != whole:  # nan: nothing measured
            unknown.append(grid.task)
        else:
            total_whole += whole
            total_least += least
    lines += ["", f"In all: {total_least:,.1f} to {total_whole:,.1f} CPU-h projected"
              + (f"; no rate for {', '.join(unknown)}" if unknown else "") + "."]
    for grid in grids:
        if any(rid in kept for point in grid.runs for rid in point):
            lines += ["", f"## {grid.task} ({grid.env_id}): the grid so far, within-budget held-out mean per tuning "
                      "seed (bold: at the goal; -: not run yet)", "", *so_far(grid, kept)]
    return "\n".join(lines) + "\n"
