"""A settings grid read with its suite's choice rule (``[choice]``, :class:`~.grid.Choice`): which point each task
keeps, from the records on the suite's tuning seeds only (:mod:`.current`; a suite with a choice runs on seeds 100
and up, so the judged seeds never choose).

A point is judged on each seed's **judged value** (the held-out mean as of the last iteration within the budget where
the run reports one, else its final held-out mean, as the goal table judges: :mod:`.summary`): first the seeds at the
goal, then rliable's IQM of those values. With a base, a point **beats** the base only beyond the seeds' noise (more
seeds at the goal, or as many with the lower end of its IQM's 95 % interval above the base's IQM); the **chosen**
point is the best of those that beat it, else the base. Without one, the best point.

With ``stop`` the grid is adaptive (:func:`~.cells.grid_states`): a change waits for the base's records on every
seed, then runs one seed at a time, and **stops** once it has missed the goal on more seeds than the base missed in
all (it can then meet the goal on fewer seeds than the base at most, so it cannot be chosen): its other cells are
listed as not run, with that reason. The choice is the one the whole grid would make.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..plotting.stats import iqm_interval
from .cells import Cell
from .current import current_records
from .definition import MethodSpec, Suite, Task
from .grid import base_values, judged, missed, not_a_point
from .store import SuiteRecord
from .summary import fmt, seeds_text

__all__ = ["Point", "TaskChoice", "choices", "choice_markdown", "choice_lines", "choice_rows", "least_cells"]


def _missed(task: Task, records: Sequence[SuiteRecord]) -> int:
    return missed(task.meets, records)


@dataclass(frozen=True)
class Point:
    method: MethodSpec
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    """Each seed's judged value, in seed order."""
    met: int
    iqm: float | None
    low: float | None
    complete: bool
    """Every seed recorded, or stopped, or not a point on this task."""
    why: str = ""
    """Why it has no more seeds to run: stopped, or not a point here."""


@dataclass(frozen=True)
class TaskChoice:
    task: Task
    points: tuple[Point, ...]
    chosen: Point | None
    """None until every point is complete."""
    base: Point | None

    def beats(self, p: Point) -> bool:
        b = self.base
        if b is None or p is b:
            return False
        if p.met != b.met:
            return p.met > b.met
        return p.low is not None and b.iqm is not None and p.low > b.iqm


def _point(suite: Suite, task: Task, spec: MethodSpec, mine: Sequence[SuiteRecord], allowed: int | None) -> Point:
    rs = sorted(mine, key=lambda r: r.seed)
    values = tuple(v for r in rs if (v := judged(r)) is not None)
    iv = iqm_interval(values) if values else None
    why = not_a_point(task.env_id, task.settings, spec.moves)
    if not why and allowed is not None and _missed(task, rs) > allowed and len(rs) < len(task.seeds):
        why = f"stopped after {len(rs)} seeds"
    return Point(spec, tuple(r.seed for r in rs), values, sum(task.meets(v) for v in values),
                 None if iv is None else iv.estimate, None if iv is None else iv.low,
                 bool(why) or len(rs) >= len(task.seeds), why)


def choices(suite: Suite, records: Sequence[SuiteRecord]) -> list[TaskChoice]:
    """Each task's grid, read with the suite's choice rule, from the records on its seeds."""
    choice = suite.choice
    if choice is None:
        return []
    shown = current_records(suite, records)
    out = []
    for task in suite.tasks:
        mine = [r for r in shown if r.task == task.key]
        by = {m.label: [r for r in mine if r.method == m.label] for m in suite.methods}
        base_recs = by.get(choice.base, [])
        allowed = _missed(task, base_recs) if choice.stop and len(base_recs) == len(task.seeds) else None
        points = [_point(suite, task, m, by[m.label], None if m.label == choice.base else allowed)
                  for m in suite.methods]
        base = next((p for p in points if p.method.label == choice.base), None)
        tc = TaskChoice(task, tuple(points), None, base)
        if all(p.complete for p in points) and points:
            ranked = [p for p in points if p.values and not not_a_point(task.env_id, task.settings, p.method.moves)]
            if base is not None:
                ranked = [p for p in ranked if tc.beats(p)] or [base]
            best = max(ranked, key=lambda p: (p.met, -1e18 if p.iqm is None else p.iqm))
            tc = TaskChoice(task, tc.points, best, base)
        out.append(tc)
    return out


def _moved_text(task: Task, spec: MethodSpec) -> str:
    """What a point changes: ``candidates 4 -> 8`` (a coordinate point) or its options (a product's)."""
    if spec.moves:
        from .grid import moved

        keys = tuple(k for k, _ in spec.moves)
        before = base_values(task.env_id, task.settings, keys)
        after = base_values(task.env_id, moved(task.env_id, task.settings, spec.moves), keys)
        return ", ".join(f"{k} {before[k]} -> {after[k]}" for k in keys)
    from ..sweep.methods import parse_method

    options = parse_method(spec.entry).options
    return ", ".join(f"{k} {v}" for k, v in options.items()) or "the task's settings"


