"""One results file shared by several bench invocations: each replaces only its own records.

A bench script that runs for hours (``peers.py``, ``lm_features.py``, ``lm_trpo_vs_ppo.py``) keeps
its records in one JSON file in its output folder and rewrites it after every run. Two invocations on one folder
(another task beside a long queue) would each write what they read at their start and lose the other's records.
:func:`merge_save` (a JSON list of records) and :func:`merge_entries` (a JSON object, one entry per key: it is
:func:`rewrite_entries` with the entries known beforehand) re-read the file under a lock (``filelock``, the same
library the run directory's lock uses) and replace only what this invocation wrote; the file is replaced atomically
(the run directory's own writer, ``write_json_atomic``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Record = dict[str, Any]


@contextmanager
def _locked(path: Path, shape: list[Any] | dict[str, Any]) -> Iterator[Any]:
    """The file's JSON (None when there is none yet), read under its lock, which is held until the block ends; a
    file that is not JSON of ``shape``'s type is :class:`bench_args.BadFile`."""
    from bench_args import read_json
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=600):
        yield read_json(path, shape) if path.is_file() else None


def _write(path: Path, data: Any) -> None:
    from llm_policy_gen.storage.runlog import write_json_atomic

    write_json_atomic(path, data, indent=1)


def merge_save(path: Path, mine: Iterable[Record], key: Callable[[Record], Hashable],
               order: Callable[[Record], Any] | None = None) -> list[Record]:
    """Put ``mine`` into the JSON list at ``path``, replacing the records with the same ``key`` and keeping every
    other one; return the whole list as written (sorted by ``order`` when given, else in file order, new keys last)."""
    with _locked(path, []) as old:
        merged = {key(r): r for r in (old or [])}
        merged.update({key(r): r for r in mine})
        data = list(merged.values()) if order is None else sorted(merged.values(), key=order)
        _write(path, data)
    return data


def merge_entries(path: Path, mine: Mapping[str, Any]) -> dict[str, Any]:
    """Put ``mine``'s entries into the JSON object at ``path``, replacing those with the same key and keeping every
    other one (nothing is written when ``mine`` is empty); return the whole object."""
    return rewrite_entries(path, lambda _: mine)


def rewrite_entries(path: Path, change: Callable[[dict[str, Any]], Mapping[str, Any]]) -> dict[str, Any]:
    """Replace the entries ``change`` returns for the JSON object at ``path``, all under the file's lock: ``change``
    reads the object as it is now (and may first save what it takes out elsewhere), so no invocation writing between
    the read and the write is overwritten. Nothing is written when it returns no entry; return the whole object."""
    with _locked(path, {}) as old:
        data = dict(old or {})
        mine = change(data)
        if mine:
            data.update(mine)
            _write(path, data)
    return data
