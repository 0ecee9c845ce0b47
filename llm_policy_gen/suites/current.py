"""Which records a suite's tables show: the newest record of each cell the suite asks for today.

A method of the suite asks for one cell per task and seed (:func:`expected_budget`: the task's episodes, its own
budget, or the counted steps or episodes another method's record of the same task and seed used); a record is
*current* when its cell key is that cell's. A record of a method the suite does not list (a user's model run with
``--methods``, an imported peer at equal episodes) is current when its settings are the task's and its budget is one
the suite would give it: the task's episodes, its own, or ``offline``'s counted steps or episodes on that seed (by
the label: ``*-at-offline`` steps, ``*-at-offline-episodes`` episodes). Every other record is history: kept in the
store, never shown in a current table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .cells import key_of
from .definition import MethodSpec, Suite, Task
from .store import SuiteRecord, latest

__all__ = ["expected_budget", "current_records"]


def expected_budget(method: MethodSpec, task: Task, seed: int,
                    found: Mapping[tuple[str, str, int], SuiteRecord]) -> dict[str, Any] | None:
    """The budget the suite gives ``method`` on ``task`` and ``seed`` (None: it depends on a record not there)."""
    kind = method.budget_kind
    if kind == "task":
        return {"max_episodes": task.budget}
    if kind == "own":
        return {}
    source = found.get((task.key, str(method.budget_source), seed))
    if source is None:
        return None
    value = source.result.get("env_steps" if kind == "steps-of" else "episodes")
    return None if value is None else {"max_steps" if kind == "steps-of" else "max_episodes": int(value)}


def _other_budget_ok(record: SuiteRecord, task: Task, found: Mapping[tuple[str, str, int], SuiteRecord]) -> bool:
    """Whether a record of a method the suite does not list has a budget the suite would give it."""
    budget = dict(record.budget)
    if budget in ({}, {"max_episodes": task.budget}):
        return True
    offline = found.get((task.key, "offline", record.seed))
    if offline is None:
        return False
    if record.method.endswith("-at-offline-episodes"):
        return budget == {"max_episodes": offline.result.get("episodes")}
    if record.method.endswith("-at-offline"):
        return budget == {"max_steps": offline.result.get("env_steps")}
    return False


def current_records(suite: Suite, records: Sequence[SuiteRecord], fresh: bool = False) -> list[SuiteRecord]:
    """The records the suite's tables show, one per task, method and seed, in the store's order: on each task's
    judged seeds, or (``fresh``) on its fresh seeds, never the two mixed."""
    def shown(r: SuiteRecord) -> bool:
        task = next((t for t in suite.tasks if t.key == r.task), None)
        return task is not None and r.seed in (task.fresh_seeds if fresh else task.seeds)

    newest = [r for r in latest(records).values() if r.suite == suite.name and shown(r)]
    tasks = {t.key: t for t in suite.tasks}
    methods = {m.label: m for m in suite.methods}
    found: dict[tuple[str, str, int], SuiteRecord] = {}
    # budgets from other methods' records: the methods they come from first (a plain budget) then the rest
    for method in sorted(methods.values(), key=lambda m: m.budget_source is not None):
        for r in newest:
            task = tasks.get(r.task)
            if r.method != method.label or task is None:
                continue
            budget = expected_budget(method, task, r.seed, found)
            if budget is not None and r.cell == key_of(task, method, r.seed, budget):
                found[(r.task, r.method, r.seed)] = r
    for r in newest:
        task = tasks.get(r.task)
        if task is None or r.method in methods:
            continue
        spec = MethodSpec(r.method, r.entry, iterations=int(r.settings.get("iterations") or 0))
        same = r.cell == key_of(task, spec, r.seed, r.budget)
        if same and _other_budget_ok(r, task, found):
            found[(r.task, r.method, r.seed)] = r
    keep = {id(r) for r in found.values()}
    return [r for r in newest if id(r) in keep]
