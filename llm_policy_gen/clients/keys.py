"""API keys: where they come from, and how they are kept out of every log.

Keys are read only from the process environment, which :func:`load_env` fills from the ``.env`` file of the working
folder (python-dotenv; never a parent folder's, never overriding variables already set; the console names the
variables it set; a ``.env`` that sets a variable deciding which code a process runs at start is refused whole, see
:mod:`.envfile`). A key goes only to a base URL set in the same place (:func:`check_same_source`). A key is never a
command-line option, never written to config.json, transcripts or error messages: :func:`redact` removes every known
key value from a text, and every URL's ``user:password@`` and secret-looking query or fragment parameters (the
redaction and the record of which ``.env`` set a variable live in :mod:`llm_policy_gen.storage.secrets`, on the
bottom floor, and are re-exported here).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..storage.secrets import (
    known_keys,
    note_source,
    redact,
    redact_all,
    register_key_variables,
    remember_url,
    secret_parameter,
    url_secrets,
    variable_source,
    without_userinfo,
)

__all__ = ["load_env", "load_env_noted", "env_notice", "check_same_source", "first_value", "register_key_variables",
           "redact", "known_keys", "redact_all", "remember_url", "url_secrets", "variable_source", "without_userinfo",
           "is_loopback_url", "http_url_problem", "secret_parameter"]


def load_env(path: str | os.PathLike[str] | None = None) -> list[str]:
    """Load ``path``, else ``.env`` of the working folder (never a parent folder's: an ancestor such as the system's
    temporary folder may be anyone's), without overriding set variables; returns the names it set, sorted.

    ``LLM_POLICY_GEN_NO_DOTENV=1`` disables it (the test suite sets it so that a developer's keys are never used).

    Raises:
        UserError: the file sets a variable that decides which code a process runs when it starts (``PYTHONPATH``,
            ``LD_PRELOAD``, ``PATH``, ...: :mod:`.envfile`), or cannot be read; nothing is set then.
    """
    from .envfile import check_names, read_env_file

    if os.environ.get("LLM_POLICY_GEN_NO_DOTENV") == "1":
        return []
    target = Path(path) if path is not None else Path.cwd() / ".env"
    if not target.is_file():
        return []
    values = read_env_file(target)
    where = str(target.resolve())
    check_names(values, where)
    added = []
    for name, value in values.items():  # as load_dotenv(override=False): a variable already set is kept
        if value is not None and name not in os.environ:
            os.environ[name] = value
            note_source(name, where)
            added.append(name)
    return sorted(added)


def env_notice(names: list[str], path: str | os.PathLike[str] | None = None) -> str | None:
    """The console line saying which variables (names, never values; a name that is not plain shown escaped, see
    :func:`.envfile.shown_name`) :func:`load_env` set; None when none."""
    if not names:
        return None
    from ..loggers.console import printable
    from .envfile import shown_name

    where = printable(os.fspath(path if path is not None else Path(".env")))
    return f"note: {where} set {', '.join(shown_name(n) for n in names)} (variables already set are kept)"


def load_env_noted(path: str | os.PathLike[str] | None = None) -> list[str]:
    """:func:`load_env`, then the line of :func:`env_notice` on stderr (what the commands that call a model do)."""
    import sys

    names = load_env(path)
    line = env_notice(names, path)
    if line:
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:  # a reader that went away
            pass
    return names


def check_same_source(key_variable: str, url_variable: str | None, url_from_option: bool) -> None:
    """Refuse to send the key of ``key_variable`` to the base URL of ``url_variable`` when the two were set in
    different places (the shell, a ``.env`` file): a ``.env`` of a cloned repository (or a planted one) must not
    redirect the shell's key. A URL given with ``--base-url`` (``url_from_option``) is the user's own choice.

    Raises:
        BackendConfigError: naming both variables and where each came from.
    """
    from ..errors import BackendConfigError

    if url_from_option or not url_variable or not key_variable:
        return
    if not os.environ.get(key_variable, "").strip() or not os.environ.get(url_variable, "").strip():
        return
    key_from, url_from = variable_source(key_variable), variable_source(url_variable)
    if key_from != url_from:
        raise BackendConfigError(
            f"refused to send {key_variable} (from {key_from}) to {url_variable} (from {url_from}): a key goes only "
            f"to a base URL set in the same place; set both in the shell or both in one .env, or give the URL with "
            "--base-url")


def endpoint_notice(label: str, base_url: str, from_option: bool, url_variable: str, key_name: str) -> str:
    """The console line a run prints before its first call: where the calls go, and where that base URL and the key
    came from (``--base-url``, or the variable and whether the shell or which ``.env`` file set it)."""
    if from_option:
        url_from = "the base_url setting (--base-url)"
    elif url_variable and os.environ.get(url_variable, "").strip():
        url_from = f"{url_variable} from {variable_source(url_variable)}"
    else:
        url_from = "the provider's default"
    if key_name and os.environ.get(key_name, "").strip():
        key = f"key {key_name} from {variable_source(key_name)}"
    else:
        key = "no key sent"
    return f"{label}: calls go to {redact(without_userinfo(base_url))} (base URL: {url_from}; {key})"


def first_value(names: tuple[str, ...] | list[str]) -> str | None:
    """The value of the first variable of ``names`` set to something not blank, stripped; else None."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a base URL calls are sent to (not ``http://`` or ``https://``, no host, a bad port);
    None when it can."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "it does not start with http:// or https://"
    if not host:
        return "it names no host"
    return None


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
