"""``bench``'s engine: a suite's plan checked whole, then its cells run through the sweep's executors, resumably.

:func:`make_plan` reads the records (the suite's committed store and ``OUT/records.jsonl``), expands the cells
(:mod:`.cells`) and checks everything before anything is written, as ``compare`` does: a task folder another process
writes is refused, a run directory holding a run made with other settings is refused
(:func:`~llm_policy_gen.sweep.plan.check_same_runs`; ``check_same_sweep`` where ``compare`` made the folder), and
every (task, method) to run is built without starting (:func:`~llm_policy_gen.sweep.plan.preflight`). A refusal of
a method the user named in ``--methods`` ends the command (exit 2); one of a suite's own method is listed as
``skipped`` with its reason.

:func:`run_plan` records the runs already finished on disk (adopted), runs the other cells (resumed where started),
records each one as it finishes, then runs the cells that waited for those records (a budget from another cell, a
grid's next seed: :mod:`.choice`), phase after phase until none is ready, and writes the tables. A run that did not
finish (interrupted, failed) is never recorded.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import SweepInterrupted, UserError, signal_of
from ..loggers.console import printable
from ..run.files import RunDir, RunState
from ..storage.locks import FolderLock, HeldInterrupts
from ..sweep.executors import check_reachable, execute
from ..sweep.limits import DEFAULT_MAX_CONCURRENT_CALLS
from ..sweep.plan import check_same_runs, check_same_sweep, committed_cost, experiment, preflight, resolved, survey
from ..sweep.results import SweepRecord
from ..sweep.task import RunTask, TaskResult
from .cells import Cell, Selection, expand
from .definition import Suite
from .harvest import record_of
from .store import RECORDS, SuiteRecord, append_records, latest, read_records
from .tables import write_tables

__all__ = ["BenchConfig", "Plan", "committed_store", "make_plan", "run_plan", "spent_so_far", "ACTIVE"]

@dataclass(frozen=True)
class BenchConfig:
    """One ``bench`` invocation."""

    suite: Suite
    source: str
    """The suite as given: a shipped suite's name or a TOML file's path."""
    selection: Selection
    out: Path
    """The bench folder (``--out``): a comparison folder per task and ``records.jsonl``."""
    publish: bool = False
    """Append each new record to the committed store too."""
    executor: str = "local"
    workers: int | None = None
    progress: bool = True
    command: str = ""
    """The command line the records quote (secrets redacted)."""
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    rpm: float | None = None
    budget_usd: float | None = None


def _publish_references(plan: Plan) -> None:
    """The uniform random policy's held-out mean for every (task, seed) recorded, where the committed store's
    ``references.json`` lacks it (:func:`~.publish.add_references`)."""
    from .publish import add_references

    suite = plan.config.suite
    add_references(committed_store(plan.config.source, suite).parent, suite,
                   [(c.task.key, c.seed) for c in plan.cells if c.state == "recorded"])


def committed_store(source: str, suite: Suite) -> Path:
    """The suite's committed records: ``llm_policy_gen/suites/data/SUITE/records.jsonl`` for a shipped suite,
    ``SUITE/records.jsonl`` beside a suite's TOML file."""
    path = Path(source)
    if source.endswith(".toml") or path.is_file():
        return path.resolve().parent / suite.name / RECORDS
    return Path(str(resources.files(__package__).joinpath("data", suite.name, RECORDS)))


@dataclass
class Plan:
    config: BenchConfig
    cells: list[Cell]
    store: Path
    committed: list[SuiteRecord]
    local: list[SuiteRecord]
    recorded: list[SuiteRecord] = field(default_factory=list)
    """Records this invocation made."""

    @property
    def out(self) -> Path:
        return Path(self.config.out).resolve()

    def records(self) -> list[SuiteRecord]:
        """Every record, committed first, in file order (this invocation's last)."""
        return [*self.committed, *self.local, *self.recorded]


ACTIVE = ("finished", "resumable", "run", "waiting")
"""The states of cells this invocation touches."""


def _llm_settings(config: BenchConfig) -> dict[str, Any]:
    return {} if config.budget_usd is None else {"budget_usd": float(config.budget_usd)}


