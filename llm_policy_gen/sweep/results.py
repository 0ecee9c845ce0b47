"""What a sweep leaves in its comparison directory, as typed records with their readers and writers.

* ``results.csv`` -- one :class:`ResultRow` per run (:data:`CSV_COLUMNS`), :func:`write_results` / :func:`read_results`;
* ``curves.json`` -- one :class:`Curve` per finished run, :func:`write_curves` / :func:`load_curves`;
* ``compare.json`` -- the sweep's :class:`SweepRecord`;
* ``results.md`` -- :func:`~.markdown.results_markdown`, from :func:`backend_stats` (rliable's interquartile means and
  intervals per backend);
* ``random_policy.json`` -- the uniform random policy's held-out mean per run seed, read and written by
  :mod:`.random_baseline`, which measures it.

Reports and the paper read a comparison through this module only; nothing here runs a sweep.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..plotting.stats import Interval, iqm_interval, median_censored, normalized
from ..run.stop import StopReason
from ..run.view import ended_for_good
from ..schema.aliases import file_key, summary_in
from ..storage.runlog import read_json_object, write_bytes_atomic, write_json_atomic

__all__ = ["CSV_COLUMNS", "TIME_COLUMNS", "finished", "all_cached", "ResultRow", "Curve", "SweepRecord",
           "write_results", "read_results", "write_curves", "load_curves", "BackendStats", "backend_stats"]

#: The fields of a :class:`ResultRow`, in the order of ``results.csv``'s columns (the code's names).
ROW_FIELDS = (
    "backend", "mode", "seed", "status", "error", "is_llm", "model", "best_heldout_mean", "best_heldout_std",
    "solved", "episodes_to_solve", "iterations", "episodes_total", "env_steps_total", "llm_calls", "cached_calls",
    "input_tokens", "output_tokens", "cost_usd", "stop_reason", "wall_s", "run_dir", "method", "final_heldout_mean",
    "selected_heldout_mean",
)
#: Columns of ``results.csv``, in order: the fields under the names ``summary.json`` gives them.
CSV_COLUMNS = tuple(file_key(c) for c in ROW_FIELDS)
#: Columns that measure time, not results (they differ between two runs of the same sweep).
TIME_COLUMNS = ("wall_s",)
_INTS = ("seed", "episodes_to_solve", "iterations", "episodes_total", "env_steps_total", "llm_calls", "cached_calls",
         "input_tokens", "output_tokens")
_FLOATS = ("best_heldout_mean", "best_heldout_std", "cost_usd", "wall_s", "final_heldout_mean",
           "selected_heldout_mean")
_BOOLS = ("is_llm", "solved")


def all_cached(calls: int | None, cached: int | None) -> bool:
    """A run made calls and the answer cache answered every one."""
    return bool(calls) and int(cached or 0) >= int(calls or 0)


def finished(summary: Mapping[str, Any]) -> bool:
    """True when a run's summary says it ended for good (all iterations or a legitimate stop): the run directory's
    one rule of finished (:func:`~llm_policy_gen.run.view.ended_for_good`)."""
    return ended_for_good(summary)


# ---------------------------------------------------------------------------------------------------- results.csv
@dataclass(kw_only=True)
class ResultRow:
    """One run of a sweep, one line of ``results.csv``: its summary's numbers with ``status`` ``ok``, or
    ``failed`` / ``interrupted`` with the error and no numbers. Numbers keep the type the run's summary gave them."""

    backend: str
    """The method entry as written (``BACKEND``, ``BACKEND@MODE``, ``@MODE``, with a label and options)."""
    mode: str | None = None
    seed: int
    status: str
    """``ok``, ``failed`` or ``interrupted``."""
    error: str | None = None
    is_llm: bool | None = None
    model: str | None = None
    best_heldout_mean: float | None = None
    """The kept table's mean on the held-out episodes."""
    best_heldout_std: float | None = None
    solved: bool | None = None
    episodes_to_solve: int | None = None
    iterations: int | None = None
    episodes_total: int | None = None
    env_steps_total: int | None = None
    llm_calls: int | None = None
    cached_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    stop_reason: str | None = None
    wall_s: float | None = None
    run_dir: str | None = None
    """The run directory relative to the comparison directory ("" when it was never made)."""
    method: str | None = None
    """The method's display name (:mod:`.methods`; none in files of earlier versions)."""
    final_heldout_mean: float | None = None
    """The final policy's held-out mean (:mod:`llm_policy_gen.modes.selection`; a run of an earlier version: as
    :attr:`~llm_policy_gen.run.view.RunView.final_heldout_mean` reads it)."""
    selected_heldout_mean: float | None = None
    """The selected policy's held-out mean, for a run that selected with counted episodes (else empty)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def stop(self) -> StopReason | None:
        return StopReason.parse(self.stop_reason)

    @property
    def name(self) -> str:
        """The method's display name (the ``method`` column, else the entry's own)."""
        from .methods import display_name

        return self.method or display_name(self.backend)

    @property
    def cached(self) -> bool:
        """Every call of the run was answered from the answer cache (its wall time says nothing of the method's)."""
        return all_cached(self.llm_calls, self.cached_calls)

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], **given: Any) -> ResultRow:
        """The summary's values of every column (``summary.json``'s keys or the code's names), then ``given``
        (backend, mode, seed, status, ...)."""
        named = summary_in(summary)
        return cls(**{**{c: named.get(c) for c in ROW_FIELDS}, **given})

    def csv_cells(self) -> dict[str, Any]:
        return {file_key(c): _csv_value(getattr(self, c)) for c in ROW_FIELDS}

    @classmethod
    def from_csv(cls, cells: Mapping[str, str | None]) -> ResultRow:
        """A row of ``results.csv`` with typed values (None for empty cells; unknown columns are ignored)."""
        values = {c: _parse_cell(c, cells.get(file_key(c)) or "") for c in ROW_FIELDS}
        return cls(**{**values, "backend": values["backend"] or "", "status": values["status"] or ""})


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    return v


