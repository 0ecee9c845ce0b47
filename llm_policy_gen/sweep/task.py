"""One run of a sweep: the task, running or resuming it in its directory, and its row of results.csv.

A :class:`RunTask` is everything a run needs, picklable, so that it can go to this process, a process pool
(:mod:`.local`) or a Ray task (:mod:`.ray`) alike. :func:`run_one` starts the run, or resumes it with
:func:`llm_policy_gen.run.resume` when its directory already holds a started run, under the sweep's shared limits
(:mod:`.limits`), and never raises for a failed run: the failure becomes its row. A run counts as a result only when
it finished (:func:`~.results.finished`): all its iterations, or a legitimate stop (patience, ``--max-episodes``, the
budget, a replay that ran out); an interrupted or failed run is a row without numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..run.files import COMPARE_ERROR, RunDir
from ..run.stop import StopKind, StopReason
from ..storage.runlog import slug, write_bytes_atomic, write_json_atomic
from .limits import Limits, SharedBudget, SharedLimiter, provider_key
from .methods import Method, parse_method
from .results import Curve, ResultRow, finished

if TYPE_CHECKING:
    from ..config import TrainConfig

__all__ = ["ERROR_MARKER", "RunTask", "TaskResult", "Done", "Note", "failed_result", "result_from_summary",
           "error_text", "run_one"]

ERROR_MARKER = COMPARE_ERROR
"""Written into a run directory whose run raised (the error of its row); removed when the run resumes."""


@dataclass(frozen=True)
class RunTask:
    """One (method, seed) run of a sweep; picklable, so it can go to a process pool or a Ray task."""

    env_id: str
    backend: str
    """The method entry as written (:mod:`.methods`: ``BACKEND``, ``BACKEND@MODE``, ``@MODE``, with a label and
    options)."""
    seed: int
    out: str
    """The comparison directory (absolute)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Other TrainConfig settings (from --config, --iterations and --budget-usd), and the entry's options."""
    name: str = ""
    """The method's display name (default: the entry's own, :meth:`.methods.Method.display`)."""

    @cached_property
    def method(self) -> Method:
        return parse_method(self.backend)

    @property
    def label(self) -> str:
        """The name tables, reports and the console show."""
        return self.name or self.method.display(self.settings)

    @property
    def run_id(self) -> str:
        return self.method.run_id(self.seed)

    @property
    def backend_spec(self) -> str | None:
        """The backend its runs get (the entry's, without ``@MODE``; None for a mode that proposes nothing)."""
        return self.method.backend_spec

    @property
    def mode(self) -> str:
        """The entry's mode (``BACKEND@MODE``, ``@MODE``, or the one an old spelling names: ``q-learning``), else the
        sweep's, else table."""
        return self.method.run_mode(self.settings)

    @property
    def run_dir(self) -> Path:
        """Where ``train`` puts the run: under the gymnasium id's folder (``FrozenLake-v1`` for the spec variant
        ``FrozenLake-v1.8x8``)."""
        from ..envs.catalog import gym_id

        return Path(self.out) / "runs" / slug(gym_id(self.env_id)) / self.run_id

    def config(self) -> TrainConfig:
        """The run's settings as ``train`` gets them (every value checked: a bad one is a UserError)."""
        from ..config import TrainConfig

        return TrainConfig.build((self.settings, "compare settings"), (
            {"env_id": self.env_id, "backend": self.backend_spec, "mode": self.mode, "seed": self.seed,
             "logs_dir": str(Path(self.out) / "runs"), "run_id": self.run_id, "progress": False},
            "compare",
        ))


@dataclass
class TaskResult:
    """What one run of a sweep gives back: its row, its curve, and the lines its run logged."""

    row: ResultRow
    curve: Curve
    log: list[str] = field(default_factory=list)


Done = Callable[[RunTask, TaskResult], None]
"""What an executor calls with each run's result, as the run ends."""
Note = Callable[[dict[str, Any]], None]
"""What an executor calls with each event of an attempt (a line of ``sweep.jsonl``)."""


