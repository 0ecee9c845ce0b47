"""``train``: a new run from a configuration.

The run directory is created and locked, and ``config.json`` written, before anything else can fail: a run killed
from then on can be resumed. A run refused before it started (a bad backend, a missing key) leaves no directory.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from .. import __version__
from ..backends import is_client
from ..clients.usage import Budget, CallLimiter
from ..config import TrainConfig
from ..console import Console
from ..errors import RunInterrupted, signal_of
from ..locks import LOCK_FILES, FolderLock, HeldInterrupts
from ..runlog import RunDir, write_json_atomic
from .driver import execute
from .prepare import prepare
from .records import RunResult, config_record
from .services import Run

__all__ = ["train", "make_console"]


def train(cfg: TrainConfig, log: Callable[[str], None] | None = None, *, limiter: CallLimiter | None = None,
          budget: Budget | None = None) -> RunResult:
    """Start a run for ``cfg``; returns its directory and summary.

    ``limiter`` and ``budget`` replace the run's own call limiter and budget, so that several runs (a sweep) can
    share one provider limit and one spending ceiling. The run directory is locked while the run writes it
    (:class:`~llm_policy_gen.locks.FolderLock`).
    """
    with ExitStack() as held:
        return _train(cfg, log, held, limiter=limiter, budget=budget)


def _train(cfg: TrainConfig, log: Callable[[str], None] | None, held: ExitStack, *, limiter: CallLimiter | None,
           budget: Budget | None) -> RunResult:
    p = prepare(cfg)
    cfg, spec, mode = p.cfg, p.spec, p.mode
    with HeldInterrupts(raise_after=False) as starting:  # never a run directory without its config.json
        run_dir = RunDir.create(Path(cfg.logs_dir), spec.env_id, cfg.backend or p.backend, cfg.seed, cfg.run_id)
        held.enter_context(FolderLock(run_dir.path, "the run directory"))  # released when the run ends, however
        # What a resume needs, at once: a run killed from here on can be resumed (the full record follows below).
        write_json_atomic(run_dir.config, {"package": "llm-policy-gen", "version": __version__, "seed": cfg.seed,
                                           "mode": mode.name, "config": cfg.to_dict(), "env_spec": spec.to_dict()})
    if starting.pending:
        raise RunInterrupted(str(run_dir.path), 0, starting.signum)
    console = make_console(cfg, spec.env_id, p.backend, mode.name, log)
    for n in p.notes:
        console.notice(n)
    try:
        run = Run(cfg, spec, mode, run_dir, console, limiter=limiter, budget=budget)
        run.open_log()
    except BaseException:
        console.close()
        _remove_unstarted(run_dir)
        raise
    write_json_atomic(run_dir.config, config_record(run))
    try:
        run.mode_start()
    except KeyboardInterrupt as exc:
        console.close()
        run.collector.close()
        raise RunInterrupted(str(run_dir.path), 0, signal_of(exc)) from None
    except BaseException:
        console.close()
        run.collector.close()
        raise
    return execute(run, 1)


def _remove_unstarted(run_dir: RunDir) -> None:
    """A run refused before it started (a bad backend, a missing key) leaves no directory behind."""
    try:
        for name in (run_dir.config.name, *LOCK_FILES):
            (run_dir.path / name).unlink(missing_ok=True)
        (run_dir.path / "policies").rmdir()
        run_dir.path.rmdir()
        run_dir.path.parent.rmdir()  # logs/<env-id>/, when this run was its only one
    except OSError:
        pass


def make_console(cfg: TrainConfig, env_id: str, backend: str, mode: str,
                 log: Callable[[str], None] | None) -> Console:
    """The run's console line: LLM clients and replay (a model's recorded calls) count calls, tokens and cost; the
    other backends propose."""
    return Console(cfg.iterations, f"{env_id} [{backend}{'' if mode == 'table' else ', ' + mode}]",
                   enabled=cfg.progress and log is None, quiet=cfg.quiet, sink=log, is_llm=is_client(backend))
