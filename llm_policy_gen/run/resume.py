"""``train --resume``: a run carried on from its directory alone.

A run interrupted (Ctrl-C) or killed (``kill -9``) at any moment resumes from its last checkpoint: the unfinished
iteration is redone, and its model calls that were already recorded are answered from the record (never sent again,
their tokens and cost counted once); the temporary file of a write that the kill cut short is removed. A run
directory may come from someone else, so before anything in it changes the resume checks where it would send the
user's key, which files it names, and that its records agree with its checkpoint (:mod:`.resume_checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .. import __version__
from ..clients.transcript import RecordedCalls
from ..clients.usage import Budget, CallLimiter
from ..loggers.console import Console, plural
from ..loggers.writers import check_writers
from ..storage.locks import FolderLock, HeldInterrupts
from ..storage.runlog import rewrite_jsonl
from .driver import execute
from .files import RunDir
from .prepare import prepare
from .records import RunResult
from .resume_checks import check_run_dir, load_state, read_checkpoint, read_record, resume_config
from .services import Run
from .start import make_console

__all__ = ["resume"]


def resume(run_dir: Path, overrides: dict[str, Any] | None = None, log: Callable[[str], None] | None = None, *,
           limiter: CallLimiter | None = None, budget: Budget | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (see the module docstring); a run directory that
    another process is writing is refused (:class:`~llm_policy_gen.storage.locks.FolderBusy`) before anything
    changes."""
    with ExitStack() as held:
        return _resume(run_dir, overrides, log, held, limiter=limiter, budget=budget)


def _built(held: ExitStack, console: Console, build: Callable[[], Run]) -> Run:
    """``build()``, the console closed when it fails; the run's collector is closed when the resume ends."""
    try:
        run = build()
    except BaseException:
        console.close()
        raise
    held.callback(run.collector.close)
    return run


def _remove(paths: list[Path]) -> str:
    """Delete the temporaries of a killed process's unfinished writes; what was removed, in words ('' if none)."""
    sizes = []
    for p in paths:
        try:
            sizes.append(p.stat().st_size)
            p.unlink()
        except OSError:
            continue
    if not sizes:
        return ""
    n = len(sizes)
    return (f"{n} temporary file{'s' if n != 1 else ''} ({sum(sizes) / 2**20:,.1f} MiB) of writes that a killed "
            f"process left unfinished: {', '.join(p.name for p in paths[:3])}{', ...' if n > 3 else ''}")


def _span(iterations: list[int]) -> str:
    """``4..6`` for consecutive iterations, else the list (``4, 6``)."""
    if iterations == list(range(iterations[0], iterations[-1] + 1)) and len(iterations) > 1:
        return f"iterations {iterations[0]}..{iterations[-1]}"
    return f"iteration{'s' if len(iterations) > 1 else ''} {', '.join(map(str, iterations))}"


def _resume(run_dir: Path, overrides: dict[str, Any] | None, log: Callable[[str], None] | None, held: ExitStack, *,
            limiter: CallLimiter | None, budget: Budget | None) -> RunResult:
    rd = RunDir(Path(run_dir))
    check_run_dir(rd, run_dir)
    held.enter_context(FolderLock(rd.path, "the run directory"))
    record, spec = read_record(rd)
    cfg = resume_config(rd, record, spec, dict(overrides or {}), run_dir)
    prepared = prepare(cfg, spec)  # a broken price file is refused before anything in the run directory changes
    mode = prepared.mode
    state, done_iter = read_checkpoint(rd)
    torn: list[str] = []  # a last line cut by a kill: dropped, and said
    recorded, kept_lines = RecordedCalls.from_transcript(rd.transcripts, done_iter, on_torn=torn.append)
    logged = rd.load_events(on_torn=torn.append, check=False)
    events = [e for e in logged if int(e.get("iteration", 0)) <= done_iter]
    dropped = sorted({int(e.get("iteration", 0)) for e in logged} - {int(e.get("iteration", 0)) for e in events})
    check_writers(cfg.log)
    # The run is built and its state loaded before any file of it changes: a refused resume (a model file gone, a
    # checkpoint this version cannot load) leaves the run directory as it was, its summary included.
    console = make_console(prepared, log)
    run = _built(held, console, lambda: Run(cfg, spec, mode, rd, console, recorded=recorded,
                                           resumed=state is not None, limiter=limiter, budget=budget,
                                           record=record))
    if state is not None:
        load_state(rd, run, state)
    with HeldInterrupts():  # the cuts go together: an interrupt waits for all of them
        rewrite_jsonl(rd.transcripts, kept_lines)
        rewrite_jsonl(rd.events, events)
        rd.prune_after(done_iter)
        rd.summary.unlink(missing_ok=True)
        leftovers = _remove(rd.unfinished_writes())
    run.open_log()
    console.notice(f"resuming {rd.path} after iteration {done_iter}"
                   + (f" ({len(recorded)} recorded calls of the unfinished iteration reused)" if len(recorded) else ""))
    if dropped:  # a checkpoint that waited (run/pace.py) and a process killed outright: those iterations are redone
        console.notice(f"note: dropped {plural(len(dropped), 'recorded iteration')} ({_span(dropped)}) finished after "
                       f"the last checkpoint written; the run goes on from iteration {done_iter + 1}, redoing them")
    for text in torn:
        console.notice(f"note: {text}")
    if leftovers:
        console.notice(f"note: removed {leftovers}")
    if record.get("version") != __version__:
        console.notice(f"note: {rd.path} was made by llm-policy-gen {record.get('version') or '(unknown version)'}; "
                       f"it goes on with version {__version__}")
    if state is None:
        run.mode_start()
    else:
        run.mark_committed(state)
        run.save_best()
    return execute(run, done_iter + 1)