def make_plan(config: BenchConfig) -> Plan:
    """Every cell with its state, everything checked (see the module doc); writes nothing."""
    store = committed_store(config.source, config.suite)
    committed, local = read_records(store), read_records(Path(config.out).resolve())
    cells = expand(config.suite, config.selection, config.out, latest([*committed, *local]), _llm_settings(config))
    plan = Plan(config, cells, store, committed, local)
    _check(plan)
    return plan


def _groups(cells: Sequence[Cell], states: Sequence[str]) -> dict[tuple[str, str], list[Cell]]:
    out: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        if c.state in states and c.run is not None:
            out.setdefault((c.task.key, c.method.label), []).append(c)
    return out


def _sweep_of(task: RunTask) -> dict[str, Any]:
    """What ``compare`` records as its sweep's settings for ``task``'s (its settings without the entry's options)."""
    from ..config import TrainConfig

    shared = {k: v for k, v in task.settings.items() if k not in task.method.options}
    cfg = TrainConfig.build((shared, "the suite's settings"), ({"env_id": task.env_id}, "bench"))
    return {k: v for k, v in experiment(resolved(cfg)).items() if k not in ("backend", "seed")}


def _check(plan: Plan) -> None:
    """Refuse a busy task folder or runs of other settings; build every (task, method) to run without starting."""
    from ..storage.runlog import read_json_object

    out = plan.out
    for (key, _), group in _groups(plan.cells, ACTIVE).items():
        folder = out / key
        if folder.is_dir():
            with FolderLock(folder, "the task folder"):
                pass
        tasks = [c.run for c in group if c.run is not None and c.state != "waiting"]
        found = survey(tasks)
        before = read_json_object(folder / "compare.json", lenient=True)
        by_compare = before is not None and all(t.backend in SweepRecord.from_json(before).backends for t in tasks)
        if tasks and by_compare:
            check_same_sweep(folder, _sweep_of(tasks[0]), tasks, found)
        else:
            check_same_runs(folder, tasks, found)
    for (key, label), group in _groups(plan.cells, ("resumable", "run", "waiting")).items():
        try:
            preflight([c.run for c in group if c.run is not None])
        except UserError as exc:
            if group[0].explicit:
                raise UserError(f"{key}/{label} cannot run: {exc}") from None
            for c in group:
                c.state, c.why = "skipped", str(exc)
    check_reachable(plan.config.executor)


# ---------------------------------------------------------------------------------------------------- running
Say = Callable[[str], None]


def _record(plan: Plan, cell: Cell, say: Say, note: str) -> None:
    """Record ``cell``'s finished run in ``OUT/records.jsonl`` (and the committed store with ``--publish``) now; an
    adopted run's record quotes the command that started it."""
    adopted = cell.state == "finished"
    rec = record_of(plan.config.suite, cell, None if adopted else plan.config.command)
    with HeldInterrupts(raise_after=True):  # both lines or neither, whatever comes
        append_records(plan.out, [rec])
        if plan.config.publish:
            append_records(plan.store, [rec])
    plan.recorded.append(rec)
    cell.state, cell.record = "recorded", rec
    value = rec.heldout
    say(f"{cell.name}: held-out {'n/a' if value is None else f'{value:.2f}'}, "
        f"{rec.result.get('episodes')} episodes, {rec.result.get('env_steps')} steps ({note})")


def spent_so_far(plan: Plan, todo: Sequence[Cell]) -> float:
    """What runs of this folder already spent: its records' costs and the started runs' checkpoints."""
    done = sum(float(r.result.get("cost_usd") or 0.0) for r in latest([*plan.local, *plan.recorded]).values())
    tasks = [c.run for c in todo if c.run is not None]
    found = survey(tasks)
    return done + sum(committed_cost(t, found[t.run_id]) for t in tasks)


