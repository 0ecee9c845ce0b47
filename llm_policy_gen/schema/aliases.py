"""One word for one measure inside the code, and the one mapping to the words files and command lines used.

Inside the package, ``test_*`` names what is measured on the **test seeds** (the episodes that judge candidates,
rising from ``test_start`` to ``test_max``) and ``heldout_*`` what is measured on the **held-out seeds** (reported
only, never used to decide). Earlier versions said ``eval`` for both: the settings ``eval_start``, ``eval_max`` and
``eval_rise_every`` are about test seeds, and the key ``best_eval_mean`` was the test-seed mean in the prompt but
the held-out mean in ``events.jsonl`` and ``summary.json``.

The files keep the keys the outside contract names (``docs/run-directory.md``), so every reader and script of
today goes on working: an ``events.jsonl`` line still says ``eval_mean``, ``eval_returns``, ``eval_episodes`` and
``best_eval_mean``; ``summary.json`` and ``results.csv`` say ``best_eval_mean``, ``best_eval_std`` and
``best_eval_episodes``. :func:`event_out` and :func:`summary_out` give a record the file's keys,
:func:`events_in` and :func:`summary_in` read a file of any version back into the code's names (a run directory
written before K candidates existed used ``best_eval_mean`` for the kept table's *test* mean and ``heldout_mean``
for the held-out one: :data:`LAYOUT_BEFORE_CANDIDATES`).

Settings are the other way round: ``config.json`` records them under their new names, and an old name is
accepted wherever a setting is given (:func:`settings_in`: a TOML file, a run's ``config.json``, an env spec's
``train_defaults``, the settings of ``compare``; :data:`OLD_FLAGS`: the command line).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import UserError

__all__ = ["SETTING_ALIASES", "PREFIXED", "OLD_FLAGS", "Q_LEARNER_ALIASES", "old_keys", "EVENT_FILE_KEYS",
           "SUMMARY_FILE_KEYS",
           "TEMPLATE_FIELD_ALIASES", "LAYOUT_BEFORE_CANDIDATES", "LAYOUT_CURRENT", "settings_in", "template_fields",
           "event_out", "event_in", "events_in", "events_layout", "summary_out", "summary_in", "file_key", "file_keys",
           "MOVED_BACKENDS", "recorded_backend", "spelled_mode", "note_old_spelling", "take_notes"]

#: A plug-in's options named for their owner, as the others are (``lm_*``, ``peer_*``, ``q_*``): old name -> the name
#: of today (issue 60 item 4). Their flags follow (``--potential-bound`` -> ``--reward-potential-bound``).
PREFIXED: dict[str, str] = {
    "potential_bound": "reward_potential_bound",
    "advice_prob": "advisor_prob",
    "advice_decay": "advisor_decay",
    "n_ctx": "llamacpp_n_ctx",
    "llm_threads": "llamacpp_threads",
    "refine": "rules_refine",
}
#: Old setting name -> the name of today: the test seeds' three (``eval_*``), the evidence's discount, named for its
#: owner as every discount is (``evidence_gamma``, ``q_gamma``, ``lm_gamma``; its flag was ``--evidence-gamma``), and
#: the plug-ins' options named for their owners (:data:`PREFIXED`).
SETTING_ALIASES: dict[str, str] = {
    "eval_start": "test_start",
    "eval_max": "test_max",
    "eval_rise_every": "test_rise_every",
    "gamma": "evidence_gamma",
    **PREFIXED,
}
#: The reward and advisor modes' Q-learner's old keys -> the key every Q-learning mode reads today (one spelling of
#: one idea: ``--q-alpha``, ``--q-gamma``). Only those modes read them: under another mode they configured nothing.
Q_LEARNER_ALIASES: dict[str, str] = {"learner_alpha": "q_alpha", "learner_gamma": "q_gamma"}
Q_LEARNER_ALIAS_MODES = ("reward", "advisor")
#: Old command-line option -> the setting it gives (``--eval-start`` -> ``test_start``, whose option is
#: ``--test-start``; ``--learner`` -> ``lm_learner``, whose option is ``--lm-learner``: a plug-in's options carry its
#: name). Each still works, with a one-line deprecation note.
OLD_FLAGS: dict[str, str] = {
    **{"--" + old.replace("_", "-"): new for old, new in {**SETTING_ALIASES, **Q_LEARNER_ALIASES}.items()
       if old != "gamma"},
    "--learner": "lm_learner", "--device": "lm_device", "--lora": "lm_lora",
}

#: A backend name that moved, the one table of the old backend spellings: old name -> (the mode it names today, the
#: backend that had the name before). The standard Q-learner took the name ``q-learning`` and became a mode that
#: proposes nothing (no backend line), so ``--backend q-learning`` is the old spelling of ``--mode q-learning``
#: (:func:`spelled_mode`); the proposer that had the name is ``kept-table-q`` (:func:`recorded_backend`).
MOVED_BACKENDS: dict[str, tuple[str, str]] = {"q-learning": ("q-learning", "kept-table-q")}

#: Old prompt-template placeholder -> the placeholder of today (a template folder copied from an earlier version,
#: ``LLM_POLICY_GEN_PROMPTS``, still fills).
TEMPLATE_FIELD_ALIASES: dict[str, str] = {"eval_episodes": "test_episodes", "best_eval": "best_test"}

#: An iteration record's key in the code -> its key in ``events.jsonl`` (the contract's spelling).
EVENT_FILE_KEYS: dict[str, str] = {
    "test_mean": "eval_mean",
    "test_returns": "eval_returns",
    "test_episodes": "eval_episodes",
    "best_heldout_mean": "best_eval_mean",
}
#: A summary's key in the code -> its key in ``summary.json`` and in a comparison's ``results.csv``.
SUMMARY_FILE_KEYS: dict[str, str] = {
    "best_heldout_mean": "best_eval_mean",
    "best_heldout_std": "best_eval_std",
    "best_heldout_episodes": "best_eval_episodes",
}

LAYOUT_BEFORE_CANDIDATES = 1
"""``events.jsonl`` written before K candidates: no ``best_test_mean`` or ``candidate_means``; its
``best_eval_mean`` was the kept table's test mean and ``heldout_mean`` the held-out one."""
LAYOUT_CURRENT = 2
"""``events.jsonl`` as written today."""

