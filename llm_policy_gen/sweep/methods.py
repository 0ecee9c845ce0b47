"""A comparison's method entries: their grammar, run ids, display names and the settings they give their runs.

::

    ENTRY  := [LABEL "="] METHOD ["[" OPTS "]"]
    METHOD := BACKEND | BACKEND "@" MODE | "@" MODE
    OPTS   := KEY "=" VALUE { ";" KEY "=" VALUE }
    LABEL  := one or more of [A-Za-z0-9._+-]

``BACKEND`` is a backend spec (``offline``, ``gemini:MODEL``, ``llamacpp:PATH.gguf``, ``replay:PATH``, ...);
``@MODE`` alone is a mode that proposes nothing and so names no backend (``@q-learning``, ``@lm-policy``; the backend
its runs get is :func:`mode_backend`'s); ``q-learning`` is the old spelling of ``@q-learning`` (noted once, its runs
keep their ids). ``OPTS`` are settings of that method only, by their config key
(``lm_features=onehot``) or their flag without the dashes (``lm-features=onehot``); a value is read as the ``train``
flag reads it (``lm_net_arch=64,64``). Entries are split on top-level commas only (:func:`split_methods`).

Run ids (:meth:`Method.run_id`): an entry without label and options keeps the id ``compare`` gave it before the
grammar, ``slug(ENTRY)_s{seed}`` (``@MODE`` counts as ``MODE``), so the runs of an old comparison folder are found
again; with a label ``slug(LABEL)_s{seed}``; with options and no label ``slug(METHOD)-{hash}_s{seed}``, the hash the
first 8 hex digits of the sha256 of the options' JSON (sorted keys), an option renamed since the grammar came under
its name of then (:data:`~llm_policy_gen.schema.aliases.PREFIXED`: ``advice_prob``, not ``advisor_prob``), so an
entry keeps its runs. An option's old name is read as today's, with a deprecation note.

Display names (:meth:`Method.display`): the label; else a backend whose spec holds a path shows its stem
(``llamacpp:SmolLM2-135M-Instruct.Q4_1``), a mode that runs a model shows ``MODE(model stem)``
(``lm-policy(SmolLM2-135M-Instruct.Q4_1)``), the rest as written.
"""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..run.names import path_stem
from ..schema.aliases import PREFIXED, SETTING_ALIASES, note_old_spelling, spelled_mode
from ..storage.runlog import slug

__all__ = ["ACCEPTED", "Method", "parse_method", "split_methods", "parse_methods", "mode_backend", "alone",
           "display_names",
           "display_name", "path_stem", "check_options"]

ACCEPTED = ("[LABEL=]BACKEND[@MODE][[KEY=VALUE;...]] or [LABEL=]@MODE[[KEY=VALUE;...]], comma-separated "
            "(e.g. offline,q-learning,smol=llamacpp:/m/SmolLM2.gguf,onehot=@lm-policy[lm_features=onehot])")
"""What a method entry may be, for messages."""

_LABEL = re.compile(r"[A-Za-z0-9._+-]+")
_NAMED_BEFORE = {new: old for old, new in PREFIXED.items()}
"""Options renamed since the grammar came -> their names then, which their run ids hash (:meth:`Method.run_stem`)."""
_SWEEP_KEYS = {"env_id": "--env", "backend": "the entry's BACKEND", "mode": "the entry's @MODE", "seed": "--seeds",
               "logs_dir": "--out", "run_id": "the entry's LABEL", "explicit": "nothing",
               "budget_usd": "--budget-usd (the sweep's)"}
"""Settings an entry may not give: the entry itself or the sweep sets them."""
def mode_backend(mode: str) -> str | None:
    """The backend an ``@MODE`` entry's runs are given: None for a mode that proposes nothing (``@q-learning``,
    ``@lm-policy``: its runs build none and record the backend its class spells, as ``q-learning`` and
    ``offline@lm-policy`` ran), ``offline`` for a plug-in mode that asks no backend without the modes' base class,
    which it never asks (``@peer``). :func:`alone` says whether ``@MODE`` may stand alone."""
    from ..modes import proposes_nothing

    return None if proposes_nothing(mode) is not None else "offline"


