"""The goal table's tasks for the bench script that still runs on them (``bench/lm_features.py``'s ``offline`` rows;
the settings search is the suite ``tune`` now), and one run of a task as that script makes it.

The tasks are the goals suite's (``llm_policy_gen/suites/data/goals.toml``, read with
:func:`llm_policy_gen.suites.definition.load_suite`), so the table exists once; ``llm-policy-gen bench goals`` runs
the table itself. :func:`run_one` makes a ``train`` run with ``--max-episodes`` at the task's budget under
``OUT/runs`` and an id that names its settings (:func:`run_id`: the same id the old ``bench/suite.py`` gave, so the
runs its folders and the tuning records hold are found again), and reads it only through the run-directory reader:
a finished run (``RunDir.state()``) is read back, an interrupted, failed or started one is resumed, never read as a
result.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Goal", "GOALS", "BY_KEY", "LONG", "meets", "tasks_and_seeds", "run_id", "run_id_of", "run_folders",
           "run_one", "curve_of"]


@dataclass(frozen=True)
class Goal:
    key: str
    env_id: str
    budget: int
    goal: float
    anchors: str
    today: str = ""
    exact: bool = False
    settings: tuple[tuple[str, Any], ...] = ()
    """Settings given to every run of the task on top of the spec's."""
    seeds: tuple[int, ...] = tuple(range(10))
    need: int = 8


def _goals() -> list[Goal]:
    from llm_policy_gen.suites.definition import load_suite

    return [Goal(t.key, t.env_id, t.budget, t.goal, t.anchors, exact=t.exact, settings=tuple(t.settings.items()),
                 seeds=t.seeds, need=t.need) for t in load_suite("goals").tasks]


GOALS = _goals()
BY_KEY = {g.key: g for g in GOALS}
LONG = tuple(range(5))
"""The seeds of the long tasks."""


def meets(goal: Goal, value: float | None) -> bool:
    """Whether ``value`` meets the task's goal: reaches it, or equals it for an exact optimum (None never does)."""
    if value is None:
        return False
    return abs(value - goal.goal) < 1e-9 if goal.exact else value >= goal.goal - 1e-9


def tasks_and_seeds(prog: str, tasks: str, seeds: str) -> tuple[list[str], list[int]] | None:
    """The task keys of ``--tasks`` and the seeds of ``--seeds``; None after printing what is wrong in one line."""
    unknown = [t for t in tasks.split(",") if t not in BY_KEY]
    if unknown:
        print(f"{prog}: unknown task {unknown[0]!r}; accepted: {', '.join(BY_KEY)}", file=sys.stderr)
        return None
    from bench_args import seeds as seeds_arg

    parsed = seeds_arg(prog, seeds)
    return None if parsed is None else (tasks.split(","), parsed)


ABLATIONS: dict[str, tuple[str, tuple[tuple[str, Any], ...]]] = {
    "offline-neutral": ("offline", (("prior", "neutral"),)),
    "offline-from-prior": ("offline", (("prior", "start"),)),
}
"""Backends that are another backend with settings (on a spec without a prior the settings change nothing)."""