def _parse_cell(column: str, text: str) -> Any:
    if text == "":
        return None
    if column in _BOOLS:
        return text == "true"
    if column in _INTS:
        return int(float(text))
    if column in _FLOATS:
        return float(text)
    return text


def write_results(path: Path, rows: Iterable[ResultRow]) -> None:
    """``results.csv`` (atomically)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r.csv_cells())
    write_bytes_atomic(Path(path), buf.getvalue().encode("utf-8"))


def read_results(path: Path) -> list[ResultRow]:
    """The rows of a ``results.csv``; a missing file is a :class:`UserError` saying how to make it."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p} does not exist; run `llm-policy-gen compare ... --out {p.parent}` first")
    with open(p, encoding="utf-8", newline="") as fh:
        return [ResultRow.from_csv(r) for r in csv.DictReader(fh)]


# ---------------------------------------------------------------------------------------------------- curves.json
@dataclass
class Curve:
    """A finished run's kept table: held-out mean (``y``) against environment episodes (``x``), a step curve."""

    backend: str
    seed: int
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Curve:
        return cls(str(data.get("backend")), int(data.get("seed") or 0), list(data.get("x") or []),
                   list(data.get("y") or []))


def write_curves(out: Path, env_id: str, curves: Iterable[Curve]) -> None:
    """``out/curves.json``: the points ``curves.png`` is drawn from."""
    write_json_atomic(Path(out) / "curves.json", {"env_id": env_id, "metric": "heldout_mean",
                                                  "runs": [asdict(c) for c in curves]})


def load_curves(out: Path) -> list[Curve]:
    """The curves of a comparison directory (``curves.json``); a missing file is a :class:`UserError`."""
    p = Path(out) / "curves.json"
    if not p.is_file():
        raise UserError(f"{p} does not exist; run `llm-policy-gen compare ... --out {Path(out)}` first")
    return curves_from_json(read_json_object(p) or {})


def curves_from_json(data: Mapping[str, Any]) -> list[Curve]:
    """The curves of a ``curves.json`` object (entries that are not objects are skipped)."""
    return [Curve.from_json(c) for c in data.get("runs", []) if isinstance(c, dict)]


