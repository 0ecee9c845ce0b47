"""``compare --executor local``: the runs one after another in this process, or in a pool of spawned processes.

**Stops in a pool** (``--workers N``) behave as in one process: Ctrl-C, SIGTERM or SIGHUP, sent to the whole process
group (a terminal's Ctrl-C, systemd, Slurm) or to the sweep's own process alone, interrupts every run in progress as
Ctrl-C interrupts ``train`` (its ``summary.json`` says ``interrupted``, its lock is released), and no run starts
after it: the sweep cancels the runs not started, passes the signal on to its workers (a worker stops once, however
many copies it gets: :func:`~llm_policy_gen.storage.locks.sweep_worker`), waits for their runs to write their
summaries, and takes each run's row from what its run directory says. The sweep then ends as an interrupted one,
with the exit code of the signal (130, 143 or 129).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from ..errors import signal_of
from ..run.files import RunDir
from ..storage.locks import HeldInterrupts, sweep_worker, worker_run
from .limits import SweepLimits, managed_limits
from .task import Done, Note, RunTask, TaskResult, error_text, failed_result, result_from_summary, run_one

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
    from concurrent.futures import ProcessPoolExecutor

    with managed_limits(**limits) as proxy, \
            ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=sweep_worker,
                                initargs=(os.getpid(),)) as pool:  # a killed sweep leaves no worker writing
        futures: dict[Future[TaskResult], RunTask] = {}
        told: set[Future[TaskResult]] = set()
        try:
            for t in tasks:
                futures[pool.submit(_run_task, t, proxy, t.run_id)] = t
                note({"event": "submitted", "run": t.run_id, "attempt": 1, "node": "local"})
            _collect(futures, told, proxy, on_done, note)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
            with HeldInterrupts(raise_after=False):  # the runs' own ends are waited for, whatever comes
                for fut in futures:
                    fut.cancel()  # not started yet: never starts
                for pid in list(getattr(pool, "_processes", None) or {}):  # the workers, as the executor keeps them
                    try:
                        os.kill(pid, signal_of(exc))
                    except ProcessLookupError:
                        pass
                _collect({f: t for f, t in futures.items() if not f.cancelled()}, told, proxy, on_done, note)
            raise
        return proxy.report()


def _collect(futures: Mapping[Future[TaskResult], RunTask], told: set[Future[TaskResult]], proxy: Any,
             on_done: Done, note: Note) -> None:
    """Each future's result, as it comes, to ``on_done`` (once: ``told`` holds those given)."""
    from concurrent.futures import as_completed

    for fut in as_completed([f for f in futures if f not in told]):
        t = futures[fut]
        try:
            res = fut.result()
        except Exception as exc:  # the worker process died
            proxy.forget(t.run_id)
            res = failed_result(t, error_text(exc))
        note({"event": "done", "run": t.run_id, "attempt": 1, "status": res.row.status})
        on_done(t, res)
        told.add(fut)


def _run_task(task: RunTask, limits: Any, holder: str) -> TaskResult:
    """:func:`~.task.run_one` in a worker: not started once the sweep was stopped; an interrupted run's row is what
    its run directory says (its summary)."""
    with worker_run() as may_start:
        if not may_start:
            return failed_result(task, "not started: the sweep was interrupted; run the same command again to run "
                                 "it", "interrupted")
        try:
            return run_one(task, limits, holder)
        except KeyboardInterrupt:
            pass
    summary = RunDir(task.run_dir).load_summary() if RunDir(task.run_dir).summary.is_file() else None
    if summary is None:
        return failed_result(task, "interrupted before it started; run the same command again to run it",
                             "interrupted")
    return result_from_summary(task, summary)
