"""One results file shared by several bench invocations: each replaces only its own records.

A bench script that runs for hours (``peers.py``, ``lm_features.py``, ``lm_trpo_vs_ppo.py``) keeps one JSON list of
records in its output folder and rewrites it after every run. Two invocations on one folder (another task beside a
long queue) would each write the list they read at their start and lose the other's records. :func:`merge_save`
re-reads the file under a lock (``filelock``, the same library the run directory's lock uses) and replaces only the
records whose key this invocation wrote; the file is replaced atomically (the run directory's own writer,
``write_json_atomic``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def merge_save(path: Path, mine: Iterable[Record], key: Callable[[Record], Hashable],
               order: Callable[[Record], Any] | None = None) -> list[Record]:
    """Put ``mine`` into the JSON list at ``path``, replacing the records with the same ``key`` and keeping every
    other one; return the whole list as written (sorted by ``order`` when given, else in file order, new keys last)."""
    from filelock import FileLock

    from llm_policy_gen.storage.runlog import write_json_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=600):
        merged = {key(r): r for r in (json.loads(path.read_text()) if path.is_file() else [])}
        merged.update({key(r): r for r in mine})
        data = list(merged.values()) if order is None else sorted(merged.values(), key=order)
        write_json_atomic(path, data, indent=1)
    return data