def alone(mode: str) -> bool:
    """Whether an entry may name mode ``mode`` without a backend: its class says it needs none."""
    from ..modes import MODES

    return not getattr(MODES.load(mode), "needs_backend", True)  # ModeBase.needs_backend, or a plug-in's own


@dataclass(frozen=True)
class Method:
    """One parsed method entry."""

    written: str
    """The entry as written (spaces around it dropped): the ``backend`` column of results.csv."""
    label: str | None
    backend: str | None
    """The backend spec as written; None for ``@MODE``."""
    mode: str | None
    """The mode after ``@``; None when the entry names none."""
    options: dict[str, Any] = field(default_factory=dict)
    """Settings of this method only, by config key, typed."""
    options_text: str = ""
    """The ``[...]`` part as written (without the brackets)."""

    @property
    def method_text(self) -> str:
        """METHOD as written (no label, no options)."""
        return f"@{self.mode}" if self.backend is None else self.backend + (f"@{self.mode}" if self.mode else "")

    @property
    def canonical(self) -> str:
        """METHOD in its canonical form: ``@MODE`` is ``MODE`` (``@q-learning`` -> ``q-learning``)."""
        return str(self.mode) if self.backend is None else self.method_text

    @property
    def backend_spec(self) -> str | None:
        """The backend its runs get: the entry's, or :func:`mode_backend`'s for ``@MODE`` and for ``q-learning``, the
        old spelling of ``@q-learning`` (:func:`~llm_policy_gen.schema.aliases.spelled_mode`); None: none."""
        old = spelled_mode(self.backend)
        if self.backend is not None and old is None:
            return self.backend
        return mode_backend(str(self.mode or old))

    @property
    def run_stem(self) -> str:
        """The run id without ``_s{seed}`` (see the module doc)."""
        if self.label:
            return slug(self.label)
        if self.options:
            named = {_NAMED_BEFORE.get(k, k): v for k, v in self.options.items()}  # the ids of before the renames
            digest = hashlib.sha256(json.dumps(named, sort_keys=True).encode("utf-8")).hexdigest()[:8]
            return f"{slug(self.canonical)}-{digest}"
        return slug(self.canonical if self.backend is None else self.written)

    def run_id(self, seed: int) -> str:
        return f"{self.run_stem}_s{seed}"

    def display(self, settings: Mapping[str, Any] | None = None) -> str:
        """The name tables, reports and figures show (``settings``: the sweep's, under the entry's options)."""
        if self.label:
            return self.label
        given = {**(settings or {}), **self.options}
        model = _model_of(self.run_mode(given), given)
        if model:
            rest = [f"{k}={_short(v)}" for k, v in self.options.items() if k not in _model_keys(self.run_mode(given))]
            return f"{self.run_mode(given)}({path_stem(model)})" + (f"[{';'.join(rest)}]" if rest else "")
        text = _short_spec(self.backend) + (f"@{self.mode}" if self.mode else "") if self.backend else f"@{self.mode}"
        if self.options:
            text += "[" + ";".join(f"{k}={_short(v)}" for k, v in self.options.items()) + "]"
        return text

    def run_mode(self, settings: Mapping[str, Any] | None = None) -> str:
        """The mode its runs run: the entry's (``q-learning``, the old spelling of ``@q-learning``, names one too),
        else the sweep's, else table."""
        return str(self.mode or spelled_mode(self.backend) or (settings or {}).get("mode") or "table")


