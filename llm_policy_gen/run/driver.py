"""The iteration driver, one for every mode: stops, records, checkpoints, and a summary however the run ends.

Stops, checked before each iteration: ``--iterations``, ``--max-episodes`` and ``--max-steps`` (counted training, test
and confirmation episodes and their environment steps: the run stops at the first iteration boundary at or past the
budget, and the stop reason says by how much it went past; a budget the last iteration reached is named rather than
"iterations done"), ``--patience``; after an iteration: the budget, a replay that ran out, and an unreachable backend
(``unreachable_after`` iterations in a row without one answered call; when the very first call of a run reaches no
server, the run stops at once with an error naming the URL: :mod:`.health`). After each iteration the driver appends
the iteration's record (``events.jsonl`` and the other writers), then writes ``checkpoint.npz`` atomically, with
Ctrl-C (and SIGTERM, SIGHUP) held back so that the two go together; a write of the two that fails takes the
record's line back out of ``events.jsonl``, so the files never disagree on the iterations a run finished. A large
state's checkpoint may wait a few iterations (:mod:`.pace`): it is written when the run ends however it ends, and a
write that fails cuts ``events.jsonl`` back to the last checkpoint written.

A run that asked a model ends with exit 1 when no call succeeded, or when no answer was ever valid.
"""

from __future__ import annotations

import errno
import time

from ..clients.keys import redact
from ..errors import (
    BackendAuthError,
    BackendUnreachable,
    EndpointError,
    NoCallSucceeded,
    NoValidAnswer,
    RunInterrupted,
    signal_of,
)
from ..storage.locks import HeldInterrupts
from ..storage.runlog import appends_undone_on_error
from .counters import rollouts_from_state
from .health import CallHealth
from .records import RunResult, Summary, event_record, summary_record
from .services import Run
from .stop import StopKind, StopReason

__all__ = ["execute"]


def _drive(run: Run, first: int) -> tuple[StopReason, bool]:
    """Iterations ``first..cfg.iterations``; returns the stop reason and whether the run ended inside an iteration
    it did not finish (a replay that ran out, a budget reached before any answer), whose episodes are not counted.
    However they end, the last finished iteration's checkpoint is written if it waited (:mod:`.pace`)."""
    try:
        ended = _iterations(run, first)
    except BaseException:
        with HeldInterrupts(raise_after=False):
            try:
                run.flush_checkpoint()
            except OSError:
                pass  # the run's files are back at the last checkpoint written; the first error is the one said
        raise
    with HeldInterrupts():
        run.flush_checkpoint()
    return ended


def _iterations(run: Run, first: int) -> tuple[StopReason, bool]:
    cfg, c = run.cfg, run.counters
    health = CallHealth(cfg, run.backend_name, run.session) if run.session is not None else None
    stop = StopReason.iterations_done()
    for iteration in range(first, cfg.iterations + 1):
        if (budget := _budget_reached(run)) is not None:
            stop = budget
            break
        if cfg.patience and c.since_best >= cfg.patience:
            stop = StopReason.patience(cfg.patience)
            break
        t_iter = time.perf_counter()
        before = run.usage.copy()
        if health is not None:
            health.iteration_starts()
        step = run.mode.iterate(run, iteration)
        if step.verdict is not None:
            run.keep_verdict(step.verdict, iteration)
        if health is not None:
            health.iteration_ended(step.answers, c)
        if step.skipped:
            stop = StopReason.parse(step.stop) or StopReason.of(StopKind.STOPPED)
            run.log(f"run ends: {stop}")
            return stop, True
        # The iteration's record and its checkpoint go together: a Ctrl-C (or SIGTERM) waits for both, and a write
        # that fails (a full disk, a file size limit) takes the record's line back out of events.jsonl.
        # A checkpoint that waits (:mod:`.pace`) is a copy of the state in memory, written when the run ends; a
        # checkpoint write that fails cuts events.jsonl back to the last one written (Run._write_checkpoint). An
        # iteration that asked a model is written at once.
        committed = lambda: run.committed is not None and run.committed.get("iteration") == iteration  # noqa: E731, B023
        with HeldInterrupts(), appends_undone_on_error(run.dir.events, done=committed):
            c.iteration = iteration
            c.since_best = 0 if step.accepted else c.since_best + 1
            c.accepted_count += int(step.accepted)
            rec = event_record(run, step, iteration, t_iter, run.usage.minus(before))
            run.logger.write(dict(rec))
            run.checkpoint(now=health is not None)
        if step.stop is not None:
            stop = StopReason.parse(step.stop) or StopReason.of(StopKind.STOPPED)
            run.log(f"run ends: {stop}")
            break
        if health is not None and (after := health.unreachable_after(c)) is not None:
            stop = StopReason.of(StopKind.UNREACHABLE)
            run.log(f"run ends: {after} iterations in a row without one answered call")
            break
    else:  # the last iteration may have reached a budget too: the budget is named, with how far past it the run went
        stop = _budget_reached(run) or stop
    if health is not None:
        health.check_some_call_succeeded()
    return stop, False


def _budget_reached(run: Run) -> StopReason | None:
    """The episode or step budget the run's counted interaction has reached, if any."""
    cfg, c = run.cfg, run.counters
    if cfg.max_episodes is not None and c.episodes_total >= cfg.max_episodes:
        return StopReason.episodes(c.episodes_total, cfg.max_episodes)
    if cfg.max_steps is not None and c.steps_total >= cfg.max_steps:
        return StopReason.steps(c.steps_total, cfg.max_steps)
    return None


