"""The bench's records across machines: a bench folder lives outside the work tree and goes with the machine it ran on
(``/work/bench-out`` was lost twice so), while ``bench/data/`` in the repository keeps copies of its record files.

    python bench/records.py restore [--suite DIR] [--tune DIR]   # a new machine: seed the folders from bench/data
    python bench/records.py keep [--suite DIR] [--tune DIR]      # before the machine goes: merge them into bench/data

Both **merge**, record by record, never replace a file wholesale, so neither direction can lose a record the other
side holds: the suite's ``results.json`` by task, backend and seed; ``peers.json`` by task, algorithm, seed and
budget; the tuning's ``tune_runs.json`` by run id and ``tune.json`` by task; ``priors.json`` and
``random_policy.json`` (held-out means kept so as not to measure them again) by task and seed. On a record both
sides hold, ``keep`` takes the folder's (it is the newer) and ``restore`` keeps the folder's too. The pages written
from the records (``suite.md``, ``report.json``, ``tune_specs.md``) are copied as they are by ``keep`` and only where
missing by ``restore``; after a ``restore`` the scripts read the records as finished cells (``bench/suite.py``,
``bench/peers.py``) or finished runs (``bench/tune_specs.py``), and ``--report`` redraws the figures.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402
from bench_args import out_dir, read_json, run_main  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
Key = Callable[[dict[str, Any]], Hashable]


def _suite_key(r: dict[str, Any]) -> Hashable:
    from suite import record_key

    return record_key(r)


def _peer_key(r: dict[str, Any]) -> Hashable:
    from peers import record_key

    return record_key(r)


def _run_key(r: dict[str, Any]) -> Hashable:
    from tune_store import run_name

    return run_name(r)


#: per folder kind: the record lists (file, key), the files of entries by task, the pages
LISTS = {"suite": (("results.json", _suite_key), ("peers.json", _peer_key)), "tune": (("tune_runs.json", _run_key),)}
BY_TASK = {"suite": ("priors.json", "random_policy.json"), "tune": ("tune.json",)}
PAGES = {"suite": ("suite.md", "report.json"), "tune": ("tune_specs.md",)}
REWRITE = {"suite": "python bench/suite.py --out {dest} --report NOTE",
           "tune": "python bench/tune_specs.py --report-only --out {dest}"}


def _read(path: Path, empty: Any) -> Any:
    return read_json(path, empty)


def merge_list(src: Path, dest: Path, key: Key, src_wins: bool) -> tuple[int, int]:
    """``src``'s records into ``dest`` (the one whose records win on a shared key: ``src`` if ``src_wins``); returns
    (records added or changed, records in all)."""
    return merge_records(_read(src, []), dest, key, src_wins)


def merge_records(mine: list[dict[str, Any]], dest: Path, key: Key, src_wins: bool) -> tuple[int, int]:
    """:func:`merge_list` of records in hand."""
    held = {key(r): r for r in _read(dest, [])}
    moved = [r for r in mine if key(r) not in held or (src_wins and held[key(r)] != r)]
    if not moved:
        return 0, len(held)
    return len(moved), len(results_file.merge_save(dest, moved, key=key, order=key))


def merge_by_task(src: Path, dest: Path, src_wins: bool) -> tuple[int, int]:
    """``tune.json`` (task: its search) or a held-out means file (``tasks``: task: ``by_seed``), merged by task and
    seed; returns (entries added or changed, entries in all)."""
    theirs = _read(src, {})
    if "tasks" not in theirs and theirs:  # tune.json: one entry per task, run records in tune_runs.json only
        from tune_store import RUNS_FILE, lean, lift

        lift(dest.parent)
        theirs, lifted = lean(theirs)  # an older file's run records: into tune_runs.json, record by record
        merge_records(lifted, dest.parent / RUNS_FILE, _run_key, src_wins)
    mine = _read(dest, {})
    if "tasks" not in theirs:
        new = {k: v for k, v in theirs.items() if k not in mine or (src_wins and mine[k] != v)}
        return len(new), len(results_file.merge_entries(dest, new))
    tasks: dict[str, Any] = mine.setdefault("tasks", {})
    moved = 0
    for task, entry in theirs["tasks"].items():
        have = tasks.get(task)
        if have is None or have.get("env_id") != entry.get("env_id"):
            if have is None or src_wins:
                tasks[task] = entry
                moved += len(entry.get("by_seed", {}))
            continue
        seeds = {s: v for s, v in entry.get("by_seed", {}).items()
                 if s not in have["by_seed"] or (src_wins and have["by_seed"][s] != v)}
        have["by_seed"].update(seeds)
        moved += len(seeds)
    if moved:
        from suite_scores import write_means

        mine.setdefault("heldout_episodes", theirs.get("heldout_episodes"))
        write_means(dest, mine)
    return moved, sum(len(e.get("by_seed", {})) for e in tasks.values())


def _lacks(src: Path, dest: Path, key: Key) -> int:
    """How many of ``dest``'s records ``src`` does not hold."""
    held = {key(r) for r in _read(src, [])}
    return sum(key(r) not in held for r in _read(dest, []))


