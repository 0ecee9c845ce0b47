"""The keys of a run's records, declared once: an ``events.jsonl`` line (:class:`Event`) and ``summary.json``
(:class:`Summary`), and the field checks a reader applies (:data:`EVENT_FIELDS`, derived from :class:`Event`); and
the run directory's layout version, ``config.json``'s ``schema_version`` (:data:`SCHEMA_VERSION`, :func:`config_of`).

The records stay JSON objects on disk (the outside contract names their keys); :mod:`.records` fills them and
:mod:`.files` reads them back. This module imports nothing of the run, so that a reader of a run directory (the
report, the plots, the sweep) needs none of it.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict, get_args, get_origin, get_type_hints

from ..errors import UserError
from ..schema.aliases import EVENT_FILE_KEYS, SUMMARY_FILE_KEYS
from ..storage.runlog import CHECKS, Check

__all__ = ["Event", "Summary", "EVENT_FIELDS", "fields_of", "SCHEMA_KEY", "SCHEMA_VERSION", "UPGRADES",
           "BEHAVIOUR_BEFORE", "config_of",
           "event_line", "summary_record"]


class Event(TypedDict, total=False):
    """One ``events.jsonl`` line (the keys every mode's line has; a mode adds its own)."""

    iteration: int
    mode: str
    train_return: float | None
    train_returns: list[float]
    train_epsilon: float | None
    test_mean: float | None
    test_returns: list[float]
    test_episodes: int
    candidates: int
    candidate_means: list[float | None]
    chosen: int | None
    best_test_mean: float | None
    best_heldout_mean: float | None
    heldout_mean: float | None
    accepted: bool
    accepted_total: int
    valid: bool
    n_changed: int
    episodes_total: int
    env_steps_total: int
    heldout_episodes_total: int
    selection_episodes_total: int | None
    selection_steps_total: int | None
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    input_tokens_total: int
    output_tokens_total: int
    cost_usd_total: float
    cost_complete: bool
    llm_calls: int
    failed_calls: int
    first_call_error: str | None
    validation_errors: list[str]
    notes: list[str]
    prompt_chars: int | None
    wall_s: float
    confirmation: dict[str, Any]
    heldout_std: float
    heldout_episodes: int
    heldout_returns: list[float]
    heldout_returns_before: list[float]


class Summary(TypedDict, total=False):
    """``summary.json`` (a mode's ending adds its own keys)."""

    env_id: str
    mode: str
    backend: str
    model: str
    is_llm: bool
    seed: int
    candidates: int
    best_heldout_mean: float | None
    best_heldout_std: float | None
    best_heldout_episodes: int
    best_test_mean: float | None
    best_iteration: int
    accepted_count: int
    never_accepted: bool
    reward_threshold: float | None
    solved: bool
    episodes_to_solve: int | None
    iteration_solved: int | None
    iterations: int
    episodes_total: int
    env_steps_total: int
    heldout_episodes_total: int
    select: str
    """What chose the reported policy: ``keeper`` (its counted test and confirmation episodes), ``none`` (the final
    policy is reported) or ``eval`` (a peer's counted evaluation episodes on training seeds)."""
    counting: str
    """What the counted interaction informs, in words (:mod:`llm_policy_gen.modes.selection`)."""
    selection_episodes_total: int | None
    """Counted episodes that chose the reported policy (not played to learn); the rest were training episodes.
    None: unknown (a run resumed from a checkpoint written before the split was kept)."""
    selection_steps_total: int | None
    """Their environment steps."""
    final_heldout_mean: float | None
    """The final policy's held-out mean (a learner's last read-out table, a peer's last network; the kept table where
    the keeper is the method); None where the run does not know it (interrupted)."""
    final_heldout_std: float | None
    steps_in_progress: int
    """A learner that steps its own environments: steps of its episodes still in progress when the run ended, which
    it learned from and which are counted once their episodes end (a longer run)."""
    selected_heldout_mean: float | None
    """The selected policy's held-out mean, for a run that selects with counted episodes (the kept table, a peer's
    best-evaluated network); None for one that does not."""
    max_episodes: int | None
    """The episode budget (``--max-episodes``), or None."""
    episodes_past_budget: int | None
    """Counted episodes past the episode budget (a run stops only between iterations); None when not reached."""
    max_steps: int | None
    """The step budget (``--max-steps``), or None."""
    steps_past_budget: int | None
    """Counted environment steps past the step budget; None when not reached."""
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    cost_complete: bool
    llm_calls: int
    cached_calls: int
    failed_calls: int
    first_call_error: str | None
    invalid_iterations: int
    prompt_chars_first: int | None
    prompt_chars_last: int | None
    prompt_chars_max: int | None
    stop_reason: str
    unreachable_after: int
    wall_s: float
    unfinished_iteration_calls: int
    unfinished_iteration_failed_calls: int


def _kind(annotation: Any) -> str | None:
    """The :data:`~llm_policy_gen.storage.runlog.CHECKS` kind of a record field's type (None: not checked)."""
    if isinstance(annotation, types.UnionType) or get_origin(annotation) is typing.Union:
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) != 1:
            return None
        annotation = rest[0]
    origin = get_origin(annotation)
    if origin is list:
        item = get_args(annotation)[0]
        return "numbers" if _kind(item) in ("number", "int") else "list"
    if origin is dict:
        return "object"
    return {bool: "bool", int: "int", float: "number", str: "str"}.get(annotation)


