"""The grid of a sweep and the checks before its first run.

:func:`plan` makes one :class:`~.task.RunTask` per (``--backends`` entry, seed); :func:`survey` reads what an earlier
invocation left of each (:class:`Found`); :func:`check_same_sweep` refuses a comparison folder that holds a sweep or
runs made with settings that decide results differently (:func:`~llm_policy_gen.config.operational_settings` may
change); :func:`preflight` builds each entry's run, without starting it, so that a bad environment, mode, backend or
key ends the command before any run starts.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import operational_settings  # what may differ between invocations of one sweep
from ..errors import UserError
from ..loggers.console import printable
from ..run.files import CONFIG, RunDir, RunState
from ..schema.aliases import settings_in
from ..storage.runlog import read_json_object, to_jsonable
from .methods import check_options, display_names, parse_method, parse_methods
from .results import SweepRecord
from .task import RunTask

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..envs.spec import EnvSpec

__all__ = ["operational_settings", "parse_seeds", "parse_backends", "plan", "Found", "survey", "committed_cost",
           "experiment", "resolve", "differences", "check_same_sweep", "check_same_runs", "preflight"]


# ---------------------------------------------------------------------------------------------------- parsing
def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,7"`` and mixes (``"0-2,9"``) too. Bad input is a UserError."""
    accepted = "A-B with 0 <= A <= B, or comma-separated integers >= 0 (e.g. 0-4 or 0,2,7)"
    seeds: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UserError(f"bad --seeds {text!r}: accepted {accepted}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise UserError(f"bad --seeds {text!r}: range {lo}-{hi} is empty; accepted {accepted}")
        seeds.extend(s for s in range(lo, hi + 1) if s not in seeds)
    return seeds


def parse_backends(text: str, flag: str = "--backends") -> list[str]:
    """Comma-separated method entries (:mod:`.methods`), each checked by the grammar and the backend and mode
    registries; returned as written, repeated ones once."""
    return [m.written for m in parse_methods(text, flag)]


# ---------------------------------------------------------------------------------------------------- the grid
def plan(env_id: str, backends: Sequence[str], seeds: Sequence[int], out: Path,
         settings: Mapping[str, Any]) -> list[RunTask]:
    """Every (method, seed) task of the sweep, method-major: each with the sweep's settings under its entry's options
    (an option that does not apply to the entry's runs is refused here) and its display name."""
    out = Path(out).resolve()
    methods = [parse_method(b) for b in backends]
    for m in methods:
        check_options(m, settings)
    names = display_names(methods, settings)
    return [RunTask(env_id, m.written, s, str(out), {**settings, **m.options}, names[m.written])
            for m in methods for s in seeds]


@dataclass
class Found:
    """What an earlier invocation left of one run."""

    state: str
    """``new`` (nothing), ``finished``, ``started`` (resumable) or ``stale`` (a directory without config.json)."""
    summary: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    env_kwargs: dict[str, Any] | None = None
    """The environment's keyword arguments the run recorded (its ``env_spec``)."""


_FOUND = {RunState.NEW: "new", RunState.STALE: "stale", RunState.FINISHED: "finished"}
"""A run's state as the sweep names it (every other state is ``started``: resumed, never read as a result)."""


def _found(task: RunTask) -> Found:
    state, record, summary = RunDir(task.run_dir).survey()  # each file read once
    found = _FOUND.get(state, "started")
    if found in ("new", "stale") or record is None:
        return Found(found)
    spec = record.get("env_spec")
    kwargs = spec.get("kwargs") if isinstance(spec, dict) and isinstance(spec.get("kwargs"), dict) else None
    return Found(found, summary, record["config"], kwargs)


def survey(tasks: Sequence[RunTask]) -> dict[str, Found]:
    """What is on disk of each task, by run id."""
    return {t.run_id: _found(t) for t in tasks}


def committed_cost(task: RunTask, found: Found) -> float:
    """What a run already spent, as far as its checkpoint (or its final summary) records it."""
    if found.state == "finished" and found.summary is not None:
        return float(found.summary.get("cost_usd") or 0.0)
    ckpt = RunDir(task.run_dir).checkpoint
    if found.state != "started" or not ckpt.is_file():
        return 0.0
    from ..run.checkpoint import load_checkpoint

    try:
        return float(load_checkpoint(ckpt).get("usage", {}).get("cost_usd") or 0.0)
    except UserError:
        return 0.0


# ---------------------------------------------------------------------------------------------------- settings
def experiment(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a resolved config that decide a run's results (JSON values, as config.json holds them, under
    today's names)."""
    return {k: v for k, v in settings_in(to_jsonable(dict(config)), CONFIG).items()
            if k not in operational_settings()}


def resolve(cfg: TrainConfig) -> tuple[EnvSpec, TrainConfig]:
    """The run's env spec, and ``cfg`` with the spec's train defaults applied (as ``train`` does)."""
    from ..run import resolve_spec

    spec = resolve_spec(cfg)
    return spec, cfg.with_env_defaults(spec.train_defaults) if spec.train_defaults else cfg


def resolved(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as the engine records it in config.json."""
    return resolve(cfg)[1].to_dict()


def differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"iterations 5 (this command: 8)"`` for every key of both whose value differs (a setting only one side
    knows came with another version of the package; its default keeps the old behaviour)."""
    out = []
    for k in sorted(set(before) & set(now)):
        if json.dumps(before.get(k), sort_keys=True) != json.dumps(now.get(k), sort_keys=True):
            out.append(f"{k} {json.dumps(before.get(k))} (this command: {json.dumps(now.get(k))})")
    return out


def _refuse_other_settings(out: Path, what: str, diffs: Sequence[str]) -> UserError:
    return UserError(f"--out {out} holds {what} with other settings: {'; '.join(diffs)}; re-run with those settings "
                     "to continue it, or give another --out")


def check_same_sweep(out: Path, sweep: Mapping[str, Any], tasks: Sequence[RunTask],
                     found: Mapping[str, Found]) -> None:
    """Refuse (UserError) when ``out`` holds a sweep or runs made with settings that decide results differently."""
    before = read_json_object(out / "compare.json", lenient=True)
    seen = [f.env_kwargs for f in found.values() if f.env_kwargs is not None]
    if before is not None:
        record = SweepRecord.from_json(before)
        recorded = record.experiment
        if recorded is None or not isinstance(recorded, dict):  # a comparison written before the record existed
            recorded = {"env_id": record.env_id or None, "iterations": record.iterations}
            now = {k: sweep.get(k) for k in recorded}
        else:
            recorded, now = experiment(recorded), dict(sweep)
        diffs = differences(_env_today(recorded, now.get("env_id"), seen), now)
        if diffs:
            raise _refuse_other_settings(out, "a comparison", diffs)
    check_same_runs(out, tasks, found)


def check_same_runs(out: Path, tasks: Sequence[RunTask], found: Mapping[str, Found]) -> None:
    """Refuse (UserError) when a task's run directory holds a run made with settings that decide results
    differently (the runs' part of :func:`check_same_sweep`, for a folder whose runs have settings of their own:
    ``bench``'s task folders)."""
    for task in tasks:
        f = found[task.run_id]
        if f.config is not None:
            spec, cfg = resolve(task.config())
            ran = _env_today(experiment(f.config), cfg.env_id, [f.env_kwargs] if f.env_kwargs is not None else [])
            diffs = differences(ran, experiment(cfg.to_dict())) + _other_kwargs(f, spec, cfg)
            if diffs:
                raise _refuse_other_settings(out, f"the run {task.run_dir.relative_to(out)}", diffs)


def _env_today(recorded: Mapping[str, Any], env_id: object, kwargs_seen: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``recorded`` settings with their ``env_id`` replaced by this command's ``env_id`` when that is the spec which
    gives the recorded runs' environment today (``FrozenLake-v1`` run before round 5 of the hardening continues as
    ``FrozenLake-v1.deterministic``); else as they are."""
    from ..envs.catalog import recorded_spec_id

    ran = recorded.get("env_id")
    if ran == env_id or not isinstance(ran, str) or not isinstance(env_id, str) or not kwargs_seen:
        return dict(recorded)
    extra = recorded.get("env_kwargs") if isinstance(recorded.get("env_kwargs"), dict) else None
    if all(recorded_spec_id(ran, k, extra) == env_id for k in kwargs_seen):
        return {**recorded, "env_id": env_id}
    return dict(recorded)


def _other_kwargs(found: Found, spec: EnvSpec, cfg: TrainConfig) -> list[str]:
    """The environment's keyword arguments, when the run recorded others than this command's spec gives (a spec
    changed since the run: FrozenLake-v1 was the lake without slip before round 5 of the hardening), with the id that
    gives the recorded ones today."""
    from ..envs.catalog import recorded_spec_id

    if found.env_kwargs is None or to_jsonable(found.env_kwargs) == to_jsonable(spec.kwargs):
        return []
    today = recorded_spec_id(cfg.env_id, found.env_kwargs, cfg.env_kwargs)
    hint = f"; --env {today} gives the run's" if today != cfg.env_id else ""
    return [f"env kwargs {json.dumps(found.env_kwargs, sort_keys=True)} (this command: "
            f"{json.dumps(spec.kwargs, sort_keys=True)}{hint})"]


def preflight(tasks: Sequence[RunTask]) -> None:
    """Everything a run would refuse before its first iteration, for every task, before any run starts: the
    settings of every (entry, seed), and each entry's environment, mode and backend (its key included) by building
    its run in a scratch folder without starting it. Says, once per entry, where its calls will go and where that
    base URL and the key came from, and once per setting of the sweep that no method of it takes, that it changes
    nothing."""
    from ..run import check_backend, prepare
    from ..run.prepare import unused_settings

    built: set[str] = set()
    unused: dict[str, str] | None = None
    for task in tasks:
        cfg = task.config()  # every (entry, seed): a bad seed is refused here
        if task.backend in built:
            continue
        built.add(task.backend)
        prepared = prepare(cfg)
        endpoint = check_backend(prepared)
        if endpoint is not None:
            print(printable(endpoint), file=sys.stderr)
        mine = {k: f"{task.label}: {why}" for k, why in
                unused_settings(prepared.cfg, set(task.settings), prepared.backend).items()}
        unused = mine if unused is None else {k: v for k, v in unused.items() if k in mine}
    for key, why in (unused or {}).items():  # a sweep's setting that no method of it takes: said, not refused
        print(printable(f"note: the setting {key} has no effect on any method of this sweep (on {why})"),
              file=sys.stderr)
