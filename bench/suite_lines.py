"""One summary line per task of the goal table, for the README (issue 20, item 6): written by ``bench/suite.py``
(and ``bench/peers.py``) beside ``suite.md`` as ``OUT/readme.md``, from the same records.

Each line gives the goal, offline's within-budget median (the measure the goals are judged on), how many seeds meet
it, the worst seed, whether the goal is met (the median meets it and enough seeds do), offline's interquartile mean
with its 95% interval, and each peer column's (with the seeds it covers). No ratio of returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import suite_report
from suite_goals import GOALS, Goal, fmt, median, meets, seed_stats
from suite_peers import PeerCell

from llm_policy_gen.plotting.stats import iqm_interval


def _seeds(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seed" + ("s " if len(seeds) > 1 else " ") + ", ".join(map(str, seeds))


def task_line(goal: Goal, rows: list[dict[str, Any]], peers: Sequence[PeerCell],
              random: suite_report.Scores | None = None) -> str | None:
    """The line of one task, from its offline records (None if offline has not run it)."""
    rs = sorted((r for r in rows if r["backend"] == "offline" and "heldout" in r), key=lambda r: r["seed"])
    if not rs:
        return None
    within = [r.get("heldout_within") for r in rs]
    med = median(within)
    worst, met = seed_stats(goal, within)
    n_met = int(met.split("/")[0])
    verdict = "**met**" if meets(goal, med) and n_met >= goal.need else "not met"
    need = f"{goal.need} of {len(goal.seeds)}"
    text = (f"- **{goal.env_id}**, {'=' if goal.exact else '>='} {fmt(goal.goal, goal)} within "
            f"{goal.budget:,} episodes (median, {need} seeds): offline {fmt(med, goal)} "
            f"({_seeds([r['seed'] for r in rs])}), {met} seeds meet it, worst {fmt(worst, goal)}: {verdict}")
    d = 2 if abs(goal.goal) < 10 else 1
    norm = suite_report.norm_scores(goal.key, [(r["seed"], r["heldout"]) for r in rs], random or {})
    text += (f"; held-out IQM {iqm_interval([r['heldout'] for r in rs]).format(d)}"
             + ("" if norm is None else f", normalised {iqm_interval(norm).format(2)}"))
    for cell in peers:
        if cell.task != goal.key or cell.error is not None:
            continue
        vals = [v for v in cell.values if v is not None]
        met_final = sum(meets(goal, v) for v in vals)
        text += (f"; {cell.column} " + (iqm_interval(vals).format(d) if vals else "n/a")
                 + f" (final held-out, {len(vals)} of {len(cell.values)} seeds run, {met_final} "
                 + ("meets" if met_final == 1 else "meet") + " the goal)")
    return text + "."


def readme_lines(records: list[dict[str, Any]], peers: Sequence[PeerCell] = (),
                 random: suite_report.Scores | None = None) -> str:
    """Every task's line, in the goal table's order."""
    lines = [task_line(g, [r for r in records if r["task"] == g.key], peers, random) for g in GOALS]
    return "\n".join(x for x in lines if x is not None) + "\n"
