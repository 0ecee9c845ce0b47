"""Where a sweep's runs execute (``compare --executor``): one name, one module, loaded only when chosen.

* ``local`` (:mod:`.local`): one run after another in this process, or a pool of ``--workers`` spawned processes;
* ``ray`` (:mod:`.ray`): each run a Ray task (the ``ray`` extra), on ``RAY_ADDRESS`` or a local instance.

An executor is a function ``(tasks, workers, on_done, limits, note) -> the limits' report``; a new one is a module
and a line in :data:`EXECUTORS`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UserError, missing_extra
from .task import Done, Note, RunTask

__all__ = ["EXECUTORS", "check_executor", "check_reachable", "execute"]

EXECUTORS: dict[str, tuple[str, str, str | None]] = {
    "local": (".local", "execute_local", None),
    "ray": (".ray", "execute_ray", "ray"),
}
"""Name: (module, function, the extra it needs or None)."""


def check_executor(name: str) -> None:
    """Refuse an unknown executor, or one whose extra is not installed (one line, exit 2)."""
    if name not in EXECUTORS:
        raise UserError(f"bad --executor {name!r}: accepted {' or '.join(EXECUTORS)}")
    extra = EXECUTORS[name][2]
    if extra is not None and importlib.util.find_spec(extra) is None:
        raise missing_extra(f"--executor {name} needs {extra}", extra)


def check_reachable(name: str) -> None:
    """Before the first run: a Ray sweep given ``RAY_ADDRESS`` checks that the cluster answers there."""
    if name == "ray" and os.environ.get("RAY_ADDRESS"):
        from .ray import check_address

        check_address(os.environ["RAY_ADDRESS"])


def execute(name: str, tasks: Sequence[RunTask], workers: int | None, on_done: Done, limits: Mapping[str, Any],
            note: Note) -> dict[str, Any]:
    """Run ``tasks`` on the executor ``name`` (``workers`` None: each executor's default, one run at a time here,
    a local Ray instance's CPUs); returns the shared limits' report."""
    module, function, _ = EXECUTORS[name]
    run = getattr(importlib.import_module(module, __package__), function)
    result: dict[str, Any] = run(tasks, workers, on_done, limits, note)
    return result
