"""One run of a ``compare`` sweep: the task, running or resuming it in its directory, and its row of results.csv.

A :class:`RunTask` is everything a run needs, picklable, so that it can go to this process, a process pool or a Ray
task (:mod:`llm_policy_gen.ray_executor`) alike. :func:`run_one` starts the run, or resumes it with
:func:`llm_policy_gen.engine.resume` when its directory already holds a started run, under the sweep's shared limits
(:mod:`llm_policy_gen.sweep_limits`), and never raises for a failed run: the failure becomes its row. A run counts
as a result only when it finished (:func:`finished`): all its iterations, or a legitimate stop (patience,
``--max-episodes``, the budget, a replay that ran out); an interrupted or failed run is a row without numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .runlog import read_jsonl, slug, write_bytes_atomic, write_json_atomic
from .sweep_limits import Limits, SharedBudget, SharedLimiter, provider_key

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = ["CSV_COLUMNS", "TIME_COLUMNS", "ERROR_MARKER", "UNFINISHED_STOPS", "RunTask", "split_entry", "finished",
           "failed_result", "result_from_summary", "error_text", "run_one"]

#: Columns of ``results.csv``, in order.
CSV_COLUMNS = (
    "backend", "mode", "seed", "status", "error", "is_llm", "model", "best_eval_mean", "best_eval_std", "solved",
    "episodes_to_solve", "iterations", "episodes_total", "env_steps_total", "llm_calls", "cached_calls",
    "input_tokens", "output_tokens", "cost_usd", "stop_reason", "wall_s", "run_dir",
)
#: Columns that measure time, not results (they differ between two runs of the same sweep).
TIME_COLUMNS = ("wall_s",)
ERROR_MARKER = "compare_error.json"
"""Written into a run directory whose run raised (the error of its row); removed when the run resumes."""
#: Stop reasons of a run that did not finish (the engine's); any other stop is a legitimate end.
UNFINISHED_STOPS = ("interrupted", "credentials refused", "backend unreachable")


@dataclass(frozen=True)
class RunTask:
    """One (backend, seed) run of a sweep; picklable, so it can go to a process pool or a Ray task."""

    env_id: str
    backend: str
    seed: int
    out: str
    """The comparison directory (absolute)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Other TrainConfig settings (from --config, --iterations and --budget-usd)."""

    @property
    def run_id(self) -> str:
        return f"{slug(self.backend)}_s{self.seed}"

    @property
    def backend_spec(self) -> str:
        """The backend spec without its ``@MODE``."""
        return split_entry(self.backend)[0]

    @property
    def mode(self) -> str:
        """The entry's mode (``BACKEND@MODE``), else the sweep's (table by default)."""
        return split_entry(self.backend)[1] or str(self.settings.get("mode", "table"))

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / "runs" / slug(self.env_id) / self.run_id

    def config(self) -> TrainConfig:
        """The run's settings as ``train`` gets them (every value checked: a bad one is a UserError)."""
        from .config import TrainConfig

        return TrainConfig.build((self.settings, "compare settings"), (
            {"env_id": self.env_id, "backend": self.backend_spec, "mode": self.mode, "seed": self.seed,
             "logs_dir": str(Path(self.out) / "runs"), "run_id": self.run_id, "progress": False},
            "compare",
        ))


def split_entry(entry: str) -> tuple[str, str | None]:
    """``"offline@reward"`` -> ``("offline", "reward")``; ``"gemini"`` -> ``("gemini", None)``."""
    spec, sep, mode = entry.rpartition("@")
    return (spec, mode) if sep and spec else (entry, None)


def finished(summary: Mapping[str, Any]) -> bool:
    """True when a run's summary says it ended for good (all iterations or a legitimate stop)."""
    reason = str(summary.get("stop_reason") or "")
    return bool(reason) and reason not in UNFINISHED_STOPS and not reason.startswith("failed")


def _relative_dir(task: RunTask) -> str:
    return str(task.run_dir.relative_to(task.out)) if task.run_dir.exists() else ""


