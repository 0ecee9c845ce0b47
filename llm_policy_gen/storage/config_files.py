"""Reading settings from files: a TOML file (a config file, a spec, a price table), or a run's ``config.json``
re-used as a config file. Each unreadable or invalid file is one :class:`UserError` naming the file and what it is."""

from __future__ import annotations

import json
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import JSONBounds, UserError
from ..schema.aliases import note_old_spelling, old_keys, recorded_backend
from .safe_json import loads

__all__ = ["read_toml", "load_config_file", "RUN_IDENTITY"]


MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest settings file read (a config file, a spec, a price table, a run's config.json are a few KB)."""


def _read_text(p: Path, what: str) -> str:
    """The file's text (a UTF-8 byte-order mark dropped, as editors on Windows write one); a file that cannot be read,
    is not a regular file (``/dev/zero``, a pipe, a folder) or is larger than :data:`MAX_FILE_BYTES` is a
    :class:`UserError` naming ``what`` it is (a file that is not UTF-8 raises ``UnicodeDecodeError``, which each
    format reports as invalid)."""
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # before opening: opening a named pipe would wait for a writer
            raise UserError(f"cannot read {what} {p}: not a regular file")
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"cannot read {what} {p}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    return data.decode("utf-8-sig")


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML file as a dict; an unreadable or invalid file is a :class:`UserError` naming ``what`` it is."""
    p = Path(path)
    try:
        return tomllib.loads(_read_text(p, what))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{what} {p} is not valid TOML: {exc}") from None
    except RecursionError:
        raise UserError(f"{what} {p} cannot be read: it is nested too deeply") from None
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits()
        raise UserError(f"{what} {p} cannot be read: {str(exc).split(':')[0]}") from None


#: Keys of a run's config.json beside its ``config`` object: a JSON file with them is a run's record.
RUN_RECORD_KEYS = frozenset({"package", "version", "argv", "env_spec", "schema_version", "seeds"})

#: Settings of a run's own identity, not of its experiment: dropped when a config.json is re-used.
RUN_IDENTITY = ("run_id", "explicit")


def load_config_file(path: str | Path, upgrade: Callable[[dict[str, Any], Path], dict[str, Any]] | None = None
                     ) -> dict[str, Any]:
    """Settings from a config file: TOML (top-level keys or one ``[train]`` table; dashes allowed in names), or a
    run's ``config.json`` (its ``config`` object, without the run's own id), which re-runs that experiment; a backend
    it records under a name that has since moved is given its name of today
    (:func:`~llm_policy_gen.schema.aliases.recorded_backend`: an old run's ``q-learning`` is ``kept-table-q``).
    ``upgrade`` reads a run's record of an older layout as today's, or refuses a newer one
    (:func:`llm_policy_gen.run.files.load_settings` passes it)."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        try:
            data = loads(_read_text(p, "config file"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"config file {p} is not valid JSON: {exc}") from None
        except JSONBounds as exc:
            raise UserError(f"config file {p} cannot be read as JSON: {exc}") from None
        section = data.get("config", data) if isinstance(data, dict) else None
        if isinstance(data, dict) and RUN_RECORD_KEYS & set(data) and upgrade is not None:
            data = upgrade(data, p)  # a run's record in today's layout (run.files.load_settings)
            section = data.get("config", data)
        if isinstance(data, dict) and "config" not in data and RUN_RECORD_KEYS & set(data):
            raise UserError(f"config file {p} is a run's config.json without its 'config' object (the settings); "
                            "it was cut or edited: give another run's config.json or a TOML file")
        if not isinstance(section, dict):
            raise UserError(f"config file {p}: expected a JSON object (a run's config.json)")
        settings = {k: v for k, v in section.items() if k not in RUN_IDENTITY}
        if isinstance(settings.get("backend"), str):  # a backend recorded under a name that has since moved
            settings["backend"] = recorded_backend(settings["backend"], settings.get("mode", "table"))
        return settings
    data = read_toml(p, "config file")
    tables = {k for k, v in data.items() if isinstance(v, dict) and k not in ("env_kwargs", "env-kwargs")}
    if tables - {"train"}:
        bad = sorted(tables - {"train"})[0]
        raise UserError(f"config file {p}: unknown section [{bad}]; accepted: top-level settings or one [train] table")
    if "train" in tables:
        section = data["train"]
        if set(data) - {"train"}:
            raise UserError(f"config file {p}: give settings either at the top level or in [train], not both")
    else:
        section = data
    settings = {k.replace("-", "_"): v for k, v in section.items()}
    for old, new in old_keys(settings).items():  # a user's file with an old name: it works, and says so once
        note_old_spelling(f"note: config file {p}: {old} is the old name of {new} (deprecated; it still works)")
    return settings