_FROM_EVENT_FILE = {v: k for k, v in EVENT_FILE_KEYS.items()}
_FROM_SUMMARY_FILE = {v: k for k, v in SUMMARY_FILE_KEYS.items()}


def _renamed(record: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """``record`` with its keys renamed by ``names``, in the same order (the files' bytes depend on it)."""
    return {names.get(k, k): v for k, v in record.items()}


# ------------------------------------------------------------------------------------------------------- settings
_NOTES: list[str] = []
"""Deprecation notes of this command (an old flag, an old key in a TOML file), printed once its settings are read
whole: a refused command prints its one line only."""


def note_old_spelling(text: str) -> None:
    """Keep ``text`` (one line) for :func:`take_notes`."""
    if text not in _NOTES:
        _NOTES.append(text)


def take_notes() -> list[str]:
    """The notes kept so far, and none kept from now on."""
    out = list(_NOTES)
    _NOTES.clear()
    return out


def old_keys(values: Mapping[str, Any]) -> dict[str, str]:
    """The old names among ``values``' keys, each with its name of today (for a deprecation note)."""
    return {k: {**SETTING_ALIASES, **Q_LEARNER_ALIASES}[k] for k in values if k in SETTING_ALIASES
            or k in Q_LEARNER_ALIASES}


def settings_in(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Settings read from ``source`` with their old names replaced by today's (also inside ``explicit``); one given
    under both names is a :class:`UserError` naming the two, unless both say the same.

    The reward and advisor modes' ``learner_alpha`` and ``learner_gamma`` are ``q_alpha`` and ``q_gamma``. A record
    that names its mode (a run's ``config.json``, which holds every plug-in's options) gives them to those modes only
    (under another they configured nothing), and its step size the user did not give (``explicit``) is today's
    ``None``, the mode's own."""
    mode = values.get("mode")
    given = {str(k) for k in values.get("explicit", [])} if isinstance(values.get("explicit"), list) else set()
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in Q_LEARNER_ALIASES:
            continue
        new = SETTING_ALIASES.get(key, key)
        if new in out and out[new] != value:
            old = next(o for o, n in SETTING_ALIASES.items() if n == new)
            raise UserError(f"{source}: {old} is the old name of {new}; give one of them, not both")
        out[new] = value
    for old, new in Q_LEARNER_ALIASES.items():
        if old not in values:
            continue
        if mode is None and new in out and out[new] != values[old]:
            raise UserError(f"{source}: {old} is the old name of {new}; give one of them, not both")
        if mode is None or mode in Q_LEARNER_ALIAS_MODES:
            out[new] = values[old]
    old_record = {"learner_alpha", "q_alpha"} <= set(values) and isinstance(mode, str)  # it recorded every option
    if old_record and not {"q_alpha", "learner_alpha"} & given:
        out["q_alpha"] = None  # an old record's step size the user did not give: the mode's default then and now
    if isinstance(out.get("explicit"), list):
        names = {**SETTING_ALIASES, **Q_LEARNER_ALIASES}
        out["explicit"] = sorted({names.get(str(k), str(k)) for k in out["explicit"]})
    return out


def recorded_backend(backend: str | None, mode: str | None) -> str | None:
    """The backend a run directory's ``config.json`` names, in today's names (``mode``: the run's recorded mode).

    A moved name is recorded with its own mode only by runs of today, so a moved name recorded under another mode is
    the backend that had the name before: ``q-learning`` recorded with ``table`` (or ``advisor``) is the proposer now
    called ``kept-table-q``. Runs written before the standard learner took the name resume, and re-run with
    ``--config``, as what they were."""
    if not backend:
        return backend
    name, sep, model = backend.partition(":")
    moved = MOVED_BACKENDS.get(name)
    if moved is None or mode == moved[0]:
        return backend
    return moved[1] + sep + model


def spelled_mode(backend: object) -> str | None:
    """The mode a backend spec of an old spelling names (``q-learning`` -> ``q-learning``), None for any other."""
    if not isinstance(backend, str):
        return None
    moved = MOVED_BACKENDS.get(backend.strip().lower())
    return moved[0] if moved else None


def template_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A prompt's template fields with the old placeholders too (each filled like its new name)."""
    return {**fields, **{old: fields[new] for old, new in TEMPLATE_FIELD_ALIASES.items() if new in fields}}


# -------------------------------------------------------------------------------------------------------- records
def event_out(record: Mapping[str, Any]) -> dict[str, Any]:
    """An iteration record with the keys ``events.jsonl`` carries."""
    return _renamed(record, EVENT_FILE_KEYS)


def events_layout(rows: Iterable[Mapping[str, Any]]) -> int:
    """:data:`LAYOUT_BEFORE_CANDIDATES` for a file of lines none of which has ``best_test_mean`` or
    ``candidate_means``, else :data:`LAYOUT_CURRENT` (an empty file too)."""
    rows = list(rows)
    if rows and not any("best_test_mean" in e or "candidate_means" in e for e in rows):
        return LAYOUT_BEFORE_CANDIDATES
    return LAYOUT_CURRENT


def event_in(line: Mapping[str, Any], layout: int = LAYOUT_CURRENT) -> dict[str, Any]:
    """One ``events.jsonl`` line in the code's names (``layout``: :func:`events_layout` of its file)."""
    rec = _renamed(line, _FROM_EVENT_FILE)
    if layout == LAYOUT_BEFORE_CANDIDATES:
        rec["best_test_mean"] = rec.pop("best_heldout_mean", None)
        rec["best_heldout_mean"] = rec.get("heldout_mean")
    elif "best_heldout_mean" not in rec and "heldout_mean" in rec:
        rec["best_heldout_mean"] = rec["heldout_mean"]
    return rec


def events_in(lines: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The lines of one ``events.jsonl`` in the code's names, and the file's layout."""
    rows = list(lines)
    layout = events_layout(rows)
    return [event_in(e, layout) for e in rows], layout


def summary_out(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary (or a result row) with the keys ``summary.json`` and ``results.csv`` carry."""
    return _renamed(summary, SUMMARY_FILE_KEYS)


def summary_in(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``summary.json`` (or a ``results.csv`` row) in the code's names."""
    return _renamed(summary, _FROM_SUMMARY_FILE)


def file_key(name: str) -> str:
    """The key a file carries for the code's ``name`` (``best_heldout_mean`` -> ``best_eval_mean``), for messages
    and pages that name the file's key."""
    return SUMMARY_FILE_KEYS.get(name, EVENT_FILE_KEYS.get(name, name))


def file_keys(names: Mapping[str, Any]) -> dict[str, Any]:
    """``names`` (a table keyed by the code's event names) keyed by the file's names instead."""
    return _renamed(names, EVENT_FILE_KEYS)