def backend_settings(goal: Goal, backend: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The backend a bench backend runs and the settings it adds to the task's (none that change nothing)."""
    base, extra = ABLATIONS.get(backend, (backend, ()))
    if extra and dict(extra).get("prior") in ("neutral", "start"):
        from llm_policy_gen.envs import get_spec

        if get_spec(goal.env_id).prior is None:
            extra = ()
    return base, extra


def run_id(goal: Goal, backend: str, seed: int) -> str:
    """A changed budget or changed settings make a new run (the settings by a digest of their names)."""
    from llm_policy_gen.backends import learner_mode

    base, extra = backend_settings(goal, backend)
    rid = f"{goal.key}_b{goal.budget}_{backend if extra else base}_s{seed}"
    if learner_mode(base):  # the standard learner: never a reused run of the proposer that had its name before
        rid += "_learner"
    if goal.settings:
        rid += "_" + hashlib.sha256(json.dumps(sorted(goal.settings)).encode()).hexdigest()[:6]
    return rid


_TAKEN = re.compile(r"-(\d+)$")
"""The suffix ``train`` gives a run folder whose id's folder is taken (``RUN_ID-2``, ...)."""


def run_id_of(folder: Path | str) -> str:
    """The run id a run folder was made for: its name less the ``-K`` that ``train`` adds when the id's folder is
    taken."""
    return _TAKEN.sub("", Path(folder).name)


def run_folders(logs: Path, rid: str) -> list[Path]:
    """Every folder of ``rid`` under ``logs/ENV/``, in the order ``train`` made them: ``RUN_ID``, ``RUN_ID-2``, ..."""
    found = [p for p in logs.glob(f"*/{rid}*") if run_id_of(p) == rid]
    return sorted(found, key=lambda p: int(m.group(1)) if (m := _TAKEN.search(p.name)) else 1)


def curve_of(events: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    """A run's curve from its events (in the reader's words): ``[env_steps, episodes, held-out mean]`` after every
    iteration that has them."""
    return [[float(e["env_steps_total"]), float(e["episodes_total"]), float(e["best_heldout_mean"])]
            for e in events if e.get("best_heldout_mean") is not None and e.get("env_steps_total") is not None]


PRUNE_ABOVE = 100_000
"""Tables with more states than this lose their per-iteration policy files after the run."""


def run_one(goal: Goal, backend: str, seed: int, out: Path, keep_policies: bool = False) -> dict[str, Any]:
    """One run (in a worker process); returns its record. A finished run is read back, an unfinished one resumed."""
    os.environ["LLM_POLICY_GEN_WORKERS"] = "1"
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.run import resume, train
    from llm_policy_gen.run.files import RunDir
    from llm_policy_gen.run.view import RunState

    rid = run_id(goal, backend, seed)
    logs = out / "runs"
    record: dict[str, Any] = {"task": goal.key, "env_id": goal.env_id, "backend": backend, "seed": seed,
                              "budget": goal.budget, "settings": dict(goal.settings)}
    folders = [(p, RunDir(p).state()) for p in run_folders(logs, rid)]
    existing = [p for p, s in folders if s is RunState.FINISHED]
    partial = [p for p, s in folders if s.resumable]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    try:
        if existing:
            run_dir = existing[0]
            record["reused"] = True
        elif partial:  # an interrupted run: the same result as an uninterrupted one
            run_dir = resume(partial[-1], {}, log=lambda _m: None).run_dir
            record["resumed"] = True
        else:
            base, extra = backend_settings(goal, backend)
            cfg = TrainConfig.build(({"env_id": goal.env_id, "backend": base, "seed": seed,
                                      "max_episodes": goal.budget, "iterations": 100_000, "logs_dir": str(logs),
                                      "run_id": rid, "progress": False, "quiet": True, "plots": False,
                                      **dict(goal.settings), **dict(extra)}, "bench"))
            run_dir = train(cfg, log=lambda _m: None).run_dir
    except Exception as exc:  # a failed run is a row with its error
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rd = RunDir(run_dir)
    if not keep_policies and get_spec(goal.env_id).n_states > PRUNE_ABOVE:
        pruned = list(rd.iteration_policies().values())
        for f in pruned:
            f.unlink()
        record["pruned_policies"] = len(pruned)
    view = rd.read()
    summary, events = view.summary, view.events
    within = [e for e in events if e["episodes_total"] <= goal.budget]
    record.update(
        run_dir=str(run_dir), heldout=summary["best_heldout_mean"], episodes=summary["episodes_total"],
        env_steps_total=summary.get("env_steps_total"), iterations=summary["iterations"], wall_s=summary["wall_s"],
        cpu_s=None if existing or partial else round(usage.ru_utime + usage.ru_stime - cpu0, 1),
        heldout_within=within[-1]["best_heldout_mean"] if within else None,
        episodes_within=within[-1]["episodes_total"] if within else 0,
        reached_at=next((e["episodes_total"] for e in events if meets(goal, e.get("best_heldout_mean"))), None),
        stop=summary["stop_reason"], output_format=view.fact("output_format"), curve=curve_of(events))
    return record