# ---------------------------------------------------------------------------------------------------- compare.json
@dataclass(kw_only=True)
class SweepRecord:
    """``compare.json``: the sweep's parameters, the settings that decide its results, its limits' report. Written
    when the sweep starts (without the last three fields) and again when it ends."""

    package: str = "llm-policy-gen"
    version: str = ""
    env_id: str = ""
    backends: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    seeds_text: str = ""
    iterations: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """The settings given (base URL without its password), and ``heldout_episodes``."""
    experiment: dict[str, Any] | None = None
    """Every setting that decides results (none in files of earlier versions)."""
    executor: str = "local"
    workers: int | None = None
    command: str = ""
    reward_threshold: float | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    """The provider limits and budget asked for; at the end, :meth:`~llm_policy_gen.sweep.limits.SweepLimits.report`."""
    started: str = ""
    finished: str | None = None
    sweep_wall_s: float | None = None
    interrupted: bool | None = None

    @property
    def heldout_episodes(self) -> Any:
        return self.settings.get("heldout_episodes", 100)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.finished is None:
            for k in ("finished", "sweep_wall_s", "interrupted"):
                del out[k]
        return out

    def write(self, out: Path) -> None:
        write_json_atomic(Path(out) / "compare.json", self.to_json())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepRecord:
        """A record from a ``compare.json`` of any version (a missing or null value takes the default)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if data.get(f.name) is not None})


# ---------------------------------------------------------------------------------------------------- the summary
@dataclass
class BackendStats:
    """One line of ``results.md``: a backend's runs summed up over seeds."""

    backend: str
    is_llm: bool
    runs: int
    ok: int
    returns: Interval
    """Interquartile mean over seeds of the final held-out return, with its stratified bootstrap interval."""
    score: Interval | None
    """The same for the normalised score ``(return - R) / (goal - R)``, R the uniform random policy's return on the
    run's held-out seeds; None without a goal or R."""
    median_episodes_to_solve: float | None
    solve_rate: float
    episodes: float
    """Mean over the runs with a result of the counted episodes (training, test and confirmation)."""
    steps: float
    """Mean over the same runs of their counted environment steps."""
    calls: float
    tokens: float
    cost_usd: float
    wall_s: float
    """Mean wall time of the runs with a result, those whose every call came from the answer cache left out (NaN
    when every run's did)."""
    name: str = ""
    """The method's display name."""
    cached_calls: float = 0.0
    """Mean over the runs with a result of the calls the answer cache answered (they count in ``calls`` too)."""
    cached_runs: int = 0
    """Runs with a result whose every call came from the answer cache: not in ``wall_s``."""


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _score(runs: Sequence[ResultRow], random: Mapping[int, float] | None, goal: float | None) -> Interval | None:
    """IQM [95% CI] of the runs' normalised scores; None where a run's seed has no random return or there is no
    goal."""
    have = [r for r in runs if r.best_heldout_mean is not None]
    if random is None or goal is None or any(r.seed not in random for r in have):
        return None
    scores = normalized([float(r.best_heldout_mean or 0.0) for r in have], [random[r.seed] for r in have], goal)
    return None if scores is None else iqm_interval(scores)


def _name(entry: str) -> str:
    from .methods import display_name

    return display_name(entry)


def backend_stats(rows: Sequence[ResultRow], backends: Sequence[str] | None = None,
                  random: Mapping[int, float] | None = None, goal: float | None = None) -> list[BackendStats]:
    """Per-backend aggregates of result rows (in ``backends`` order, else first appearance); ``random``: the uniform
    random policy's held-out mean per run seed (:func:`~llm_policy_gen.sweep.random_baseline.random_baseline`),
    ``goal``: the task's goal (the reward threshold), for the normalised score."""
    order = list(backends) if backends else list(dict.fromkeys(r.backend for r in rows))
    out = []
    for b in order:
        mine = [r for r in rows if r.backend == b]
        ok = [r for r in mine if r.ok]
        timed = [r for r in ok if not r.cached]
        out.append(BackendStats(
            backend=b,
            is_llm=any(bool(r.is_llm) for r in ok),
            runs=len(mine),
            ok=len(ok),
            returns=iqm_interval([r.best_heldout_mean for r in ok if r.best_heldout_mean is not None]),
            score=_score(ok, random, goal),
            median_episodes_to_solve=median_censored([r.episodes_to_solve if r.solved else None for r in ok]),
            solve_rate=(sum(bool(r.solved) for r in ok) / len(ok)) if ok else float("nan"),
            episodes=_mean([float(r.episodes_total or 0) for r in ok]),
            steps=_mean([float(r.env_steps_total or 0) for r in ok]),
            calls=_mean([float(r.llm_calls or 0) for r in ok]),
            tokens=_mean([float((r.input_tokens or 0) + (r.output_tokens or 0)) for r in ok]),
            cost_usd=float(sum(float(r.cost_usd or 0) for r in ok)),
            wall_s=_mean([float(r.wall_s or 0) for r in timed]),
            name=mine[0].name if mine else _name(b),
            cached_calls=_mean([float(r.cached_calls or 0) for r in ok]) if ok else 0.0,
            cached_runs=len(ok) - len(timed),
        ))
    return out
