"""The tables a suite asks for beside the goal table (``[suite] tables = [...]``), and the figures its records carry.

* ``drift`` (the ``noise`` suite): per task and method, over the current records' seeds, the runs, the adoptions
  (measurable ones: the event carries both held-out lists), the adoptions that lowered the held-out mean by more
  than two standard errors of the paired difference (:mod:`.drift`), the runs with any and with more than one, and
  a last row over all of them. Record keys: ``adoptions``, ``measurable_adoptions``, ``drifted_down``.
* ``answers`` (the ``real`` suite): what a language model's answers were worth (its runs only), from the run's
  transcript: the candidates it was asked for that were valid at the first attempt and after repairs, its calls
  (failed), the ``--rules-refine`` refinements (which call no model), the adoptions the model's and the refinements'
  tables won, tokens in and out, seconds per answered call (a call answered by the model, not from a record or the
  cache; median over the seeds), and the initial table's held-out mean (median; what the model's tables must beat:
  the first adoption's ``heldout_returns_before``, or the kept table's when nothing was adopted). Record keys:
  ``candidates_asked``, ``valid_first``, ``valid_after_repairs``, ``failed_calls``, ``refinements``,
  ``adopted_by_model``, ``adopted_by_refine``, ``s_per_call``, ``initial_heldout_mean``.

:func:`figures_of` adds a suite's keys to a record's ``result`` (read through the run-directory reader);
:func:`render_extra` gives the Markdown section and a CSV file (``SUITE_drift.csv``, ``SUITE_answers.csv``) per table.
A record made before its suite asked for a table lacks its keys and shows ``-``.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ..run.files import RunDir, RunView
from .definition import Suite
from .drift import Z, drift_of
from .store import SuiteRecord

__all__ = ["figures_of", "render_extra", "drift_figures", "answer_figures"]


def drift_figures(rd: RunDir, view: RunView) -> dict[str, Any]:
    d = drift_of(view)
    return {"adoptions": d.adoptions, "measurable_adoptions": d.measurable, "drifted_down": len(d.drops)}


def answer_figures(rd: RunDir, view: RunView) -> dict[str, Any]:
    every = rd.load_transcripts()
    calls = [t for t in every if t.get("phase") != "refine"]  # --rules-refine's refinements call no model
    first = [t for t in calls if int(t.get("attempt") or 1) == 1]
    valid: dict[tuple[int, int], bool] = {}
    for t in calls:
        key = (int(t.get("iteration") or 0), int(t.get("candidate") or 1))
        valid[key] = valid.get(key, False) or bool(t.get("valid"))
    latency = [float(t["latency_s"]) for t in calls if t.get("latency_s") is not None
               and not (t.get("failed") or t.get("reused") or t.get("cached"))]
    phase = {(int(t.get("iteration") or 0), int(t.get("candidate") or 1)): t.get("phase") for t in every}
    won = [phase.get((int(e.get("iteration") or 0), int(e["chosen"]))) for e in view.events
           if e.get("accepted") and e.get("chosen") is not None]
    before = next((e["heldout_returns_before"] for e in view.events
                   if e.get("accepted") and e.get("heldout_returns_before")), None)
    initial = statistics.mean(float(x) for x in before) if before else (
        view.summary.get("best_heldout_mean") if not any(e.get("accepted") for e in view.events) else None)
    return {"candidates_asked": len(first), "valid_first": sum(bool(t.get("valid")) for t in first),
            "valid_after_repairs": sum(valid.values()), "failed_calls": sum(bool(t.get("failed")) for t in calls),
            "refinements": len(every) - len(calls), "adopted_by_model": sum(p != "refine" for p in won),
            "adopted_by_refine": sum(p == "refine" for p in won),
            "s_per_call": round(statistics.mean(latency), 3) if latency else None,
            "initial_heldout_mean": initial}


_FIGURES: dict[str, Callable[[RunDir, RunView], dict[str, Any]]] = {"drift": drift_figures,
                                                                     "answers": answer_figures}


def figures_of(suite: Suite, rd: RunDir, view: RunView) -> dict[str, Any]:
    """The keys the suite's extra tables need, of the finished run ``view`` of ``rd``."""
    out: dict[str, Any] = {}
    for name in suite.tables:
        out.update(_FIGURES[name](rd, view))
    return out


# ---------------------------------------------------------------------------------------------------- rendering
def _groups(records: Sequence[SuiteRecord]) -> dict[tuple[str, str], list[SuiteRecord]]:
    out: dict[tuple[str, str], list[SuiteRecord]] = {}
    for r in records:
        out.setdefault((r.task, r.method), []).append(r)
    return out


def _sum(rs: Sequence[SuiteRecord], key: str) -> int | None:
    values = [r.result.get(key) for r in rs]
    return None if any(v is None for v in values) else int(sum(v for v in values if v is not None))