def fields_of(record: type) -> dict[str, Check]:
    """Each field of a typed record (a ``TypedDict``) with the check its type implies, for
    :func:`~llm_policy_gen.storage.runlog.check_fields`."""
    out: dict[str, Check] = {}
    for key, annotation in get_type_hints(record).items():
        kind = _kind(annotation)
        if kind is not None:
            out[key] = CHECKS[kind]
    return out


EVENT_FIELDS: dict[str, Check] = fields_of(Event)
"""The fields of an ``events.jsonl`` line, and the type each must have when not null (a mode's own keys are not
checked)."""


SCHEMA_KEY = "schema_version"
SCHEMA_VERSION = 2
"""The layout this version writes. 1: the contract's files and keys (a ``config.json`` without ``schema_version``,
as written before the key existed, is the same layout). 2: ``schema_version`` in ``summary.json`` and in every
``events.jsonl`` line too, and the figures under the code's names (``test_mean``, ``best_heldout_mean``, ...) with
layout 1's keys (``eval_mean``, ``best_eval_mean``, ...) beside them for this version, deprecated."""


def _same_config(record: dict[str, Any]) -> dict[str, Any]:
    """Layout 1's ``config.json`` to layout 2's: the record is the same (layout 2 changed the other files)."""
    return {**record, SCHEMA_KEY: 2}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _same_config}
"""Layout ``v`` -> the function that turns its ``config.json`` record into layout ``v + 1``'s: the one mapping
through which an older run directory is read."""


BEHAVIOUR_BEFORE: dict[str, dict[str, Any]] = {"q-learning": {"q_learns_from": "own"}}
"""Per mode, the settings added with a change of behaviour and the value a run's ``config.json`` without the key
meant (the behaviour before the change): :func:`config_of` fills them in, so an old run resumes, and re-runs with
``--config``, as it ran (``q_learns_from``: ``q-learning`` learns from the keeper's episodes too since issue 62)."""


def config_of(record: Mapping[str, Any], where: Path | str) -> dict[str, Any]:
    """A run's ``config.json`` record in this version's layout: an older one upgraded through :data:`UPGRADES`,
    a newer or unknown ``schema_version`` refused (:class:`UserError`, one line naming ``where`` and the version)."""
    version = record.get(SCHEMA_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserError(f"{where}: {SCHEMA_KEY} {json.dumps(version)[:40]} is not a run-directory layout (this "
                        f"version of llm-policy-gen reads layouts 1 to {SCHEMA_VERSION})")
    if version > SCHEMA_VERSION:
        raise UserError(f"{where} has {SCHEMA_KEY} {version}, a run-directory layout newer than this version of "
                        f"llm-policy-gen reads (1 to {SCHEMA_VERSION}); upgrade llm-policy-gen to read it")
    out = dict(record)
    for v in range(version, SCHEMA_VERSION):
        out = UPGRADES[v](out)
    settings = out.get("config")
    if isinstance(settings, dict):
        before = BEHAVIOUR_BEFORE.get(str(settings.get("mode")), {})
        if set(before) - set(settings):
            out["config"] = {**before, **settings}
    return out


def _with_old_keys(record: Mapping[str, Any], old_keys: Mapping[str, str]) -> dict[str, Any]:
    """``record`` stamped with :data:`SCHEMA_VERSION`, in the code's names, and for one version the deprecated key
    of each renamed figure beside its new name (the same value; ``docs/run-directory.md`` lists them)."""
    out: dict[str, Any] = {SCHEMA_KEY: SCHEMA_VERSION}
    for key, value in record.items():
        if key == SCHEMA_KEY:
            continue
        out[key] = value
        if key in old_keys:
            out[old_keys[key]] = value
    return out


def event_line(record: Mapping[str, Any]) -> dict[str, Any]:
    """An iteration record as an ``events.jsonl`` line of this layout: ``schema_version``, the code's names
    (``test_mean``, ``best_heldout_mean``, ...) and the deprecated ones beside them (``eval_mean``, ...)."""
    return _with_old_keys(record, EVENT_FILE_KEYS)


def summary_record(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary as ``summary.json`` of this layout holds it (see :func:`event_line`: ``best_heldout_mean`` and the
    deprecated ``best_eval_mean`` beside it)."""
    return _with_old_keys(summary, SUMMARY_FILE_KEYS)