def _relative_dir(task: RunTask) -> str:
    return str(task.run_dir.relative_to(task.out)) if task.run_dir.exists() else ""


def failed_result(task: RunTask, error: str, status: str = "failed", stop_reason: str | None = None) -> TaskResult:
    """A row without numbers: the run has no result (yet)."""
    row = ResultRow(backend=task.backend, mode=task.mode, seed=task.seed, status=status, error=error,
                    stop_reason=stop_reason, run_dir=_relative_dir(task), method=task.label)
    return TaskResult(row, Curve(task.backend, task.seed))


def _curve_from_events(task: RunTask, events: Iterable[Mapping[str, Any]]) -> Curve:
    """(episodes_total, best table's held-out mean), from events.jsonl's lines in the code's names."""
    curve = Curve(task.backend, task.seed)
    for e in events:
        y = e.get("best_heldout_mean")
        if y is None or e.get("episodes_total") is None:
            continue
        curve.x.append(float(e["episodes_total"]))
        curve.y.append(float(y))
    return curve


def result_from_summary(task: RunTask, summary: Mapping[str, Any]) -> TaskResult:
    """The row and curve of a run that wrote ``summary``: its numbers when it finished, else no result."""
    if not finished(summary):
        stop = StopReason.parse(str(summary.get("stop_reason") or "no stop reason"))
        assert stop is not None
        status = "interrupted" if stop.kind is StopKind.INTERRUPTED else "failed"
        return failed_result(task, f"{stop} after iteration {summary.get('iterations', 0)}; run the same command "
                             "again to resume it", status, stop.text)
    view = RunDir(task.run_dir).read(check=False)
    row = ResultRow.from_summary(summary, backend=task.backend, mode=task.mode, seed=task.seed, status="ok",
                                 error="", run_dir=_relative_dir(task), method=task.label,
                                 final_heldout_mean=view.final_heldout_mean,
                                 selected_heldout_mean=view.selected_heldout_mean)
    return TaskResult(row, _curve_from_events(task, view.events))


def error_text(exc: BaseException) -> str:
    from ..clients.keys import redact

    lines = redact(str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def run_one(task: RunTask, limits: Limits | None = None, holder: str = "") -> TaskResult:
    """Run one task, or resume it when its directory holds a started run; never raises for a failed run.

    ``limits`` (the sweep's) bounds its calls and its spending, in the name of ``holder``.
    """
    from ..run import resume, train

    logs: list[str] = []
    shared: dict[str, Any] = {}
    if limits is not None:
        holder = holder or task.run_id
        shared = {"limiter": SharedLimiter(limits, provider_key(task.backend_spec, task.settings.get("base_url")),
                                           holder),
                  "budget": SharedBudget(limits, holder)}
    rd = RunDir(task.run_dir)
    try:
        if rd.config.is_file():
            rd.compare_error.unlink(missing_ok=True)
            # The sweep's own environment and endpoint, named again: a module:EnvId environment is imported and a
            # remote base URL is called on resume only when named (config.json has no password either).
            url = task.settings.get("base_url")
            overrides = {"env_id": task.env_id, **({"base_url": url} if url else {}),
                         **{k: task.settings[k] for k in ("prices_file", "cache_dir", "lm_cache")
                            if task.settings.get(k)}}
            result = resume(task.run_dir, overrides, log=logs.append, **shared)
        else:
            result = train(task.config(), log=logs.append, **shared)
        if Path(result.run_dir) != task.run_dir:  # pragma: no cover - the sweep removes stale directories first
            raise RuntimeError(f"run went to {result.run_dir}, expected {task.run_dir}")
        out = result_from_summary(task, result.summary)
    except Exception as exc:  # a failed run is a row of the table, never the end of the sweep
        out = failed_result(task, error_text(exc))
        if task.run_dir.is_dir():
            write_json_atomic(rd.compare_error, {"error": out.row.error})
    out.log = logs
    if task.run_dir.is_dir() and logs:
        write_bytes_atomic(rd.compare_log, ("\n".join(logs) + "\n").encode("utf-8"))
    return out