def _verdict(tc: TaskChoice, p: Point) -> str:
    if p is tc.base:
        return "base"
    if p.why:
        return f"no: {p.why}" if p.seeds else f"not a point: {p.why}"
    if not p.complete:
        return "not yet"
    return "yes" if tc.base is None or tc.beats(p) else "no"


def _chosen_text(tc: TaskChoice) -> str:
    seeds = seeds_text(tc.task.seeds)
    if tc.chosen is None:
        left = sum(len(tc.task.seeds) - len(p.seeds) for p in tc.points if not p.complete)
        return f"not chosen yet on seeds {seeds}: {left} cell(s) of the grid still to run"
    what = "the base kept" if tc.chosen is tc.base else _moved_text(tc.task, tc.chosen.method)
    return f"chosen on seeds {seeds}: {tc.chosen.method.label} ({what})"


def choice_lines(suite: Suite, records: Sequence[SuiteRecord]) -> list[str]:
    """One line per task: the point chosen on the tuning seeds, or what is left to run."""
    return [f"{tc.task.key} ({tc.task.env_id}): {_chosen_text(tc)}" for tc in choices(suite, records)]


def choice_rows(made: Sequence[TaskChoice]) -> list[list[object]]:
    """The CSV of :func:`choices`: one row per task and point, with its figures, verdict and whether it is chosen."""
    rows: list[list[object]] = [["task", "env_id", "point", "moves", "seeds_run", "met", "iqm", "iqm_low", "verdict",
                                 "chosen"]]
    for tc in made:
        for p in tc.points:
            rows.append([tc.task.key, tc.task.env_id, p.method.label, _moved_text(tc.task, p.method), len(p.seeds),
                         p.met, "" if p.iqm is None else f"{p.iqm:.6g}", "" if p.low is None else f"{p.low:.6g}",
                         _verdict(tc, p), "" if tc.chosen is None else tc.chosen is p])
    return rows


def choice_markdown(made: Sequence[TaskChoice]) -> list[str]:
    """Per task of :func:`choices`: every point's seeds met, IQM of the judged values [95 % CI low], verdict and
    values per seed; then the point chosen."""
    lines: list[str] = []
    for tc in made:
        t = tc.task
        lines += ["", f"**{t.env_id}** (`{t.key}`; {t.budget:,} episodes; goal {'=' if t.exact else '>='} "
                  f"{fmt(t.goal, t)}; seeds {seeds_text(t.seeds)}; base: "
                  f"{', '.join(f'{k} {v}' for k, v in t.settings.items()) or 'the spec and package defaults'})"]
        if not any(p.seeds for p in tc.points):
            lines += ["", f"No records yet: {_chosen_text(tc)}."]
            continue
        lines += ["", "| point | moves | seeds met / run | IQM [95% CI low] | beats the base | judged value per seed |",
                  "|---|---|---|---|---|---|"]
        for p in tc.points:
            iqm = "-" if p.iqm is None else f"{fmt(p.iqm, t)} [{fmt(p.low, t)}]"
            per = ", ".join(fmt(v, t) for v in p.values) or "-"
            lines.append(f"| {p.method.label} | {_moved_text(t, p.method)} | {p.met}/{len(p.seeds)} | {iqm} | "
                         f"{_verdict(tc, p)} | {per} |")
        lines += ["", _chosen_text(tc)[0].upper() + _chosen_text(tc)[1:] + "."]
    return lines


def least_cells(suite: Suite, todo: Sequence[Cell], records: Sequence[SuiteRecord]) -> list[Cell]:
    """Of the cells still to run (``todo``), the fewest an adaptive grid (``stop``) can need: every cell of the base,
    and each change's next seeds until its first possible stop, should every one of them miss the goal and the base
    miss on no more seeds than it has (a lower bound; the whole grid is the upper one)."""
    choice = suite.choice
    if choice is None or not choice.stop:
        return list(todo)
    shown = current_records(suite, records)
    out: list[Cell] = []
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in todo:
        groups.setdefault((cell.task.key, cell.method.label), []).append(cell)
    for (task_key, label), cells in groups.items():
        if label == choice.base:
            out += cells
            continue
        task = cells[0].task
        allowed = _missed(task, [r for r in shown if r.task == task_key and r.method == choice.base])
        own = _missed(task, [r for r in shown if r.task == task_key and r.method == label])
        out += sorted(cells, key=lambda c: c.seed)[:max(0, allowed + 1 - own)]
    return out
