"""What ``train --resume`` refuses before any file of the run changes.

A run directory may come from someone else: before anything in it changes, the resume checks which environment
module it would import, where it would send the user's key, which files it names, which settings may change, and
that its records agree with its checkpoint; a checkpoint this version cannot load is refused the same way, one line
each (:class:`~llm_policy_gen.errors.UserError`), every file left as it was. :mod:`.resume` carries the run on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..clients.keys import is_loopback_url, redact, without_userinfo
from ..config import TrainConfig, option_name, resume_options
from ..envs.spec import EnvSpec
from ..errors import SpecError, UserError
from ..modes import MODES
from ..storage.runlog import read_jsonl
from .checkpoint import load_checkpoint
from .files import RunDir, load_settings
from .pace import may_wait
from .services import Run
from .stop import StopKind, StopReason

__all__ = ["check_run_dir", "read_record", "resume_config", "read_checkpoint", "load_state"]


def check_run_dir(rd: RunDir, given: Path | str) -> None:
    """``given`` is a run directory that holds no link (nothing is deleted or written through one)."""
    if not rd.path.is_dir():
        what = "is a file, not a folder" if rd.path.exists() else "does not exist"
        raise UserError(f"{given} {what}; give the run directory `train` printed")
    if not rd.config.is_file():
        raise UserError(f"{given} is not a run directory (no {rd.config.name}); give the folder `train` printed")
    rd.check_no_links()  # nothing is deleted or written through a link (the lock's own files included)


def read_record(rd: RunDir) -> tuple[dict[str, Any], EnvSpec]:
    """The run's ``config.json`` and its recorded environment spec."""
    record = rd.load_config()  # a newer layout is refused here, in one line naming its schema_version
    try:
        assert record is not None, "it holds no JSON object"
        spec = EnvSpec.from_dict(record["env_spec"])
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise UserError(f"{rd.config} cannot be read as a run's {rd.config.name}: {exc}") from None
    return record, spec


def resume_config(rd: RunDir, record: dict[str, Any], spec: EnvSpec, overrides: dict[str, Any],
                  given: Path | str | None = None) -> TrainConfig:
    """The run's own settings with the ``overrides`` a resume accepts (``given``: the folder as the user named it);
    a run that cannot be resumed, or that already finished its iterations, is refused."""
    given = rd.path if given is None else given
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
            raise UserError(f"{given} already finished ({done.get('stop_reason')}, {done.get('iterations')} "
                            "iterations); give a larger --iterations to extend it")
        if finished:
            _check_budget_left(given, done, cfg)
    return cfg


def _check_budget_left(given: Path | str, done: dict[str, Any], cfg: TrainConfig) -> None:
    """A finished run whose counted episodes or steps already reach the budget would stop before its first iteration:
    refused, as a finished run without iterations left is, naming the option to raise."""
    for key, budget, flag, word in (("episodes_total", cfg.max_episodes, "--max-episodes", "episodes"),
                                    ("env_steps_total", cfg.max_steps, "--max-steps", "steps")):
        counted = done.get(key)
        if budget is not None and isinstance(counted, int) and counted >= budget:
            raise UserError(f"{given} already finished ({done.get('stop_reason')}, {counted} {word} counted, "
                            f"{flag} {budget}); give a larger {flag} to extend it")


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
    if recorded is not None and "[REDACTED]" in recorded:  # a ?key=... that config.json does not keep
        raise UserError(f"{rd.path} sends its calls to {redact(recorded)}, whose credential its config.json does not "
                        "keep; resume it with --base-url and the whole URL, its key included")
    if recorded is not None and not is_loopback_url(recorded):
        raise UserError(f"{rd.path} sends its calls to {redact(recorded)} (recorded in its config.json), not this "
                        f"machine; resuming would send your key there: if you trust it, add --base-url "
                        f"{redact(recorded)} (with user:password@ if it needs one)")


def _check_resume_paths(rd: RunDir, settings: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A run directory may come from someone else: a price file it names is read, and an answer cache folder it names
    is written to, only when the command line names the same one (``--prices FILE``; the cache folder by a sweep
    that resumes its own runs), or, for the cache, not at all (``--no-cache``); the lm-policy mode's model cache
    (``--lm-cache``) only when the command line names a folder (that one or another: what it holds is the same).
    Pops the path overrides it accepts."""
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
    lm_cache, given_lm_cache = settings.get("lm_cache"), overrides.pop("lm_cache", None)
    if given_lm_cache is not None:  # any folder: the model's copy, encodings and scores are the same in each
        settings["lm_cache"] = given_lm_cache
    elif lm_cache is not None:
        raise UserError(f"{rd.config} names the model cache folder {lm_cache}: a folder a run directory names is not "
                        f"written to on resume; add --lm-cache {lm_cache} if you trust it, or --lm-cache DIR for "
                        "another folder")


def _check_records_within(rd: RunDir, done: int, has_checkpoint: bool) -> None:
    """Resuming drops what follows the checkpoint (the unfinished iteration's events, and its calls past the ones it
    reuses): refuse when the files record more than that, as when ``checkpoint.npz`` was deleted or replaced by an
    older one, rather than cut recorded iterations and paid calls. A checkpoint larger than
    :data:`~.pace.PACE_ABOVE_BYTES` may lag its events by a few iterations that called no model (:mod:`.pace`): those
    are redone, to the same result."""
    def last(path: Path) -> int:
        return max((int(r.get("iteration", 0)) for r in read_jsonl(path)), default=0) if path.is_file() else 0

    events, calls = last(rd.events), last(rd.transcripts)
    paced = has_checkpoint and may_wait(rd.checkpoint.stat().st_size)
    if (events > done + int(has_checkpoint) and not paced) or calls > done + 1:
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


def read_checkpoint(rd: RunDir) -> tuple[dict[str, Any] | None, int]:
    """The checkpoint's state (None without one) and the last iteration it finished; refused when the run's files
    record more than that."""
    state = load_checkpoint(rd.checkpoint) if rd.checkpoint.is_file() else None
    done_iter = _checkpoint_iteration(rd, state)
    _check_records_within(rd, done_iter, state is not None)
    return state, done_iter


def load_state(rd: RunDir, run: Run, state: dict[str, Any]) -> None:
    """The checkpoint's state into ``run`` (memory only): a field missing or mistyped is one line, the console
    closed, before any file changes."""
    try:
        run.load_state_dict(state)
        run.policy_of(run.best_table, {})  # the kept table fits the spec (saved once the resume goes on)
    except (*_STATE_ERRORS, UserError) as exc:
        run.console.close()
        raise (exc if isinstance(exc, UserError) and not isinstance(exc, SpecError) else _bad_state(rd, exc)) \
            from None
