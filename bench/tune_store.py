"""The tuning's run records (``bench/tune_specs.py``): each finished run's record kept once, in
``OUT/tune_runs.json``, by its run id; ``tune.json``'s entries name their runs by id. An older ``tune.json`` held its
runs' whole records in each entry: :func:`lift` moves them here, losing none."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402
from bench_args import read_json  # noqa: E402
from goal_runs import run_id_of  # noqa: E402

RUNS_FILE = "tune_runs.json"
"""Every finished run's record (the suite's), kept beside ``tune.json`` as each run ends: with it alone a fresh
``OUT`` goes on where the search stopped (``OUT/runs`` is lost with the machine it ran on; a grid is tens of
CPU-hours and a session a few)."""


def run_name(record: dict[str, Any]) -> str:
    """A record's run id (the task, budget, backend, seed and a digest of the settings): its run folder's name, less
    the ``-2`` a run gets when a killed try left the id's folder (:func:`goal_runs.run_id_of`)."""
    return run_id_of(record["run_dir"])


def kept_runs(out: Path) -> dict[str, dict[str, Any]]:
    """The finished runs ``OUT`` keeps records of, by run id: ``tune_runs.json``'s and those of the finished tasks in
    ``tune.json`` (a search finished before ``tune_runs.json`` existed)."""
    kept: dict[str, dict[str, Any]] = {}
    done = out / "tune.json"
    for task in read_json(done, {}).values():
        kept.update({run_name(r): r for r in task.get("records", []) if "heldout" in r and r.get("run_dir")})
    runs = out / RUNS_FILE
    kept.update({run_name(r): r for r in read_json(runs, []) if "heldout" in r})
    return kept


def lean(entries: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``tune.json``'s entries with each task's run records replaced by their run ids (``runs``), and the finished
    records taken out of them for ``tune_runs.json``. An entry written before ``tune_runs.json`` existed, or by an
    earlier version of this script, held its runs' whole records (curves included): a second copy of what
    ``tune_runs.json`` holds, megabytes in ``bench/data``."""
    entries_out: dict[str, Any] = {}
    lifted: list[dict[str, Any]] = []
    for task, entry in entries.items():
        if not isinstance(entry, dict) or "records" not in entry:
            entries_out[task] = entry
            continue
        records = [r for r in entry["records"] if r.get("run_dir")]
        lifted += [{k: v for k, v in r.items() if k != "reused"} for r in records if "heldout" in r]
        entries_out[task] = {**{k: v for k, v in entry.items() if k != "records"},
                             "runs": [run_name(r) for r in records]}
    return entries_out, lifted


def lift(out: Path) -> None:
    """Move the run records an older ``OUT/tune.json`` holds into ``OUT/tune_runs.json`` (:func:`lean`): the records
    first, so that a kill between the two writes loses nothing, and all under ``tune.json``'s lock, so that an entry
    another invocation writes meanwhile is not overwritten by the lean copy of the one read before it."""
    store = out / "tune.json"
    if store.is_file():
        results_file.rewrite_entries(store, lambda entries: _lifted(out, entries))


def _lifted(out: Path, entries: Mapping[str, Any]) -> dict[str, Any]:
    """The lean copies of the ``entries`` that still hold records, once their records are in ``tune_runs.json``."""
    old = {k: v for k, v in entries.items() if isinstance(v, dict) and "records" in v}
    if not old:
        return {}
    lean_entries, lifted = lean(old)
    runs = out / RUNS_FILE
    held = {run_name(r) for r in read_json(runs, [])}
    new = [r for r in lifted if run_name(r) not in held]
    if new:
        results_file.merge_save(runs, new, key=run_name, order=run_name)
    return lean_entries