def move(kind: str, src: Path, dest: Path, keep: bool) -> list[str]:
    """Merge one folder's records (``kind``: suite or tune) from ``src`` into ``dest``; the lines to print. ``keep``
    copies the pages too, unless ``src`` lacks records ``dest`` holds (its pages would then show less than the
    merged records: a folder that was not restored first)."""
    said = []
    lacking = sum(_lacks(src / name, dest / name, key) for name, key in LISTS[kind])
    for name, key in LISTS[kind]:
        n, total = merge_list(src / name, dest / name, key, src_wins=keep)
        said.append(f"{dest / name}: {n} record(s) new or changed from {src} ({total} in all)")
    for name in BY_TASK[kind]:
        n, total = merge_by_task(src / name, dest / name, src_wins=keep)
        said.append(f"{dest / name}: {n} entr{'y' if n == 1 else 'ies'} new or changed from {src} ({total} in all)")
    if keep and lacking:
        said.append(f"{dest}: its pages are left as they were: {src} lacks {lacking} of its records (a folder not "
                    f"restored first); write them from the merged records: {REWRITE[kind].format(dest=dest)}")
        return said
    for name in PAGES[kind]:
        if (src / name).is_file() and (keep or not (dest / name).exists()):
            shutil.copyfile(src / name, dest / name)
            said.append(f"{dest / name}: copied from {src}")
    return said


def main(argv: list[str] | None = None) -> int:
    from suite import DEFAULT_OUT as SUITE_OUT
    from tune_specs import DEFAULT_OUT as TUNE_OUT

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=("restore", "keep"))
    ap.add_argument("--suite", default=str(SUITE_OUT), help="the suite's and the peers' folder (bench/suite.py --out)")
    ap.add_argument("--tune", default=str(TUNE_OUT), help="the tuning's folder (bench/tune_specs.py --out)")
    ap.add_argument("--data", default=str(DATA), help="where the copies are kept (the repository's bench/data)")
    args = ap.parse_args(argv)
    folders = {"suite": out_dir("records", args.suite, "--suite"), "tune": out_dir("records", args.tune, "--tune")}
    data = out_dir("records", args.data, "--data")
    if data is None or any(f is None for f in folders.values()):
        return 2
    keep = args.action == "keep"
    if keep and not any(f is not None and f.is_dir() for f in folders.values()):
        print(f"records: keep: neither {folders['suite']} nor {folders['tune']} exists; give --suite or --tune",
              file=sys.stderr)
        return 2
    for kind, folder in folders.items():  # every record file read first: a corrupt one is refused before any merge
        assert folder is not None
        for name, empty in [(n, []) for n, _ in LISTS[kind]] + [(n, {}) for n in BY_TASK[kind]]:
            _read(folder / name, empty)
            _read(data / kind / name, empty)
    for kind, folder in folders.items():
        assert folder is not None
        if keep and not folder.is_dir():
            print(f"{folder}: no such folder, nothing of it to keep")
            continue
        src, dest = (folder, data / kind) if keep else (data / kind, folder)
        dest.mkdir(parents=True, exist_ok=True)
        for line in move(kind, src, dest, keep):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(run_main("records", main))
