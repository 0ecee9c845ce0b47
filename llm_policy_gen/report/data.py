"""What a report reads: a run directory or a comparison directory, from any version of the files, as plain views.

A run directory written before K candidates existed (version 1) has no ``candidate_means``, ``chosen``,
``best_test_mean``, confirmation or checkpoint, and its ``events.jsonl`` named the kept table's *test* mean as later
files name the held-out one (:data:`~llm_policy_gen.schema.aliases.LAYOUT_BEFORE_CANDIDATES`). :func:`load_run`
reads both through :func:`~llm_policy_gen.schema.aliases.events_in` into one :class:`IterationView` per
iteration, so the page always says which number is which; whatever a directory lacks is listed in
:attr:`RunData.missing` and its part of the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..run.files import RunDir, RunState, RunView, is_run_dir
from ..schema.aliases import summary_in
from ..storage.runlog import read_json_object
from ..sweep.results import Curve, ResultRow, SweepRecord, curves_from_json, read_results

__all__ = ["IterationView", "RunData", "CompareData", "load_run", "load_compare", "is_run_dir", "is_compare_dir",
           "REPORT_NAME"]

REPORT_NAME = "report.html"
"""The page's file name inside the directory it reports on (the default ``--out``)."""


def is_compare_dir(path: Path) -> bool:
    return (Path(path) / "results.csv").is_file() or (Path(path) / "compare.json").is_file()


@dataclass
class IterationView:
    """One iteration of a run, the same for every file version."""

    iteration: int
    best_test: float | None
    """The kept table's mean on this iteration's test seeds (what the keeper compares)."""
    heldout: float | None
    """The kept table's mean on the held-out episodes (reported only)."""
    candidate_means: list[float | None]
    chosen: int | None
    """1-based index of the candidate that challenged the kept table."""
    accepted: bool
    confirmation: dict[str, Any] | None
    test_mean: float | None
    train_return: float | None
    episodes_total: int | None
    steps_total: int | None
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cost_total: float | None
    errors: list[str]
    wall_s: float | None
    test_episodes: int | None
    heldout_measured: bool
    """The held-out episodes were run at this iteration (a new best)."""

    @classmethod
    def from_event(cls, e: dict[str, Any], v1: bool) -> IterationView:
        """One iteration from its events.jsonl line in the code's names (``v1``: a version 1 file)."""
        means = list(e.get("candidate_means") or [])
        chosen = e.get("chosen")
        if v1 and not means:  # one candidate per iteration: its test mean, when its answer was valid
            means = [e.get("test_mean")]
            chosen = 1 if e.get("valid", e.get("test_mean") is not None) else None
        return cls(
            iteration=int(e.get("iteration", 0)),
            best_test=e.get("best_test_mean"),
            heldout=e.get("best_heldout_mean"),
            candidate_means=means,
            chosen=chosen,
            accepted=bool(e.get("accepted")),
            confirmation=e.get("confirmation") if isinstance(e.get("confirmation"), dict) else None,
            test_mean=e.get("test_mean"),
            train_return=e.get("train_return"),
            episodes_total=e.get("episodes_total"),
            steps_total=e.get("env_steps_total"),
            calls=int(e.get("llm_calls") or 0),
            input_tokens=int(e.get("input_tokens") or 0),
            output_tokens=int(e.get("output_tokens") or 0),
            cost_usd=float(e.get("cost_usd") or 0.0),
            cost_total=e.get("cost_usd_total"),
            errors=[str(x) for x in e.get("validation_errors") or []],
            wall_s=e.get("wall_s"),
            test_episodes=e.get("test_episodes"),
            heldout_measured="heldout_episodes" in e or (v1 and bool(e.get("accepted"))),
        )