def _execute(plan: Plan, todo: list[Cell], say: Say) -> list[Cell]:
    """Run ``todo`` through the executor; each finished run is recorded as it ends. Returns the cells that ran and
    did not finish."""
    if not todo:
        return []
    c = plan.config
    for cell in todo:
        assert cell.run is not None
        if RunDir(cell.run.run_dir).state() is RunState.STALE:
            shutil.rmtree(cell.run.run_dir)
    by_run = {(cell.run.out, cell.run.run_id): cell for cell in todo if cell.run is not None}
    failed: list[Cell] = []
    limits = {"max_concurrent": c.max_concurrent_calls, "rpm": c.rpm, "budget_usd": c.budget_usd,
              "spent_usd": spent_so_far(plan, todo)}

    def on_done(task: RunTask, res: TaskResult) -> None:
        cell = by_run[(task.out, task.run_id)]
        if RunDir(task.run_dir).state() is RunState.FINISHED:
            _record(plan, cell, say, "resumed" if cell.state == "resumable" else "ran")
        else:
            failed.append(cell)
            say(f"{cell.name}: {res.row.status.upper()}: {res.row.error}")

    execute(c.executor, [cell.run for cell in todo if cell.run is not None], c.workers, on_done, limits,
            lambda event: None)
    return failed


def _second_phase(plan: Plan, say: Say) -> list[Cell]:
    """The waiting cells again, now that their sources may have records: those that can run now."""
    waiting = [(c.task.key, c.method.label, c.seed) for c in plan.cells if c.state == "waiting"]
    if not waiting:
        return []
    fresh = {(c.task.key, c.method.label, c.seed): c for c in
             expand(plan.config.suite, plan.config.selection, plan.config.out, latest(plan.records()),
                    _llm_settings(plan.config))}
    ready: list[Cell] = []
    for i, cell in enumerate(plan.cells):
        now = fresh.get((cell.task.key, cell.method.label, cell.seed))
        if cell.state != "waiting" or now is None or now.state == "waiting":
            continue
        now.explicit = cell.explicit
        plan.cells[i] = now
        ready.append(now)
    checked = _groups(ready, ("run", "resumable", "finished"))
    for group in checked.values():
        tasks = [c.run for c in group if c.run is not None]
        try:
            check_same_runs(plan.out / group[0].task.key, tasks, survey(tasks))
            preflight(tasks)
        except UserError as exc:  # listed, not raised: the first phase's records are kept
            for c in group:
                c.state, c.why = "skipped", str(exc)
    for c in ready:
        if c.state == "skipped":
            say(f"{c.name}: not run: {c.why}")
    return [c for c in ready if c.state in ("run", "resumable", "finished")]


def run_plan(plan: Plan, say: Say | None = None) -> tuple[list[Cell], list[Path]]:
    """Adopt the finished runs, run the cells (in phases), write the tables; returns the cells that ran and did not
    finish, and the tables written. A Ctrl-C (SIGTERM, SIGHUP) keeps every record made, writes the tables and raises
    :class:`~llm_policy_gen.errors.SweepInterrupted`."""
    speak: Say = say or (lambda s: print(printable(s), file=sys.stderr, flush=True))
    out = plan.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the bench folder {out}: {exc.strerror}; choose --out") from None
    failed: list[Cell] = []
    stopped: KeyboardInterrupt | None = None
    with ExitStack() as held:
        for key in sorted({c.task.key for c in plan.cells if c.state in ACTIVE}):
            (out / key).mkdir(exist_ok=True)
            held.enter_context(FolderLock(out / key, "the task folder"))
        try:
            cells = [c for c in plan.cells if c.state in ("finished", "resumable", "run")]
            while cells:  # then the cells that waited for those records, until none is ready (an adaptive grid)
                for cell in [c for c in cells if c.state == "finished"]:
                    _record(plan, cell, speak, "finished earlier: adopted")
                failed += _execute(plan, [c for c in cells if c.state in ("resumable", "run")], speak)
                cells = _second_phase(plan, speak)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
            stopped = exc
        with HeldInterrupts(raise_after=False):
            # the normaliser of every published seed, beside the records (a settings search normalises nothing)
            if plan.config.publish and stopped is None:
                _publish_references(plan)
            tables = write_tables(plan.config.suite, list(latest(plan.records()).values()), out)
    if stopped is not None:
        done = sum(c.state == "recorded" for c in plan.cells)
        raise SweepInterrupted(str(out), done, len(plan.cells), plan.config.command, signal_of(stopped))
    return failed, tables
