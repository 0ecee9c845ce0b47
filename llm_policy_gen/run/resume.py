"""``train --resume``: a run carried on from its directory alone.

A run interrupted (Ctrl-C) or killed (``kill -9``) at any moment resumes from its last checkpoint: the unfinished
iteration is redone, and its model calls that were already recorded are answered from the record (never sent again,
their tokens and cost counted once). A run directory may come from someone else, so before anything in it changes
the resume checks where it would send the user's key, which files it names, and that its records agree with its
checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .. import __version__
from ..clients.keys import is_loopback_url, redact, without_userinfo
from ..clients.transcript import RecordedCalls
from ..clients.usage import Budget, CallLimiter
from ..config import TrainConfig, option_name, resume_options
from ..envs.spec import EnvSpec
from ..errors import SpecError, UserError
from ..loggers.console import Console
from ..loggers.writers import check_writers
from ..modes import MODES
from ..storage.locks import FolderLock, HeldInterrupts
from ..storage.runlog import read_jsonl, rewrite_jsonl
from .checkpoint import load_checkpoint
from .driver import execute
from .files import RunDir, load_settings
from .prepare import prepare
from .records import RunResult
from .services import Run
from .start import make_console
from .stop import StopKind, StopReason

__all__ = ["resume"]


def resume(run_dir: Path, overrides: dict[str, Any] | None = None, log: Callable[[str], None] | None = None, *,
           limiter: CallLimiter | None = None, budget: Budget | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (see the module docstring); a run directory that
    another process is writing is refused (:class:`~llm_policy_gen.storage.locks.FolderBusy`) before anything
    changes."""
    with ExitStack() as held:
        return _resume(run_dir, overrides, log, held, limiter=limiter, budget=budget)


def _check_resume_env(rd: RunDir, record: dict[str, Any], spec: EnvSpec, given: str | None) -> None:
    """A ``module:EnvId`` run imports its module only when ``--env`` names it again; a module that cannot be
    imported (or an environment gymnasium cannot make) is one line, before any file of the run changes."""
    from ..envs.catalog import check_env_named
    from ..envs.make import make_env

    settings = record.get("config")
    recorded = settings.get("env_id") if isinstance(settings, dict) else None
    check_env_named(str(recorded or spec.env_id), given, f"the run {rd.path}", spec.env_id)
    make_env(spec).close()


def _check_resume_endpoint(rd: RunDir, record: dict[str, Any], given: str | None) -> None:
    """A run directory may come from someone else: its recorded ``--base-url`` is where a resume would send the
    user's key. One that is not on this machine must be named again (``--base-url``, the same URL); a
    ``--base-url`` other than the recorded one is refused."""
    config = record.get("config")
    recorded = config.get("base_url") if isinstance(config, dict) else None
    recorded = without_userinfo(recorded) if isinstance(recorded, str) and recorded.strip() else None
    if given is not None:
        if recorded is None or without_userinfo(given) != recorded:
            was = f"was made with --base-url {redact(recorded)}" if recorded else "was made without --base-url"
            raise UserError(f"--base-url {redact(without_userinfo(given))} differs from the run's endpoint: {rd.path} "
                            f"{was}; resume it with the same --base-url, or start a new run")
        return
    if recorded is not None and not is_loopback_url(recorded):
        raise UserError(f"{rd.path} sends its calls to {redact(recorded)} (recorded in its config.json), not this "
                        f"machine; resuming would send your key there: if you trust it, add --base-url "
                        f"{redact(recorded)} (with user:password@ if it needs one)")