@dataclass
class RunData:
    """Everything a run report shows, read from one run directory."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any] | None
    """``summary.json`` as written (:attr:`facts` in the code's names)."""
    events: list[dict[str, Any]]
    """``events.jsonl``'s lines in the code's names."""
    iterations: list[IterationView]
    transcripts: list[dict[str, Any]]
    version: int
    """1: written before K candidates (see the module docstring); 2: the current files."""
    missing: list[str] = field(default_factory=list)
    view: RunView = field(default_factory=lambda: RunView(Path(), RunState.NEW, {}, {}, [], 2))
    """The run as :meth:`RunDir.read` gives it (its facts' one precedence)."""

    @property
    def facts(self) -> dict[str, Any]:
        """``summary.json`` in the code's names (empty when the run did not finish)."""
        return summary_in(self.summary or {})

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.config.get("config") or {})

    @property
    def env_id(self) -> str:
        return self.view.env_id or "unknown environment"

    @property
    def backend(self) -> str:
        return self.view.backend or "unknown backend"

    @property
    def is_llm(self) -> bool | None:
        for v in ((self.summary or {}).get("is_llm"), self.config.get("backend_is_llm")):
            if isinstance(v, bool):
                return v
        return None

    @property
    def finished(self) -> bool:
        return self.summary is not None


def load_run(path: Path) -> RunData:
    """Read a run directory (see the module docstring); a folder that is not one is a :class:`UserError`."""
    p = Path(path)
    rd = RunDir(p)
    if not is_run_dir(p):
        raise UserError(f"{p} is not a run directory (no {rd.events.name} or {rd.summary.name}); give the folder "
                        "`train` printed")
    try:  # a broken line is one line naming the file and the line
        view = rd.read()
        transcripts = rd.load_transcripts()
    except OSError as exc:
        raise UserError(f"{exc.filename or p} cannot be read: {exc.strerror or exc}") from None
    config, summary, events, v1 = view.record, view.file_summary, view.events, view.before_candidates
    why = {rd.config.name: "settings", rd.events.name: "iterations and curves", rd.summary.name: "the run did not "
           "finish: figures come from the last logged iteration", rd.transcripts.name: "model calls",
           rd.best_policy.name: "the policy figure"}
    missing = [f"{name} ({why[name]})" for name in rd.missing()]
    return RunData(p, config, summary, events, [IterationView.from_event(e, v1) for e in events], transcripts,
                   1 if v1 else 2, missing, view)


@dataclass
class CompareData:
    """A comparison directory: its record, result rows, curve points and run directories."""

    path: Path
    record: SweepRecord
    rows: list[ResultRow]
    curves: list[Curve]
    missing: list[str] = field(default_factory=list)
    random: dict[int, float] | None = None
    """The uniform random policy's held-out mean per run seed (``random_policy.json``), for the normalised score."""

    @property
    def env_id(self) -> str:
        return str(self.record.env_id or "unknown environment")

    @property
    def backends(self) -> list[str]:
        order = list(self.record.backends)
        return order + [b for b in dict.fromkeys(r.backend for r in self.rows) if b not in order]

    def run_dir(self, row: ResultRow) -> Path | None:
        """The row's run directory, when it is one inside this comparison folder; a ``run_dir`` that is absolute,
        leads out of the folder (``..``, a link) or holds a symbolic link is ignored, so a page never reads or
        writes elsewhere."""
        rel = row.run_dir
        if not rel:
            return None
        if Path(str(rel)).is_absolute() or ".." in Path(str(rel)).parts:
            return None
        d = self.path / str(rel)
        try:
            inside = d.resolve().is_relative_to(self.path.resolve())
        except OSError:
            return None
        if not (inside and is_run_dir(d)):
            return None
        try:
            RunDir(d).check_no_links()
        except UserError:
            return None
        return d


def load_compare(path: Path) -> CompareData:
    """Read a comparison directory written by ``llm-policy-gen compare``."""
    from ..sweep.random_baseline import read_random_baseline  # it measures too: not imported with the report

    p = Path(path)
    if not is_compare_dir(p):
        raise UserError(f"{p} is not a comparison directory (no results.csv); give the folder `compare` printed")
    record = SweepRecord.from_json(read_json_object(p / "compare.json") or {})
    if not (p / "results.csv").is_file():
        raise UserError(f"{p} holds no results.csv yet (the sweep has not finished); run `llm-policy-gen compare` "
                        "again to finish it")
    try:
        rows = read_results(p / "results.csv")
    except (ValueError, KeyError) as exc:
        raise UserError(f"{p / 'results.csv'} cannot be read: {exc}") from None
    curves = curves_from_json(read_json_object(p / "curves.json") or {})
    missing = [n for n in ("compare.json", "curves.json", "curves.png") if not (p / n).is_file()]
    return CompareData(p, record, rows, curves, missing, read_random_baseline(p) or None)