def _finish(run: Run, stop: StopReason, interrupted: bool, held: HeldInterrupts) -> Summary:
    """Write summary.json (and the plots): from the last committed state when the run was interrupted or ended
    inside an unfinished iteration. Called with Ctrl-C held back (``held``), except in the mode's own ending."""
    state = run.committed if interrupted and run.committed is not None else None
    extra: dict[str, object] = {}
    if state is not None:
        # The files must agree with the summary: the best policy as of the last finished iteration, and no policy
        # file of the iteration that did not finish.
        run.keeper.load_state_dict(state["keeper"])
        run.best_heldout = rollouts_from_state(state["heldout"])
        run.save_best()
        run.dir.prune_after(int(state["iteration"]))
    else:
        try:
            with held.allowed():  # the mode's ending may call the model: a Ctrl-C cuts it short
                extra = run.report_final()  # the final policy's held-out measurement (never counted)
                extra.update(run.mode.finish(run))
        except (KeyboardInterrupt, Exception) as exc:  # the summary must still be written
            extra = {"finish_error": f"{type(exc).__name__}: {redact(str(exc))[:200]}"}
    summary = summary_record(run, stop, dict(extra), state)
    run.dir.write_summary(summary)
    if run.cfg.plots and run.dir.events.exists():
        from ..plotting.curves import plot_run

        try:
            plot_run(run.dir.path)
        except Exception as exc:  # matplotlib errors are many and varied; the run's data is already safe
            run.log(f"warning: plots not written: {exc}")
    return summary


def execute(run: Run, first: int) -> RunResult:
    """Drive ``run`` from iteration ``first`` to its end, and write its summary however it ends."""
    stop = StopReason.iterations_done()
    interrupted = ended_inside = False
    try:
        stop, ended_inside = _drive(run, first)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
        stop, interrupted = StopReason.of(StopKind.INTERRUPTED), True
        raise RunInterrupted(str(run.dir.path), _kept(run), signal_of(exc)) from None
    except BackendAuthError:
        stop, interrupted = StopReason.of(StopKind.CREDENTIALS), True
        raise
    except (BackendUnreachable, EndpointError):
        stop, interrupted = StopReason.of(StopKind.UNREACHABLE), True
        raise
    except NoCallSucceeded:
        stop, interrupted = StopReason.of(StopKind.FAILED, "no call succeeded"), True
        raise
    except NoValidAnswer:
        stop, interrupted = StopReason.of(StopKind.FAILED, "no answer was valid"), True
        raise
    except OSError as exc:
        stop, interrupted = StopReason.of(StopKind.FAILED, str(exc.strerror or exc)), True
        if exc.errno in _WRITE_ERRORS:
            raise _write_failed(run, exc) from None
        raise
    except Exception as exc:
        stop = StopReason.of(StopKind.FAILED, f"{type(exc).__name__}: {redact(str(exc))[:200]}")
        interrupted = True
        raise
    finally:
        with HeldInterrupts(raise_after=False) as late:  # the closing files are written whole, Ctrl-C or not
            run.logger.close()
            run.collector.close()
            summary = None
            try:
                summary = _finish(run, stop, interrupted or ended_inside, late)
            except OSError as exc:
                if not interrupted:
                    if exc.errno in _WRITE_ERRORS:
                        raise _write_failed(run, exc) from None
                    raise
    if late.cut:  # a Ctrl-C cut the mode's ending short (its files are whole): the run says it was interrupted
        raise RunInterrupted(str(run.dir.path), _kept(run), late.signum)
    assert summary is not None
    if summary["never_accepted"] and run.mode.judges_candidates and run.selects:
        run.log("note: no candidate was ever accepted; the best policy is the initial table")
    return RunResult(run.dir.path, run.dir.load_summary() or {})  # as written: the file's keys


_WRITE_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("disk full while writing", "once there is room"),
    errno.EFBIG: ("file size limit (ulimit -f) reached while writing", "once the limit allows it"),
    errno.EDQUOT: ("disk quota exceeded while writing", "once the quota allows it"),
    errno.EROFS: ("read-only file system: cannot write", "once it is writable"),
    errno.EACCES: ("permission denied: cannot write", "once it is writable"),
    errno.EIO: ("input/output error while writing", "once the disk works"),
}
"""A write that failed: what the message says, and when the run can go on."""


def _write_failed(run: Run, exc: OSError) -> OSError:
    """A failed write as one line: the file, where the run is, what it keeps (the iterations up to its last
    checkpoint, which its events.jsonl and summary.json agree with) and the command that goes on. JSONL lines that
    did not fit were cut back and JSON files are replaced whole, so nothing kept is torn."""
    done = _kept(run)
    kept = f"keeps iterations 1..{done}" if done else "keeps its configuration but no finished iteration"
    what, when = _WRITE_ERRORS.get(exc.errno or 0, ("cannot write", "once it can be written"))
    cache = run.session.cache if run.session is not None else None
    if cache is not None and exc.filename == str(cache.dir):  # the answer cache may sit on another disk
        return OSError(exc.errno, f"{what} the answer cache {cache.dir}; the run directory {run.dir.path} {kept} "
                       f"(resume with `train --resume {run.dir.path} --no-cache`, or without --no-cache {when})")
    return OSError(exc.errno, f"{what} {exc.filename or 'the run directory'}; the run directory {run.dir.path} "
                   f"{kept} (resume with `train --resume {run.dir.path}` {when})")


def _kept(run: Run) -> int:
    """The last iteration the run directory keeps (its last checkpoint's)."""
    return int(run.committed["iteration"]) if run.committed is not None else 0