def split_methods(text: str) -> list[str]:
    """``text`` split on its top-level commas (a comma inside ``[...]`` belongs to a value); empty parts dropped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]" and depth > 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _bad(flag: str, entry: str, why: str) -> UserError:
    return UserError(f"bad {flag} entry {entry!r}: {why}; accepted: {ACCEPTED}")


def parse_method(entry: str, flag: str = "--methods") -> Method:
    """One entry, checked (backend, mode, option keys and values); a bad one is a one-line :class:`UserError` naming
    it and what is accepted. An entry holding a secret (a URL's password, a key) is refused without showing it: the
    entry is written as it is into compare.json, results.csv and the console."""
    from ..backends import parse_backend_spec
    from ..clients.keys import redact
    from ..modes import MODES

    if redact(entry) != entry:
        raise UserError(f"bad {flag} entry {redact(entry.strip())!r}: it holds a secret (a URL's password or a key), "
                        "which the comparison's files would show; give it in --config or the provider's variable")
    text = entry.strip()
    label: str | None = None
    head, eq, rest = text.partition("=")
    if eq and _LABEL.fullmatch(head):
        label, text = head, rest.strip()
    elif eq and "[" not in head and not re.search(r"[:@/\\]", head):
        raise _bad(flag, entry, f"label {head!r} is not made of letters, digits and ._+-")
    options_text = ""
    if "[" in text or "]" in text:
        open_at = text.find("[")
        if open_at < 0 or not text.endswith("]") or text.count("[") != text.count("]"):
            raise _bad(flag, entry, "options go in one [...] at the end of the entry")
        text, options_text = text[:open_at].strip(), text[open_at + 1:-1].strip()
        if not options_text:
            raise _bad(flag, entry, "empty [...]: give KEY=VALUE settings or drop the brackets")
    if not text:
        raise _bad(flag, entry, "no method (a backend, BACKEND@MODE or @MODE)")
    spec, at, mode = text.rpartition("@")
    backend: str | None = spec if at and spec else (None if at else text)
    mode_name: str | None = mode if at else None
    if mode_name is not None and mode_name not in MODES:
        raise MODES.unknown(mode_name)
    if backend is None:
        if not alone(str(mode_name)):
            free = [m for m in MODES if alone(m)]
            raise _bad(flag, entry, f"@{mode_name} alone names no backend and mode {mode_name} needs one: give "
                       f"BACKEND@{mode_name}; @MODE alone is for modes that propose nothing ({', '.join(free)})")
    elif spelled_mode(backend) is None:
        parse_backend_spec(backend)
    elif mode_name is not None:  # q-learning@reward: the old spelling names a mode, not a backend
        raise _bad(flag, entry, f"{backend} is the old spelling of @{spelled_mode(backend)}, a mode, not a backend")
    opts = _options(options_text, flag, entry) if options_text else {}
    return Method(entry.strip(), label, backend, mode_name, opts, options_text)


def _options(text: str, flag: str, entry: str) -> dict[str, Any]:
    """``KEY=VALUE;...`` as typed settings by config key; each value checked by the model that declares it."""
    from ..config import TrainConfig, options

    known = options()
    by_flag = {o.flag[2:]: k for k, o in known.items() if o.flag and o.annotation is not bool}
    out: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(";")):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise _bad(flag, entry, f"option {part!r} is not KEY=VALUE")
        name = key if key in known else by_flag.get(key, key.replace("-", "_"))
        if name in SETTING_ALIASES and name not in known:  # an old name: it works, and says so once
            note_old_spelling(f"note: {flag} entry option {key} is the old name of {SETTING_ALIASES[name]} "
                              "(deprecated; it still works)")
            name = SETTING_ALIASES[name]
        if name in _SWEEP_KEYS:
            raise _bad(flag, entry, f"{key} is not an option of one method (it is set by {_SWEEP_KEYS[name]})")
        if name not in known:
            raise _bad(flag, entry, f"unknown setting {key!r} (the settings are `train`'s, see train --help)")
        if name in out:
            raise _bad(flag, entry, f"{key} is given twice")
        out[name] = _value(known[name].annotation, value, flag, entry, key)
    TrainConfig.checked(out, f"{flag} entry {entry.strip()!r}")  # the owners' checks: range, choices, types
    return out


def _value(annotation: Any, text: str, flag: str, entry: str, key: str) -> Any:
    """``text`` read as the ``train`` flag of a setting of type ``annotation`` reads it."""
    from ..schema.argtypes import int_list, json_object, name_list

    kind = annotation
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
        words = [w for a in typing.get_args(kind) if typing.get_origin(a) is typing.Literal for w in typing.get_args(a)]
        if text in words:  # a choice spelt like None (--select none) is the choice, as the flag reads it
            return text
        if text.lower() in ("none", "null"):
            return None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError("true or false")
            return text.lower() == "true"
        readers: dict[Any, Any] = {int: int, float: float, list[int]: int_list, list[str]: name_list,
                                   dict[str, Any]: json_object}
        return readers.get(kind, str)(text)
    except Exception as exc:  # a reader's own error: the value, not a traceback
        raise _bad(flag, entry, f"bad {key}={text!r} ({exc})") from None


def parse_methods(text: str, flag: str = "--methods") -> list[Method]:
    """A ``--methods`` (or ``--backends``) value: its entries, each checked, repeated ones once; two entries whose
    runs would share directories are refused."""
    methods: list[Method] = []
    for part in split_methods(str(text)):
        m = parse_method(part, flag)
        if m.mode is None and spelled_mode(m.backend):  # an old spelling: it runs what it ran, and says so once
            note_old_spelling(f"note: {flag} entry {m.backend} is the old spelling of @{spelled_mode(m.backend)} "
                              "(deprecated; it still works, its runs keep their ids)")
        if all(m.written != o.written for o in methods):
            methods.append(m)
    if not methods:
        raise UserError(f"bad {flag} {text!r}: give comma-separated entries; accepted: {ACCEPTED}")
    stems: dict[str, str] = {}
    for m in methods:
        if m.run_stem in stems:
            raise _bad(flag, m.written, f"its runs would go where those of {stems[m.run_stem]!r} go "
                       f"({m.run_stem}_s0, ...); give one of them another LABEL=")
        stems[m.run_stem] = m.written
    return methods


def check_options(method: Method, settings: Mapping[str, Any], flag: str = "--methods") -> None:
    """Refuse an option of ``method`` that no plug-in of its runs takes (``lm_model`` on a table run): the run's
    mode and backend as ``train`` resolves them (:func:`~llm_policy_gen.run.prepare.unused_settings`)."""
    if not method.options:
        return
    from ..config import TrainConfig
    from ..run.prepare import unused_settings

    cfg = TrainConfig.build((dict(settings), "compare settings"), (
        {**method.options, "backend": method.backend_spec, "mode": method.run_mode(settings)}, "compare"))
    unused = unused_settings(cfg, set(method.options))
    if unused:
        key, why = next(iter(unused.items()))
        raise _bad(flag, method.written, f"{key} does not apply to it: {why}")


def display_names(methods: Sequence[Method], settings: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Each entry's display name (as written -> name); entries whose names would be the same show as written."""
    names = {m.written: m.display(settings) for m in methods}
    seen: dict[str, int] = {}
    for n in names.values():
        seen[n] = seen.get(n, 0) + 1
    return {w: (n if seen[n] == 1 else w) for w, n in names.items()}


def display_name(entry: str, settings: Mapping[str, Any] | None = None) -> str:
    """The display name of an entry as a results file holds it; one this version cannot read shows as written."""
    try:
        return parse_method(entry).display(settings)
    except UserError:
        return entry


def _short(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return path_stem(text) if "/" in text or "\\" in text else text


def _short_spec(spec: str) -> str:
    """A backend spec with its path shown as the path's stem, for backends whose spec holds a path (``replay:PATH``,
    ``llamacpp:PATH.gguf``: their registry line's ``spec`` says so)."""
    from ..backends import BACKENDS

    name, sep, model = spec.partition(":")
    if not sep or name.lower() not in BACKENDS:
        return spec
    holds_path = "PATH" in str(BACKENDS.entry(name.lower()).info.get("spec") or "")
    return f"{name}:{path_stem(model)}" if holds_path and model else spec


def _model_keys(mode: str) -> list[str]:
    """The settings of ``mode`` that name a model it runs (its options' fields ending in ``_model``)."""
    from ..modes import MODES

    model = MODES.options_model(mode) if mode in MODES else None
    return [k for k in (model.model_fields if model else {}) if k.endswith("_model")]


def _model_of(mode: str, settings: Mapping[str, Any]) -> str | None:
    return next((str(settings[k]) for k in _model_keys(mode) if settings.get(k)), None)
