"""``train``: a new run from a configuration.

The run is built in a hidden folder beside its directory (:meth:`~.files.RunDir.stage`, locked from the start), its
whole ``config.json`` written there once, and only then renamed into place (:meth:`~.files.RunDir.publish`): a run
directory is never seen without its configuration, so a run killed from then on, before its first iteration
included, can be resumed. A run refused or interrupted before that (a bad backend, a missing key, a Ctrl-C while a
model loads) leaves no directory.

:func:`check_backend` builds a run the same way in a scratch folder without starting it, for ``compare``: a missing
key or SDK is refused there, before any run of a sweep starts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from ..backends import is_client
from ..clients.usage import Budget, CallLimiter
from ..config import TrainConfig
from ..errors import RunInterrupted, signal_of
from ..loggers.console import Console
from ..loggers.writers import check_writers
from ..modes.base import tables_per_iteration
from ..storage.locks import FolderLock, HeldInterrupts
from .driver import execute
from .files import RunDir
from .prepare import Prepared, prepare
from .records import RunResult, config_record
from .services import Run

__all__ = ["train", "make_console", "check_backend"]


def train(cfg: TrainConfig, log: Callable[[str], None] | None = None, *, limiter: CallLimiter | None = None,
          budget: Budget | None = None) -> RunResult:
    """Start a run for ``cfg``; returns its directory and summary.

    ``limiter`` and ``budget`` replace the run's own call limiter and budget, so that several runs (a sweep) can
    share one provider limit and one spending ceiling. The run directory is locked while the run writes it
    (:class:`~llm_policy_gen.storage.locks.FolderLock`).
    """
    with ExitStack() as held:
        return _train(cfg, log, held, limiter=limiter, budget=budget)


def _train(cfg: TrainConfig, log: Callable[[str], None] | None, held: ExitStack, *, limiter: CallLimiter | None,
           budget: Budget | None) -> RunResult:
    p = prepare(cfg)
    cfg, spec, mode = p.cfg, p.spec, p.mode
    run_dir = RunDir.stage(Path(cfg.logs_dir), spec.env_id, p.label, cfg.seed, cfg.run_id)
    console: Console | None = None
    try:
        lock = held.enter_context(FolderLock(run_dir.path, "the run directory"))  # released when the run ends
        check_writers(cfg.log)
        console = make_console(p, log)
        for n in p.notes:
            console.notice(n)
        run = Run(cfg, spec, mode, run_dir, console, limiter=limiter, budget=budget)
        run_dir.write_config(config_record(run))  # once, whole, before anyone can see the directory
    except BaseException:
        if console is not None:
            console.close()
        run_dir.discard()  # never seen: a run that did not start leaves nothing
        raise
    assert console is not None
    try:
        with HeldInterrupts():  # in place with its lock and transcript, or not at all
            lock.moved_to(run_dir.publish())
            run.published()
        for folder in run_dir.remove_abandoned():
            console.notice(f"note: removed {folder}, the unfinished start of a run that was killed")
        run.open_log()
        if p.backend is None:  # said once the run has started (a refusal of the mode's settings is the only line)
            k = tables_per_iteration(mode, cfg)
            console.notice(f"method: {p.label} (--mode {mode.name} proposes nothing, no backend is built; {k} "
                           f"table{'s' if k != 1 else ''} judged per iteration)")
        run.mode_start()
    except KeyboardInterrupt as exc:
        console.close()
        run.collector.close()
        raise RunInterrupted(str(run_dir.path), 0, signal_of(exc)) from None
    except BaseException:
        console.close()
        run.collector.close()
        run_dir.discard()  # a rename that failed: the run never became visible
        raise
    return execute(run, 1)


def make_console(p: Prepared, log: Callable[[str], None] | None) -> Console:
    """The run's console line: LLM clients and replay (a model's recorded calls) count calls, tokens and cost; the
    other backends propose. A mode without a backend is named by its method and model alone
    (``[lm-policy(SmolLM2-135M-Instruct.Q4_1)]``), with the tables it judges per iteration."""
    cfg = p.cfg
    if p.backend is None:
        k = tables_per_iteration(p.mode, cfg)
        what = f"{p.label}, {k} table{'s' if k != 1 else ''} judged per iteration"
    else:
        default = TrainConfig.model_fields["mode"].default  # the default mode goes unsaid
        what = p.label + ("" if p.mode.name == default else f", {p.mode.name}")
    return Console(cfg.iterations, f"{p.spec.env_id} [{what}]", enabled=cfg.progress and log is None,
                   quiet=cfg.quiet, sink=log, is_llm=p.backend is not None and is_client(p.backend),
                   proposes=p.backend is not None)


def check_backend(prepared: Prepared) -> str | None:
    """Build ``prepared``'s run in a scratch folder without starting it (its backend, key and SDK included);
    returns where its calls will go and where that base URL and the key came from (None for no server)."""
    cfg = prepared.cfg
    with tempfile.TemporaryDirectory(prefix="llm-policy-gen-check-") as tmp:
        console = Console(cfg.iterations, prepared.label, enabled=False, sink=lambda s: None)
        run = Run(cfg, prepared.spec, prepared.mode, RunDir(Path(tmp)), console)
        run.open_log()  # --log's writers too (a missing extra is refused here)
        run.logger.close()
        run.collector.close()
        return run.endpoint