def _check_resume_paths(rd: RunDir, settings: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A run directory may come from someone else: a price file it names is read, and an answer cache folder it names
    is written to, only when the command line names the same one (``--prices FILE``; the cache folder by a sweep
    that resumes its own runs), or, for the cache, not at all (``--no-cache``). Pops the path overrides it accepts."""
    prices, given_prices = settings.get("prices_file"), overrides.pop("prices_file", None)
    if given_prices is not None and given_prices != prices:
        raise UserError(f"--prices {given_prices} differs from the run's price file ({prices or 'the shipped one'}); "
                        "resume it with the same --prices, or start a new run")
    if prices is not None and given_prices is None:
        raise UserError(f"{rd.config} names the price file {prices}: a file a run directory names is read only when "
                        f"the command line names it too; add --prices {prices} if you trust it")
    cache_dir, given_cache = settings.get("cache_dir"), overrides.pop("cache_dir", None)
    if given_cache is not None and given_cache != cache_dir:
        raise UserError(f"the answer cache folder {given_cache} differs from the run's ({cache_dir or 'the default'})")
    caching = settings.get("cache", True) is not False and overrides.get("cache") is not False
    if cache_dir is not None and given_cache is None and caching:
        raise UserError(f"{rd.config} names the answer cache folder {cache_dir}: a folder a run directory names is "
                        "not written to on resume; add --no-cache (the run's recorded calls are still reused)")


def _check_records_within(rd: RunDir, done: int, has_checkpoint: bool) -> None:
    """Resuming drops what follows the checkpoint (the unfinished iteration's events, and its calls past the ones it
    reuses): refuse when the files record more than that, as when ``checkpoint.npz`` was deleted or replaced by an
    older one, rather than cut recorded iterations and paid calls."""
    def last(path: Path) -> int:
        return max((int(r.get("iteration", 0)) for r in read_jsonl(path)), default=0) if path.is_file() else 0

    events, calls = last(rd.events), last(rd.transcripts)
    if events > done + int(has_checkpoint) or calls > done + 1:
        what = f"no {rd.checkpoint.name}" if not has_checkpoint else f"a {rd.checkpoint.name} of iteration {done}"
        raise UserError(f"{rd.path} records {max(events, calls)} iterations but has {what}; resuming would drop "
                        "recorded iterations and calls, so it is refused and every file is left as it is (start a "
                        f"new run, e.g. `train --config {rd.config}`)")


_STATE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)
"""What a checkpoint's state with a missing or mistyped field raises as it is loaded."""


def _checkpoint_iteration(rd: RunDir, state: dict[str, Any] | None) -> int:
    """The last iteration ``state`` finished (0 without a checkpoint); a mistyped one is one line."""
    if state is None:
        return 0
    try:
        done = state["iteration"]
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            raise TypeError(f"iteration is {str(done)[:40]!r}, not a count")
        return done
    except _STATE_ERRORS as exc:
        raise _bad_state(rd, exc) from None


def _bad_state(rd: RunDir, exc: BaseException) -> UserError:
    detail = f"{type(exc).__name__}: {str(exc)[:120]}"
    return UserError(f"{rd.checkpoint} holds a state this version cannot load ({detail}); the resume is refused and "
                     "every file of the run is left as it is")


def _built(held: ExitStack, console: Console, build: Callable[[], Run]) -> Run:
    """``build()``, the console closed when it fails; the run's collector is closed when the resume ends."""
    try:
        run = build()
    except BaseException:
        console.close()
        raise
    held.callback(run.collector.close)
    return run


def _load_state(rd: RunDir, run: Run, state: dict[str, Any]) -> None:
    """The checkpoint's state into ``run`` (memory only): a field missing or mistyped is one line, the console
    closed, before any file changes."""
    try:
        run.load_state_dict(state)
        run.policy_of(run.best_table, {})  # the kept table fits the spec (saved once the resume goes on)
    except (*_STATE_ERRORS, UserError) as exc:
        run.console.close()
        raise (exc if isinstance(exc, UserError) and not isinstance(exc, SpecError) else _bad_state(rd, exc)) \
            from None


def _resume(run_dir: Path, overrides: dict[str, Any] | None, log: Callable[[str], None] | None, held: ExitStack, *,
            limiter: CallLimiter | None, budget: Budget | None) -> RunResult:
    rd = RunDir(Path(run_dir))
    if not rd.path.is_dir():
        raise UserError(f"{run_dir} does not exist; give the run directory `train` printed")
    if not rd.config.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {rd.config.name}); give the folder `train` printed")
    rd.check_no_links()  # nothing is deleted or written through a link (the lock's own files included)
    held.enter_context(FolderLock(rd.path, "the run directory"))
    record = rd.load_config()  # a newer layout is refused here, in one line naming its schema_version
    try:
        assert record is not None, "it holds no JSON object"
        spec = EnvSpec.from_dict(record["env_spec"])
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise UserError(f"{rd.config} cannot be read as a run's {rd.config.name}: {exc}") from None
    overrides = dict(overrides or {})
    given_url = overrides.pop("base_url", None)
    _check_resume_env(rd, record, spec, overrides.pop("env_id", None))
    _check_resume_endpoint(rd, record, given_url)
    settings = load_settings(rd.config)
    _check_resume_paths(rd, settings, overrides)
    bad = sorted(set(overrides) - set(resume_options()))
    if bad:
        raise UserError(f"--resume takes the run's own settings; {option_name(bad[0])} cannot change (accepted "
                        f"with --resume: {', '.join(option_name(o) for o in resume_options())})")
    if given_url:  # the same endpoint, with the password config.json never holds
        settings["base_url"] = given_url
    settings["run_id"] = rd.path.name
    settings["logs_dir"] = str(rd.path.parent.parent)
    cfg = TrainConfig.build((settings, f"{rd.config}"), (dict(overrides or {}), "command line"))
    why = MODES.entry(cfg.mode).info.get("no_resume") if cfg.mode in MODES else None
    if why:  # a mode that cannot resume yet says why in its registry line
        raise UserError(f"{rd.path} is a --mode {cfg.mode} run, which cannot be resumed yet ({why}); start a new run")
    if rd.summary.is_file():
        done = rd.load_summary()
        if done is None:
            raise UserError(f"{rd.summary} does not hold a JSON object; it is not a run's {rd.summary.name}")
        stop = StopReason.parse(done.get("stop_reason"))
        finished = stop is None or stop.kind not in (StopKind.INTERRUPTED, StopKind.FAILED)
        if finished and int(done.get("iterations", 0)) >= cfg.iterations:
            raise UserError(f"{run_dir} already finished ({done.get('stop_reason')}, {done.get('iterations')} "
                            "iterations); give a larger --iterations to extend it")
    prepared = prepare(cfg, spec)  # a broken price file is refused before anything in the run directory changes
    mode = prepared.mode
    state = load_checkpoint(rd.checkpoint) if rd.checkpoint.is_file() else None
    done_iter = _checkpoint_iteration(rd, state)
    _check_records_within(rd, done_iter, state is not None)
    torn: list[str] = []  # a last line cut by a kill: dropped, and said
    recorded, kept_lines = RecordedCalls.from_transcript(rd.transcripts, done_iter, on_torn=torn.append)
    events = [e for e in rd.load_events(on_torn=torn.append, check=False) if int(e.get("iteration", 0)) <= done_iter]
    check_writers(cfg.log)
    # The run is built and its state loaded before any file of it changes: a refused resume (a model file gone, a
    # checkpoint this version cannot load) leaves the run directory as it was, its summary included.
    console = make_console(cfg, spec.env_id, prepared.backend, mode.name, log)
    run = _built(held, console, lambda: Run(cfg, spec, mode, rd, console, recorded=recorded,
                                           resumed=state is not None, limiter=limiter, budget=budget))
    if state is not None:
        _load_state(rd, run, state)
    with HeldInterrupts():  # the cuts go together: an interrupt waits for all of them
        rewrite_jsonl(rd.transcripts, kept_lines)
        rewrite_jsonl(rd.events, events)
        rd.prune_after(done_iter)
        rd.summary.unlink(missing_ok=True)
    run.open_log()
    console.notice(f"resuming {rd.path} after iteration {done_iter}"
                   + (f" ({len(recorded)} recorded calls of the unfinished iteration reused)" if len(recorded) else ""))
    for text in torn:
        console.notice(f"note: {text}")
    if record.get("version") != __version__:
        console.notice(f"note: {rd.path} was made by llm-policy-gen {record.get('version') or '(unknown version)'}; "
                       f"it goes on with version {__version__}")
    if state is None:
        run.mode_start()
    else:
        run.committed = state
        run.save_best()
    return execute(run, done_iter + 1)