def _median(rs: Sequence[SuiteRecord], key: str) -> float | None:
    values = [float(v) for r in rs if (v := r.result.get(key)) is not None]
    return statistics.median(values) if values else None


def _text(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


DRIFT_KEYS = ("runs", "adoptions", "measurable_adoptions", "drifted_down", "runs_with_any", "runs_with_more_than_one")


def _drift_row(rs: Sequence[SuiteRecord]) -> list[int | None]:
    """runs, adoptions, measurable ones, drifted down, runs with any, runs with more than one (None: unknown)."""
    drops = [r.result.get("drifted_down") for r in rs]
    known = None if any(d is None for d in drops) else [int(d or 0) for d in drops]
    return [len(rs), _sum(rs, "adoptions"), _sum(rs, "measurable_adoptions"), _sum(rs, "drifted_down"),
            None if known is None else sum(d > 0 for d in known), None if known is None else sum(d > 1 for d in known)]


def _drift(records: Sequence[SuiteRecord]) -> tuple[list[str], list[list[object]]]:
    rows = [([t, m], _drift_row(rs)) for (t, m), rs in _groups(records).items()]
    if rows:
        rows.append((["all", "all"], _drift_row(records)))
    md = [f"Drift (the keeper's adoptions that lowered the held-out mean by more than {Z:g} standard errors of the "
          "paired difference, from each run's events; the keeper's goal: no run with more than one, at most one run "
          "in twenty with any):", "", _md_row(["task", "method", "runs", "adoptions (measurable)", "drifted down",
                                               "runs with any", "runs with more than one"]),
          "|" + "---|" * 7]
    md += [_md_row([*names, _cell(n[0]), f"{_cell(n[1])} ({_cell(n[2])})", *map(_cell, n[3:])]) for names, n in rows]
    table: list[list[object]] = [["task", "method", *DRIFT_KEYS]]
    return md, table + [[*names, *n] for names, n in rows]


ANSWER_KEYS = ("seeds", "candidates_asked", "valid_first", "valid_after_repairs", "calls", "failed_calls",
               "refinements", "adopted_by_model", "adopted_by_refine", "tokens_in", "tokens_out", "s_per_call_median",
               "initial_heldout_median")


def _answers(records: Sequence[SuiteRecord]) -> tuple[list[str], list[list[object]]]:
    rows: list[list[object]] = []
    md = ["Answers (the language model's, from each run's transcript; a candidate is valid after repairs when any of "
          "its attempts was; refinements call no model; seconds per call: answered calls only, median over the "
          "seeds; the initial table: its held-out mean, median over the seeds):", "",
          _md_row(["task", "method", "seeds", "valid 1st attempt", "valid after repairs", "calls (failed)",
                   "refinements", "adopted: model / refinement", "tokens in / out", "s per call", "initial table"]),
          "|" + "---|" * 11]
    for (t, m), rs in _groups([r for r in records if r.result.get("model")]).items():  # the language models' runs
        asked, first, after = (_sum(rs, k) for k in ("candidates_asked", "valid_first", "valid_after_repairs"))
        row: list[object] = [t, m, ",".join(str(r.seed) for r in rs), asked, first, after,
                             _sum(rs, "calls"), _sum(rs, "failed_calls"), _sum(rs, "refinements"),
                             _sum(rs, "adopted_by_model"), _sum(rs, "adopted_by_refine"), _sum(rs, "tokens_in"),
                             _sum(rs, "tokens_out"), _median(rs, "s_per_call"), _median(rs, "initial_heldout_mean")]
        rows.append(row)
        share = "" if not asked or first is None else f" ({100 * first / asked:.0f}%)"
        md.append(_md_row([str(row[0]), m, str(row[2]), f"{_cell(first)}/{_cell(asked)}{share}",
                           f"{_cell(after)}/{_cell(asked)}", f"{_cell(row[6])} ({_cell(row[7])})", _cell(row[8]),
                           f"{_cell(row[9])} / {_cell(row[10])}", f"{_cell(row[11])} / {_cell(row[12])}",
                           _text(_median(rs, "s_per_call"), 1), _text(_median(rs, "initial_heldout_mean"), 2)]))
    return md, [["task", "method", *ANSWER_KEYS], *rows]


def _cell(x: object) -> str:
    return "-" if x is None else f"{x:,}" if isinstance(x, int) else str(x)


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


_TABLES = {"drift": _drift, "answers": _answers}


def render_extra(suite: Suite, records: Sequence[SuiteRecord]) -> tuple[list[str], dict[str, str]]:
    """The Markdown lines of the suite's extra tables (each after a blank line) over ``records`` (the current ones,
    in the tables' order), and their CSV files by name."""
    lines: list[str] = []
    files: dict[str, str] = {}
    for name in suite.tables:
        md, rows = _TABLES[name](records)
        lines += ["", *md]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(["" if c is None else c for c in row] for row in rows)
        files[f"{suite.name}_{name}.csv"] = buf.getvalue()
    return lines, files