def failed_result(task: RunTask, error: str, status: str = "failed",
                  stop_reason: str | None = None) -> dict[str, Any]:
    """A row without numbers: the run has no result (yet)."""
    row: dict[str, Any] = {c: None for c in CSV_COLUMNS}
    row.update(backend=task.backend, mode=task.mode, seed=task.seed, status=status, error=error,
               stop_reason=stop_reason, run_dir=_relative_dir(task))
    return {"row": row, "curve": ([], []), "log": []}


def _curve_from_events(events: Iterable[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(episodes_total, best table's held-out mean -- or best_eval_mean where no held-out mean was logged)."""
    xs, ys = [], []
    for e in events:
        y = e.get("heldout_mean", e.get("best_eval_mean"))
        if y is None or e.get("episodes_total") is None:
            continue
        xs.append(float(e["episodes_total"]))
        ys.append(float(y))
    return xs, ys


def result_from_summary(task: RunTask, summary: dict[str, Any]) -> dict[str, Any]:
    """The row and curve of a run that wrote ``summary``: its numbers when it finished, else no result."""
    if not finished(summary):
        reason = str(summary.get("stop_reason") or "no stop reason")
        status = "interrupted" if reason == "interrupted" else "failed"
        return failed_result(task, f"{reason} after iteration {summary.get('iterations', 0)}; run the same command "
                             "again to resume it", status, reason)
    row: dict[str, Any] = {c: summary.get(c) for c in CSV_COLUMNS}
    row.update(backend=task.backend, mode=task.mode, seed=task.seed, status="ok", error="",
               run_dir=_relative_dir(task))
    events = task.run_dir / "events.jsonl"
    return {"row": row, "curve": _curve_from_events(read_jsonl(events) if events.is_file() else []), "log": []}


def error_text(exc: BaseException) -> str:
    from .clients.keys import redact

    lines = redact(str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def run_one(task: RunTask, limits: Limits | None = None, holder: str = "") -> dict[str, Any]:
    """Run one task, or resume it when its directory holds a started run; never raises for a failed run.

    ``limits`` (the sweep's) bounds its calls and its spending, in the name of ``holder``. Returns
    ``{"row", "curve", "log"}``.
    """
    from .engine import resume, train

    logs: list[str] = []
    shared: dict[str, Any] = {}
    if limits is not None:
        holder = holder or task.run_id
        shared = {"limiter": SharedLimiter(limits, provider_key(task.backend_spec, task.settings.get("base_url")),
                                           holder),
                  "budget": SharedBudget(limits, holder)}
    try:
        if (task.run_dir / "config.json").is_file():
            (task.run_dir / ERROR_MARKER).unlink(missing_ok=True)
            # The sweep's own environment and endpoint, named again: a module:EnvId environment is imported and a
            # remote base URL is called on resume only when named (config.json has no password either).
            url = task.settings.get("base_url")
            overrides = {"env_id": task.env_id, **({"base_url": url} if url else {}),
                         **{k: task.settings[k] for k in ("prices_file", "cache_dir") if task.settings.get(k)}}
            result = resume(task.run_dir, overrides, log=logs.append, **shared)
        else:
            result = train(task.config(), log=logs.append, **shared)
        if Path(result.run_dir) != task.run_dir:  # pragma: no cover - run_compare removes stale directories first
            raise RuntimeError(f"run went to {result.run_dir}, expected {task.run_dir}")
        out = result_from_summary(task, result.summary)
        out["log"] = logs
    except Exception as exc:  # a failed run is a row of the table, never the end of the sweep
        out = failed_result(task, error_text(exc))
        out["log"] = logs
        if task.run_dir.is_dir():
            write_json_atomic(task.run_dir / ERROR_MARKER, {"error": out["row"]["error"]})
    if task.run_dir.is_dir() and logs:
        write_bytes_atomic(task.run_dir / "compare.log", ("\n".join(logs) + "\n").encode("utf-8"))
    return out
