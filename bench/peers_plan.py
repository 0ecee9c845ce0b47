"""What the peers still cost: ``bench/peers.py --plan`` (issue 32 item 2: a CPU-hour budget per run, and the cells
that only a reference can fill), without training anything.

For every cell asked for (task, algorithm, budget, seed) it reads what is there (``peers.json``, an interrupted run's
``checkpoint/books.json``) and projects the CPU hours still needed from the training rate (environment steps per
CPU second) that finished runs of the same task and algorithm measured on this machine; with no such run the
projection is unknown, never guessed. A cell whose projection for the whole run exceeds ``--cpu-hours`` is one that
only a reference can fill here. Written to ``OUT/peers_plan.md`` and printed.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Cell:
    task: str
    algo: str
    kind: str
    seed: int
    target_steps: int | None
    """The run's step horizon (for an equal-episodes budget, offline's step count), None without a budget."""
    status: str
    """``done``, ``out of reach``, ``not run: WHY``, ``stale``, ``partly run`` or ``to run``."""
    steps_done: int = 0
    cpu_done_s: float = 0.0


def rates(records: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Median training steps per CPU second of the finished runs, per (task, algorithm), and per (``*``,
    algorithm) over every task (the fallback, marked as such, for a task with no finished run of the algorithm)."""
    seen: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.get("reached") and r.get("cpu_s") and r.get("steps"):
            seen.setdefault((r["task"], r["algo"]), []).append(r["steps"] / r["cpu_s"])
            seen.setdefault(("*", r["algo"]), []).append(r["steps"] / r["cpu_s"])
    return {k: statistics.median(v) for k, v in seen.items()}


def progress(run_dir: Path) -> tuple[int, float]:
    """Steps and training CPU seconds of an interrupted run (its last checkpoint), else zeros."""
    books = run_dir / "checkpoint" / "books.json"
    if not books.is_file():
        return 0, 0.0
    data = json.loads(books.read_text())
    return int(data.get("steps", 0)), float(data.get("cpu_s", 0.0))


def markdown(cells: list[Cell], speed: dict[tuple[str, str], float], cpu_hours: float) -> str:
    """One row per (task, algorithm, budget): seeds done, runs to go, the projected CPU hours of those runs, the
    largest projection of one whole run, and whether that is over the budget per run."""
    lines = ["# Peers: what is left, projected (bench/peers.py --plan)", "",
             f"Projection: the steps still to train at the median rate (steps per CPU second) of the finished runs of "
             f"the same task and algorithm here (marked `*`: with none, the median rate of that algorithm on the other "
             f"tasks, a rough guide); budget per run {cpu_hours:g} CPU-h (`--cpu-hours`). A run projected over it is "
             "one only a reference can fill on these cores.", "",
             "| task | algo | budget | seeds done | to run | steps per CPU s | CPU-h to go | one whole run, CPU-h | "
             "over the budget per run |", "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.task, c.algo, c.kind), []).append(c)
    total, unknown = 0.0, 0
    for (task, algo, kind), mine in groups.items():
        rate, mark = speed.get((task, algo)), ""
        if rate is None and speed.get(("*", algo)):
            rate, mark = speed[("*", algo)], "*"
        todo = [c for c in mine if c.status in ("to run", "partly run", "stale")]
        reasons = sorted({c.status for c in mine if c.status.startswith("not run")})
        left = [max(0, (c.target_steps or 0) - c.steps_done) for c in todo]
        whole = max((c.target_steps or 0 for c in mine), default=0)
        if rate:
            hours, one = sum(left) / rate / 3600, whole / rate / 3600
            total += hours
            cost, one_s, over = f"{hours:,.1f}{mark}", f"{one:,.2f}{mark}", "**yes**" if one > cpu_hours else "no"
        else:
            unknown += len(todo)
            cost, one_s, over = ("unknown: no finished run of it here", "?", "?") if todo else ("0.0", "-", "-")
        done = sum(c.status == "done" for c in mine)
        extra = f" ({'; '.join(reasons)})" if reasons else ""
        lines.append(f"| {task} | {algo.upper()} | {kind} | {done}/{len(mine)}{extra} | {len(todo)} | "
                     f"{f'{rate:,.0f}{mark}' if rate else '-'} | {cost} | {one_s} | {over} |")
    lines += ["", f"In all: {total:,.1f} CPU-h projected" + (f", and {unknown} runs with no rate to project from"
                                                             if unknown else "") + "."]
    return "\n".join(lines) + "\n"
