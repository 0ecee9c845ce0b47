"""``compare --executor local``: the runs one after another in this process, or in a pool of spawned processes."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..storage.locks import die_with_parent
from .limits import SweepLimits, managed_limits
from .task import Done, Note, RunTask, error_text, failed_result, run_one

__all__ = ["execute_local"]


def execute_local(tasks: Sequence[RunTask], workers: int | None, on_done: Done, limits: Mapping[str, Any],
                  note: Note) -> dict[str, Any]:
    """Run tasks in this process (``workers`` 1 or None) or in a pool of ``workers`` spawned processes, all under one
    :class:`~.limits.SweepLimits` (a manager process serves it to a pool); returns its report."""
    if workers is None or workers <= 1:
        shared = SweepLimits(**limits)
        for t in tasks:
            note({"event": "started", "run": t.run_id, "attempt": 1, "node": "local"})
            res = run_one(t, shared, t.run_id)
            note({"event": "done", "run": t.run_id, "attempt": 1, "status": res.row.status})
            on_done(t, res)
        return shared.report()
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with managed_limits(**limits) as proxy, \
            ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=die_with_parent,
                                initargs=(os.getpid(),)) as pool:  # a killed sweep leaves no worker writing
        futures = {pool.submit(run_one, t, proxy, t.run_id): t for t in tasks}
        for t in tasks:
            note({"event": "submitted", "run": t.run_id, "attempt": 1, "node": "local"})
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # the worker process died
                proxy.forget(t.run_id)
                res = failed_result(t, error_text(exc))
            note({"event": "done", "run": t.run_id, "attempt": 1, "status": res.row.status})
            on_done(t, res)
        return proxy.report()
